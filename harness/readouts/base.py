"""Readouts connect a task to a model capability and turn model output into a response.

A readout is constructed per (model, task). ``prepare`` sees the probe-train split (prototype and
ridge probes fit there, never on test); ``respond`` answers a batch of test stimuli. Responses
that cannot be parsed are ``response=None`` with ``parse_status='null:<why>'``: they are excluded
from scores and counted, never scored as errors.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..models.base import Adapter, Embedder
from ..models.device import chunk_size
from ..stimuli.base import Stimulus, StimulusSet, prefetched


class UnknownReadoutOption(ValueError):
    """A readout setting the readout does not take; ``keys`` lets preflight name the recipe line."""

    def __init__(self, message: str, keys: list[str]):
        super().__init__(message)
        self.keys = keys


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


class Readout:
    name: ClassVar[str]
    capability: ClassVar[str]  # "embed" | "generate" | "predict"
    uses_prompt: ClassVar[bool] = False
    # what respond() reads of a stimulus, prepared a batch ahead by the runner; None: nothing
    # to prepare (the readout renders its own way)
    reads: ClassVar[Literal["image", "parts"] | None] = "image"
    # the settings the readout takes (model ``generation`` + ``task_options.<task>.readout``),
    # with their defaults; any other key is refused when preflight builds the readout
    OPTIONS: ClassVar[dict[str, Any]] = {}

    def __init__(self, stimset: StimulusSet, **options: Any):
        self.with_defaults(stimset, options, self.OPTIONS)
        self.stimset = stimset
        self.options = options
        self.dist = _Local()  # the runner swaps in its accelerate-backed Dist
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
        (``prepare_ahead``)."""
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

        return np.stack(self.dist.map(run, images_of))

    @classmethod
    def with_defaults(cls, stimset: StimulusSet, options: dict[str, Any],
                      known: dict[str, Any]) -> dict[str, Any]:
        """``options`` over the readout's defaults; an unknown option is an error naming the task."""
        unknown = sorted(set(options) - set(known))
        if unknown:
            guess = difflib.get_close_matches(unknown[0], sorted(known), n=1, cutoff=0.5)
            raise UnknownReadoutOption(
                f"{stimset.task_id}: readout {cls.name} has no option(s) {unknown}"
                + (f"; did you mean {guess[0]}?" if guess else "") + f" (known: {sorted(known)})",
                unknown)
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
