"""The local MLflow store is created whole or not at all: MLflow's schema migrations (tens of
steps, seconds) run on a file beside the store, renamed into place once done. A store that a
process killed mid-migration left behind (made before this was so, or on a full disk) is made
again when it holds no run, and named in one line with what to do when it holds runs.
(SIGKILLs at random moments of creation: tests/reliability/test_store_creation_kill.py.)"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path


def _half_migrated(db: Path) -> None:
    """A store as a process killed inside MLflow's migrations leaves it: stamped at an early
    revision, with the copy table of the next step's batch migration left behind (a rerun's
    migration then fails: ``table _alembic_tmp_tags already exists``)."""
    import sqlalchemy
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase

    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    InitialBase.metadata.create_all(engine)
    config = _get_alembic_config(str(engine.url))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "df50e92ffc5e")
        connection.exec_driver_sql("CREATE TABLE _alembic_tmp_tags (key VARCHAR(250))")
    engine.dispose()


def _tables(db: Path) -> set[str]:
    with closing(sqlite3.connect(db)) as con:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_a_new_store_appears_only_once_created(tmp_path, monkeypatch):
    """Until MLflow's migrations are done, the store's name holds nothing a rerun would open."""
    import mlflow.store.db.utils as db_utils

    from harness.tracking.store import open_store

    db = tmp_path / "mlflow.db"
    seen = []
    upgrade = db_utils._upgrade_db

    def watched(engine):
        seen.append(db.exists())
        upgrade(engine)

    monkeypatch.setattr(db_utils, "_upgrade_db", watched)
    open_store(f"sqlite:///{db}", "life")
    assert seen == [False]
    assert {"runs", "alembic_version", "experiments"} <= _tables(db)
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("mlflow.db"))
    assert left == ["mlflow.db", "mlflow.db.lock"]


def test_a_half_migrated_store_without_runs_is_made_again(tmp_path, caplog):
    from harness.tracking.store import open_store

    db = tmp_path / "mlflow.db"
    _half_migrated(db)
    experiment = open_store(f"sqlite:///{db}", "life")
    assert experiment and "_alembic_tmp_tags" not in _tables(db)
    assert (tmp_path / "mlflow.db.incomplete").is_file()  # kept aside, not deleted
    (line,) = [r.getMessage() for r in caplog.records if "interrupted" in r.getMessage()]
    assert str(db) in line and "mlflow.db.incomplete" in line, line


def test_a_store_mlflow_cannot_open_that_holds_runs_is_named_in_one_line(tmp_path):
    import subprocess
    import sys

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    opening = ("import sys\nfrom harness.errors import GestaltError\n"
               "from harness.tracking.store import open_store\n"
               "try:\n    open_store(sys.argv[1], 'life')\nexcept GestaltError as e:\n    sys.exit(str(e))\n")
    # a process of its own each time: MLflow checks a store's schema once per process
    made = subprocess.run([sys.executable, "-c", opening + "import mlflow\nmlflow.start_run()\nmlflow.end_run()",
                           uri], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-2000:]
    with closing(sqlite3.connect(db)) as con, con:
        con.execute("UPDATE alembic_version SET version_num = 'df50e92ffc5e'")  # a schema MLflow will not open
    refused = subprocess.run([sys.executable, "-c", opening, uri], capture_output=True, text=True)
    message = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 1 and message.startswith(f"{uri}: MLflow cannot open this store"), refused.stderr
    assert "holds runs" in message and "mlflow db upgrade" in message
    assert db.is_file() and not (tmp_path / "mlflow.db.incomplete").exists()


def test_a_store_is_created_in_the_folder_it_names_whatever_was_created_before(tmp_path, monkeypatch):
    """MLflow keeps one engine per store URI for the process: a relative ``mlflow.db`` made in one
    folder, its engine kept (a creation killed in a long-lived process), must not stand in for the
    same relative name in the next folder, nor a store made, removed and made again at one path."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from harness.tracking.store import _create_sqlite_store

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    SqlAlchemyStore("sqlite:///mlflow.db.creating", str(first))
    monkeypatch.chdir(second)
    _create_sqlite_store(Path("mlflow.db"))
    assert (second / "mlflow.db").is_file() and not (second / "mlflow.db.creating").exists()
    again = second / "again.db"
    _create_sqlite_store(again)
    again.unlink()
    _create_sqlite_store(again)
    assert again.is_file()
