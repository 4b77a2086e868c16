"""The summary run and the report answer the experiment, not the last recipe: every (model, task)
comes from the latest finished battery that ran it, whichever recipe that was, and the runs it
replaced stay listed as superseded."""

import csv
import json
import os
from types import SimpleNamespace

import pytest
import yaml

from tests.conftest import MIRROR, REPO
from tests.test_one_answer import cli, summary_groups
from tests.test_rank_groups import CONSTANT

SIL, EDGES = "closure.nat.silhouette", "closure.nat.edges"


def summary_runs(uri: str, experiment: str) -> list[dict]:
    from mlflow import MlflowClient

    _, run = summary_groups(uri, experiment)
    return json.loads(open(MlflowClient(uri).download_artifacts(run.info.run_id, "runs.json")).read())


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("experiment")
    models = {"shape-rule": {"id": "shape-rule", "source": "python",
                             "name": str(REPO / "examples/rule_based.py") + ":build"}}
    for answer in ("knife", "dog"):
        (tmp / f"{answer}.py").write_text(CONSTANT.format(answer=answer))
        models[f"always-{answer}"] = {"id": f"always-{answer}", "source": "python", "name": f"{tmp}/{answer}.py:build"}
    uri = f"sqlite:///{tmp}/mlflow.db"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    seen = {}

    def recipe(name, ids, tasks):
        body = {"name": name, "models": [models[i] for i in ids], "tasks": tasks,
                "bootstrap": {"n_boot": 100, "n_boot_kappa": 100},
                "runtime": {"processes": 1, "device": "cpu", "progress": False},
                "data": {"mirror": str(MIRROR)}, "tracking": {"uri": uri, "experiment": "exp"},
                "output_dir": str(tmp / "out")}
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        cli("recipe", str(path), env=env)
        seen[name] = (summary_groups(uri, "exp")[0], summary_runs(uri, "exp"))

    # the same two models on another task, then a third model on the first task alone
    recipe("silhouettes", ["shape-rule", "always-knife"], [SIL])
    recipe("edges", ["shape-rule", "always-knife"], [EDGES])
    recipe("dog", ["always-dog"], [SIL])
    cli("report", "--experiment", "exp", "--out", str(tmp / "report"), "--uri", uri, env=env)
    report = (summary_groups(uri, "exp")[0], summary_runs(uri, "exp"))
    # the first recipe again: nothing of the experiment changed, so its summary is not drawn again
    drawn = summary_groups(uri, "exp")[1]
    noop = cli("recipe", str(tmp / "silhouettes.yaml"), env=env)
    return SimpleNamespace(tmp=tmp, uri=uri, seen=seen, report=report, noop=noop, drawn=drawn,
                           after_noop=summary_groups(uri, "exp")[1])


def answered(runs: list[dict]) -> set[tuple[str, str]]:
    return {(r["model"], t) for r in runs for t in r["answers"]}


def test_two_recipes_over_the_same_models_answer_every_model_and_task(experiment):
    groups, runs = experiment.seen["edges"]
    both = {(m, t) for m in ("shape-rule", "always-knife") for t in (SIL, EDGES)}
    assert {(g["model"], g["task"]) for g in groups["groups"]} == both
    assert answered(runs) == both
    assert {r["recipe"] for r in runs} == {"silhouettes", "edges"}  # filled by `gestalt recipe`
    # each cell names the run it comes from, the run that ran that task
    by_run = {r["run_id"]: r for r in runs}
    assert all(g["task"] in by_run[g["run_id"]]["answers"] for g in groups["groups"])
    with open(experiment.tmp / "report" / "scores.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(m, t) for m in ("shape-rule", "always-knife", "always-dog") for t in (SIL, EDGES)
            if (m, t) != ("always-dog", EDGES)} == {(r["model"], r["task"]) for r in rows}


def test_two_recipes_of_different_models_are_ranked_together(experiment):
    for groups, runs in (experiment.seen["dog"], experiment.report):
        ranked = {g["model"] for g in groups["groups"] if g["task"] == SIL}
        assert ranked == {"shape-rule", "always-knife", "always-dog"}
        assert {r["model"] for r in runs} == ranked
        assert {r["recipe"] for r in runs} == {"silhouettes", "edges", "dog"}
        assert answered(runs) >= {("always-dog", SIL), ("shape-rule", EDGES)}


def test_a_rerun_that_changes_nothing_leaves_the_experiment_s_summary_as_drawn(experiment):
    """After three recipes and a report, the first recipe again is up to date: its summary check
    fingerprints the whole experiment's batteries, not only its own, so it finds the summary
    drawn from exactly these and neither redraws nor rewrites it."""
    assert "0 new trials" in experiment.noop.stdout
    assert "drawing the experiment's summary run" not in experiment.noop.stderr
    before, after = experiment.drawn, experiment.after_noop
    assert after.info.run_id == before.info.run_id and after.info.end_time == before.info.end_time
    assert after.data.tags == before.data.tags
