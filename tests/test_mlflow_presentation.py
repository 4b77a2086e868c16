"""What a battery run looks like in MLflow: short headline names that stay distinct when the UI
truncates them, values rounded to what their interval justifies, the experiment opening on the
runs table, and records whose lines start with the trial's identity, response and correctness."""

import contextlib
import json

import pytest


def test_headline_names_are_short_and_distinct_when_truncated():
    from harness.tracking.mlflow_run import HEADLINE_METRICS, headline_name

    names = list(HEADLINE_METRICS.values())
    assert len({n[:12] for n in names}) == len(names) and max(map(len, names)) <= 15
    assert headline_name("closure.nat.silhouette", "kappa") == "sil.kappa"
    assert headline_name("similarity.chart.series_count", "capacity") == "count.capacity"
    assert headline_name("ratio.chart.grape_type1:step_c", "mlae") == "grape1.mlae:step_c"
    assert headline_name("closure.nat.silhouette", "kappa_pairwise") is None


def test_values_are_rounded_to_their_interval():
    from harness.scores.record import Score
    from harness.tracking.mlflow_run import score_metrics

    s = Score(name="kappa", value=0.24240012, ci_low=0.1401, ci_high=0.3512, n=80, nulls=0, method="m",
              version="1", ceiling=0.49250001, floor=0.0)
    m = score_metrics("closure.nat.silhouette", [s])
    # half-width 0.11 (two significant digits) -> 2 decimals, for the value and its bounds alike;
    # the human ceiling is not this estimate: four significant digits
    assert m["sil.kappa"] == m["closure.nat.silhouette/kappa"] == 0.24
    assert m["closure.nat.silhouette/kappa_ci_low"] == 0.14 and m["closure.nat.silhouette/kappa_ceiling"] == 0.4925
    tight = Score(name="B", value=0.61234567, ci_low=0.6101, ci_high=0.6145, n=9000, nulls=0, method="m",
                  version="1")
    assert score_metrics("similarity.chart.mark_color", [tight])["color.B"] == 0.6123
    bare = Score(name="mae", value=5.0749999, ci_low=None, ci_high=None, n=40, nulls=0, method="m", version="1")
    assert score_metrics("similarity.chart.series_count", [bare])["similarity.chart.series_count/mae"] == 5.075


def test_battery_run_sets_kind_view_key_order_and_table(tmp_path):
    from mlflow import MlflowClient

    from harness.tracking.mlflow_run import SHARED_VIEW_TAG, BatteryRun
    from harness.trials.records import RecordStore
    from tests.test_cli import write_modal_human_records
    from tests.test_reports import battery_scores

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = write_modal_human_records(tmp_path / "closure.nat.silhouette.jsonl")
    records = RecordStore(path).read()
    with BatteryRun(uri=uri, experiment="present", run_name="m", tags={"gestalt.model": "m"}) as run:
        run.log_task("closure.nat.silhouette", battery_scores(0.5)["closure.nat.silhouette"], records, {}, {},
                     path)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("present")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(exp.tags[SHARED_VIEW_TAG])
    assert view["selectedColumns"] == ["metrics.`sil.B`", "metrics.`sil.kappa`"]

    local = client.download_artifacts(run.run_id, "records/closure.nat.silhouette.jsonl", str(tmp_path / "a"))
    first = json.loads(open(local).readline())
    assert list(first)[:6] == ["stimulus_id", "rep", "model", "response", "ground_truth", "correct"]
    assert first == records[0]  # the same record, keys reordered
    table = json.loads(open(client.download_artifacts(run.run_id, "tables/closure.nat.silhouette.json",
                                                      str(tmp_path / "b"))).read())
    assert table["columns"][:4] == ["stimulus_id", "rep", "model", "response"] and len(table["data"]) == 80
    assert json.loads(table["data"][0][table["columns"].index("run_meta")]) == records[0]["run_meta"]
    # MLflow takes it for one of its tables: listed on the run, read back by load_table
    listed = json.loads(client.get_run(run.run_id).data.tags["mlflow.loggedArtifacts"])
    assert listed == [{"path": "tables/closure.nat.silhouette.json", "type": "table"}]
    loaded = client.load_table(exp.experiment_id, "tables/closure.nat.silhouette.json", run_ids=[run.run_id])
    assert len(loaded) == 80 and list(loaded.columns[:4]) == ["stimulus_id", "rep", "model", "response"]
    assert loaded["trial_id"].tolist() == [r["trial_id"] for r in records]


