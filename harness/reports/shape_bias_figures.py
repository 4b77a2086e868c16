"""Figures of the texture_vs_shape battery: the shape-bias plot of Geirhos et al. (2019) and the
edges' accuracy against error consistency.

The shape-bias plot puts people and models on one axis from texture (0: every decision the
texture class) to shape (1: every decision the shape class): one row per shape class, a marker per
model and class, and each model's overall shape bias as a vertical line, the observers' mean
beside them. Everything is read from the scores (``shape_bias`` and ``human_shape_bias`` with
their ``per_class`` extras), so the report redraws it from logged intervals.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..scores.record import Score
from .figures import accuracy_kappa_figure, palette, score_named  # sets the Agg backend first
import matplotlib.pyplot as plt  # noqa: E402,I001

CUE_CONFLICT = "shape.nat.cue_conflict"
EDGES = "closure.nat.edges"
HUMAN = "0.35"
MARKERS = "os^vP*X"  # diamonds are the people's


def texture_fraction(shape: Any) -> Any:
    """The top axis: among shape and texture decisions, the texture's share (its own inverse)."""
    return 1 - np.asarray(shape, float)


def _per_class(score: Score, classes: list[str]) -> np.ndarray:
    per = score.extra.get("per_class", {})
    return np.array([np.nan if per.get(c, {}).get("shape_bias") is None else per[c]["shape_bias"]
                     for c in classes], float)


def shape_bias_figure(models: list[tuple[str, Score]], human: Score | None, title: str):
    """``models``: (label, its ``shape_bias`` score); ``human``: the ``human_shape_bias`` score."""
    first = human if human is not None else models[0][1]
    classes = list(first.extra.get("per_class", {}))
    fig, ax = plt.subplots(figsize=(7.5, 0.3 * len(classes) + 2.4), constrained_layout=True)
    y = np.arange(len(classes))
    colors = palette([label for label, _ in models])
    if human is not None and human.value is not None:
        ax.plot(_per_class(human, classes), y, "D", color=HUMAN, ms=6, mfc="none",
                label=f"people: mean {human.value:.3f} [{human.ci_low:.3f}, {human.ci_high:.3f}], "
                      f"range {human.extra['range_min']:.3f}-{human.extra['range_max']:.3f}")
        ax.axvline(human.value, color=HUMAN, ls="--", lw=1)
    for k, (label, s) in enumerate(models):
        if s.value is None:
            continue
        ci = "" if s.ci_low is None else f" [{s.ci_low:.3f}, {s.ci_high:.3f}]"
        # eight colours, then the next marker: no two models drawn alike
        ax.plot(_per_class(s, classes), y, MARKERS[k // 8 % len(MARKERS)], color=colors[label], ms=5,
                label=f"{label}: {s.value:.3f}{ci}")
        ax.axvline(s.value, color=colors[label], ls="--", lw=1)
    ax.set_yticks(y, classes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("fraction of 'shape' decisions (dashed: overall)")
    top = ax.secondary_xaxis("top", functions=(texture_fraction, texture_fraction))
    top.set_xlabel("fraction of 'texture' decisions")
    ax.grid(axis="x", color="0.9", lw=0.6)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def shape_bias_battery_figures(task_id: str, scores: list[Score], model_id: str) -> dict[str, Any]:
    """The run's shape-bias plot: this model beside the observers."""
    bias = score_named(scores, "shape_bias")
    if bias is None:
        return {}
    return {f"{task_id}.shape_bias.png": shape_bias_figure(
        [(model_id, bias)], score_named(scores, "human_shape_bias"),
        f"{task_id}: shape bias of {model_id} and the observers (n = {bias.n} conflict trials)")}


def texture_vs_shape_report_figures(by_model: dict[str, dict[str, list[Score]]],
                                    groups: dict[str, str] | None = None) -> dict[str, Any]:
    """The battery's cross-model figures: every model's shape bias on one plot with the people,
    and the edges' accuracy against error consistency with the human ceiling band."""
    out: dict[str, Any] = {}
    biases = [(m, s) for m, tasks in by_model.items()
              if (s := score_named(tasks.get(CUE_CONFLICT, []), "shape_bias")) is not None]
    if biases:
        human = next((h for tasks in by_model.values()
                      if (h := score_named(tasks.get(CUE_CONFLICT, []), "human_shape_bias"))), None)
        out[f"{CUE_CONFLICT}.shape_bias.png"] = shape_bias_figure(
            biases, human, f"{CUE_CONFLICT}: shape bias of {len(biases)} models and the observers")
    points = [{"label": m, "group": (groups or {}).get(m), "accuracy": score_named(tasks[EDGES], "accuracy"),
               "kappa": score_named(tasks[EDGES], "kappa")}
              for m, tasks in by_model.items() if score_named(tasks.get(EDGES, []), "kappa") is not None]
    if points:
        out[f"{EDGES}.accuracy_vs_kappa.png"] = accuracy_kappa_figure(
            points, title=f"{EDGES}: accuracy vs error consistency, {len(points)} models")
    return out
