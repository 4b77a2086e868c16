"""The bar-chart battery through the recipe path: a CNN trained from scratch on the task's
probe-train split, its curves and checkpoint logged to MLflow, the checkpoint registered."""

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import MIRROR

TASK = "ratio.chart.grape_type1"
AUTHORS_DEV = MIRROR / "grape" / "authors-test-type1-dev"  # 500 charts drawn by GRAPE's own generator


def tiny_lenet_recipe(folder: Path, tracking: dict, epochs: int = 2, **task_options) -> dict:
    """A bar-chart recipe whose lenet trains in seconds on a CPU, its checkpoints under ``folder``."""
    return {
        "name": "bars-tiny", "tasks": [TASK],
        "models": [{"id": "tiny-cnn", "source": "cnn", "name": "lenet", "family": "cnn-from-scratch",
                    "batch_size": 64,
                    "options": {"conv": [4, 8], "hidden": 16, "max_epochs": epochs, "patience": epochs,
                                "batch_size": 16, "lr": 1.0e-3}}],
        "task_options": {TASK: {"n_train": 48, "n_val": 16, "n_test": 20, "ood": "all", "n_ood": 2,
                                "readout": {"checkpoint_dir": str(folder / "ckpt")}, **task_options}},
        "bootstrap": {"n_boot": 200},
        "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
        "tracking": tracking, "output_dir": str(folder / "out")}


def test_cnn_battery_logs_training_and_registers_the_model(tmp_path):
    import mlflow
    import torch
    from mlflow import MlflowClient

    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from harness.tracking.scorecards import RegistryError, register_trained_model

    recipe = tiny_lenet_recipe(tmp_path, {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "bars"})
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    results = run_recipe(load_recipe(path), echo=lambda *_: None)
    assert results[0].new_trials > 20  # IID test + OOD levels

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=["bars"], output_format="list")[0]
    client = MlflowClient(uri)
    curve = client.get_metric_history(run.info.run_id, f"{TASK}/train/val_loss")
    assert [m.step for m in curve] == [1, 2]
    files = [a.path for a in client.list_artifacts(run.info.run_id, f"models/{TASK}")]
    assert len(files) == 1 and files[0].endswith(".pt")
    assert any(k.startswith(f"{TASK}/") and "mlae" in k.lower() for k in run.data.metrics)
    figures = {a.path for a in client.list_artifacts(run.info.run_id, "figures")}
    assert {f"figures/{TASK}.mlae_vs_humans.png", f"figures/{TASK}.mlae_vs_level.png"} <= figures
    logged = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/intervals.json")[TASK]["scores"]
    level_scores = [s["name"] for s in logged if s["name"].startswith("ood.") and s["name"].endswith(".delta_mlae")]
    assert {k.split(".")[1] for k in level_scores} >= {"bar_width", "title_position"}

    name, version = register_trained_model(uri, run.info.run_id, TASK)
    assert version == "1"
    local = mlflow.artifacts.download_artifacts(f"models:/{name}/1", dst_path=str(tmp_path / "dl"))
    ckpt = next(Path(local).rglob("*.pt"))
    state = torch.load(ckpt, weights_only=True)
    assert state["history"] and state["states"]
    with pytest.raises(RegistryError, match="no trained model"):
        register_trained_model(uri, run.info.run_id, "ratio.chart.grape_type2")

    recs = [json.loads(x) for x in (tmp_path / f"out/tiny-cnn/records/{TASK}.jsonl").read_text().splitlines()]
    assert {r["readout"] for r in recs} == {"regression"} and all(r["correct"] is None for r in recs)
    assert any(r["manipulated_value"] for r in recs)


def test_haehn_replication_recipe_is_the_table_i_grid():
    from harness.models.registry import build_adapter
    from harness.recipes import load_recipe
    from harness.run import model_specs, plan
    from tests.conftest import REPO

    recipe = load_recipe(REPO / "recipes/bars-haehn-replication.yaml")
    grid = {(m.name, m.options["optimizer"], m.options["lr"], m.options.get("nesterov"),
             m.options["weight_decay"]) for m in recipe.models}
    assert len(recipe.models) == len(grid) == 16
    assert {m.name for m in recipe.models} == {"vgg19", "resnet152"}
    assert all(t == "regression" for p in plan(recipe) for _, t in p.tasks)
    for spec in model_specs(recipe):
        build_adapter(spec)  # every option is one the cnn adapter knows


