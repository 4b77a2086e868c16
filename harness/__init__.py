"""gestalt: does a vision model see like a person? Psychophysics-grade evaluation harness.

Stages, in the only direction data flows:
sources -> stimuli -> models -> readouts -> trials -> scores -> tracking -> reports.
A module never imports from a later stage (tests/test_layers.py enforces it).

``harness.evaluate(models=[...], tasks=[...])`` and ``harness.load_records(run_id)`` are the
Python API (:mod:`harness.evaluation`), imported on first use so ``import harness`` stays light.
"""

import os
from typing import Any

# MLflow sends usage telemetry to its servers from every process that imports it (a thread that
# fetches a config over the internet at import, then posts records of API calls). An evaluation
# run on a lab's machines or a cluster's nodes sends nothing of the sort unless its user says so:
# MLFLOW_DISABLE_TELEMETRY=false opts in. Set before any gestalt module imports mlflow.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from .version import __version__  # noqa: E402  (after the telemetry default, before any mlflow import)

__all__ = ["__version__", "evaluate", "load_records"]


def __getattr__(name: str) -> Any:
    if name in ("evaluate", "load_records"):
        from . import evaluation

        return getattr(evaluation, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
