"""Figures of the bar-chart ratio battery, from the ``mlae_vs_humans`` score records.

- ``<task>.mlae_vs_level.png``: GRAPE MLAE (mean of per-chart log errors) at every level of each
  perturbed parameter with its 95% CI, the model's IID MLAE as a dashed line, and the human
  user-study MLAE at that level where GRAPE measured one.
- ``<task>.mlae_vs_humans.png``: the model's IID MLAE in the three published forms beside the
  human references of the same chart type.
- ``generalization_matrix.png`` (report, across runs and task variants): GRAPE Fig. 10, every
  trained network's MLAE on the IID charts and on each OOD parameter (mean over its levels).
- ``<task>.gradcam_overlays.png`` (only when records carry Grad-CAM maps, the regression readout's
  ``gradcam`` option): as GRAPE Fig. 8, a few test charts with their Grad-CAM map overlaid, the IID
  charts in one row and their OOD twins at one perturbation level below (bar width where it was
  run, as in the paper), the marked bars outlined and each panel titled with its IoU (GRAPE Eq. 4,
  computed by scores/mlae.py exactly as the ``gradcam_iou`` score).
"""

from __future__ import annotations

import math
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..scores.mlae import GRADCAM_THRESHOLD, gradcam_iou, gradcam_scaled, record_cam  # noqa: E402
from ..scores.record import Score  # noqa: E402
from ..stimuli.bars.render import ChartImage, render_stimuli, target_masks  # noqa: E402
from ..stimuli.base import by_id  # noqa: E402
from .style import error_bars, fit_margins  # noqa: E402

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


def _value(s: Score) -> float:
    """The score's value, NaN where it has none (every answer null): matplotlib leaves it out."""
    return np.nan if s.value is None else s.value


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
        ax.errorbar(xs, [_value(s) for _, s in points], yerr=np.hstack([error_bars(s) for _, s in points]),
                    fmt="o-", capsize=3, label=model_id)
        human = [(x, _human_mlae(s)) for x, (_, s) in zip(xs, points)]
        human = [(x, h) for x, h in human if h is not None]
        if human:
            ax.plot(*zip(*human), "s--", color="0.35", label="humans (GRAPE study)")
        if iid is not None and iid.value is not None:
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
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels, values, lows, highs, colors = [], [], [], [], []
    for name, title in forms:
        s = next((x for x in scores if x.name == name), None)
        if s is None:
            continue
        # a form with no readable answer keeps its place, empty, beside the human references
        labels.append(f"{model_id}\n{title}" + ("\n(no answer)" if s.value is None else ""))
        values.append(_value(s))
        [low], [high] = error_bars(s)
        lows.append(low)
        highs.append(high)
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
    fit_margins(fig, ax)
    return fig


GRADCAM_EXAMPLES = 4
GRADCAM_PARAMETER = "bar_width"  # the perturbation of GRAPE's Fig. 8, preferred where it was run


def gradcam_examples(records: list[dict], stimset, k: int = GRADCAM_EXAMPLES) -> list[tuple[str, list]]:
    """Rows ``[(label, [(record, stimulus)])]`` of the Grad-CAM overlay figure, chosen deterministically.

    Charts with a map count once (their first record). The perturbed row is one (parameter, level):
    ``bar_width`` where some IID chart's twin there has a map, else the first such parameter in
    record order, at its level pairing the most IID charts (the first in record order on ties).
    The IID row is the first ``k`` IID charts in record order with a twin there, the perturbed row
    those twins, column by column. Without any such pair: one row of the first ``k`` IID charts
    with a map (or of any charts with a map, when no IID chart has one). [] when no record has one.
    """
    if not any(record_cam(r) is not None for r in records):
        return []
    stimuli = by_id(stimset.stimuli)
    first: dict[str, dict] = {}  # stimulus id -> its first record with a map, in record order
    for r in records:
        s = stimuli.get(r.get("stimulus_id", ""))
        if (s is not None and s.stimulus_id not in first and isinstance(s.image_source, ChartImage)
                and record_cam(r) is not None):
            first[s.stimulus_id] = r
    iid = [sid for sid in first if not stimuli[sid].manipulated_value]
    twins: dict[tuple[str, str], dict[str, str]] = {}  # (parameter, level) -> IID id -> twin id
    labels: dict[tuple[str, str], str] = {}
    for sid in first:
        s = stimuli[sid]
        mv, base = s.manipulated_value, s.meta.get("base_id")
        if mv and base in first and not stimuli[base].manipulated_value:
            key = (mv["parameter"], str(mv["level"]))
            twins.setdefault(key, {}).setdefault(base, sid)
            labels[key] = f"{mv['parameter']} = {mv['level']}"
    pick = lambda sid: (first[sid], stimuli[sid])  # noqa: E731
    if twins:
        parameters = list(dict.fromkeys(p for p, _ in twins))
        parameter = GRADCAM_PARAMETER if GRADCAM_PARAMETER in parameters else parameters[0]
        key = max((kk for kk in twins if kk[0] == parameter), key=lambda kk: len(twins[kk]))
        bases = [sid for sid in iid if sid in twins[key]][:k]
        return [("IID", [pick(b) for b in bases]), (labels[key], [pick(twins[key][b]) for b in bases])]
    return [("IID" if iid else "perturbed", [pick(sid) for sid in (iid or list(first))[:k]])]


