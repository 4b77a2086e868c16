"""SIGTERM (a scheduler's time limit) stops ``gestalt recipe`` with status 143 and the records
written so far kept, before the scheduler's SIGKILL (SLURM sends it 30 s later): at once where the
model returns between its calls, and within the grace the harness gives itself where the model
never returns (one endless kernel, a hung device, code that catches every exception)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from harness.exit_status import SIGTERM_DEADLINE_S
from tests.conftest import MIRROR, REPO

TASK = "closure.nat.silhouette"

MODEL = textwrap.dedent('''
    import time


    class Slow:
        fingerprint = {"slow": 1}

        def __init__(self, hangs):
            self.hangs = hangs

        def generate(self, image, prompt, settings):
            if not self.hangs:
                time.sleep(0.2)
                return "cat"
            try:
                time.sleep(0.2)
            except BaseException:  # a stop that never reaches the harness
                while True:
                    try:
                        time.sleep(1)
                    except BaseException:
                        pass
            return "cat"


    def build(hangs=False):
        return Slow(hangs)
''')


def start(folder: Path, hangs: bool) -> subprocess.Popen:
    (folder / "slow.py").write_text(MODEL)
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump({
        "name": "stop", "tasks": [TASK],
        "models": [{"id": "slow", "source": "python", "name": f"{folder / 'slow.py'}:build", "batch_size": 1,
                    "options": {"hangs": hangs}}],
        "bootstrap": {"n_boot": 100, "n_boot_kappa": 100}, "runtime": {"progress": False, "device": "cpu"},
        "data": {"mirror": str(MIRROR)}, "tracking": {"uri": f"sqlite:///{folder}/mlflow.db", "experiment": "stop"},
        "output_dir": str(folder / "out")}, sort_keys=False))
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "recipe", str(path)], cwd=REPO,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def records(folder: Path) -> list[dict]:
    path = folder / "out/slow/records" / f"{TASK}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("hangs", [False, True])
def test_sigterm_mid_battery_ends_143_keeping_the_records(tmp_path, hangs):
    proc = start(tmp_path, hangs)
    try:
        deadline = time.time() + 300
        while len(records(tmp_path)) < 3 and time.time() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGTERM)  # as a scheduler signals the job's processes
        t0 = time.time()
        # measured: 4 s at load 11 on 2 cores; a hung process: the deadline
        _, err = proc.communicate(timeout=3 * SIGTERM_DEADLINE_S)
        took = time.time() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, err[-2000:]
    kept = records(tmp_path)
    assert len(kept) >= 3 and all(r["parse_status"] == "ok" for r in kept)
    line = [x for x in err.splitlines() if x.startswith("gestalt")][-1]
    assert "terminated (SIGTERM)" in line and "records so far are kept" in line, err[-2000:]
    if hangs:
        assert took >= SIGTERM_DEADLINE_S - 1 and f"not stopped within {SIGTERM_DEADLINE_S:g} s" in line
