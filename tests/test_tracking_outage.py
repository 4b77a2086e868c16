"""A tracking server that does not answer (jobs logging to one server): before
the run, one line naming the server and where its address came from, before any model call; in
the middle of a run, one line naming the run, the records kept, and a rerun against the server
back up continues the same run. A server lost mid-run is retried for the outage budget
(``tracking.outage_budget_s``), saying so once, and the process then ends: MLflow's own retries
(minutes a request by default) never keep it alive. Never MLflow's traceback."""

from __future__ import annotations

import contextlib
import time
from urllib.parse import urlparse

import pytest
import yaml

from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer
from tests.servers import TcpProxy, free_port, mlflow_server, postgres_server


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


BUDGET_S = 5  # tracking.outage_budget_s in the outage tests (the default is minutes)
MARGIN_S = 30  # from giving up to the process's exit, at most


class _Stderr:
    """A running battery's stderr lines, read as they come, each with when it came."""

    def __init__(self, proc):
        import threading

        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(
            (time.monotonic(), line) for line in proc.stderr), daemon=True)
        self._thread.start()

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "".join(line for _, line in self.lines)

    def first(self, words: str) -> float:
        return next(t for t, line in self.lines if words in line)


def _mlflow_retries_unset(monkeypatch) -> None:
    import os

    for name in [k for k in os.environ if k.startswith("MLFLOW_HTTP_REQUEST")]:
        monkeypatch.delenv(name)


def _lost_mid_run(tmp_path, path, uri: str, lose) -> tuple[str, str]:
    """Start the battery against ``uri``, ``lose()`` the store at its 10th record and leave it
    lost: the process ends within the budget once it has said it is retrying, with one line,
    every record kept. (the ``gestalt`` line, stderr)"""
    _point_at(path, uri)
    proc = life.start(path, f"--tracking.outage_budget_s={BUDGET_S}")
    err = _Stderr(proc)
    deadline = time.time() + 300
    while time.time() < deadline and len(life.record_lines(tmp_path)) < 10:
        assert proc.poll() is None, (proc.stdout.read(), err.text())
        time.sleep(0.02)
    lose()
    # the trials go on; the task's end cannot be logged, and the process gives up
    proc.wait(timeout=300 + BUDGET_S)
    ended = time.monotonic()
    text = err.text()
    assert proc.returncode == 1, text[-3000:]
    assert "Traceback" not in text
    assert ended - err.first("not answering") <= BUDGET_S + MARGIN_S, text[-3000:]
    (progress,) = [x for x in text.splitlines() if "not answering" in x]
    assert progress.endswith(f"retrying for up to {BUDGET_S} s"), progress
    (line,) = [x for x in text.splitlines() if x.startswith("gestalt")]
    assert "stopped answering" in line and "of fake-api" in line, line
    assert "records so far are kept, run the recipe again to resume" in line
    assert len(life.record_lines(tmp_path)) == life.TRIALS
    return line, text


def _continues(path, line: str, uri: str) -> None:
    """A rerun against the store back up continues the run the lost one left, and logs what the
    store never got: records, intervals, figures."""
    from mlflow import MlflowClient

    _point_at(path, uri)
    code, out, err = life.cli(path)
    assert code == 0, err[-3000:]
    assert "0 new trials, 0 model calls" in out
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("life").experiment_id],
                              "tags.`gestalt.model` != ''")  # not the experiment's summary run
    assert len(runs) == 1, out + "\n" + "\n".join(f"{r.info.run_id} {r.info.status} {r.data.tags}" for r in runs)
    (run,) = runs
    logged = {a.path for a in client.list_artifacts(run.info.run_id)}
    figures = {a.path for a in client.list_artifacts(run.info.run_id, "figures")}
    assert f"continuing run {run.info.run_id}" in out and f"{run.info.run_id} of fake-api" in line
    assert run.info.status == "FINISHED" and run.data.metrics[f"{life.TASK}/n"] == life.TRIALS
    assert {"records", "intervals.json", "figures"} <= logged, logged
    assert f"figures/{life.TASK}.confusion.png" in figures, figures


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_tracking_server_lost_mid_run_ends_the_job_within_the_budget_and_a_rerun_continues_the_run(
        tmp_path, monkeypatch, backend):
    """With MLflow's default retries (about 4 minutes a request, unset as a user has them) and a
    short budget set through the recipe's setting; the server's store on sqlite or PostgreSQL."""
    _mlflow_retries_unset(monkeypatch)
    store = tmp_path / "store"
    store.mkdir()
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(postgres_server(tmp_path)) if backend == "postgresql" else None
        slow = stack.enter_context(FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.05))
        path = life.api_recipe(tmp_path, slow.url, batch_size=1)
        server = contextlib.ExitStack()
        uri = server.enter_context(mlflow_server(store, database))
        line, _ = _lost_mid_run(tmp_path, path, uri, server.close)  # the server killed, left down
        assert f"tracking server {uri} stopped answering" in line
        with mlflow_server(store, database) as back:  # the same store, on another port
            _continues(path, line, back)


