"""A task run twice in one battery, as the base task and as a variant (BASE:VARIANT) with its own
options: records, scores, MLflow metric/param names, artifacts, figures and the registry all carry
the variant id, and nothing of the two runs mixes."""

import json

BASE = "ratio.chart.haehn_type1"
VARIANT = f"{BASE}:step_c"


def test_variant_runs_beside_its_base_through_records_and_mlflow(tmp_path, capsys, write_recipe):
    import mlflow
    from mlflow import MlflowClient

    from harness.cli import main
    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from harness.scores.tasks import get_family
    from harness.tracking.scorecards import register_scorecard
    from harness.trials.records import validate

    sizes = {"n_train": 32, "n_val": 16, "n_test": 20}
    path = write_recipe(
        [{"id": "tiny-cnn", "source": "cnn", "name": "lenet", "family": "cnn-from-scratch", "batch_size": 64,
          "options": {"conv": [4], "hidden": 8, "max_epochs": 1, "patience": 1, "batch_size": 16, "lr": 1.0e-3}}],
        [BASE, VARIANT], name="variants", bootstrap={"n_boot": 200},
        task_options={BASE: {**sizes, "readout": {"checkpoint_dir": str(tmp_path / "ckpt")}},
                      VARIANT: {**sizes, "values": "random", "marked": "adjacent",
                                "readout": {"checkpoint_dir": str(tmp_path / "ckpt")}}})
    (result,) = run_recipe(load_recipe(path), echo=lambda *_: None)
    assert result.new_trials == 40 and set(result.scores) == {BASE, VARIANT}

    recs = {}
    for task in (BASE, VARIANT):
        f = tmp_path / "out" / "tiny-cnn" / "records" / f"{task}.jsonl"
        recs[task] = [validate(json.loads(x)) for x in f.read_text().splitlines()]
        assert len(recs[task]) == 20
        assert {r["task_id"] for r in recs[task]} == {task}
        assert all(r["trial_id"].startswith(f"{task}|") for r in recs[task])
        assert {(r["principle"], r["track"]) for r in recs[task]} == {("ratio", "chart")}
    # same stimulus ids, different charts: the variant's options reached its builder only
    assert [r["stimulus_id"] for r in recs[BASE]] == [r["stimulus_id"] for r in recs[VARIANT]]
    assert [r["stimulus_sha256"] for r in recs[BASE]] != [r["stimulus_sha256"] for r in recs[VARIANT]]

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    (run,) = mlflow.search_runs(experiment_names=["variants"], output_format="list")
    client = MlflowClient(uri)
    m, run_id = run.data.metrics, run.info.run_id
    for task in (BASE, VARIANT):
        assert m[f"{task}/n"] == 20 and m["model_calls"] > 0
        # the headline under the family's short name, the variant's apart from its base's
        headline = get_family("mlae_vs_humans").short_name(task, "mlae")
        assert headline in m and f"{headline}_ci_lower" in m
        assert [h.step for h in client.get_metric_history(run_id, f"{task}/train/val_loss")] == [1]
        assert len(client.list_artifacts(run_id, f"models/{task}")) == 1
    assert not any(k.startswith(f"{BASE}/:") for k in m)
    assert f"{VARIANT}=regression" in run.data.params["readouts"].split(",")
    artifacts = {a.path for a in client.list_artifacts(run_id, "records")}
    assert {f"records/{BASE}.jsonl", f"records/{VARIANT}.jsonl"} <= artifacts
    figures = {a.path for a in client.list_artifacts(run_id, "figures")}
    assert f"figures/{VARIANT}.mlae_vs_humans.png" in figures
    intervals = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/intervals.json")
    stimsets = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/stimulus_sets.json")
    assert set(stimsets) == {BASE, VARIANT} and stimsets[BASE] != stimsets[VARIANT]
    assert intervals[VARIANT]["stimulus_set_sha256"] == stimsets[VARIANT]

    # the scorecard (dataset names, version tags) and the trained regressor of the variant
    card = register_scorecard(uri, run_id)
    assert f"| &ensp;{VARIANT}&ensp; |" in client.get_model_version(card.name, card.version).description
    capsys.readouterr()
    main(["register", run_id, f"--trained={VARIANT}", f"--uri={uri}"])
    out = capsys.readouterr().out
    assert out.startswith(f"gestalt-regressor-tiny-cnn-{BASE}-step_c v1 (trained for {VARIANT}")
    main(["report", run_id, f"--uri={uri}", "--experiment=variants", f"--out={tmp_path / 'report'}"])
    scores_csv = next((tmp_path / "report").rglob("scores.csv")).read_text()
    assert f",{VARIANT}," in scores_csv and f",{BASE}," in scores_csv
    capsys.readouterr()
    # rescoring the variant's records offline rebuilds the variant's stimuli from the recipe
    main(["score", str(tmp_path / "out" / "tiny-cnn" / "records" / f"{VARIANT}.jsonl"),
          f"--recipe={path}", "--format=json"])
    rescored = {s["name"]: s["value"] for s in json.loads(capsys.readouterr().out)}
    logged = {s["name"]: s["value"] for s in intervals[VARIANT]["scores"]}
    assert rescored.keys() == logged.keys()
    assert all(a == b or (a != a and b != b) for a, b in ((rescored[k], logged[k]) for k in logged))
