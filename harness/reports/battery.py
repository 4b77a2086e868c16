"""One task of one model's battery, drawn as its scoring family draws it (logged with the run).

The dispatch sits above the shared figures (:mod:`.figures`) and each family's own figure module
(:mod:`.chart6_figures`, :mod:`.bars_figures`, :mod:`.shape_bias_figures`), which may use the
shared ones: so no figure module imports another that imports it back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..scores.record import Score
from ..scores.tasks import family_of
from ..stimuli.base import ObserverPanel
from .figures import confusion_figure, score_figures, score_named

RunFigures = Callable[[str, list[dict], list[Score], Any, str], dict[str, Any]]


def _scores(task_id: str, records: list[dict], scores: list[Score], stimset, model_id: str) -> dict[str, Any]:
    observers = isinstance(stimset.human, ObserverPanel)
    return score_figures(task_id, scores, model_id, stimset if observers else None)


def _confusion(task_id: str, records: list[dict], scores: list[Score], stimset, model_id: str) -> dict[str, Any]:
    if isinstance(stimset.human, ObserverPanel) and score_named(scores, "kappa"):
        return {f"{task_id}.confusion.png": confusion_figure(records, stimset, model_id)}
    return {}


def _chart6(task_id: str, records: list[dict], scores: list[Score], stimset, model_id: str) -> dict[str, Any]:
    from .chart6_figures import chart6_battery_figures

    return chart6_battery_figures(task_id, records, scores, stimset, model_id)


def _shape_bias(task_id: str, records: list[dict], scores: list[Score], stimset, model_id: str) -> dict[str, Any]:
    from .shape_bias_figures import shape_bias_battery_figures

    return shape_bias_battery_figures(task_id, scores, model_id)


def _bars(task_id: str, records: list[dict], scores: list[Score], stimset, model_id: str) -> dict[str, Any]:
    from .bars_figures import bars_battery_figures

    return bars_battery_figures(task_id, records, scores, stimset, model_id)


# A scoring family's ``run_figures`` names -> their drawing (each family module imported only
# when its figures are drawn)
RUN_FIGURES: dict[str, RunFigures] = {"scores": _scores, "confusion": _confusion, "chart6": _chart6,
                                      "shape_bias": _shape_bias, "bars": _bars}


def battery_figures(task_id: str, records: list[dict], scores: list[Score], stimset,
                    model_id: str) -> dict[str, Any]:
    """name -> Figure for one task of one model's battery (logged under the run's figures/):
    the figures the task's scoring family names."""
    family = family_of(task_id)
    figs: dict[str, Any] = {}
    for name in family.run_figures if family is not None else ("scores", "confusion"):
        figs.update(RUN_FIGURES[name](task_id, records, scores, stimset, model_id))
    return figs
