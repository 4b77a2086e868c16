"""Readouts connect a task to a model capability and turn model output into a response.

A readout is constructed per (model, task). ``prepare`` sees the probe-train split (prototype and
ridge probes fit there, never on test); ``respond`` answers a batch of test stimuli. Responses
that cannot be parsed are ``response=None`` with ``parse_status='null:<why>'``: they are excluded
from scores and counted, never scored as errors.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from pydantic import ValidationError

from ..errors import plain
from ..models.base import Adapter, Embedder
from ..options import Options
from ..own_files import own_file
from ..models.device import chunk_size
from ..stimuli.base import Stimulus, StimulusSet, prefetched

log = logging.getLogger(__name__)


class UnknownReadoutOption(ValueError):
    """A readout setting the readout does not take; ``keys`` lets preflight name the recipe line."""

    def __init__(self, message: str, keys: list[str]):
        super().__init__(message)
        self.keys = keys


class SplitTooSmall(ValueError):
    """The task's probe-train split is too small for the readout: the task's ``n_train`` option is
    at fault (for every model), so preflight names that line."""


class ReadoutSettings(Options):
    """A readout's settings: a recipe model's ``generation`` and ``task_options.<task>.readout``.
    Each readout declares a subclass, its fields typed (strictly, :mod:`harness.options`) and
    defaulted; any other key is refused, at recipe load (with the recipe's line) and when
    preflight builds the readout for a model."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {k: f.get_default(call_default_factory=True) for k, f in cls.model_fields.items()}


def settings_error(settings: type[ReadoutSettings], e: ValidationError) -> tuple[str, str]:
    """(key, what is wrong) of a validation's first error: an unknown key or a bad value, with
    the closest known key or allowed value."""
    err = e.errors()[0]
    key = ".".join(map(str, err["loc"]))
    if err["type"] == "extra_forbidden":
        guess = difflib.get_close_matches(key, sorted(settings.model_fields), n=1, cutoff=0.5)
        return key, "unknown setting" + (f"; did you mean {guess[0]}?" if guess else "")
    allowed = [str(a) for a in get_args(settings.model_fields[str(err["loc"][0])].annotation)
               if isinstance(a, str)] if err["loc"] and str(err["loc"][0]) in settings.model_fields else []
    guess = difflib.get_close_matches(str(err.get("input")), allowed, n=1, cutoff=0.5)
    return key, f"{err.get('input')!r}: {plain(err['msg'])}" + (f"; did you mean {guess[0]}?" if guess else "")


@dataclass
class Response:
    response: Any
    raw_output: str | None = None
    parse_status: str = "ok"
    latency_s: float | None = None
    usage: dict[str, int] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)


class _Local:
    """Single-process stand-in for harness.trials.distributed.Dist (same ``map``, ``is_main`` and
    ``barrier`` contract)."""

    is_main = True

    def map(self, fn, items):
        return list(fn(list(items))) if len(items) else []

    def barrier(self) -> None:
        """Nothing to wait for: this is the only process."""


