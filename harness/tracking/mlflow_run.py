"""One flat MLflow run per model battery; tasks are metric prefixes.

Params: model identity, weights revision, readouts, seeds, harness version. Metrics:
``<task>/<metric>`` with ``_ci_low``/``_ci_high``/``_ceiling``/``_floor``, ``<task>/n`` and
``<task>/null_rate``. Artifacts: ``records/<task>.jsonl``, ``intervals.json``, the resolved recipe
and its hash, the stimulus-set hashes and ``figures/*.png``. Only the main process logs.
The default store is ``sqlite:///mlflow.db`` in the working directory (the ./mlruns file store is
refused by current MLflow); ``MLFLOW_TRACKING_URI`` or the recipe's ``tracking.uri`` override it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from ..trials.distributed import file_lock

DEFAULT_URI = "sqlite:///mlflow.db"


def tracking_uri(configured: str | None) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


# -- run lifecycle: one run per battery, never one left RUNNING by a dead process ------------

BATTERY_KEY = "gestalt.battery_key"  # hash of everything that decides the battery's trials and scores
RECORDS_DIGEST = "gestalt.records_sha256"  # the record files' digest when the battery finished
OUTCOME = "gestalt.outcome"  # why a run ended FAILED: interrupted, abandoned, all trials null


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def open_store(uri: str, experiment: str) -> str:
    """Point MLflow at the store and experiment, creating them once; the experiment id.

    On a fresh sqlite store two processes would both run MLflow's schema migration and one dies
    in alembic ("expected to match one row"); both would also create the experiment. Creation
    therefore happens under a lock file beside the database."""
    import mlflow

    db = _sqlite_path(uri)
    lock = file_lock(db.with_name(db.name + ".lock")) if db else contextlib.nullcontext()
    with lock:
        mlflow.set_tracking_uri(uri)
        exp = mlflow.get_experiment_by_name(experiment)
        if exp is None and db is not None:
            # MLflow would put artifacts in ./mlruns of whatever directory the run starts from;
            # keep them beside the database instead, so a store is one self-contained folder
            mlflow.create_experiment(experiment, artifact_location=(db.parent.resolve() / "mlartifacts").as_uri())
        return mlflow.set_experiment(experiment).experiment_id


def _owner_tags() -> dict[str, str]:
    return {"gestalt.host": socket.gethostname(), "gestalt.pid": str(os.getpid())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _abandoned(run) -> bool:
    """RUNNING, but the process that ran it on this machine is gone (SIGKILL, power, OOM)."""
    tags = run.data.tags
    pid = tags.get("gestalt.pid", "")
    return (run.info.status == "RUNNING" and tags.get("gestalt.host") == socket.gethostname()
            and pid.isdigit() and not _alive(int(pid)))


@dataclass
class Prior:
    """What the store already holds for a battery: the run to continue, if any."""

    run_id: str | None = None
    up_to_date: bool = False
    closed: tuple[str, ...] = ()  # abandoned runs of the model marked FAILED


def find_battery(experiment_id: str, model_id: str, battery_key: str, records_digest: str,
                 new_run: bool = False) -> Prior:
    """The run of this battery to continue, or None for a new one; marks abandoned runs FAILED.

    The latest run with the same battery key is the battery's run: FINISHED with the same record
    digest means up to date; otherwise (killed, interrupted, trials missing or repaired) the
    rerun continues in it, so the experiment keeps one run per battery. A RUNNING run whose
    process is gone and that will not be continued is closed FAILED with outcome "abandoned".
    Callers hold the battery's lock, so no other live process on this machine is inside it."""
    from mlflow import MlflowClient

    client = MlflowClient()
    runs = client.search_runs([experiment_id], filter_string=f"tags.`gestalt.model` = '{model_id}'",
                              order_by=["attributes.start_time DESC"])
    mine = [r for r in runs if r.data.tags.get(BATTERY_KEY) == battery_key]
    prior = Prior()
    if mine and not new_run:
        latest = mine[0]
        if latest.info.status == "FINISHED" and latest.data.tags.get(RECORDS_DIGEST) == records_digest:
            prior = Prior(run_id=latest.info.run_id, up_to_date=True)
        elif latest.info.status != "RUNNING" or _abandoned(latest):
            prior = Prior(run_id=latest.info.run_id)
    closed = []
    for r in runs:
        if r.info.run_id != prior.run_id and _abandoned(r):
            client.set_tag(r.info.run_id, OUTCOME, "abandoned")
            client.set_terminated(r.info.run_id, status="FAILED")
            closed.append(r.info.run_id)
    prior.closed = tuple(closed)
    return prior


