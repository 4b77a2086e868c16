"""A tracking server that does not answer (issue 15 section 4: jobs logging to one server): before
the run, one line naming the server and where its address came from, before any model call; in
the middle of a run, one line naming the run, the records kept, and a rerun against the server
back up continues the same run. Never MLflow's traceback after minutes of silent retries."""

from __future__ import annotations

import time

import pytest
import yaml

from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer
from tests.servers import free_port, mlflow_server


@pytest.fixture
def server():
    with FakeVendorServer(key=life.KEY, answer=life.answer) as s:
        yield s


def _point_at(path, uri: str | None) -> None:
    recipe = yaml.safe_load(path.read_text())
    recipe["tracking"]["uri"] = uri
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))


@pytest.mark.parametrize("scheme, where", [("http", "tracking.uri"), ("http", "$MLFLOW_TRACKING_URI"),
                                           ("postgresql+psycopg2", "tracking.uri")])
def test_a_tracking_server_that_does_not_answer_stops_the_run_before_any_model_call(
        tmp_path, server, monkeypatch, scheme, where):
    """A server MLflow reaches over HTTP, or a database it talks to itself."""
    port = free_port()  # nothing listens there
    closed = f"{scheme}://gestalt:s3cret-pw@127.0.0.1:{port}" + ("/mlflow" if scheme != "http" else "")
    path = life.api_recipe(tmp_path, server.url)
    if where == "tracking.uri":
        _point_at(path, closed)
    else:
        _point_at(path, None)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", closed)
    code, out, err = life.cli(path)
    assert code == 1, err[-2000:]
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("gestalt")]
    shown = closed.replace("gestalt:s3cret-pw@", "***@")
    assert line.startswith(f"gestalt: error: tracking server {shown} ({where}) does not answer"), line
    assert "refused" in line and "tracking.enabled=false" in line
    assert "s3cret-pw" not in out + err  # a password in the address is never printed
    assert server.requests == [] and not life.record_lines(tmp_path)


def test_a_bare_postgresql_address_is_refused_in_one_line(tmp_path, server):
    path = life.api_recipe(tmp_path, server.url)
    _point_at(path, "postgresql://gestalt:s3cret-pw@127.0.0.1:5432/mlflow")
    code, out, err = life.cli(path)
    assert code == 2 and "Traceback" not in err and "s3cret-pw" not in out + err
    assert err.startswith("gestalt: error: tracking.uri: postgresql://***@127.0.0.1:5432/mlflow: write "
                          "postgresql+psycopg2://"), err


READERS = [["report", "--out=REPORT"], ["register", "0123456789abcdef"], ["ui", "--port=1"]]


def _read_store(tmp_path, command: list[str], uri: str) -> int:
    """The command's exit status."""
    from harness.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([*(f"--out={tmp_path / 'report'}" if a == "--out=REPORT" else a for a in command), f"--uri={uri}"])
    return int(exit_.value.code)


@pytest.mark.parametrize("command", READERS)
def test_commands_reading_the_store_say_in_one_line_that_its_server_does_not_answer(tmp_path, capsys, command):
    closed = f"http://127.0.0.1:{free_port()}"
    code = _read_store(tmp_path, command, closed)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err.startswith(f"gestalt: error: tracking server {closed} (--uri) does not answer"), err


@pytest.mark.parametrize("command", READERS)
def test_commands_reading_the_store_refuse_a_store_file_that_is_not_there(tmp_path, capsys, command):
    """... and make none (MLflow would create an empty database at the path given)."""
    missing = tmp_path / "typo.db"
    code = _read_store(tmp_path, command, f"sqlite:///{missing}")
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"gestalt: error: sqlite:///{missing} (--uri): no MLflow store here"), err
    assert not missing.exists()


@pytest.mark.slow
def test_a_tracking_server_lost_mid_run_keeps_the_records_and_a_rerun_continues_the_run(
        tmp_path, monkeypatch):
    # MLflow's own retries (about 4 minutes by default) are its business; here, none
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    store = tmp_path / "store"
    store.mkdir()
    with FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.05) as slow:
        path = life.api_recipe(tmp_path, slow.url, batch_size=1)
        with mlflow_server(store) as uri:
            _point_at(path, uri)
            proc = life.start(path)
            deadline = time.time() + 300
            while time.time() < deadline and len(life.record_lines(tmp_path)) < 10:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.02)
        # the server is gone; the trials go on, and the task's end cannot be logged
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 1, err[-3000:]
        assert "Traceback" not in err
        (line,) = [x for x in err.splitlines() if x.startswith("gestalt")]
        assert f"tracking server {uri} stopped answering" in line and "of fake-api" in line, line
        assert "records so far are kept, run the recipe again to resume" in line
        assert len(life.record_lines(tmp_path)) == life.TRIALS
        with mlflow_server(store) as back:  # the same store, on another port
            _point_at(path, back)
            code, out, err = life.cli(path)
            assert code == 0, err[-3000:]
            assert "0 new trials, 0 model calls" in out
            from mlflow import MlflowClient

            client = MlflowClient(back)
            (run,) = client.search_runs([client.get_experiment_by_name("life").experiment_id])
            logged = {a.path for a in client.list_artifacts(run.info.run_id)}
            figures = {a.path for a in client.list_artifacts(run.info.run_id, "figures")}
    assert f"continuing run {run.info.run_id}" in out and f"{run.info.run_id} of fake-api" in line
    assert run.info.status == "FINISHED" and run.data.metrics[f"{life.TASK}/n"] == life.TRIALS
    # what the lost server never got is logged by the rerun: records, intervals, figures
    assert {"records", "intervals.json", "figures"} <= logged, logged
    assert f"figures/{life.TASK}.confusion.png" in figures, figures
