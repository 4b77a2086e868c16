"""Figures of the bar-chart ratio battery, from the ``mlae_vs_humans`` score records.

- ``<task>.mlae_vs_level.png``: GRAPE MLAE (mean of per-chart log errors) at every level of each
  perturbed parameter with its 95% CI, the model's IID MLAE as a dashed line, and the human
  user-study MLAE at that level where GRAPE measured one.
- ``<task>.mlae_vs_humans.png``: the model's IID MLAE in the three published forms beside the
  human references of the same chart type.
"""

from __future__ import annotations

import math
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..scores.record import Score  # noqa: E402

_OOD = re.compile(r"^ood\.(?P<parameter>[^.]+)\.(?P<level>.+)\.mlae$")


def _level_value(level: str) -> float | str:
    try:
        return float(level)
    except ValueError:
        return level


def level_curves(scores: list[Score]) -> dict[str, list[tuple[Any, Score]]]:
    """parameter -> [(level, GRAPE-form MLAE score)] in level order."""
    curves: dict[str, list[tuple[Any, Score]]] = {}
    for s in scores:
        m = _OOD.match(s.name)
        if m:
            curves.setdefault(m["parameter"], []).append((_level_value(m["level"]), s))
    for points in curves.values():
        points.sort(key=lambda p: (isinstance(p[0], str), p[0] if not isinstance(p[0], str) else 0, str(p[0])))
    return curves


def _human_mlae(score: Score) -> float | None:
    ref = (score.extra.get("human") or {}).get("grape_user_study")
    return float(ref["mlae"]) if ref and ref.get("mlae") is not None else None


def mlae_vs_level_figure(task_id: str, scores: list[Score], model_id: str):
    curves = level_curves(scores)
    iid = next((s for s in scores if s.name == "mlae"), None)
    n = max(1, len(curves))
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False,
                             constrained_layout=True)
    for ax, (parameter, points) in zip(axes.ravel(), sorted(curves.items())):
        xs = list(range(len(points)))
        vals = [s.value for _, s in points]
        err = [[s.value - s.ci_low for _, s in points], [s.ci_high - s.value for _, s in points]]
        ax.errorbar(xs, vals, yerr=err, fmt="o-", capsize=3, label=model_id)
        human = [(x, _human_mlae(s)) for x, (_, s) in zip(xs, points)]
        human = [(x, h) for x, h in human if h is not None]
        if human:
            ax.plot(*zip(*human), "s--", color="0.35", label="humans (GRAPE study)")
        if iid is not None:
            ax.axhline(iid.value, color="C0", ls=":", lw=1, label=f"{model_id} IID")
        ax.set_xticks(xs, [str(lv) for lv, _ in points], rotation=45, fontsize=7)
        ax.set_title(parameter, fontsize=10)
        ax.set_ylabel("MLAE (GRAPE form)")
    for ax in axes.ravel()[len(curves):]:
        ax.axis("off")
    if curves:
        axes.ravel()[0].legend(fontsize=7)
    fig.suptitle(f"{task_id}: MLAE by perturbation level (95% CI)")
    return fig


def mlae_vs_humans_figure(task_id: str, scores: list[Score], model_id: str):
    forms = [("mlae", "GRAPE mean"), ("mlae_midmean", "Cleveland-McGill midmean"), ("mlae_haehn", "Haehn")]
    fig, ax = plt.subplots(figsize=(9, 4.5), constrained_layout=True)
    labels, values, lows, highs, colors = [], [], [], [], []
    for name, title in forms:
        s = next((x for x in scores if x.name == name), None)
        if s is None:
            continue
        labels.append(f"{model_id}\n{title}")
        values.append(s.value)
        lows.append(s.value - s.ci_low)
        highs.append(s.ci_high - s.value)
        colors.append("C0")
        for ref, h in (s.extra.get("human") or {}).items():
            if h.get("mlae") is None:
                continue
            labels.append(f"humans\n{ref}")
            values.append(h["mlae"])
            lows.append(h["mlae"] - h.get("ci_low", h["mlae"]))
            highs.append(h.get("ci_high", h["mlae"]) - h["mlae"])
            colors.append("0.55")
    ax.bar(range(len(values)), values, yerr=[lows, highs], color=colors, capsize=3)
    ax.set_xticks(range(len(values)), [lab.replace("_", " ") for lab in labels], fontsize=7, rotation=25,
                  ha="right")
    ax.set_ylabel("MLAE (lower is better)")
    ax.set_title(f"{task_id}: IID MLAE, model vs human references")
    return fig


def bars_battery_figures(task_id: str, records, scores: list[Score], stimset, model_id: str) -> dict[str, Any]:
    figs = {f"{task_id}.mlae_vs_humans.png": mlae_vs_humans_figure(task_id, scores, model_id)}
    if level_curves(scores):
        figs[f"{task_id}.mlae_vs_level.png"] = mlae_vs_level_figure(task_id, scores, model_id)
    return figs
