"""One flat MLflow run per model battery; tasks are metric prefixes.

Params: model identity, weights revision, readouts, seeds, harness version. Metrics:
``<task>/<metric>`` with ``_ci_low``/``_ci_high``/``_ceiling``/``_floor``, ``<task>/n`` and
``<task>/null_rate``. Artifacts: ``records/<task>.jsonl``, ``intervals.json``, the resolved recipe
and its hash, the stimulus-set hashes and ``figures/*.png``. Only the main process logs.
The default store is ``sqlite:///mlflow.db`` in the working directory (the ./mlruns file store is
refused by current MLflow); ``MLFLOW_TRACKING_URI`` or the recipe's ``tracking.uri`` override it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

DEFAULT_URI = "sqlite:///mlflow.db"


def tracking_uri(configured: str | None) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


class BatteryRun:
    """Context manager around ``mlflow.start_run``: an exception ends the run FAILED, never FINISHED."""

    def __init__(self, *, uri: str, experiment: str, run_name: str, tags: dict[str, str]):
        import mlflow

        self.mlflow = mlflow
        mlflow.set_tracking_uri(uri)
        if uri.startswith("sqlite:///") and mlflow.get_experiment_by_name(experiment) is None:
            # MLflow would put artifacts in ./mlruns of whatever directory the run starts from;
            # keep them beside the database instead, so a store is one self-contained folder
            db = Path(uri.removeprefix("sqlite:///"))
            mlflow.create_experiment(experiment, artifact_location=(db.parent.resolve() / "mlartifacts").as_uri())
        mlflow.set_experiment(experiment)
        self.run_name = run_name
        self.tags = tags
        self.run = None

    def __enter__(self) -> BatteryRun:
        self.run = self.mlflow.start_run(run_name=self.run_name, tags=self.tags)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.mlflow.end_run(status="FAILED" if exc_type else "FINISHED")

    @property
    def run_id(self) -> str:
        return self.run.info.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        clean = {k: ("" if v is None else str(v)[:6000]) for k, v in params.items()}
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
        for path in artifacts.values():
            self.mlflow.log_artifact(str(path), artifact_path=f"models/{task_id}")
