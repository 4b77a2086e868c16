"""Class-prototype probe: the silhouette readout for encoders.

Prototype of a class = mean embedding of its probe-train images; a test image gets the class
whose prototype is nearest by cosine. The probe reads what is linearly available in the
representation and cannot add organisation that is absent (the paper's appendix).
"""

from __future__ import annotations

import numpy as np

from .base import Readout, Response


def l2_normalise(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norm > 0, norm, 1.0)


def class_prototypes(embeddings: np.ndarray, labels: list[str]) -> tuple[list[str], np.ndarray]:
    classes = sorted(set(labels))
    lab = np.array(labels)
    return classes, np.stack([embeddings[lab == c].mean(axis=0) for c in classes])


def nearest_prototype(embeddings: np.ndarray, prototypes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the most cosine-similar prototype per row, and the similarity matrix."""
    sims = l2_normalise(embeddings) @ l2_normalise(prototypes).T
    return sims.argmax(axis=1), sims


class PrototypeProbe(Readout):
    name = "prototype"
    capability = "embed"

    def __init__(self, stimset, **options):
        if not stimset.train:  # refused when the recipe is planned, before any model loads
            raise ValueError(f"{stimset.task_id}: readout {self.name} fits its class prototypes on the "
                             f"probe-train split, and this stimulus set has none (images: all scores "
                             f"every image for readouts that train nothing; use images: split)")
        super().__init__(stimset, **options)

    def prepare(self, model) -> None:
        train = self.stimset.train
        emb = self.embed_all(model, train)
        self.classes, self.prototypes = class_prototypes(emb, [s.ground_truth for s in train])

    def respond(self, model, batch):
        idx, sims = nearest_prototype(model.embed([s.image for s in batch]), self.prototypes)
        return [Response(response=self.classes[i], raw_output=None,
                         extras={"cosine": round(float(sims[k, i]), 6)})
                for k, i in enumerate(idx)]
