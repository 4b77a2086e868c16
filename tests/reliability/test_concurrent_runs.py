"""Reliability campaign: two `gestalt recipe` processes started together on one folder.

Each battery's output folder is locked while it runs, so the second process waits, then finds the
trials recorded and the run up to date: every trial is computed and written once, and the
experiment holds one FINISHED run per battery. On a fresh folder the MLflow store is created once
(under its lock) instead of both processes racing through its schema migration."""

import pytest

from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer

MODELS = ("fake-api", "fake-api-2")


@pytest.mark.slow
@pytest.mark.parametrize("store", ["fresh", "existing"])
def test_two_processes_on_one_folder_compute_each_trial_once(tmp_path, store):
    from harness.tracking.store import open_store

    with FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.01) as server:
        path = life.api_recipe(tmp_path, server.url, models=MODELS)
        if store == "existing":
            open_store(f"sqlite:///{tmp_path}/mlflow.db", "another-experiment")
        procs = [life.start(path), life.start(path)]
        outs = [p.communicate(timeout=900) for p in procs]
        requests = len(server.requests)
    codes = [p.returncode for p in procs]
    per_model = {m: [r["trial_id"] for r in life.record_lines(tmp_path, m)] for m in MODELS}
    duplicates = sum(len(ids) - len(set(ids)) for ids in per_model.values())
    runs = life.runs(tmp_path)
    statuses = sorted(r.info.status for r in runs)
    print(f"\n2 processes, {store} store: exit {codes}, {duplicates} duplicate trials, {requests} model calls "
          f"for {life.TRIALS * len(MODELS)} trials, {len(runs)} runs for {len(MODELS)} batteries, "
          f"{statuses.count('RUNNING')} left RUNNING")
    assert codes == [0, 0], [err[-2000:] for _, err in outs]
    assert all(len(ids) == life.TRIALS for ids in per_model.values()) and duplicates == 0
    assert requests == life.TRIALS * len(MODELS)  # each trial computed once
    assert statuses == ["FINISHED"] * len(MODELS)
    assert sum(out.count("up to date: run") for out, _ in outs) == len(MODELS)  # the waiting one made none
