"""``gestalt report`` on a result folder that cannot be written (mounted or unpacked read-only):
the report is written where ``--out`` says, the store is only read, and the summary run it cannot
log is named in one line."""

import builtins
import errno
import os
import sqlite3
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from tests.conftest import MIRROR
from tests.test_result_folder import RECIPE, hashes


def read_only(monkeypatch, folder: Path) -> None:
    """Every write under ``folder`` fails as on a read-only mount (EROFS), root's included (a
    chmod does not stop root, who runs these tests in CI); sqlite opens its files read-only."""
    def inside(path) -> bool:
        return isinstance(path, (str, os.PathLike)) and os.path.abspath(path).startswith(f"{folder}/")

    def refused(path):
        return OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    real_open, real_os_open, real_access, connect = builtins.open, os.open, os.access, sqlite3.connect
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def open_(file, mode="r", *args, **kw):
        if inside(file) and set(mode) & set("wax+"):
            raise refused(file)
        return real_open(file, mode, *args, **kw)

    def os_open(path, flags, *args, **kw):
        if inside(path) and flags & writes:
            raise refused(path)
        return real_os_open(path, flags, *args, **kw)

    def access(path, mode, *args, **kw):
        return False if inside(path) and mode & os.W_OK else real_access(path, mode, *args, **kw)

    def connect_(db, *args, **kw):
        if inside(db):
            return connect(f"file:{os.path.abspath(db)}?mode=ro", *args, **{**kw, "uri": True})
        return connect(db, *args, **kw)

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(sqlite3, "connect", connect_)


@pytest.mark.slow
def test_a_report_reads_a_read_only_result_folder(tmp_path, monkeypatch, capsys, caplog):
    folder = tmp_path / "A"
    folder.mkdir()
    (folder / "recipe.yaml").write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    monkeypatch.setenv("GESTALT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    main(["recipe", "recipe.yaml"])
    (folder / "mlflow.db.lock").unlink()  # a folder unpacked from an archive made without it
    before = hashes(folder)
    capsys.readouterr()
    read_only(monkeypatch, folder)
    out = tmp_path / "report"
    main(["report", "--experiment", RECIPE["tracking"]["experiment"], "--out", str(out)])
    monkeypatch.undo()
    assert (out / "index.html").is_file() and (out / "scores.csv").is_file()
    # the harness's log line: on stderr, or where an earlier main() of this process left the
    # logger's handler, in the log records pytest keeps
    said = {*capsys.readouterr().err.splitlines(), *(r.getMessage() for r in caplog.records)}
    (line,) = {x.split("gestalt: ", 1)[-1] for x in said if "no summary run" in x}
    assert "mlflow.db cannot be written" in line and str(out) in line, line
    assert hashes(folder) == before
