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
