"""Data-parallel over machines stays accelerate's job: two `accelerate launch`
processes as machine ranks 0 and 1 of `--num_machines 2`, rendezvous on 127.0.0.1 (torchrun, gloo
on CPU), write one output folder: each trial exactly once, the same answers as one process, and
one MLflow run for the battery."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import MIRROR
from tests.servers import free_port

TASK = "closure.nat.silhouette"


def recipe(folder: Path) -> Path:
    folder.mkdir()
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump({
        "name": "machines", "tasks": [TASK],
        "models": [{"id": "vit", "source": "timm", "name": "test_vit", "weights": "random", "batch_size": 16}],
        "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
        "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
        "tracking": {"uri": f"sqlite:///{folder}/mlflow.db", "experiment": "machines"},
        "output_dir": str(folder / "out")}))
    return path


def answers(folder: Path) -> dict[str, tuple]:
    lines = (folder / "out/vit/records" / f"{TASK}.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    out = {r["trial_id"]: (r["response"], r["correct"], r["cache_key"]) for r in recs}
    assert len(out) == len(recs), "a trial was written twice"
    return out


@pytest.mark.slow
def test_two_machines_on_one_host_write_each_trial_once(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", GESTALT_DEVICE="cpu")
    single = recipe(tmp_path / "single")
    done = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(single)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    two = recipe(tmp_path / "two")
    port = free_port()
    # --multi_gpu selects accelerate's torchrun launcher, which also runs on CPU-only hosts (gloo);
    # `--cpu` would choose its MPI path, which needs mpirun across machines
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "2",
              "--num_processes", "2", "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
              "--mixed_precision", "no", "--dynamo_backend", "no"]
    procs = [subprocess.Popen([*launch, "--machine_rank", str(rank), "-m", "harness.cli", "recipe", str(two)],
                              env=env, cwd=two.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert "80 new trials" in outs[0][0]  # machine 0 reports the battery; machine 1 prints nothing
    assert outs[1][0].strip() == ""

    assert answers(two.parent) == answers(single.parent)
    assert len(answers(two.parent)) == 80

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{two.parent}/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["machines"], filter_string="tags.`gestalt.model` != ''",
                              output_format="list")  # not the experiment's summary run
    assert [(r.info.run_name, r.info.status) for r in runs] == [("vit", "FINISHED")]


@pytest.mark.slow
def test_two_processes_train_one_regressor(tmp_path):
    """A regressor trained under `accelerate launch` with two processes (gloo on CPU) is one
    model: each process trains on its share of every batch and the backward pass syncs the
    gradients, so the checkpoint rank 0 writes answers every test chart as the two processes
    did, each on its own share of the trials."""
    import numpy as np

    from harness.models.registry import build_adapter
    from harness.recipes import load_recipe
    from harness.run import build_stimsets
    from harness.sources import Sources
    from harness.stimuli.bars.render import render_stimuli
    from tests.test_bars_battery import TASK as task
    from tests.test_bars_battery import tiny_lenet_recipe

    folder = tmp_path / "cnn"
    folder.mkdir()
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_lenet_recipe(folder, {"enabled": False}, epochs=3, n_train=64,
                                                     n_test=24, ood="none", n_ood=4)))
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", GESTALT_DEVICE="cpu")
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
              "--num_processes", "2", "--main_process_port", str(free_port()),
              "--mixed_precision", "no", "--dynamo_backend", "no"]
    done = subprocess.run([*launch, "-m", "harness.cli", "recipe", str(path)], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    [checkpoint] = (folder / "ckpt").glob("*.pt")
    recipe = load_recipe(path)
    model = build_adapter(recipe.models[0]).to("cpu").load(checkpoint)
    stimset = build_stimsets(recipe, Sources(mirror=MIRROR), [task])[task]
    expected = dict(zip((s.stimulus_id for s in stimset.test), model.predict(render_stimuli(stimset.test))))
    records = [json.loads(x) for x in (folder / "out/tiny-cnn/records" / f"{task}.jsonl").read_text().splitlines()]
    assert len(records) == len(expected) == 24 and {r["stimulus_id"] for r in records} == set(expected)
    got = np.array([r["response"] for r in records])
    assert np.allclose(got, [expected[r["stimulus_id"]] for r in records], rtol=1e-5, atol=1e-6)
