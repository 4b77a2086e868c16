"""A local model's error is a failed call, not an answer: a ``source: python`` model whose forward
pass raises (a missing device, out of memory, a bug), while the readout is fitted (a probe's
train split embedded) or while it answers, leaves its trials as ``null:api_error:<exception>``
in one line and exit status 1, as a failed API call does; the next run, the model mended, computes
exactly those trials again."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from harness.exit_status import Exit
from tests import lifecycle as life
from tests.conftest import MIRROR

MODEL = textwrap.dedent('''
    """Stand-ins for a network whose forward pass raises while a file ``broken`` lies beside it."""
    from pathlib import Path

    import numpy as np

    BROKEN = Path(__file__).with_name("broken")


    def forward(n):
        if BROKEN.exists():
            raise RuntimeError("CUDA error: no CUDA-capable device is detected")
        return np.linspace(0.1, 0.9, n)


    class Embedder:
        fingerprint = {"embedder": 1}  # the same model, mended or not: the same trials

        def embed(self, images):
            return np.stack([np.asarray(im.convert("L").resize((8, 8)), float).ravel() for im in images]) \\
                + forward(len(images))[:, None]


    class Regressor:
        fingerprint = {"regressor": 1}

        def predict(self, images):
            return forward(len(images))


    def embedder():
        return Embedder()


    def regressor():
        return Regressor()
''')

CASES = {"embedder": "closure.nat.silhouette", "regressor": "ratio.chart.grape_type1"}  # model: its task


def recipe(folder: Path, model: str) -> Path:
    task = CASES[model]
    (folder / "models.py").write_text(MODEL)
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump({
        "name": "local", "tasks": [task],
        "models": [{"id": model, "source": "python", "name": f"{folder / 'models.py'}:{model}"}],
        "task_options": {task: {"n_train": 16, "n_val": 4, "n_test": 20, "ood": "all", "n_ood": 2}}
        if model == "regressor" else {},
        "bootstrap": {"n_boot": 100, "n_boot_kappa": 100},
        "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
        "tracking": {"enabled": False}, "output_dir": str(folder / "out")}, sort_keys=False))
    return path


def statuses(folder: Path, model: str) -> list[str]:
    lines = (folder / "out" / model / "records" / f"{CASES[model]}.jsonl").read_text().splitlines()
    return [json.loads(line)["parse_status"] for line in lines]


@pytest.mark.parametrize("model", list(CASES))
def test_a_local_model_that_raises_leaves_failed_calls_that_the_next_run_computes(tmp_path, model):
    path = recipe(tmp_path, model)
    (tmp_path / "broken").touch()
    code, _, err = life.cli(path)
    assert code == Exit.RERUN_FIXES, err[-3000:]
    trials = len(statuses(tmp_path, model))
    assert trials >= 20 and statuses(tmp_path, model) == ["null:api_error:RuntimeError"] * trials
    last = [line for line in err.splitlines() if line.startswith("gestalt: error")]
    assert len(last) == 1 and f"a rerun sends the {trials} failed calls again" in last[0]

    (tmp_path / "broken").unlink()  # the device is back
    code, out, err = life.cli(path)
    assert code == 0, err[-3000:]
    assert f"re-sending {trials} failed calls" in out and f"{trials} new trials" in out
    assert statuses(tmp_path, model) == ["ok"] * trials


def test_a_cnn_whose_training_fails_leaves_failed_calls(tmp_path, monkeypatch):
    from harness.models.regressors import CNNRegressor

    task = CASES["regressor"]
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({
        "name": "local", "tasks": [task],
        "models": [{"id": "tiny-cnn", "source": "cnn", "name": "lenet",
                    "options": {"conv": [4], "hidden": 8, "max_epochs": 1, "batch_size": 16}}],
        "task_options": {task: {"n_train": 16, "n_val": 4, "n_test": 20, "ood": "all", "n_ood": 2,
                                "readout": {"checkpoint_dir": str(tmp_path / "ckpt")}}},
        "bootstrap": {"n_boot": 100}, "runtime": {"progress": False, "device": "cpu"},
        "data": {"mirror": str(MIRROR)}, "tracking": {"enabled": False}, "output_dir": str(tmp_path / "out")}))

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory")

    with monkeypatch.context() as m:
        m.setattr(CNNRegressor, "_fit_all", out_of_memory)
        code, _, err = life.cli(path)
    assert code == Exit.RERUN_FIXES, err[-3000:]
    records = tmp_path / "out/tiny-cnn/records" / f"{task}.jsonl"
    failed = [json.loads(line)["parse_status"] for line in records.read_text().splitlines()]
    assert failed and set(failed) == {"null:api_error:RuntimeError"}
    code, out, err = life.cli(path)  # trained this time
    assert code == 0, err[-3000:]
    assert f"re-sending {len(failed)} failed calls" in out
    assert {json.loads(line)["parse_status"] for line in records.read_text().splitlines()} == {"ok"}
