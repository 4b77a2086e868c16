"""A real browser on the MLflow UI: a store with three finished batteries, `gestalt ui` on it, and
Debian's headless chromium (.ci/run installs it), driven over the DevTools protocol (:class:`Browser`).

`python -m tests.browser docs/mlflow-ui` rebuilds the store and saves docs/tracking.md's screenshots.
"""

from __future__ import annotations

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
import contextlib
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
def ui(store: Path, *flags: str, timeout: float = 180) -> Iterator[str]:
    """`gestalt ui` in the store's folder; yields the runs-table URL it prints. Stopped by PID."""
    port = free_port()
    log = store / "ui.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "ui", "--port", str(port), *flags], cwd=store,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(ENV, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    try:
        deadline = time.monotonic() + timeout
        while not (m := re.search(r"MLflow UI for \S+: (\S+)", log.read_text())):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
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


class Browser:
    """Headless Chromium in a fresh profile, driven over the DevTools protocol: a page a test
    opens, reads, clicks through and photographs as a user would."""

    def __init__(self, width: int = 1600, height: int = 900):
        import urllib.request

        from websockets.sync.client import connect

        self.profile = tempfile.TemporaryDirectory()
        port = free_port()
        self.proc = subprocess.Popen(
            [chromium() or "chromium", *CHROMIUM_FLAGS, f"--user-data-dir={self.profile.name}",
             f"--remote-debugging-port={port}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as reply:
                    page = next(t for t in json.load(reply) if t["type"] == "page")
                break
            except (OSError, StopIteration):
                assert time.monotonic() < deadline and self.proc.poll() is None, "chromium did not start"
                time.sleep(0.1)
        self.connection = contextlib.ExitStack()
        self.ws = self.connection.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30))
        self.calls = 0
        self.send("Page.enable")
        # the page itself at width x height (the window's size would include a headless frame)
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def send(self, method: str, **params) -> dict:
        self.calls += 1
        self.ws.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv(timeout=120))
            if reply.get("id") == self.calls:
                assert "error" not in reply, (method, reply["error"])
                return reply["result"]

    def evaluate(self, script: str):
        result = self.send("Runtime.evaluate", expression=script, returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_for(self, script: str, what: str, timeout: float = 120):
        """Poll ``script`` until it is truthy (the UI renders asynchronously); its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(script)
            if value:
                return value
            assert time.monotonic() < deadline, f"{what}: not shown within {timeout:.0f} s; page:\n{self.text()[:3000]}"
            time.sleep(0.1)

    def click(self, text: str, selector: str = "a", timeout: float = 120) -> None:
        """Click the first ``selector`` element whose visible text is ``text``, once it shows."""
        find = (f"Array.from(document.querySelectorAll({json.dumps(selector)}))"
                f".find(e => e.innerText.trim() === {json.dumps(text)})")
        self.wait_for(f"!!({find})", f"{selector} {text!r}", timeout)
        self.evaluate(f"({find}).click()")

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        assert path.stat().st_size > 10_000, path

    def close(self) -> None:
        self.connection.close()
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def base_of(url: str) -> str:
    return url.split("/#/")[0]


def compare_url(base: str, experiment_id: str, run_ids: list[str]) -> str:
    q = urllib.parse.quote
    runs, experiments = json.dumps(run_ids), json.dumps([experiment_id])
    return f"{base}/#/compare-runs?runs={q(runs)}&experiments={q(experiments)}"


def main(out: str) -> None:
    """Rebuild the three-battery store, register one scorecard, and save the README's screenshots
    along a new user's clicks at 1600x1000: the root address (the experiment's runs table), its
    summary run, Compare, the scorecard."""
    from mlflow import MlflowClient

    dest = Path(out).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp)
        db = three_batteries(store)
        client = MlflowClient(f"sqlite:///{db}")
        exp = client.get_experiment_by_name("gestalt")
        runs = client.search_runs([exp.experiment_id], "tags.`gestalt.model` != ''",
                                  order_by=["attributes.start_time"])
        (summary,) = client.search_runs([exp.experiment_id], "tags.`gestalt.summary` = 'true'")
        first = runs[0]
        with ui(store) as url, Browser(width=1600, height=1000) as page:
            registered = gestalt("register", first.info.run_id, cwd=store)
            assert registered.returncode == 0, registered.stderr
            base = base_of(url)
            page.goto(f"{base}/")  # the root address opens the experiment's runs table
            page.wait_for("document.body.innerText.includes('Silhouette.B')", "the runs table")
            time.sleep(3)
            page.screenshot(dest / "runs-table.png")
            page.click(summary.info.run_name)
            page.wait_for("Array.from(document.images).some(i => i.src.includes('matrix.png') && i.naturalWidth)",
                          "the summary's matrix")
            time.sleep(2)
            page.screenshot(dest / "summary.png")
            page.goto(compare_url(base, exp.experiment_id, [r.info.run_id for r in runs]))
            page.wait_for("document.body.innerText.includes('Silhouette.B')", "Compare")
            time.sleep(3)
            page.screenshot(dest / "compare.png")
            page.goto(registered.stdout.strip().splitlines()[-1])
            page.wait_for("document.querySelectorAll('table td').length > 10", "the scorecard")
            time.sleep(2)
            page.screenshot(dest / "scorecard.png")
    print(f"screenshots in {dest}")


if __name__ == "__main__":
    main(sys.argv[1])
