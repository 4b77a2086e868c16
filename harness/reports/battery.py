"""One task of one model's battery, drawn as its scoring family draws it (logged with the run).

The dispatch sits above the shared figures (:mod:`.figures`) and each family's own figure module
(:mod:`.chart6_figures`, :mod:`.bars_figures`, :mod:`.shape_bias_figures`), which may use the
shared ones: so no figure module imports another that imports it back."""

from __future__ import annotations

from typing import Any

from ..scores.record import Score
from ..scores.tasks import family_of
from ..stimuli.base import ObserverPanel
from .figures import confusion_figure, score_figures, score_named


def battery_figures(task_id: str, records: list[dict], scores: list[Score], stimset,
                    model_id: str) -> dict[str, Any]:
    """name -> Figure for one task of one model's battery (logged under the run's figures/),
    chosen by the task's scoring family."""
    family = family_of(task_id)
    if family is not None and family.name == "chart6":
        from .chart6_figures import chart6_battery_figures

        return chart6_battery_figures(task_id, records, scores, stimset, model_id)
    if family is not None and family.name == "shape_bias":
        from .shape_bias_figures import shape_bias_battery_figures

        return shape_bias_battery_figures(task_id, scores, model_id)
    if family is not None and family.name == "mlae_vs_humans":
        from .bars_figures import bars_battery_figures

        return bars_battery_figures(task_id, records, scores, stimset, model_id)
    observers = isinstance(stimset.human, ObserverPanel)
    figs = score_figures(task_id, scores, model_id, stimset if observers else None)
    if observers and score_named(scores, "kappa"):
        figs[f"{task_id}.confusion.png"] = confusion_figure(records, stimset, model_id)
    return figs
