"""`gestalt ui` under a supervisor: a SIGINT sent to its process stops it and the server it started,
as SIGTERM does, even when it was started as a shell's background job (SIGINT ignored)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.servers import free_port

REPO = Path(__file__).resolve().parents[1]


def _ignore_sigint() -> None:
    # what a shell does to a background job, and what Python keeps at startup
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_sigint_to_a_background_ui_stops_it_and_its_server(tmp_path):
    from mlflow import MlflowClient

    MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").create_experiment("gestalt")
    port = free_port()
    log = tmp_path / "ui.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "ui", "--port", str(port)], cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT, preexec_fn=_ignore_sigint,
                                env=dict(os.environ, PYTHONPATH=str(REPO),
                                             MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db"))
    servers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 300  # a cold MLflow import on a busy machine takes a while
        while not re.search(r"MLflow UI for \S+: \S+", log.read_text()):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        servers = psutil.Process(proc.pid).children(recursive=True)
        assert servers, "gestalt ui serves through a child process"
        os.kill(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, f"gestalt ui ignored SIGINT (exit {code}):\n{log.read_text()[-3000:]}"
        _, alive = psutil.wait_procs(servers, timeout=30)
        assert not alive, f"the server outlived gestalt ui: {alive}"
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"
    finally:
        # nothing of this test left behind, whatever failed above
        for p in [psutil.Process(proc.pid) if proc.poll() is None else None, *servers]:
            if p is not None and p.is_running():
                p.kill()
        proc.wait()
