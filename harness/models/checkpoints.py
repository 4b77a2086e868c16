"""A ``cnn`` regressor's training kept after every finished epoch, so that a training stopped
mid-way (a scheduler's time limit: SIGTERM, then SIGKILL) resumes where it stopped on the rerun
instead of starting again from epoch 1: a job whose time limit is shorter than one model's
training still gets through it, a few epochs per requeue.

One file, :class:`TrainingCheckpoint`, beside the task's records in the result folder, written
whole after each epoch (a scratch file renamed over it, never through a link: ``own_files``). It
holds the folds already trained (their best weights and curves) and the fold under way: its
network, optimizer, best weights so far, epochs without improvement, curve, seconds spent, and
the state of every random generator training draws from (torch's global one for dropout and
initial weights, the noise generator, numpy's for the data order). Restored, they make the
resumed training the one an uninterrupted run gives, bit for bit on a CPU
(tests/test_training_resume.py). The file is keyed by everything that decides the training (the
model's fingerprint: architecture, every training option, seed and epochs included, torch's
version; and the training data): a file of another key is left unread, and the training starts
from epoch 1 and writes over it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..own_files import own_file

FORMAT = 1
log = logging.getLogger(__name__)


@dataclass
class FoldProgress:
    """One fold's training between two epochs."""

    best: float = float("inf")
    best_state: dict[str, Any] | None = None
    stale: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0  # spent training this fold (``max_train_seconds`` counts across reruns)


class TrainingCheckpoint:
    """The training of one model on one task's data at ``path``, keyed by ``key``."""

    def __init__(self, path: Path, key: str):
        self.path, self.key = path, key

    def load(self) -> dict[str, Any] | None:
        """What the last finished epoch left: ``input_shape``, the trained folds' ``states`` and
        ``history``, the fold under way (``current``, :func:`fold_state`; None between folds).
        None where there is none for this key, or it cannot be read (the training then starts
        again, as it would have without one)."""
        import torch

        if not self.path.is_file():
            return None
        try:
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - cut short, another torch's format: train anew
            log.warning("%s: training checkpoint unreadable (%s: %s); training from epoch 1",
                        self.path, type(e).__name__, e)
            return None
        if not isinstance(saved, dict) or saved.get("format") != FORMAT or saved.get("key") != self.key:
            return None  # another model, options or training data trained here: not this one's
        return saved

    def save(self, input_shape: tuple[int, int, int], nets: list, history: list[list[dict[str, float]]],
             current: dict[str, Any] | None) -> None:
        """The folds trained (``nets``, ``history``) and the one under way (``current``)."""
        import torch

        states = [{k: v.detach().cpu() for k, v in net.state_dict().items()} for net in nets]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with own_file(self.path, "wb") as f:
            torch.save({"format": FORMAT, "key": self.key, "input_shape": list(input_shape),
                        "states": states, "history": history, "current": current}, f)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def fold_state(net, opt, gen, rng: np.random.Generator, progress: FoldProgress) -> dict[str, Any]:
    """The fold under way, as :func:`restore_fold` takes it back (tensors copied to the CPU)."""
    import torch

    cpu = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
    state = {"net": cpu, "opt": opt.state_dict(), "best": progress.best, "best_state": progress.best_state,
             "stale": progress.stale, "history": progress.history, "seconds": progress.seconds,
             # numpy's PCG64 state holds 128-bit integers, which torch's safe loader does not take
             "numpy_rng": json.dumps(rng.bit_generator.state), "noise_rng": gen.get_state(),
             "torch_rng": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # dropout on a GPU draws there
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def restore_fold(state: dict[str, Any], net, opt, gen, rng: np.random.Generator) -> FoldProgress:
    """``net``, ``opt`` and the generators as :func:`fold_state` saw them; the fold's progress."""
    import torch

    net.load_state_dict(state["net"])
    opt.load_state_dict(state["opt"])
    rng.bit_generator.state = json.loads(state["numpy_rng"])
    gen.set_state(state["noise_rng"])
    torch.set_rng_state(state["torch_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return FoldProgress(best=state["best"], best_state=state["best_state"], stale=state["stale"],
                        history=state["history"], seconds=state["seconds"])
