"""What a ``cnn`` regressor trains on: images and targets (:class:`TrainingData`), k-fold's pooled
and split views of them, and the batches of an epoch, rendered in worker processes where asked."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np


class TrainingData(Protocol):
    """Images and targets for fitting: ``images(idx)`` returns uint8 (len(idx), H, W[, C])."""

    targets: np.ndarray

    def __len__(self) -> int: ...

    def images(self, idx: np.ndarray) -> np.ndarray: ...


class _Batches:
    """Index batches of a TrainingData as a map-style dataset (one item = one batch)."""

    def __init__(self, data: TrainingData, batches: list[np.ndarray]):
        self.data, self.batches = data, batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        idx = self.batches[b]
        return self.data.images(idx), self.data.targets[idx]


def _as_is(item):
    return item  # a module-level function: workers started with "spawn" must pickle it


def _leave_stopping_to_the_trainer(worker_id: int) -> None:
    """A scheduler's SIGTERM reaches every process of the job, these workers too: dying of it, a
    worker would end the training with DataLoader's error (exit 1) instead of the trainer's own
    stop (exit 143). The trainer stops them with its DataLoader, as torch's workers do on Ctrl-C."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@contextmanager
def _sigterm_after() -> Iterator[None]:
    """A SIGTERM that arrives in the block handled once it ends. The block forks the workers, and
    Python drops the exception a signal handler raises in the callbacks run around a fork
    (logging's lock): the SIGTERM would be lost and the training run on to its end."""
    arrived: list[tuple[int, Any]] = []
    try:
        handler = signal.signal(signal.SIGTERM, lambda signum, frame: arrived.append((signum, frame)))
    except ValueError:  # not the main thread, where Python runs signal handlers
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, handler)
        if arrived:
            if callable(handler):
                handler(*arrived[0])
            else:
                signal.raise_signal(signal.SIGTERM)  # the default action (or none, where ignored)


def load_batches(data: TrainingData, batches: list[np.ndarray], workers: int):
    """The batches' (images, targets), rendered in ``workers`` processes when > 0 (charts that
    do not fit in memory are drawn per batch, in parallel with training)."""
    if workers <= 0:
        return (_Batches(data, batches)[b] for b in range(len(batches)))
    import torch
    from torch.utils.data import DataLoader

    # its own generator: seeding the workers must not consume the global RNG that dropout uses
    # _Batches is a map-style dataset by protocol (__getitem__, __len__); the stubs want the class
    loader: DataLoader[tuple[np.ndarray, np.ndarray]] = DataLoader(
        _Batches(data, batches), batch_size=None, shuffle=False, num_workers=workers,  # type: ignore[arg-type]
        collate_fn=_as_is, worker_init_fn=_leave_stopping_to_the_trainer, generator=torch.Generator().manual_seed(0))
    with _sigterm_after():
        return iter(loader)


class Pooled:
    """Several TrainingData as one (for k-fold over train + val)."""

    def __init__(self, parts: list[TrainingData]):
        self.parts = parts
        self.offsets = np.cumsum([0] + [len(p) for p in parts])
        self.targets = np.concatenate([p.targets for p in parts])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def images(self, idx: np.ndarray) -> np.ndarray:
        if not len(idx):
            return self.parts[0].images(idx)  # no images, in the parts' shape and type
        which = np.searchsorted(self.offsets, idx, side="right") - 1
        out: np.ndarray | None = None
        for p in np.unique(which):
            sel = which == p
            part = self.parts[p].images(idx[sel] - self.offsets[p])
            if out is None:
                out = np.empty((len(idx),) + part.shape[1:], part.dtype)
            out[sel] = part
        assert out is not None  # idx is not empty: some part gave images
        return out


class Subset:
    def __init__(self, data: TrainingData, idx: np.ndarray):
        self.data, self.idx = data, idx
        self.targets = data.targets[idx]

    def __len__(self) -> int:
        return len(self.idx)

    def images(self, idx: np.ndarray) -> np.ndarray:
        return self.data.images(self.idx[idx])
