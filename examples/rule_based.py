"""A rule-based "model" with ``generate``, evaluated as ``source: python``.

It names a silhouette's class from the shape of its black region alone: wide shapes are
vehicles, tall ones bottles, the rest animals. Any object with ``generate(image, prompt,
settings)`` returning text is a model to gestalt; the readout parses the text as for a VLM.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from PIL import Image


class ShapeRule:
    # no weights: the rule is its identity (this replaces the default fingerprint)
    fingerprint: ClassVar[dict[str, Any]] = {"rule": "aspect-ratio", "version": 1}

    def generate(self, image: Image.Image, prompt: str, settings: dict[str, Any]) -> str:
        ink = np.asarray(image.convert("L")) < 128
        rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
        if not len(rows):
            return "I cannot see an object."
        aspect = (cols[-1] - cols[0] + 1) / (rows[-1] - rows[0] + 1)
        if aspect > 1.6:
            return "car"
        if aspect < 0.6:
            return "bottle"
        return "The answer is: dog."


def build() -> ShapeRule:
    return ShapeRule()
