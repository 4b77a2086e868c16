"""A full or read-only output folder ends the run with one line naming the folder and the cause,
exit 1; the records written so far are kept and a rerun once it is writable continues.
Simulated here (an append or a mkdir failing as the kernel fails them); on a real small tmpfs
and a read-only mount: tests/reliability/test_disk_faults.py."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from harness.trials.records import RecordStore
from tests import lifecycle as life
from tests.conftest import REPO
from tests.fake_vendor_server import FakeVendorServer


def _run(path: Path, capsys) -> tuple[int, str]:
    from harness.cli import main

    try:
        main(["recipe", str(path)])
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    return code, capsys.readouterr().err


@pytest.fixture
def server():
    with FakeVendorServer(key=life.KEY, answer=life.answer) as s:
        yield s


def test_a_disk_that_fills_mid_run_ends_it_in_one_line_and_keeps_the_records(tmp_path, server, monkeypatch,
                                                                          capsys):
    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    path = life.api_recipe(tmp_path, server.url, tracking=False)
    append = RecordStore.append
    calls = []

    def fills(self, records):
        calls.append(len(records))
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        append(self, records)

    monkeypatch.setattr(RecordStore, "append", fills)
    code, err = _run(path, capsys)
    folder = tmp_path / "out" / "fake-api" / "records"
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"gestalt: error: no space left on {folder}: records so far are kept; free space "
                          f"and run again"), err
    kept = len(life.record_lines(tmp_path))
    assert kept == sum(calls[:3]) > 0
    monkeypatch.setattr(RecordStore, "append", append)
    code, err = _run(path, capsys)
    assert code == 0, err
    assert len(life.record_lines(tmp_path)) == life.TRIALS
    assert len(server.requests) == life.TRIALS + calls[3]  # only the batch the full disk refused is asked again


def test_a_read_only_output_folder_is_named_in_one_line(tmp_path, server, monkeypatch, capsys):
    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    path = life.api_recipe(tmp_path, server.url, tracking=False)
    out = tmp_path / "out"
    mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self == out or out in self.parents:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    code, err = _run(path, capsys)
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("gestalt: error: ") and "read-only" in err and str(tmp_path) in err, err
    assert "run again" in err and server.requests == []


# -- wherever it fills: artifacts, figures, the store; the run is marked FAILED where it can be ----

def _battery_run(tmp_path):
    (run,) = life.battery_runs(tmp_path)
    return run


def _fills(where: str):
    """A write at ``where`` failing as a full disk fails it, as the library raises it."""
    def artifacts(self, local_dir, artifact_path=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(self.artifact_dir, "figures", "x.png"))

    def figure(self, fname, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(fname))

    def store(self, run_id, metrics=(), params=(), tags=(), *args, **kwargs):
        import sqlite3

        from mlflow.exceptions import MlflowException
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as e:
            raise MlflowException("(sqlite3.OperationalError) database or disk is full\n[SQL: INSERT ...]") from e

    if where == "artifacts":
        from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository
        return LocalArtifactRepository, "log_artifacts", artifacts
    if where == "figures":
        from matplotlib.figure import Figure
        return Figure, "savefig", figure
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    return SqlAlchemyStore, "log_batch", store


@pytest.mark.parametrize("where", ["artifacts", "figures", "store"])
def test_a_disk_that_fills_anywhere_is_one_line_and_the_run_ends_failed(tmp_path, server, monkeypatch, capsys,
                                                                         where):
    """MLflow and matplotlib raise (or wrap) the full disk themselves: still one line, exit 1,
    the battery's run marked FAILED (its store can still be written here), and a rerun with
    space again continues that run to FINISHED, every trial once."""
    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    path = life.api_recipe(tmp_path, server.url)
    owner, name, fault = _fills(where)
    original = getattr(owner, name)
    monkeypatch.setattr(owner, name, fault)
    code, err = _run(path, capsys)
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("gestalt: error: no space left on /"), err
    assert "records so far are kept; free space and run again" in err
    if where == "store":
        assert str(tmp_path) in err  # the store's folder, which the database error does not name
    run = _battery_run(tmp_path)
    if where != "store":  # a store that cannot take a row keeps the run RUNNING: the rerun continues it
        assert run.info.status == "FAILED" and run.data.tags["gestalt.outcome"] == "no space left", run.data.tags
    monkeypatch.setattr(owner, name, original)
    code, err = _run(path, capsys)
    assert code == 0, err
    assert _battery_run(tmp_path).info.run_id == run.info.run_id
    assert _battery_run(tmp_path).info.status == "FINISHED"
    ids = [r["trial_id"] for r in life.record_lines(tmp_path)]
    assert len(ids) == len(set(ids)) == life.TRIALS


def test_a_read_only_store_names_its_real_folder(tmp_path, server, monkeypatch, capsys):
    """Not "." when the store is a relative sqlite:///mlflow.db in the working folder."""
    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    monkeypatch.chdir(tmp_path)
    path = life.api_recipe(tmp_path, server.url)
    text = path.read_text().replace(f"sqlite:///{tmp_path}/mlflow.db", "sqlite:///mlflow.db")
    path.write_text(text.replace(str(tmp_path / "out"), "out"))
    from mlflow.exceptions import MlflowException
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    def read_only(self, *args, **kwargs):
        raise MlflowException("(sqlite3.OperationalError) attempt to write a readonly database")

    monkeypatch.setattr(SqlAlchemyStore, "log_batch", read_only)
    code, err = _run(path, capsys)
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"gestalt: error: {tmp_path} is read-only" in err, err


def test_mlflow_says_nothing_of_its_own_unless_verbose(tmp_path, server, monkeypatch):
    """A first run creates the store (MLflow's INFO lines on its tables) and ends runs (its
    "View run" lines for a server): none reach the terminal."""
    import subprocess
    import sys

    path = life.api_recipe(tmp_path, server.url)
    env = dict(life.env(), PYTHONPATH=str(REPO))
    for own in ("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "MLFLOW_LOGGING_LEVEL"):
        env.pop(own, None)
    quiet = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert " mlflow" not in quiet.stderr and "alembic" not in quiet.stderr, quiet.stderr[-3000:]
    (tmp_path / "mlflow.db").unlink()
    loud = subprocess.run([sys.executable, "-m", "harness.cli", "--verbose", "recipe", str(path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert loud.returncode == 0, loud.stderr[-3000:]  # --verbose is taken by every command


def test_a_damaged_database_gets_advice_that_works(tmp_path):
    """`mlflow db upgrade` cannot repair a damaged file: the advice is to restore it, or to move
    it aside and run again (the records are outside it, so nothing is asked of a model again)."""
    from harness.errors import GestaltError
    from harness.tracking.store import open_store

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    open_store(uri, "life")
    import mlflow
    with mlflow.start_run():
        pass
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page overwritten
    db.write_bytes(bytes(data))
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    engine = SqlAlchemyStore._engine_map.pop(uri, None)
    if engine is not None:
        engine.dispose()
    with pytest.raises(GestaltError) as e:
        open_store(uri, "life")
    message = str(e.value)
    assert "\n" not in message and "mlflow db upgrade" not in message, message
    assert "damaged" in message and "restore it from a copy" in message and f"mv {db}" in message, message
