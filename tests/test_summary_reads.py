"""The experiment's summary run is brought up to date by what a recipe adds, not by what the
experiment holds: it reads no run's figures, reads a local store's intervals in place, and
downloads a run's intervals from any other store once (kept per store and run), so after one
battery more it asks MLflow's client for that battery's alone."""

import json

import pytest

from harness.reports import report, runs
from harness.tracking import batteries
from tests.test_reports import SIL, log_battery_run

K = 3


@pytest.fixture
def store(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv("GESTALT_CACHE", str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    for i in range(K):  # each with a logged figure the summary has no use for
        log_battery_run(uri, "roster", f"model-{i}", "supervised", i / K, tmp_path=tmp_path, figure=True)
    calls = []

    def counted(name):
        orig = getattr(MlflowClient, name)

        def counting(self, run_id, path=None, *args, **kw):
            calls.append((name, run_id, path))
            return orig(self, run_id, path, *args, **kw)
        return counting

    for name in ("download_artifacts", "list_artifacts"):
        monkeypatch.setattr(MlflowClient, name, counted(name))
    return uri, tmp_path, calls


def add_one(uri, tmp_path, i=K):
    return log_battery_run(uri, "roster", f"model-{i}", "supervised", 0.5, tmp_path=tmp_path, figure=True)[0]


def drawn(uri):
    """The summary's rank groups as drawn into the store."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("roster").experiment_id],
                             "tags.`gestalt.summary` = 'true'")[0]
    return json.loads(open(client.download_artifacts(run.info.run_id, "rank_groups.json")).read())


def test_a_local_store_s_summary_asks_mlflow_for_no_run_s_artifacts(store):
    uri, tmp_path, calls = store
    report.experiment_summary(uri, "roster")
    add_one(uri, tmp_path)
    calls.clear()
    report.experiment_summary(uri, "roster")
    assert calls == []  # intervals read in place; no figure listed or downloaded
    assert {g["model"] for g in drawn(uri)["groups"]} == {f"model-{i}" for i in range(K + 1)}


def test_another_store_s_summary_downloads_only_the_runs_it_has_not_read(store, monkeypatch):
    """A store whose artifacts are not a local folder (a server, a bucket): the first summary
    downloads every run's intervals, the next only the battery added since."""
    uri, tmp_path, calls = store
    monkeypatch.setattr(batteries, "local_artifacts", lambda artifact_uri: None)
    monkeypatch.setattr(runs, "local_artifacts", lambda artifact_uri: None)
    report.experiment_summary(uri, "roster")
    assert sorted(c[2] for c in calls) == ["intervals.json"] * K  # and no figure
    before = drawn(uri)
    new = add_one(uri, tmp_path)
    calls.clear()
    report.experiment_summary(uri, "roster")
    assert calls == [("download_artifacts", new, "intervals.json")]
    after = drawn(uri)
    assert len(after["groups"]) > len(before["groups"])
    assert {g["model"] for g in after["groups"]} == {f"model-{i}" for i in range(K + 1)}


def test_a_run_that_finished_again_is_read_again(store, monkeypatch):
    """A rerun continues a battery's run and ends it again with new intervals: the kept copy is
    keyed by the run's end, so the summary reads the new ones."""
    from mlflow import MlflowClient

    uri, tmp_path, calls = store
    monkeypatch.setattr(batteries, "local_artifacts", lambda artifact_uri: None)
    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("roster").experiment_id],
                             "tags.`gestalt.model` = 'model-0'")[0]
    first = batteries.finished_intervals(client, run, uri)
    assert batteries.finished_intervals(client, run, uri) == first and len(calls) == 1
    changed = {**first, SIL: {"unavailable": "rescored away"}}
    folder = tmp_path / "new"
    folder.mkdir()
    (folder / "intervals.json").write_text(json.dumps(changed))
    client.log_artifact(run.info.run_id, str(folder / "intervals.json"))
    client.set_terminated(run.info.run_id, "FINISHED", end_time=run.info.end_time + 1000)
    again = client.get_run(run.info.run_id)
    assert batteries.finished_intervals(client, again, uri) == changed
    assert len(calls) == 2


def test_a_summary_drawn_again_rewrites_no_battery_s_unchanged_tags(store, monkeypatch):
    """Each battery carries its answers and colour as tags; drawn again from the same batteries
    (``gestalt report``), the summary writes none of them again: a client call per battery."""
    from mlflow import MlflowClient

    uri, _, _ = store
    report.experiment_summary(uri, "roster")
    written = []
    orig = MlflowClient.log_batch

    def counting(self, run_id, *args, **kw):
        written.append(run_id)
        return orig(self, run_id, *args, **kw)

    monkeypatch.setattr(MlflowClient, "log_batch", counting)
    summary = report.experiment_summary(uri, "roster")
    assert written == [summary.run_id]  # its own description and fingerprint alone
