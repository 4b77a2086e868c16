"""A small PyTorch network evaluated as ``source: python`` (see examples/own-model.yaml).

It has ``embed``, so gestalt reads it out with probes on its embeddings (e.g. the silhouette
prototype probe fit on images 1-5). Its weights are random, seeded: the point is the plumbing.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch import nn


class TinyNet(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 5, stride=2), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4), nn.Flatten())

    def embed(self, images: list[Image.Image]) -> np.ndarray:
        device = next(self.parameters()).device
        x = torch.stack([torch.from_numpy(np.asarray(im.convert("L").resize((64, 64)), np.float32) / 255)
                         for im in images])[:, None].to(device)
        with torch.inference_mode():
            return self.features(x).cpu().numpy()


def build(width: int = 8, seed: int = 0) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet(width).eval()
