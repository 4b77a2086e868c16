"""The ``regression`` readout: a model with the ``predict`` capability trained on the task itself.

``prepare`` trains the regressor on the task's probe-train split (``meta['subset']`` 'train';
'val' for early stopping, else a seeded 10% of train) or, when a checkpoint for the same model
fingerprint and the same training data exists, loads it instead. A training keeps each finished
epoch beside the task's records (``<task>.training.pt``, models/checkpoints.py), so a run stopped
mid-training resumes there; the file goes once the trained checkpoint is written. A model without
``fit`` (a regressor of the user's own, ``source: python``) predicts as it comes. The training data are named by
a content key over their stimulus hashes (render.content_key; charts by their parameters), so the key is known
before anything is rendered or trained and enters the trial cache key (``settings``).
``respond`` returns the predicted ratio (a fraction) per stimulus; with ``gradcam`` it also
records each stimulus's Grad-CAM map (the raw last-feature-map CAM, rounded) in the extras, which
the scorer resizes and compares with the marked bars (scores/mlae.py, gradcam_iou).

Options: ``checkpoint_dir`` (default $GESTALT_CHECKPOINTS or ~/.cache/gestalt/checkpoints),
``gradcam`` (False), ``cache_bytes`` (training images kept in memory when they fit, else rendered
batch by batch each epoch; 2 GiB).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from ..models.base import fingerprint_hash
from ..models.checkpoints import TrainingCheckpoint
from ..stimuli.bars.render import content_key, render_stimuli
from ..stimuli.base import Stimulus, StimulusSet
from .base import Readout, ReadoutSettings, Response

VAL_SHARE = 0.1
CAM_DECIMALS = 4


def default_checkpoint_dir() -> Path:
    return Path(os.environ.get("GESTALT_CHECKPOINTS", Path.home() / ".cache" / "gestalt" / "checkpoints"))


class StimulusData:
    """Training images of stimuli: kept in memory when they fit in ``cache_bytes``, else
    rendered for each batch."""

    def __init__(self, stimuli: list[Stimulus], cache_bytes: int):
        self.stimuli = stimuli
        self.targets = np.array([float(s.ground_truth) for s in stimuli], dtype=np.float32)
        first = render_stimuli(stimuli[:1])
        self._all = render_stimuli(stimuli) if first.nbytes * len(stimuli) <= cache_bytes else None

    def __len__(self) -> int:
        return len(self.stimuli)

    def images(self, idx: np.ndarray) -> np.ndarray:
        if self._all is not None:
            return self._all[idx]
        return render_stimuli([self.stimuli[i] for i in idx])


class RegressionSettings(ReadoutSettings):
    checkpoint_dir: str | None = None  # None: $GESTALT_CHECKPOINTS, else ~/.cache/gestalt/checkpoints
    gradcam: bool = False
    cache_bytes: int = Field(default=2 << 30, ge=0, le=1 << 50)  # training images kept in memory up to this size


class RegressionReadout(Readout):
    name = "regression"
    capability = "predict"
    reads = None  # renders its batch as arrays (render_stimuli), charts of a batch together
    Settings: ClassVar[type[ReadoutSettings]] = RegressionSettings

    def __init__(self, stimset: StimulusSet, **options: Any):
        super().__init__(stimset, **self.with_defaults(stimset, options))
        probe = stimset.train
        if not probe:
            raise ValueError(f"{stimset.task_id}: the regression readout needs a probe-train split")
        self.train = [s for s in probe if s.meta.get("subset", "train") == "train"]
        self.val = [s for s in probe if s.meta.get("subset") == "val"]
        if not self.val:
            held = np.random.default_rng(stimset.seed).permutation(len(self.train))
            n_val = max(1, int(round(VAL_SHARE * len(self.train))))
            self.val = [self.train[i] for i in sorted(held[:n_val])]
            self.train = [self.train[i] for i in sorted(held[n_val:])]
        keys = f"{content_key(self.train)}|{content_key(self.val)}"
        self.data_key = hashlib.sha256(keys.encode()).hexdigest()

    @property
    def settings(self) -> dict[str, Any]:
        return {"readout": self.name, "gradcam": bool(self.options["gradcam"]), "train_data": self.data_key}

    def checkpoint_path(self, model) -> Path:
        root = Path(self.options["checkpoint_dir"] or default_checkpoint_dir())
        return root / f"{fingerprint_hash(model.fingerprint)[:16]}-{self.data_key[:16]}.pt"

    def training_checkpoint(self, model) -> TrainingCheckpoint | None:
        """Where the training keeps each finished epoch: beside the task's records, in the result
        folder (the runner's embedding cache is kept there); None for a readout outside a battery."""
        if self.embeddings is None:
            return None
        key = hashlib.sha256(f"{fingerprint_hash(model.fingerprint)}|{self.data_key}".encode()).hexdigest()
        return TrainingCheckpoint(self.embeddings.path.with_name(f"{self.stimset.task_id}.training.pt"), key)

    def prepare(self, model) -> None:
        if not hasattr(model, "fit"):  # a regressor of the user's own: trained already
            return
        path = self.checkpoint_path(model)
        if path.is_file():
            model.load(path)
            return
        cache = int(self.options["cache_bytes"])
        training = self.training_checkpoint(model)
        model.fit(StimulusData(self.train, cache), StimulusData(self.val, cache), data_key=self.data_key,
                  checkpoint=training, label=f"{model.spec.id} {self.stimset.task_id}")
        # every process trained its share (accelerate DDP); one writes the checkpoint
        if self.dist.is_main:
            model.save(path)
            if training is not None:
                # the trained checkpoint (and the run's MLflow artifact) now hold these weights,
                # and a rerun loads it: kept, the training's copy would make every result folder,
                # which travels as a tar or zip, carry each trained network once more
                training.remove()
        self.dist.barrier()

    def artifacts(self, model) -> dict[str, Path]:
        path = self.checkpoint_path(model)
        return {"checkpoint": path} if path.is_file() else {}

    def respond(self, model, batch: list[Stimulus]) -> list[Response]:
        images = render_stimuli(batch)
        preds = model.predict(images)
        cams = model.gradcam(images) if self.options["gradcam"] else None
        out = []
        for j, p in enumerate(preds.tolist()):
            if not np.isfinite(p):
                out.append(Response(response=None, parse_status="null:nonfinite_prediction"))
                continue
            extras = {}
            if cams is not None:
                extras["gradcam"] = {"shape": list(cams[j].shape),
                                     "values": np.round(cams[j], CAM_DECIMALS).ravel().tolist()}
            out.append(Response(response=float(p), raw_output=repr(float(p)), extras=extras))
        return out
