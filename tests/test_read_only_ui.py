"""`gestalt ui` on a result folder that cannot be written (a ``:ro`` volume, an unpacked archive
without write permission): it serves the runs, changes nothing in the folder, and stops, with its
server, when its process is stopped. Reading takes no lock."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml

from tests.conftest import REPO
from tests.servers import free_port
from tests.test_result_folder import RECIPE, hashes, rerun

EXPERIMENT = RECIPE["tracking"]["experiment"]
# root ignores file modes: the folder is mounted read-only over itself in a mount namespace of its own
READ_ONLY_MOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && cd "$0" && exec "$@"'


def read_only_command(folder: Path, argv: list[str]) -> list[str]:
    """``argv`` run where ``folder`` cannot be written: a chmod for a user, a read-only mount for
    root (skipped where this machine allows none)."""
    if os.geteuid() != 0:
        for path in [folder, *folder.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode & ~0o222)
        return argv
    if shutil.which("unshare") is None:
        pytest.skip("running as root, and no unshare for a read-only mount")
    wrapped = ["unshare", "-m", "sh", "-c", READ_ONLY_MOUNT, str(folder)]
    probe = subprocess.run([*wrapped, "sh", "-c", "! touch .probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"running as root, and no read-only mount here: {probe.stderr.strip()[:200]}")
    return [*wrapped, *argv]


def serving(port: int) -> list[int]:
    """The processes listening on 127.0.0.1:``port``."""
    return [c.pid for c in psutil.net_connections("tcp")
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid]


def fetch(url: str, body: dict | None = None) -> bytes:
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200
        return reply.read()


@pytest.mark.slow
def test_ui_serves_a_read_only_result_folder(tmp_path):
    folder = tmp_path / "A"
    folder.mkdir()
    (folder / "recipe.yaml").write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    rerun(folder, tmp_path / "cache")
    (folder / "mlflow.db.lock").unlink()  # a folder unpacked from an archive made without it
    before = hashes(folder)
    port, log = free_port(), tmp_path / "ui.log"
    argv = [sys.executable, "-m", "harness.cli", "ui", "--port", str(port), "--experiment", EXPERIMENT]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    try:
        command = read_only_command(folder, argv)
        with log.open("w") as out:
            proc = subprocess.Popen(command, cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                    env=dict(env, PYTHONPATH=str(REPO)))
        try:
            deadline = time.monotonic() + 300  # a cold MLflow import on a busy machine takes a while
            while not (m := re.search(r"MLflow UI for \S+: (http://\S+)/#/experiments/(\d+)", log.read_text())):
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            base, experiment_id = m.groups()
            assert b"<script>" in fetch(f"{base}/")
            found = json.loads(fetch(f"{base}/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment_id]}))
            names = {run["info"]["run_name"] for run in found["runs"]}
            assert len(names) == 2 and any(n.startswith("summary") for n in names), names
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)  # by its PID: `gestalt ui` stops its server itself
            code = proc.wait(timeout=60)
        assert code == 0, log.read_text()[-3000:]
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        left = serving(port)
        for pid in left:  # nothing of this test left behind, whatever failed above
            os.kill(pid, signal.SIGKILL)
        for path in [folder, *folder.rglob("*")]:  # writable again, for pytest to remove
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)
    assert not left, f"a server outlived gestalt ui on port {port}"
    assert hashes(folder) == before
