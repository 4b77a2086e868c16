"""``imagenet16``: an ImageNet classifier's own decision among the 16 entry-level classes.

The readout of model-vs-human (Geirhos et al. 2021) for the 16-class tasks (silhouettes, edges,
cue-conflict): the classifier's softmax over the 1,000 ILSVRC-2012 classes is aggregated per
entry-level class by the mean over that class's ImageNet indices (model-vs-human's
``ImageNetProbabilitiesTo16ClassesMapping`` with its default aggregation), and the decision is the
class with the highest aggregate. The index lists are data, read from the verified release
``imagenet-16-class-mapping`` (207 indices; 793 ImageNet classes belong to none). Nothing is
fitted, so the readout can score every image (``images: all``).

A recipe asks for it per model: ``readouts: {closure.nat.silhouette: imagenet16}`` on a timm
model with its ImageNet head (the ``classify`` capability).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..sources import Sources
from ..stimuli.base import StimulusSet
from .base import Readout, Response

RELEASE = "imagenet-16-class-mapping"


def class_indices(sources: Sources | None = None) -> dict[str, list[int]]:
    """Entry-level class -> its ImageNet-1k indices, as model-vs-human publishes them."""
    path = (sources or Sources()).path(RELEASE, "indices.json")
    with open(path) as f:
        return {c: [int(i) for i in idx] for c, idx in json.load(f)["categories"].items()}


def decide(probabilities: np.ndarray, classes: tuple[str, ...],
           indices: dict[str, list[int]]) -> tuple[list[str], np.ndarray]:
    """Per row of (n, 1000) probabilities: the class with the highest mean probability over its
    indices, and the (n, 16) aggregates in ``classes`` order."""
    aggregate = np.stack([probabilities[:, indices[c]].mean(axis=1) for c in classes], axis=1)
    return [classes[i] for i in aggregate.argmax(axis=1)], aggregate


class ImageNet16(Readout):
    name = "imagenet16"
    capability = "classify"

    def __init__(self, stimset: StimulusSet, **options: Any):
        super().__init__(stimset, **options)
        self.indices = class_indices()
        missing = [c for c in stimset.options if c not in self.indices]
        if stimset.response_space != "label" or missing or not stimset.options:
            raise ValueError(f"{stimset.task_id}: readout {self.name} answers the 16-class tasks; "
                             f"no ImageNet mapping for {missing or 'this task'}")

    def respond(self, model, batch):
        labels, aggregate = decide(model.classify([s.image for s in batch]), tuple(self.stimset.options),
                                   self.indices)
        return [Response(response=label, extras={"aggregate_probability": round(float(row.max()), 6)})
                for label, row in zip(labels, aggregate)]