def test_the_runs_table_view_is_read_once_per_battery(tmp_path, monkeypatch):
    """Each task's headline metrics join the experiment's view, read back once per battery (a
    store round trip per task before), also when the battery fails after its first task."""
    from mlflow import MlflowClient

    from harness.tracking.mlflow_run import SHARED_VIEW_TAG, BatteryRun
    from tests.test_reports import MARK, SIL, battery_scores

    reads = []
    real = MlflowClient.get_experiment
    monkeypatch.setattr(MlflowClient, "get_experiment", lambda self, i: (reads.append(i), real(self, i))[1])
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    scores = battery_scores(0.5)
    for tasks, fail in (([SIL, MARK], False), ([SIL], True)):
        reads.clear()
        with pytest.raises(RuntimeError) if fail else contextlib.nullcontext(), \
                BatteryRun(uri=uri, experiment="view", run_name="m", tags={}) as run:
            for task in tasks:
                path = tmp_path / f"{task}.jsonl"
                path.write_text(json.dumps({"parse_status": "ok"}) + "\n")
                run.log_task(task, scores[task], [{"parse_status": "ok"}], {}, {}, path)
            if fail:
                raise RuntimeError("crash")
        assert len(reads) == 1
    view = json.loads(MlflowClient(uri).get_experiment_by_name("view").tags[SHARED_VIEW_TAG])
    assert view["selectedColumns"] == ["metrics.`color.B`", "metrics.`sil.B`", "metrics.`sil.kappa`"]


def test_a_battery_reaches_the_store_in_ten_round_trips_and_tags_its_end_in_one(tmp_path, monkeypatch):
    """Each store call is a round trip (over the network for a tracking server): a battery opens
    the experiment once, and the tags a run gets as it ends (stimulus sets' digest, tables listed,
    record digest) are one write after its artifacts. A new run in an existing experiment made 13
    round trips before, three of them ``set_tag``."""
    import threading

    from mlflow import MlflowClient
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from tests import lifecycle as life
    from tests.fake_vendor_server import FakeVendorServer

    calls, inside = [], threading.local()

    def counted(name, method):
        def call(*args, **kwargs):  # the outermost store call only: one round trip each
            depth = getattr(inside, "depth", 0)
            if not depth:
                calls.append(name)
            inside.depth = depth + 1
            try:
                return method(*args, **kwargs)
            finally:
                inside.depth = depth
        return call

    for name, method in vars(SqlAlchemyStore).items():
        # shut_down_async_logging flushes this process's own queue: no store round trip
        if callable(method) and not name.startswith("_") and name != "shut_down_async_logging":
            monkeypatch.setattr(SqlAlchemyStore, name, counted(name, method))
    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        recipe = load_recipe(life.api_recipe(tmp_path, server.url))
        run_recipe(recipe, echo=lambda *_: None)  # makes the store and the experiment
        calls.clear()
        (result,) = run_recipe(recipe, echo=lambda *_: None, new_run=True)
    assert len(calls) <= 10, calls
    assert "set_tag" not in calls and calls.count("get_experiment_by_name") <= 2, calls
    assert calls[-2:] == ["log_batch", "update_run_info"], calls  # the closing tags, then the end
    run = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert {"gestalt.records_sha256", "gestalt.stimulus_sets_sha256"} <= set(run.data.tags)
    assert json.loads(run.data.tags[MLFLOW_LOGGED_ARTIFACTS]) == [
        {"path": f"tables/{life.TASK}.json", "type": "table"}]


def test_ui_refuses_a_missing_store_in_one_line(tmp_path):
    from tests.test_cli import gestalt

    res = gestalt("ui", "--uri", f"sqlite:///{tmp_path}/none.db")
    assert res.returncode == 2 and "no MLflow store here" in res.stderr and len(res.stderr.splitlines()) == 1
    assert not (tmp_path / "none.db").exists()
