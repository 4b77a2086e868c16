"""Reliability campaign: the tracking server is lost mid-run and comes back on the same address
within the outage budget (a restarted server, a moved pod). The run says it is retrying, then
finishes as if nothing happened: every trial recorded once, one FINISHED run, no traceback.
(Lost for longer than the budget: tests/test_tracking_outage.py.)"""

import time

import pytest

from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer
from tests.servers import TcpProxy, mlflow_server
from tests.test_tracking_outage import _mlflow_retries_unset, _point_at, _Stderr


@pytest.mark.slow
def test_a_tracking_server_lost_mid_run_and_back_within_the_budget(tmp_path, monkeypatch):
    _mlflow_retries_unset(monkeypatch)
    store = tmp_path / "store"
    store.mkdir()
    with FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.05) as slow, \
            mlflow_server(store) as server:
        proxy = TcpProxy(int(server.rsplit(":", 1)[1]))
        uri = f"http://127.0.0.1:{proxy.port}"
        path = life.api_recipe(tmp_path, slow.url, batch_size=1)
        _point_at(path, uri)
        proc = life.start(path, "--tracking.outage_budget_s=600")
        err = _Stderr(proc)
        deadline = time.time() + 300
        while time.time() < deadline and len(life.record_lines(tmp_path)) < 10:
            assert proc.poll() is None, err.text()
            time.sleep(0.02)
        proxy.down()
        while time.time() < deadline and proc.poll() is None and not any(
                "not answering" in line for _, line in err.lines):
            time.sleep(0.1)
        time.sleep(3)  # down a while longer, as a restart takes
        proxy.up()
        proc.wait(timeout=600)
        text = err.text()
        from mlflow import MlflowClient

        client = MlflowClient(uri)
        runs = client.search_runs([client.get_experiment_by_name("life").experiment_id],
                                  "tags.`gestalt.model` != ''")  # not the experiment's summary run
    ids = [r["trial_id"] for r in life.record_lines(tmp_path)]
    lost, duplicated = life.TRIALS - len(set(ids)), len(ids) - len(set(ids))
    tracebacks = text.count("Traceback")
    said = sum("not answering" in line for line in text.splitlines())
    statuses = [r.info.status for r in runs]
    print(f"\ntracking server lost mid-run and back: exit {proc.returncode}, {lost} lost, {duplicated} "
          f"duplicated, {tracebacks} tracebacks, {said} retry line(s), runs {statuses}")
    assert proc.returncode == 0, text[-3000:]
    assert lost == 0 and duplicated == 0 and tracebacks == 0
    assert said == 1 and statuses == ["FINISHED"]
    assert runs[0].data.metrics[f"{life.TASK}/n"] == life.TRIALS
