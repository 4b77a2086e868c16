"""gestalt: does a vision model see like a person? Psychophysics-grade evaluation harness.

Stages, in the only direction data flows:
sources -> stimuli -> models -> readouts -> trials -> scores -> tracking -> reports.
A module never imports from a later stage (tests/test_layers.py enforces it).

``harness.evaluate(models=[...], tasks=[...])`` and ``harness.load_records(run_id)`` are the
Python API (:mod:`harness.evaluation`), imported on first use so ``import harness`` stays light.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "evaluate", "load_records"]


def __getattr__(name: str) -> Any:
    if name in ("evaluate", "load_records"):
        from . import evaluation

        return getattr(evaluation, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