def logged_intervals(run_id: str) -> dict[str, Any]:
    """intervals.json of a finished run (the scores an up-to-date rerun reports), read in place
    from a local store (MLflow's download would draw a progress bar)."""
    import mlflow

    uri = mlflow.MlflowClient().get_run(run_id).info.artifact_uri
    if uri.startswith("file:"):
        return json.loads((Path(url2pathname(urlparse(uri).path)) / "intervals.json").read_text())
    return mlflow.artifacts.load_dict(f"{uri}/intervals.json")


class BatteryRun:
    """Context manager around ``mlflow.start_run``: an exception ends the run FAILED, never FINISHED.

    ``resume`` continues an existing run of the same battery (MLflow sets it RUNNING again);
    ``fail(outcome)`` ends it FAILED without an exception (every trial null)."""

    def __init__(self, *, uri: str, experiment: str, run_name: str, tags: dict[str, str],
                 resume: str | None = None):
        import mlflow

        self.mlflow = mlflow
        open_store(uri, experiment)
        self.run_name = run_name
        self.tags = {**tags, **_owner_tags()}
        self.resume = resume
        self.outcome: str | None = None
        self.run: Any = None  # mlflow.ActiveRun once entered

    def __enter__(self) -> BatteryRun:
        if self.resume:
            self.run = self.mlflow.start_run(run_id=self.resume)
            self.mlflow.set_tags(self.tags)
        else:
            self.run = self.mlflow.start_run(run_name=self.run_name, tags=self.tags)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.outcome = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else f"error: {exc_type.__name__}"
        if self.outcome:
            self.mlflow.set_tag(OUTCOME, self.outcome)
        self.mlflow.end_run(status="FAILED" if self.outcome else "FINISHED")

    def fail(self, outcome: str) -> None:
        self.outcome = outcome

    def finish(self, records_digest: str) -> None:
        """The digest an unchanged rerun compares against (logged last: a run killed before it is
        never taken for up to date)."""
        self.mlflow.set_tag(RECORDS_DIGEST, records_digest)

    @property
    def run_id(self) -> str:
        return self.run.info.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        clean = {k: ("" if v is None else str(v)[:6000]) for k, v in params.items()}
        if self.resume:  # params are immutable in MLflow: a continued run keeps its first values
            logged = self.mlflow.get_run(self.run_id).data.params
            clean = {k: v for k, v in clean.items() if k not in logged}
        self.mlflow.log_params(clean)

    def log_task(self, task_id: str, scores, records: list[dict], extra_metrics: dict[str, float],
                 figures: dict[str, Any], records_path: Path) -> None:
        metrics: dict[str, float] = {}
        for s in scores:
            metrics.update(s.metrics(task_id))
        n = len(records)
        nulls = sum(r["parse_status"] != "ok" for r in records)
        metrics[f"{task_id}/n"] = float(n - nulls)
        metrics[f"{task_id}/null_rate"] = nulls / n if n else 0.0
        metrics.update(extra_metrics)
        self.mlflow.log_metrics(metrics)
        self.mlflow.log_artifact(str(records_path), artifact_path="records")
        for name, fig in figures.items():
            self.mlflow.log_figure(fig, f"figures/{name}")

    def log_battery(self, *, intervals: dict[str, Any], recipe: dict, recipe_sha256: str,
                    stimulus_sets: dict[str, str]) -> None:
        self.mlflow.log_dict(intervals, "intervals.json")
        self.mlflow.log_dict(recipe, "recipe.resolved.yaml")
        self.mlflow.log_text(recipe_sha256 + "\n", "recipe.sha256")
        self.mlflow.log_dict(stimulus_sets, "stimulus_sets.json")
        digest = hashlib.sha256(json.dumps(stimulus_sets, sort_keys=True).encode()).hexdigest()
        self.mlflow.set_tag("gestalt.stimulus_sets_sha256", digest)

    def log_training(self, task_id: str, history: list[list[dict[str, float]]],
                     artifacts: dict[str, Path]) -> None:
        """Training curves (per fold, per epoch) and the checkpoint of a model trained for a task."""
        for fold, epochs in enumerate(history):
            tag = f"{task_id}/train" + (f"/fold{fold}" if len(history) > 1 else "")
            for row in epochs:
                step = int(row.get("epoch", 0))
                self.mlflow.log_metrics({f"{tag}/{k}": float(v) for k, v in row.items()
                                         if k != "epoch" and v is not None and v == v}, step=step)
        for name, path in artifacts.items():
            self.mlflow.log_artifact(str(path), artifact_path=f"models/{task_id}")
