"""A ``cnn`` training stopped mid-way resumes from its last finished epoch: in one process (the
checkpoint written after each epoch, a stop right after one of them), and as a scheduler stops a
job (``gestalt recipe`` killed after the first epoch's checkpoint appears, then run again). On a
CPU the resumed training gives the weights, curves and answers of an uninterrupted one, bit for bit."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from harness.models.base import ModelSpec
from harness.models.checkpoints import TrainingCheckpoint
from harness.models.regressors import ArrayData, CNNRegressor
from tests.conftest import MIRROR, REPO

TASK = "ratio.chart.grape_type1"


def _charts(n: int, seed: int) -> ArrayData:
    """24 x 32 charts with one 3-px bar at a random x; the target is its height / 24."""
    rng = np.random.default_rng(seed)
    heights, xs = rng.integers(2, 23, n), rng.integers(0, 29, n)
    rows, cols = np.arange(24)[None, :, None], np.arange(32)[None, None, :]
    ink = (rows >= 24 - heights[:, None, None]) & (cols >= xs[:, None, None]) & (cols < xs[:, None, None] + 3)
    return ArrayData(np.where(ink, 255, 0).astype(np.uint8), heights / 24)


def _model() -> CNNRegressor:
    # dropout, noise and k-fold: every random generator training draws from must be restored
    return CNNRegressor(ModelSpec(id="lenet", source="cnn", name="lenet", options={
        "conv": [4], "hidden": 16, "lr": 3e-3, "batch_size": 16, "max_epochs": 3, "patience": 3,
        "kfold": 2, "noise_std": 0.05, "seed": 3}))


class StoppedAfter(TrainingCheckpoint):
    """A checkpoint whose process is stopped (as by SIGTERM) right after its ``n``-th save."""

    def __init__(self, path: Path, key: str, n: int):
        super().__init__(path, key)
        self.n = n

    def save(self, *args) -> None:
        super().save(*args)
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt


def _weights(model: CNNRegressor) -> list[dict[str, torch.Tensor]]:
    return [{k: v.clone() for k, v in net.state_dict().items()} for net in model.nets]


def _curves(model: CNNRegressor) -> list[list[tuple]]:
    return [[(e["epoch"], e["train_loss"], e["val_loss"]) for e in fold] for fold in model.history]


@pytest.fixture(scope="module")
def data():
    return _charts(96, 0), _charts(32, 1)


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory):
    model = _model()
    model.fit(*data, checkpoint=TrainingCheckpoint(tmp_path_factory.mktemp("whole") / "t.pt", "k"))
    return _weights(model), _curves(model)


# two folds of three epochs, a save after each: stopped after fold 1's first epoch, after fold 1
# (between folds), after fold 2's first epoch
@pytest.mark.parametrize("saves,says", [(1, "after epoch 1 fold 1 of 2"), (3, "at fold 2 of 2"),
                                        (4, "after epoch 1 fold 2 of 2")])
def test_a_training_stopped_after_an_epoch_resumes_there_bit_for_bit(data, uninterrupted, tmp_path, caplog,
                                                                     saves, says):
    path = tmp_path / "t.pt"
    with pytest.raises(KeyboardInterrupt):
        _model().fit(*data, checkpoint=StoppedAfter(path, "k", saves))
    resumed = _model()
    caplog.clear()  # only the rerun's lines: an earlier command in this process may have set the logger to INFO
    with caplog.at_level(logging.INFO, logger="harness.models.regressors"):
        resumed.fit(*data, checkpoint=TrainingCheckpoint(path, "k"), label="lenet bars")
    lines = [r.getMessage() for r in caplog.records]
    assert f"lenet bars: training resumes {says}, from {path}" in lines
    trained = [line for line in lines if ": train loss" in line]
    assert len(trained) == 6 - saves  # only the epochs the stopped run had not finished
    weights, curves = uninterrupted
    assert _curves(resumed) == curves
    assert all(torch.equal(a[k], b[k]) for a, b in zip(_weights(resumed), weights) for k in a)


def test_a_checkpoint_of_another_training_is_not_resumed(data, uninterrupted, tmp_path, caplog):
    path = tmp_path / "t.pt"
    with pytest.raises(KeyboardInterrupt):
        _model().fit(*data, checkpoint=StoppedAfter(path, "other options or data", 2))
    model = _model()
    caplog.clear()  # only the rerun's lines, as above
    with caplog.at_level(logging.INFO, logger="harness.models.regressors"):
        model.fit(*data, checkpoint=TrainingCheckpoint(path, "k"))
    assert not any("resumes" in r.getMessage() for r in caplog.records)
    assert len([r for r in caplog.records if ": train loss" in r.getMessage()]) == 6
    assert _curves(model) == uninterrupted[1]
    assert torch.load(path, weights_only=True)["key"] == "k"  # written over by this training


# -- as a scheduler stops a job ------------------------------------------------------------------

def _recipe(folder: Path, workers: int = 0) -> Path:
    recipe = {
        "name": "bars-resume", "tasks": [TASK],
        "models": [{"id": "tiny-cnn", "source": "cnn", "name": "lenet", "batch_size": 64,
                    "options": {"conv": [4, 8], "hidden": 16, "max_epochs": 6, "patience": 6,
                                "batch_size": 16, "lr": 1.0e-3, "dropout": 0.2, "num_workers": workers}}],
        "task_options": {TASK: {"n_train": 96, "n_val": 16, "n_test": 20, "ood": "all", "n_ood": 2,
                                "readout": {"checkpoint_dir": str(folder / "ckpt")}}},
        "bootstrap": {"n_boot": 100}, "runtime": {"progress": False, "device": "cpu"},
        "data": {"mirror": str(MIRROR)}, "tracking": {"enabled": False}, "output_dir": str(folder / "out")}
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def _gestalt(path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "recipe", str(path)], cwd=REPO,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _answers(folder: Path) -> dict[str, float]:
    lines = (folder / "out/tiny-cnn/records" / f"{TASK}.jsonl").read_text().splitlines()
    return {r["trial_id"]: r["response"] for r in map(json.loads, lines)}


def _epochs(stderr: str) -> list[int]:
    return [int(line.split("epoch ")[1].split(":")[0]) for line in stderr.splitlines() if ": train loss" in line]


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole")
    out, err = _gestalt(_recipe(folder)).communicate(timeout=600)
    assert _epochs(err) == [1, 2, 3, 4, 5, 6], err[-2000:]
    return _answers(folder)


# as a scheduler stops a job: every process of it signalled, the charts' rendering workers too
# (whose number changes no result), SIGTERM first, SIGKILL where the job outlives the grace
@pytest.mark.parametrize("sig,code,workers", [(signal.SIGTERM, 143, 2),
                                              pytest.param(signal.SIGKILL, -signal.SIGKILL, 0, marks=pytest.mark.slow)])
def test_a_cnn_battery_killed_mid_training_resumes_from_its_last_epoch(tmp_path, whole_run, sig, code, workers):
    path = _recipe(tmp_path, workers)
    kept = tmp_path / "out/tiny-cnn/records" / f"{TASK}.training.pt"
    proc = _gestalt(path)
    deadline = time.time() + 300
    while not kept.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err[-2000:]
    done = _epochs(err)
    assert done and done[-1] < 6, "the run was stopped mid-training"
    k = torch.load(kept, weights_only=True)["current"]["history"][-1]["epoch"]
    assert k >= 1

    again = _gestalt(path)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-2000:]
    assert f"tiny-cnn {TASK}: training resumes after epoch {k}, from {kept}" in err
    assert _epochs(err) == list(range(k + 1, 7))  # only the epochs not finished before
    assert _answers(tmp_path) == whole_run  # as an uninterrupted run answers, on a CPU
    assert not kept.exists()  # the trained checkpoint stands for it now