class EmbeddingCache:
    """Embeddings of the stimuli a readout fits on (a probe's train split), kept in one ``.npz``
    beside the task's records and keyed by the model's fingerprint and each stimulus's sha256, as a
    trial is: recomputing one test trial does not embed the probe-train images again. The file
    holds the last fit's embeddings only; one that cannot be read is computed again."""

    def __init__(self, path: Path, fingerprint: str):
        self.path = path
        self.fingerprint = fingerprint

    def key(self, stimulus: Stimulus, parts: bool) -> str:
        return hashlib.sha256(f"{self.fingerprint}|{stimulus.sha256}|{parts}".encode()).hexdigest()

    def load(self, keys: list[str]) -> dict[str, Any]:
        import numpy as np

        try:
            with np.load(self.path) as z:
                return {k: z[k] for k in keys if k in z.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            return {}

    def save(self, embeddings: dict[str, Any]) -> None:
        import numpy as np

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with own_file(self.path, "wb") as f:
                np.savez(f, **embeddings)
        except OSError as e:  # only a rerun's saving is lost: it embeds these images again
            log.warning("%s: probe-train embeddings not kept (%s)", self.path, e)


class Readout:
    name: ClassVar[str]
    capability: ClassVar[str]  # "embed" | "generate" | "predict"
    uses_prompt: ClassVar[bool] = False
    # what respond() reads of a stimulus, prepared a batch ahead by the runner; None: nothing
    # to prepare (the readout renders its own way)
    reads: ClassVar[Literal["image", "parts"] | None] = "image"
    # the settings the readout takes (model ``generation`` + ``task_options.<task>.readout``)
    Settings: ClassVar[type[ReadoutSettings]] = ReadoutSettings

    def __init__(self, stimset: StimulusSet, **options: Any):
        self.with_defaults(stimset, options)
        self.stimset = stimset
        self.options = options
        self.dist = _Local()  # the runner swaps in its accelerate-backed Dist
        self.embeddings: EmbeddingCache | None = None  # the runner's, beside the task's records
        self.rep = 0  # repetition index of the batch being answered (set by the runner)
        # prepare the next batch in a background thread (the runner decides, from the device)
        self.prepare_ahead = True

    @property
    def n_reps(self) -> int:
        """Trials per stimulus (a readout may multiply repetitions, e.g. by montage permutations)."""
        return int(self.options.get("n_reps", 1))

    def embed_all(self, model: Embedder, images_of: list[Stimulus], parts: bool = False):
        """Embeddings of many stimuli, sharded across processes and gathered in order; each
        process embeds its share a model batch at a time, the next batch prepared meanwhile
        (``prepare_ahead``). Those in ``embeddings`` (the runner's cache) are not embedded again."""
        import numpy as np

        size = chunk_size(model.spec)

        def run(items):
            batches = [items[i:i + size] for i in range(0, len(items), size)]
            out = []
            for batch in prefetched(batches, ("parts" if parts else "image") if self.prepare_ahead else None):
                if parts:
                    emb = model.embed([im for s in batch for im in s.parts])
                    out.extend(emb.reshape(len(batch), len(batch[0].part_sources), -1))
                else:
                    out.extend(model.embed([s.image for s in batch]))
            return out

        cache = self.embeddings
        if cache is None:
            return np.stack(self.dist.map(run, images_of))
        keys = [cache.key(s, parts) for s in images_of]
        known = cache.load(keys)
        todo = [s for s, k in zip(images_of, keys) if k not in known]
        if todo:
            known.update(zip((cache.key(s, parts) for s in todo), self.dist.map(run, todo)))
            if self.dist.is_main:
                cache.save({k: known[k] for k in keys})
        return np.stack([known[k] for k in keys])

    @classmethod
    def with_defaults(cls, stimset: StimulusSet, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` over the readout's defaults, checked against its :attr:`Settings`; an
        unknown or bad setting is an error naming the task. The values stay as given (they key
        the response cache)."""
        known = cls.Settings.defaults()
        unknown = sorted(set(options) - set(known))
        if unknown:
            guess = difflib.get_close_matches(unknown[0], sorted(known), n=1, cutoff=0.5)
            raise UnknownReadoutOption(
                f"{stimset.task_id}: readout {cls.name} has no option(s) {unknown}"
                + (f"; did you mean {guess[0]}?" if guess else "") + f" (known: {sorted(known)})",
                unknown)
        try:
            cls.Settings.model_validate(options)
        except ValidationError as e:
            key, what = settings_error(cls.Settings, e)
            raise ValueError(f"{stimset.task_id}: readout {cls.name}: {key} {what}") from None
        return {**known, **options}

    def preflight(self, model: Adapter) -> dict[str, Any]:
        """Refuse (ModelError, one line) before any run when ``model`` cannot take this readout's
        settings; returns the settings it will not be sent, ``{name: value}`` (default: none)."""
        return {}

    def prepare(self, model: Adapter) -> None:
        """Fit anything the readout needs from the probe-train split (default: nothing)."""

    def respond(self, model: Adapter, batch: list[Stimulus]) -> list[Response]:
        raise NotImplementedError

    def artifacts(self, model: Adapter) -> dict[str, Path]:
        """Files this readout produced for the model (e.g. a trained regressor's checkpoint), to be
        logged with the run; default none."""
        return {}

    @property
    def settings(self) -> dict[str, Any]:
        """Everything besides the model and stimulus that changes a response (part of the cache key)."""
        return {"readout": self.name, **self.options}
