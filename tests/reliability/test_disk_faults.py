"""Reliability campaign: the output folder on a small tmpfs that fills mid-run, and on a read-only
mount. Each run ends with one line naming the folder and the cause (exit 1, no traceback), keeps
its records, and a rerun once the folder is writable again finishes: every trial recorded once.
Where the machine cannot mount (no privilege), the same faults are simulated in
tests/test_disk_faults.py."""

import subprocess
import sys

import pytest
import yaml

from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer

FREE_BYTES = 24_000  # room for a few dozen of the battery's 80 records


@pytest.fixture
def tmpfs(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip()}); simulated in test_disk_faults.py")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def _out_on(path, folder) -> None:
    recipe = yaml.safe_load(path.read_text())
    recipe["output_dir"] = str(folder / "out")
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))


def _records(folder) -> list[dict]:
    return life.whole_records(folder / "out" / "fake-api" / "records" / f"{life.TASK}.jsonl")


def _summary(fault: str, first, final, folder) -> None:
    ids = [r["trial_id"] for r in _records(folder)]
    lost, duplicated = life.TRIALS - len(set(ids)), len(ids) - len(set(ids))
    tracebacks = (first.stderr + final.stderr).count("Traceback")
    lines = [x for x in first.stderr.splitlines() if x.startswith("gestalt")]
    print(f"\n{fault}: first run exit {first.returncode} ({len(lines)} line), rerun exit {final.returncode}: "
          f"{lost} lost, {duplicated} duplicated, {tracebacks} tracebacks")
    assert first.returncode == 1 and len(lines) == 1, first.stderr[-3000:]
    assert final.returncode == 0, final.stderr[-3000:]
    assert lost == 0 and duplicated == 0 and tracebacks == 0


@pytest.mark.slow
def test_a_disk_that_fills_mid_run(tmp_path, tmpfs):
    filler = tmpfs / "filler"
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        path = life.api_recipe(tmp_path, server.url, batch_size=1)
        _out_on(path, tmpfs)
        free = subprocess.run(["df", "-B1", "--output=avail", str(tmpfs)], capture_output=True, text=True)
        filler.write_bytes(b"\0" * (int(free.stdout.split()[-1]) - FREE_BYTES))
        first = life.gestalt(path)
        kept = len(_records(tmpfs))
        line = next((x for x in first.stderr.splitlines() if x.startswith("gestalt")), "")
        assert f"no space left on {tmpfs}" in line and "records so far are kept; free space and run again" in line
        assert 0 < kept < life.TRIALS
        filler.unlink()
        final = life.gestalt(path)
    _summary(f"full disk ({kept} of {life.TRIALS} records written before)", first, final, tmpfs)


@pytest.mark.slow
def test_a_read_only_output_folder(tmp_path, tmpfs):
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        path = life.api_recipe(tmp_path, server.url)
        _out_on(path, tmpfs)
        subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
        first = life.gestalt(path)
        line = next((x for x in first.stderr.splitlines() if x.startswith("gestalt")), "")
        assert f"{tmpfs}" in line and "is read-only" in line and "run again" in line, first.stderr[-3000:]
        assert server.requests == []
        subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
        final = life.gestalt(path)
    _summary("read-only output folder", first, final, tmpfs)


@pytest.mark.slow
@pytest.mark.parametrize("size", ["1400k", "1100k", "800k"])
def test_a_result_folder_on_a_small_disk(tmp_path, size, monkeypatch):
    """The whole result folder (store, artifacts, records) on a disk of ``size``: where it fills
    (creating the store, a record, a run's artifacts, the summary's figures) is one line naming
    the folder, exit 1; the same run continues on a rerun once there is room."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip()}); simulated in test_disk_faults.py")
    try:
        with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
            path = life.api_recipe(mount, server.url)
            recipe = yaml.safe_load(path.read_text())
            recipe["tracking"]["uri"], recipe["output_dir"] = "sqlite:///mlflow.db", "out"
            path.write_text(yaml.safe_dump(recipe, sort_keys=False))

            def gestalt():
                return subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path)], env=life.env(),
                                      cwd=mount, capture_output=True, text=True, timeout=600)

            first = gestalt()
            assert first.returncode == 1, first.stderr[-3000:]
            # progress lines of the steps it reached may come before; the error is one line, no traceback
            errors = [x for x in first.stderr.splitlines() if x.startswith("gestalt")]
            assert len(errors) == 1 and "Traceback" not in first.stderr, first.stderr[-3000:]
            assert errors[0].startswith(f"gestalt: error: no space left on {mount}"), first.stderr[-3000:]
            subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
            final = gestalt()
            assert final.returncode == 0, final.stderr[-3000:]
            ids = [r["trial_id"] for r in _records(mount)]
            print(f"\nresult folder on a {size} disk: exit {first.returncode}, one line; rerun exit 0, "
                  f"{life.TRIALS - len(set(ids))} lost, {len(ids) - len(set(ids))} duplicated")
            assert len(ids) == len(set(ids)) == life.TRIALS
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