@pytest.mark.slow
@pytest.mark.timeout(3 * 1800)  # about 8 min on 2 idle cores; 14 min measured under load
def test_bars_quick_recipe_beats_the_people_on_iid_type_1(tmp_path):
    """recipes/bars-quick.yaml as a user runs it (CPU, ~10 minutes): the CNN trained from scratch
    reaches an IID MLAE below the people's with its whole CI, and every OOD parameter is scored;
    run again with ``authors_test``, the same network scores the authors' charts beside gestalt's."""
    import os
    import subprocess
    import sys

    import mlflow
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri, GESTALT_MIRROR=str(MIRROR),
               GESTALT_CHECKPOINTS=str(tmp_path / "ckpt"))
    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "harness.cli", "recipe", str(repo / "recipes/bars-quick.yaml"),
           f"--output_dir={tmp_path}/out", "--runtime.progress=false"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1800)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "epoch 1: train loss" in first.stderr  # training reports its progress

    mlflow.set_tracking_uri(uri)
    (run,) = mlflow.search_runs(experiment_names=["bars-quick"], filter_string="tags.`gestalt.model` != ''",
                                output_format="list")  # not the experiment's summary run
    m = {s["name"]: s for s in mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/intervals.json")[TASK]["scores"]}
    # GRAPE's mean-of-log-errors MLAE, and the same difference against the people's MLAE
    assert m["mlae"]["ci_high"] < 1.40, m["mlae"]["value"]
    assert m["mlae_minus_human"]["ci_high"] < 0
    assert m["mlae_midmean"]["ci_high"] < 1.40  # Cleveland-McGill's form too
    params = {k.split(".")[1] for k in m if k.startswith("ood.") and k.endswith(".delta_mlae")}
    assert params == {"bar_width", "bar_lightness", "background_lightness", "stroke_lightness",
                      "stroke_width", "dot_position", "title_position", "title_font_size", "bar_length"}
    client = MlflowClient(uri)
    curve = client.get_metric_history(run.info.run_id, f"{TASK}/train/val_loss")
    assert len(curve) >= 2 and min(c.value for c in curve) < 0.01  # chance is the target variance, ~0.06
    assert [a.path for a in client.list_artifacts(run.info.run_id, f"models/{TASK}")][0].endswith(".pt")
    figures = {a.path for a in client.list_artifacts(run.info.run_id, "figures")}
    assert {f"figures/{TASK}.mlae_vs_humans.png", f"figures/{TASK}.mlae_vs_level.png"} <= figures

    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert again.returncode == 0 and "0 new trials, 0 model calls" in again.stdout

    # the same network on the authors' own charts: read from its checkpoint, not trained again
    authors = subprocess.run([*cmd, f"--task_options.{TASK}.authors_test={AUTHORS_DEV}"], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=1800)
    assert authors.returncode == 0, authors.stderr[-3000:]
    assert "epoch 1" not in authors.stderr and "500 new trials" in authors.stdout
    latest = mlflow.search_runs(experiment_names=["bars-quick"], filter_string="tags.`gestalt.model` != ''",
                                output_format="list", order_by=["attributes.start_time DESC"])[0]
    scores = {s["name"]: s for s in
              mlflow.artifacts.load_dict(f"{latest.info.artifact_uri}/intervals.json")[TASK]["scores"]}
    assert scores["rendered_by.grape-authors.mlae"]["n"] == 500
    assert scores["rendered_by.grape-authors.mlae"]["nulls"] == 0
    gap = scores["rendered_by.grape-authors.mlae_gap"]
    assert gap["ci_low"] <= gap["value"] <= gap["ci_high"]


def test_section_vi_recipe_trains_mask_and_augmentation_variants(tmp_path):
    from harness.recipes import load_recipe
    from harness.run import preflight
    from harness.stimuli.bars.grape import MIX_NAMES
    from harness.stimuli.bars.render import render_stimuli

    path = Path(__file__).resolve().parents[1] / "recipes/bars-section-vi.yaml"
    full = load_recipe(path)
    assert len(full.tasks) == 2 + len(MIX_NAMES)
    assert all(o["n_train"] == 60000 and o["n_ood"] == 1000 for o in full.task_options.values())
    small = {f"task_options.{t}.{k}": v for t in full.tasks
             for k, v in (("n_train", 8), ("n_val", 4), ("n_test", 4), ("n_ood", 1))}
    recipe = load_recipe(path, {**small, "data.mirror": str(MIRROR)})
    _, stimsets, _ = preflight(recipe)
    assert render_stimuli(stimsets[f"{TASK}:mask"].test[:2]).shape[-1] == 4  # RGB + the mask
    assert render_stimuli(stimsets[TASK].test[:2]).shape[-1] == 3
    mixes = {t.split(":mix_")[1]: s for t, s in stimsets.items() if ":mix_" in t}
    assert sorted(s.train[0].meta["augment"] for s in mixes.values()) == sorted(MIX_NAMES)
    assert {recipe.task_options[t].get("readout", {}).get("gradcam") for t in stimsets} == {True, None}
