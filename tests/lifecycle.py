"""A cheap, deterministic battery for run-lifecycle tests: the silhouette task (80 trials)
answered by the fake vendor on 127.0.0.1, run as ``gestalt recipe`` in a subprocess, and what it
leaves behind (records, MLflow runs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import MIRROR

TASK = "closure.nat.silhouette"
TRIALS = 80
KEY = "sk-lifecycle-test-0123456789"
ENV_KEY = "GESTALT_LIFECYCLE_KEY"


def answer(prompt: str | None) -> str:
    return "It is a cat."


def api_recipe(folder: Path, url: str, *, models: tuple[str, ...] = ("fake-api",), batch_size: int = 4,
               experiment: str = "life", tracking: bool = True) -> Path:
    recipe = {
        "name": "life", "tasks": [TASK],
        "models": [{"id": m, "source": "api", "name": "openai-compatible/fake-1", "family": "api",
                    "batch_size": batch_size,
                    "options": {"base_url": url + "/v1", "api_key_env": ENV_KEY, "max_retries": 0,
                                "backoff_base_s": 0.001, "backoff_cap_s": 0.01, "concurrency": 1}}
                   for m in models],
        "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
        "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
        "tracking": {"enabled": tracking, "uri": f"sqlite:///{folder}/mlflow.db", "experiment": experiment},
        "output_dir": str(folder / "out")}
    path = folder / "life.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def env(key: str = KEY) -> dict[str, str]:
    return dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", **{ENV_KEY: key})


def default_sigint() -> None:
    # a shell running pytest in the background ignores SIGINT and children inherit that; a user's
    # terminal does not: give the child Python's own Ctrl-C handling
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(path: Path, *args: str, key: str = KEY) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "recipe", str(path), *args], env=env(key),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)


def kill_while_the_store_is_made(path: Path, folder: Path, wait: float) -> None:
    """Start the recipe's run and SIGKILL it ``wait`` s after its MLflow store appears in
    ``folder`` (the database file MLflow's migrations write: the store, or the file that becomes it)."""
    import time

    proc = start(path)
    deadline = time.time() + 300
    while (not any((folder / n).exists() for n in ("mlflow.db", "mlflow.db.creating"))
           and proc.poll() is None and time.time() < deadline):
        time.sleep(0.01)
    time.sleep(wait)
    proc.kill()
    proc.communicate()


def gestalt(path: Path, *args: str, key: str = KEY, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path), *args], env=env(key),
                          capture_output=True, text=True, timeout=timeout, check=False)


def whole_records(path: Path) -> list[dict]:
    """The records on the file's complete lines. A battery may be mid-append when this reads, or
    killed mid-write, so a tail with no newline is a record not yet (or never) written, not one."""
    data = path.read_bytes() if path.exists() else b""
    return [json.loads(x) for x in data[:data.rfind(b"\n") + 1].splitlines()]


def record_lines(folder: Path, model: str = "fake-api") -> list[dict]:
    return whole_records(folder / "out" / model / "records" / f"{TASK}.jsonl")


def runs(folder: Path, experiment: str = "life") -> list:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{folder}/mlflow.db")
    exp = client.get_experiment_by_name(experiment)
    # the battery runs: `gestalt recipe` also keeps the experiment's summary run (gestalt.summary)
    return [] if exp is None else client.search_runs([exp.experiment_id], "tags.`gestalt.model` != ''")


def battery_runs(folder: Path, model: str = "fake-api", experiment: str = "life") -> list:
    """The model's battery runs (the experiment also holds the recipe's summary run)."""
    return [r for r in runs(folder, experiment) if r.info.run_name == model]


def cli(path: Path, *args: str, key: str = KEY) -> tuple[int, str, str]:
    """``gestalt recipe`` in this process (no start-up cost): exit status, stdout, stderr."""
    import contextlib
    import io

    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.environ.get(ENV_KEY)
    os.environ[ENV_KEY] = key
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(["recipe", str(path), *args])
                code = 0
            except SystemExit as e:
                code = int(e.code or 0)
    finally:
        if old is None:
            del os.environ[ENV_KEY]
        else:
            os.environ[ENV_KEY] = old
    return code, out.getvalue(), err.getvalue()