def _outline(ax, region: np.ndarray, **kw) -> None:
    """Contour of a boolean region (nothing to draw where it is empty or everything)."""
    if region.any() and not region.all():
        ax.contour(region.astype(float), levels=[0.5], **kw)


def gradcam_overlay_figure(task_id: str, rows: list[tuple[str, list]], model_id: str,
                           threshold: int = GRADCAM_THRESHOLD):
    """Charts with their Grad-CAM map (resized and min-max scaled as the IoU score does) overlaid,
    the marked bars outlined (white), the map's region >= ``threshold`` dashed, IoU in the title."""
    cols = max(len(panels) for _, panels in rows)
    fig, axes = plt.subplots(len(rows), cols, figsize=(2.5 * cols + 1.0, 2.7 * len(rows) + 0.7),
                             squeeze=False, constrained_layout=True)
    images = iter(render_stimuli([s for _, panels in rows for _, s in panels]))
    heat = None
    for axrow, (label, panels) in zip(axes, rows):
        for ax, (record, s) in zip(axrow, panels):
            image = next(images)
            mask = target_masks(s.image_source.charts, [s.image_source.index])[0]
            cam = record_cam(record)
            assert cam is not None  # panels are drawn from records with a map only
            scaled = gradcam_scaled(cam, mask.shape)
            iou = gradcam_iou(cam, mask, threshold)
            if image.ndim == 3:
                image = image[..., :3]  # the mask variant's alpha channel is the mask: chart only
            ax.imshow(image, cmap="gray" if image.ndim == 2 else None, vmin=0, vmax=255)
            heat = ax.imshow(scaled, cmap="jet", alpha=0.45, vmin=0, vmax=255)
            _outline(ax, mask, colors="white", linewidths=1.2)
            _outline(ax, scaled >= threshold, colors="black", linewidths=0.8, linestyles="--")
            ax.set_title(f"IoU {iou:.3f}", fontsize=9)
            ax.set_xlabel(s.stimulus_id, fontsize=6)
            ax.set_xticks([])
            ax.set_yticks([])
        axrow[0].set_ylabel(label, fontsize=9)
        for ax in axrow[len(panels):]:
            ax.axis("off")
    if heat is not None:
        fig.colorbar(heat, ax=axes, shrink=0.8, label="Grad-CAM, min-max scaled to 0-255")
    fig.suptitle(f"{task_id}: {model_id} Grad-CAM maps\n(white: marked bars; dashed: map >= {threshold}; "
                 f"IoU of the two, GRAPE Eq. 4)", fontsize=10)
    return fig


def generalization_matrix(networks: list[tuple[str, list[Score]]]) -> tuple[list[str], np.ndarray]:
    """Rows (IID, then each OOD parameter) x networks of GRAPE-form MLAE: a parameter's cell is
    the mean of its levels' MLAEs (NaN where a network was not tested on it)."""
    curves = [level_curves(scores) for _, scores in networks]
    parameters = sorted({p for c in curves for p in c})
    cells = np.full((1 + len(parameters), len(networks)), np.nan)
    for j, ((_, scores), c) in enumerate(zip(networks, curves)):
        iid = next((s for s in scores if s.name == "mlae"), None)
        cells[0, j] = _value(iid) if iid is not None else np.nan
        for i, p in enumerate(parameters, start=1):
            if p in c:  # a level without an answer blanks its parameter's cell
                cells[i, j] = float(np.mean([_value(s) for _, s in c[p]]))
    return ["IID", *parameters], cells


def generalization_matrix_figure(networks: list[tuple[str, list[Score]]]):
    """GRAPE Fig. 10: networks (columns) against test conditions (rows), MLAE in each cell."""
    rows, cells = generalization_matrix(networks)
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(networks), 1.2 + 0.45 * len(rows)), constrained_layout=True)
    im = ax.imshow(np.ma.masked_invalid(cells), cmap="viridis_r", aspect="auto")
    for (i, j), v in np.ndenumerate(cells):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if v > np.nanmean(cells) else "black")
    ax.set_xticks(range(len(networks)), [label for label, _ in networks], fontsize=7, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    fig.colorbar(im, ax=ax, label="MLAE (GRAPE form; OOD: mean over levels)")
    ax.set_title("Generalization: trained networks x test conditions", fontsize=10)
    return fig


def bars_battery_figures(task_id: str, records, scores: list[Score], stimset, model_id: str) -> dict[str, Any]:
    figs = {f"{task_id}.mlae_vs_humans.png": mlae_vs_humans_figure(task_id, scores, model_id)}
    if level_curves(scores):
        figs[f"{task_id}.mlae_vs_level.png"] = mlae_vs_level_figure(task_id, scores, model_id)
    rows = gradcam_examples(records, stimset)
    if rows:
        figs[f"{task_id}.gradcam_overlays.png"] = gradcam_overlay_figure(task_id, rows, model_id)
    return figs