@pytest.mark.slow
def test_a_database_lost_mid_run_ends_the_job_within_the_budget_and_a_rerun_continues_the_run(
        tmp_path, monkeypatch):
    """A PostgreSQL database MLflow reaches itself (no tracking server), lost and back on the
    same address."""
    from harness.tracking.store import shown_uri

    _mlflow_retries_unset(monkeypatch)
    with postgres_server(tmp_path) as database, \
            FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.05) as slow:
        path = life.api_recipe(tmp_path, slow.url, batch_size=1)
        parts = urlparse(database)
        proxy = TcpProxy(parts.port)
        uri = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
        line, _ = _lost_mid_run(tmp_path, path, uri, proxy.down)
        assert f"tracking server {shown_uri(uri)} stopped answering (connection to server" in line, line
        proxy.up()
        _continues(path, line, uri)


# -- the outage budget: how long a run keeps retrying a tracking server before it gives up ----------


@pytest.fixture
def mlflow_defaults(monkeypatch):
    """MLflow's own retry settings as a user has them (unset), restored afterwards whatever the
    code under test sets; the tracking address restored too."""
    import os

    import mlflow

    for name in [k for k in os.environ if k.startswith("MLFLOW_HTTP_REQUEST")]:
        monkeypatch.delenv(name)
    for name in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)  # recorded: an undo removes what the code set
    before = mlflow.get_tracking_uri()
    yield
    mlflow.set_tracking_uri(before)


def _progress(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not answering" in r.getMessage()]


def test_a_tracking_call_gives_up_once_the_outage_budget_is_spent(mlflow_defaults, caplog):
    """With MLflow's default retries (about 4 minutes), the budget decides: the call keeps trying
    for the budget, says so once, then gives up."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from harness.tracking.store import outage_budget, patiently, tracking_lost

    closed = f"http://127.0.0.1:{free_port()}"
    mlflow.set_tracking_uri(closed)
    with outage_budget(1):
        start = time.monotonic()
        with pytest.raises(MlflowException) as lost:
            patiently(lambda: mlflow.search_experiments())
        took = time.monotonic() - start
    assert tracking_lost(lost.value) is not None
    assert 1 <= took < 1 + 30, took
    (line,) = _progress(caplog)
    assert line.startswith(f"tracking server {closed} not answering (") and line.endswith(
        "retrying for up to 1 s"), line


def test_a_tracking_server_back_within_the_budget_answers_the_same_call(mlflow_defaults, caplog):
    import http.server
    import threading

    import mlflow

    from harness.tracking.store import outage_budget, patiently

    port = free_port()
    mlflow.set_tracking_uri(f"http://127.0.0.1:{port}")

    class Empty(http.server.BaseHTTPRequestHandler):
        def _reply(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST = _reply

        def log_message(self, *args):
            pass

    servers = []

    def serve_later():  # the server starts (binds its port) 1 s into the outage, after a retry
        time.sleep(1.0)
        servers.append(http.server.ThreadingHTTPServer(("127.0.0.1", port), Empty))
        servers[0].serve_forever()

    threading.Thread(target=serve_later, daemon=True).start()
    with outage_budget(120):
        answer = patiently(lambda: mlflow.search_experiments())
    servers[0].shutdown()  # serving: it answered
    servers[0].server_close()
    assert answer == []
    assert len(_progress(caplog)) == 1


def test_the_outage_budget_leaves_mlflow_s_settings_as_they_were(mlflow_defaults):
    import os

    from harness.tracking.store import outage_budget

    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "5"
    with outage_budget(60):
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"  # the budget retries, not MLflow
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "5"


@pytest.mark.parametrize("value", [0, -1, 86401, "ten", True])
def test_the_outage_budget_setting_is_bounded(tmp_path, value):
    from harness.recipes import RecipeError, load_recipe

    path = life.api_recipe(tmp_path, "http://127.0.0.1:1")
    recipe = yaml.safe_load(path.read_text())
    recipe["tracking"]["outage_budget_s"] = value
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    with pytest.raises(RecipeError, match=r"life\.yaml:\d+: .*tracking\.outage_budget_s"):
        load_recipe(path)
