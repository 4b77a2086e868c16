"""A real browser on the MLflow UI: a store with three finished batteries, `gestalt ui` on it, and
Debian's headless chromium (.ci/run installs it) to read pages (`--dump-dom`) or save screenshots.

`python -m tests.browser docs/mlflow-ui` rebuilds the store and saves the README's screenshots.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.conftest import MIRROR
from tests.servers import free_port

MODELS = [("tiny-vit", "test_vit"), ("tiny-vit2", "test_vit2"), ("tiny-effnet", "test_efficientnet")]
TASKS = ["closure.nat.silhouette", "similarity.chart.mark_color", "similarity.chart.series_count"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def gestalt(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(ENV, PYTHONPATH=str(Path(__file__).resolve().parents[1])),
                          timeout=900)


def three_batteries(store: Path) -> Path:
    """`gestalt recipe` with three tiny random timm models on three cheap tasks; ./mlflow.db."""
    recipe = {"name": "ui-demo", "tasks": TASKS,
              "models": [{"id": i, "source": "timm", "name": n, "weights": "random", "family": "supervised",
                          "batch_size": 40} for i, n in MODELS],
              "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
              "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
              "tracking": {"experiment": "gestalt"}, "output_dir": str(store / "out")}
    (store / "ui-demo.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    res = gestalt("recipe", "ui-demo.yaml", cwd=store)
    assert res.returncode == 0, res.stderr[-3000:]
    return store / "mlflow.db"


@contextmanager
def ui(store: Path, timeout: float = 180) -> Iterator[str]:
    """`gestalt ui` in the store's folder; yields the runs-table URL it prints. Stopped by PID."""
    port = free_port()
    log = store / "ui.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "ui", "--port", str(port)], cwd=store,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(ENV, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    try:
        deadline = time.monotonic() + timeout
        while not (m := re.search(r"MLflow UI for \S+: (\S+)", log.read_text())):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        yield m.group(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # `gestalt ui` stops the server it started: nothing answers on the port any more
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, f"a server outlived gestalt ui on port {port}"


def _browse(url: str, *extra: str, width: int = 1600, height: int = 900) -> str:
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run([chromium() or "chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                              f"--window-size={width},{height}", "--virtual-time-budget=25000", *extra, url],
                             capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def page_text(url: str) -> str:
    """The rendered page's text (scripts run, then the DOM is dumped)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", _browse(url, "--dump-dom")))


def screenshot(url: str, path: Path, height: int = 900) -> None:
    _browse(url, f"--screenshot={path}", height=height)
    assert path.stat().st_size > 10_000, path


def base_of(url: str) -> str:
    return url.split("/#/")[0]


def compare_url(base: str, experiment_id: str, run_ids: list[str]) -> str:
    q = urllib.parse.quote
    runs, experiments = json.dumps(run_ids), json.dumps([experiment_id])
    return f"{base}/#/compare-runs?runs={q(runs)}&experiments={q(experiments)}"


def main(out: str) -> None:
    """Rebuild the three-battery store, register one scorecard, save the README's screenshots."""
    from mlflow import MlflowClient

    dest = Path(out).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp)
        db = three_batteries(store)
        client = MlflowClient(f"sqlite:///{db}")
        exp = client.get_experiment_by_name("gestalt")
        runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time"])
        first = runs[0]
        assert gestalt("register", first.info.run_id, cwd=store).returncode == 0
        with ui(store) as url:
            base = base_of(url)
            screenshot(url, dest / "runs-table.png")
            screenshot(compare_url(base, exp.experiment_id, [r.info.run_id for r in runs]),
                       dest / "compare.png", height=1400)
            model = first.data.tags["gestalt.model"]
            screenshot(f"{base}/#/models/gestalt-scorecard-{model}/versions/1", dest / "scorecard.png",
                       height=1000)
    print(f"screenshots in {dest}")


if __name__ == "__main__":
    main(sys.argv[1])
