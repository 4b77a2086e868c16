"""The Python API: ``harness.evaluate`` runs the recipe path from one call (live objects or
specs), returns a DataFrame and run ids, raises the project's errors; ``load_records``."""

import importlib.util

import pandas as pd
import pytest

import harness
from harness.errors import GestaltError
from harness.models.base import ModelError
from harness.recipes import RecipeError
from tests.conftest import MIRROR, REPO

TASK = "closure.nat.silhouette"
ALEXNET = {"id": "alexnet", "source": "decisions",
           "name": "geirhos-silhouettes:raw-data/silhouette-filled-experiment/*_alexnet_session_1.csv",
           "options": {"images": "geirhos-silhouettes:stimuli/filled-silhouettes"}}


@pytest.fixture(autouse=True)
def live(monkeypatch):
    from harness.models.python_source import LIVE

    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    yield
    LIVE.clear()


def shape_rule():
    spec = importlib.util.spec_from_file_location("rule_based_example", REPO / "examples/rule_based.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build()


def keys(tmp_path):
    return {"data": {"mirror": str(MIRROR)}, "output_dir": str(tmp_path / "out"),
            "bootstrap": {"n_boot": 100, "n_boot_kappa": 100}, "runtime": {"progress": False},
            "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "api"}}


def test_evaluate_a_live_object_and_a_spec_then_load_records(tmp_path):
    scores, run_ids = harness.evaluate(models=[shape_rule(), ALEXNET], tasks=[TASK], **keys(tmp_path))
    assert isinstance(scores, pd.DataFrame) and set(run_ids) == {"shape-rule", "alexnet"}
    acc = scores.set_index(["model", "name"])["value"]
    assert acc[("alexnet", "accuracy")] == pytest.approx(35 / 80)  # 0.438 as the report rounds it
    assert set(scores["run_id"]) == set(run_ids.values())
    records = harness.load_records(run_ids["alexnet"], uri=f"sqlite:///{tmp_path}/mlflow.db")
    assert len(records) == 80 and set(records["model"]) == {"alexnet"}
    assert records["correct"].sum() == 35
    import mlflow

    params = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(run_ids["alexnet"]).data.params
    assert params["trust_remote_code"] == "False" and params["model_ref"].startswith("decisions:")
    # the same records and cache as the CLI: a second call makes no model call
    again, _ = harness.evaluate(models=[shape_rule(), ALEXNET], tasks=[TASK],
                                **{**keys(tmp_path), "tracking": {"enabled": False}})
    assert again.drop(columns="run_id").equals(scores.drop(columns="run_id"))


def test_evaluate_raises_project_errors_and_never_exits(tmp_path):
    with pytest.raises(RecipeError, match="tasks.0"):
        harness.evaluate(models=[ALEXNET], tasks=["no.such.task"], **keys(tmp_path))
    with pytest.raises(RecipeError, match="evaluate: seeed: unknown key"):
        harness.evaluate(models=[ALEXNET], tasks=[TASK], seeed=1)

    class Blank:
        pass

    with pytest.raises(ModelError, match="'blank' .*no capability"):
        harness.evaluate(models=[Blank()], tasks=[TASK], **keys(tmp_path))
    with pytest.raises(GestaltError, match="no-such-run"):
        harness.load_records("no-such-run", uri=f"sqlite:///{tmp_path}/mlflow.db")
    assert not (tmp_path / "out").exists()
