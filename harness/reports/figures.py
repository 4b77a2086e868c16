"""Figures of model batteries, drawn from records, scores and the human reference.

Each figure function returns a matplotlib Figure (Agg backend; nothing needs a display) and
uses only data a reader can recompute from the logged records and intervals. Per run,
:func:`harness.reports.battery.battery_figures` draws one task of one model with these and the
family figure modules; the cross-model figures of ``gestalt report``
(:func:`agreement_matrix_figure`, :func:`rank_correlation_figure` and the multi-model forms of
:func:`accuracy_kappa_figure` and :func:`capacity_figure`) take scores read back from the runs.
"""

from __future__ import annotations

import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..scores.agreement import _kappa  # noqa: E402
from ..scores.capacity import FAIL_BELOW  # noqa: E402
from ..scores.ranking import interval, number, position  # noqa: E402
from ..scores.record import Score  # noqa: E402
from ..scores.tasks import family_of  # noqa: E402
from .style import (AXIS_LABEL, MATRIX_CMAP, TICKS, error_bars, fit_margins, label_margins,  # noqa: E402
                    palette, set_margins, text_color, text_inches, wrap_to)

A_K = re.compile(r"^a_k(\d+)$")


def score_named(scores: list[Score], name: str) -> Score | None:
    return next((s for s in scores if s.name == name), None)


def confusion_figure(records: list[dict], stimset, model_id: str):
    """Model vs human confusion (rows: true class, columns: response) on the test split.

    Laid out by hand (:func:`set_margins`): the matrices keep their size and the figure grows
    with the class names."""
    classes = list(stimset.options)
    idx = {c: i for i, c in enumerate(classes)}
    model = np.zeros((len(classes), len(classes)))
    for r in records:
        if r["parse_status"] == "ok" and r["response"] in idx:
            model[idx[r["ground_truth"]], idx[r["response"]]] += 1
    human = np.zeros_like(model)
    for s in stimset.test:
        for resp in s.meta.get("observer_responses", []):
            if resp in idx:
                human[idx[s.ground_truth], idx[resp]] += 1
    fig, axes = plt.subplots(1, 2, sharey=True)
    for ax, mat, title in ((axes[0], model, model_id), (axes[1], human, "human observers")):
        rows = mat / np.maximum(mat.sum(axis=1, keepdims=True), 1)
        im = ax.imshow(rows, vmin=0, vmax=1, cmap="Blues", aspect="auto")
        ax.set_xticks(range(len(classes)), classes, rotation=90, fontsize=8)
        ax.set_xlabel("response")
        ax.set_title(title)
    axes[0].set_yticks(range(len(classes)), classes, fontsize=8)
    axes[0].set_ylabel("true class")
    left, bottom = label_margins(fig, axes[0])
    width, height = 10.6 + left, 5.3 + bottom
    fig.set_size_inches(width, height)
    top, right = 0.85, 1.2  # the titles above; the colour bar and its label to the right
    set_margins(fig, left=left, bottom=bottom, right=right, top=top, wspace=0.06)
    bar = fig.add_axes((1 - (right - 0.25) / width, bottom / height, 0.18 / width,
                        1 - (top + bottom) / height))
    fig.colorbar(im, cax=bar, label="share of the true class's responses")
    fig.suptitle(f"{stimset.task_id}: confusion on the test split (n={len(stimset.test)})")
    return fig


def accuracy_kappa_figure(points: list[dict[str, Any]], stimset=None, title: str = ""):
    """Accuracy vs error consistency with the human ceiling band (and each observer, given the set).

    ``points``: [{"label", "accuracy": Score, "kappa": Score, optional "group" (family, one
    marker each) and "color" (used when there are too many models for a legend)}]. The ceiling
    band (mean pairwise human kappa and its bootstrap CI) and the panel's mean accuracy come from
    the first point's scores, so the figure can be drawn from logged intervals alone; with
    ``stimset`` each observer is also drawn against the leave-one-out panel.
    """
    fig, ax = plt.subplots(figsize=(7.5 if len(points) > 8 else 6.5, 5.5))
    first = points[0]["kappa"] if points else None
    if first is not None and first.ceiling is not None:
        lo, hi = first.extra.get("ceiling_ci", [first.ceiling, first.ceiling])
        ax.axhspan(lo, hi, color="0.85", label=f"human ceiling {first.ceiling:.3f} (95% CI)")
        ax.axhline(first.ceiling, color="0.5", lw=1)
    human_acc = points[0]["accuracy"].extra.get("human_accuracy") if points else None
    if human_acc is not None:
        ax.axvline(human_acc, color="0.5", ls=":", lw=1, label=f"human accuracy {human_acc:.3f}")
    if stimset is not None:
        oc = np.asarray(stimset.human.correct, float)
        loo = (oc.sum(axis=0, keepdims=True) - oc) / (oc.shape[0] - 1)
        ax.scatter(oc.mean(axis=1), _kappa(oc, loo), marker="^", color="0.4",
                   label="observers (vs LOO panel)")
    many = len(points) > 8  # a legend of dozens of models is unreadable: label the points
    markers = dict(zip(dict.fromkeys(pt.get("group") for pt in points), "osD^vPX*"))
    legend_groups: set = set()
    for pt in points:
        a, k = pt["accuracy"], pt["kappa"]
        if a.value is None or k.value is None:  # every trial null: nothing to place
            continue
        group = pt.get("group")
        if many:  # colour and legend by family, names on the points
            label = group if group not in legend_groups else None
            legend_groups.add(group)
        else:  # one colour per model
            label = pt["label"] + (f" ({group})" if group else "")
        ax.errorbar(a.value, k.value, xerr=error_bars(a), yerr=error_bars(k), fmt=markers.get(group, "o"),
                    capsize=3, color=pt.get("color") if many else None, label=label, ms=5)
        if many:
            ax.annotate(pt["label"], (a.value, k.value), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("accuracy (95% bootstrap CI)")
    ax.set_ylabel("error consistency kappa vs panel")
    ax.set_xlim(0, 1)
    task = stimset.task_id if stimset is not None else "closure.nat.silhouette"
    ax.set_title(title or f"{task}: accuracy vs kappa")
    ax.legend(fontsize=7, loc="best")
    fit_margins(fig, ax)
    return fig


def a_k_curve(scores: list[Score]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(k, a(k), CI low, CI high) from the ``a_kNN`` scores, ascending in k."""
    rows = sorted((int(m.group(1)), s) for s in scores if (m := A_K.match(s.name)))
    k = np.array([r[0] for r in rows], dtype=int)
    val = lambda x: np.nan if x is None else x  # noqa: E731
    return (k, np.array([s.value for _, s in rows], float),
            np.array([val(s.ci_low) for _, s in rows], float),
            np.array([val(s.ci_high) for _, s in rows], float))


def capacity_figure(curves: list[dict[str, Any]], band: tuple[int, int] | None = None,
                    title: str = "similarity.chart.series_count: a(k) against the capacity band"):
    """a(k) with bootstrap bands (within-k resampling) against the human 6-12 capacity band.

    ``curves``: [{"label", "scores": [Score...], optional "color"}]; the band is read from the
    ``capacity`` score's ``extra['band']`` unless given. Each model's capacity (where its fitted
    logistic curve, drawn dashed, crosses 0.5) is marked at 0.5 with its 95% interval.
    """
    fig, ax = plt.subplots(figsize=(9.5, 5), constrained_layout=True)
    if band is None:
        cap = next((s for c in curves if (s := score_named(c["scores"], "capacity"))), None)
        band = tuple(cap.extra["band"]) if cap is not None and "band" in cap.extra else None
    if band is not None:
        ax.axvspan(band[0], band[1], color="0.88", label=f"human capacity band {band[0]}-{band[1]}")
    ax.axhline(FAIL_BELOW, color="0.4", ls="--", lw=1, label=f"a(k) = {FAIL_BELOW}")
    alpha = 0.25 if len(curves) == 1 else 0.12
    k_max = 1
    colors = palette([c["label"] for c in curves])
    for n_curve, c in enumerate(curves):
        k, a, lo, hi = a_k_curve(c["scores"])
        if not len(k):
            continue
        k_max = max(k_max, int(k.max()))
        cap = score_named(c["scores"], "capacity")
        label = c["label"] if cap is None else (
            f"{c['label']} (capacity {cap.value:.1f} [{cap.ci_low:.1f}, {cap.ci_high:.1f}]"
            + (f", censored {cap.extra['censored']}" if cap.extra.get("censored") else "") + ")")
        line, = ax.plot(k, a, "-", marker="osD^vP*X"[n_curve % 8], ms=4, lw=1.6,
                        color=c.get("color") or colors[c["label"]], label=label)
        ax.fill_between(k, lo, hi, color=line.get_color(), alpha=alpha, lw=0)
        if cap is not None and "logistic_b1" in cap.extra:
            grid = np.linspace(k.min(), k.max(), 200)
            eta = cap.extra["logistic_b0"] + cap.extra["logistic_b1"] * (
                grid - cap.extra["logistic_centre"])
            ax.plot(grid, 1 / (1 + np.exp(-eta)), "--", lw=1, color=line.get_color())
            if cap.value is not None and cap.ci_low is not None and cap.ci_high is not None:
                ax.errorbar([cap.value], [FAIL_BELOW], xerr=[[cap.value - cap.ci_low],
                                                             [cap.ci_high - cap.value]],
                            marker="v", ms=9, color=line.get_color(), mec="k", capsize=4)
    ax.set_xlim(0.5, k_max + 0.5)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xticks(range(1, k_max + 1))
    ax.set_xlabel("number of colour series k")
    ax.set_ylabel("accuracy a(k) (95% bootstrap band)")
    ax.set_title(title + f"\n(triangle: capacity = where the fitted logistic (dashed) crosses "
                 f"{FAIL_BELOW}, 95% CI)", fontsize=10)
    ax.grid(axis="y", color="0.9", lw=0.6)
    # beside the axes: over the curves it hid the very k where they cross 0.5
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def odd_one_out_figure(scores: list[Score], model_id: str, task_id: str):
    """B against each human reference, with its position-guessing floor and the human ceilings.

    One row per reference (``B`` = the primary one, ``B_<name>`` the others) and one for
    ``individual_agreement``: the model's score with its 95% CI, the null bracket where there are
    nulls, the floor (best position-only strategy) and each row's ceiling (B: the cited 0.863
    test-retest consistency; individual agreement: the human individual agreement, its exact
    maximum). The shaded band is the split-half majority consistency with its CI.
    """
    bs = [s for s in scores if s.name == "B" or s.name.startswith("B_")
          or s.name == "individual_agreement"]
    fig, ax = plt.subplots(figsize=(7.5, 1.4 + 0.8 * max(len(bs), 1)), constrained_layout=True)
    split = score_named(scores, "human_majority_split_half")
    if split is not None and split.ci_low is not None and split.ci_high is not None:
        ax.axvspan(split.ci_low, split.ci_high, color="0.85",
                   label=f"human split-half majority consistency {split.value:.3f} (95% CI)")
    labels = []
    for y, s in enumerate(bs):
        ref = s.extra.get("reference", "individual votes" if s.name == "individual_agreement"
                          else s.name.removeprefix("B_"))
        labels.append(f"{s.name} vs {ref}\n(n={s.n}, nulls={s.nulls})")
        if s.ceiling is not None:
            ax.plot([s.ceiling, s.ceiling], [y - 0.3, y + 0.3], color="0.2", lw=2,
                    label="ceiling (B: cited 0.863; individual: human)" if y == 0 else None)
        if s.nulls and "B_full_low" in s.extra:
            ax.plot([s.extra["B_full_low"], s.extra["B_full_high"]], [y, y], color="0.6", lw=6,
                    solid_capstyle="butt", label="null bracket (1-v)B..(1-v)B+v" if y == 0 else None)
        if s.floor is not None:
            ax.plot([s.floor, s.floor], [y - 0.3, y + 0.3], color="tab:red", lw=2,
                    label="floor: best position-only strategy" if y == 0 else None)
        if "human_vs_reference" in s.extra:
            ax.plot([s.extra["human_vs_reference"]], [y], marker="^", color="0.35", ls="",
                    label="individual people vs reference" if y == 0 else None)
        if s.value is None:  # every trial null
            continue
        ax.errorbar(s.value, y, xerr=error_bars(s), fmt="o",
                    color="tab:blue", capsize=4, label=f"{model_id} B (95% CI)" if y == 0 else None)
    ax.set_yticks(range(len(bs)), labels, fontsize=8)
    ax.set_ylim(-0.6, len(bs) - 0.4)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("agreement with the human reference")
    ax.set_title(f"{task_id}: {model_id} against the human references", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def score_figures(task_id: str, scores: list[Score], model_id: str, stimset=None) -> dict[str, Any]:
    """name -> Figure for what a task's scores show; no records needed, so the report can redraw
    them from logged intervals (``stimset`` only adds the individual observers to accuracy-kappa)."""
    figs: dict[str, Any] = {}
    if score_named(scores, "capacity") is not None:
        figs[f"{task_id}.a_k.png"] = capacity_figure(
            [{"label": model_id, "scores": scores}], title=f"{task_id}: {model_id} a(k)")
    if score_named(scores, "B") is not None and score_named(scores, "human_majority_split_half") is not None:
        figs[f"{task_id}.agreement.png"] = odd_one_out_figure(scores, model_id, task_id)
    if score_named(scores, "kappa") is not None and score_named(scores, "accuracy") is not None:
        figs[f"{task_id}.accuracy_vs_kappa.png"] = accuracy_kappa_figure(
            [{"label": model_id, "accuracy": score_named(scores, "accuracy"),
              "kappa": score_named(scores, "kappa")}], stimset, title=f"{task_id}: accuracy vs kappa")
    return figs


MATRIX_CELL = (1.2, 0.34)  # inches per task column and per model row: two lines of 7 pt text, room around
MATRIX_BAR = (0.18, 3.0)  # the colour bar's width and its longest length, inches
MATRIX_REPEAT = 20  # above this many models the task headers stand under the rows too


def agreement_matrix_figure(models: list[tuple[str, str]], tasks: list[tuple[str, str]],
                            cells: dict[tuple[str, str], Score],
                            unavailable: dict[tuple[str, str], str] | None = None,
                            groups: dict[tuple[str, str], str] | None = None, groups_note: str = ""):
    """The task x model matrix of each task's headline score (its family's
    :meth:`~harness.scores.tasks.Family.lead_score`, as on every surface).

    ``models``: [(model id, family)] in display order (grouped by family); ``tasks``: [(task id,
    score name)]; ``cells``: (model, task) -> Score. Each cell prints the value (a censored one
    says on which side) and its 95% CI; its colour is the value's position between the task's
    floor (0) and ceiling (1; 1.0 where a task has no ceiling), so tasks with different floors
    read on one scale. A task whose headline gives no order (series counting's capacity, read
    against people's band) is left white, its header naming the band.

    The colour is the terminal's position (:func:`~harness.scores.ranking.position`): (value -
    floor) / (ceiling - floor) only where the ceiling bounds the score; otherwise, as for B, whose
    cited ceiling a model can pass, (value - floor) / (1 - floor) against the score's maximum 1.
    So no cell exceeds 1 by construction and nothing is clipped (the colour scale extends below
    -1 if a cell does).

    ``groups``: (model, task) -> its rank-group letters, printed after the value (models sharing
    a letter are not told apart); ``groups_note`` says how the groups were formed, under the title,
    broken into lines as wide as the figure.

    Laid out by hand (:func:`set_margins`): every cell keeps its size (:data:`MATRIX_CELL`), so a
    hundred models make a tall figure of legible rows rather than a squeezed one, and the margins
    are sized to the texts they hold.
    """
    unavailable, groups = unavailable or {}, groups or {}
    families = {task: family_of(task) for task, _ in tasks}
    decimals = {task: 3 if (f := families[task]) is None else f.decimals_of(name) for task, name in tasks}
    # an unranked family's headline has no order to colour (a task this harness no longer declares keeps its colour)
    coloured = {task: f is None or f.ranked for task, f in families.items()}
    fig, ax = plt.subplots()
    frac = np.full((len(models), len(tasks)), np.nan)
    for i, (model, _) in enumerate(models):
        for j, (task, _) in enumerate(tasks):
            s = cells.get((model, task))
            where = None if s is None or not coloured[task] else position(s)
            if where is not None:
                frac[i, j] = where
    low = min(-0.25, float(np.nanmin(frac))) if np.isfinite(frac).any() else -0.25
    im = ax.imshow(frac, cmap=MATRIX_CMAP, vmin=low, vmax=1.0, aspect="auto")
    for i, (model, _) in enumerate(models):
        for j, (task, _) in enumerate(tasks):
            s = cells.get((model, task))
            if s is None or s.value is None:
                ax.text(j, i, "unavailable" if (model, task) in unavailable else "-",
                        ha="center", va="center", fontsize=7, color="0.4")
                continue
            d = decimals[task]
            side = f" censored {s.extra['censored']}" if s.extra.get("censored") else ""
            ci = "" if s.ci_low is None else f"\n{interval(s, d)}"
            shade = (1.0, 1.0, 1.0) if np.isnan(frac[i, j]) else im.cmap(im.norm(frac[i, j]))
            letters = f"  {groups[(model, task)]}" if groups.get((model, task)) else ""
            ax.text(j, i, f"{number(s.value, d)}{side}{letters}{ci}", ha="center", va="center", fontsize=7,
                    color=text_color(shade))
    ax.set_xticks(range(len(tasks)), [_matrix_header(task, name, models, cells, decimals[task], coloured[task])
                                      for task, name in tasks], fontsize=7)
    ax.xaxis.tick_top()
    if len(models) > MATRIX_REPEAT:  # a reader scrolled to the last rows still sees which task is which
        ax.tick_params(axis="x", bottom=True, labelbottom=True)
    ax.set_yticks(range(len(models)), [m for m, _ in models], fontsize=8)
    model_families = [f for _, f in models]
    for i in range(1, len(models)):
        if model_families[i] != model_families[i - 1]:
            ax.axhline(i - 0.5, color="k", lw=1.5)
    blocks = list(dict.fromkeys(model_families))
    right = ax.twinx()  # family names on the right, one tick per block
    right.set_ylim(ax.get_ylim())
    right.set_yticks([np.mean([i for i, f in enumerate(model_families) if f == fam]) for fam in blocks],
                     blocks, fontsize=8, fontweight="bold")
    right.tick_params(length=0)
    bar = fig.add_axes((0.0, 0.0, 0.1, 0.1))  # over the headers, placed once the margins are known
    fig.colorbar(im, cax=bar, orientation="horizontal")
    bar.tick_params(labelsize=7)
    _lay_out_matrix(fig, ax, right, bar, (len(tasks), len(models)), groups_note)
    return fig


def _matrix_header(task: str, name: str, models: list[tuple[str, str]], cells: dict[tuple[str, str], Score],
                   decimals: int, coloured: bool) -> str:
    """A task's column header: its id, the headline's name and its anchors: floor and ceiling, or
    people's band for a headline without an order."""
    s = next((cells[(m, task)] for m, _ in models if (m, task) in cells), None)
    if s is None:
        return f"{task}\n{name}"
    if not coloured:
        band = s.extra.get("band")
        return f"{task}\n{name}\n" + (f"people {band[0]}-{band[1]}, no order" if band else "no order")
    ceiling = "" if s.ceiling is None else f", ceiling {number(s.ceiling, decimals)}"
    return f"{task}\n{name}\nfloor {number(s.floor, decimals)}{ceiling}"


def _lay_out_matrix(fig, ax, right, bar, shape: tuple[int, int], note: str) -> None:
    """Size the matrix's figure to its cells and texts and place, from the top: the title with
    ``note`` wrapped to the figure's width, the colour bar (over the first rows, not at the foot
    of a hundred), the task headers, the cells with the model names left and the families right."""
    columns, rows = shape
    header_w, header_h = text_inches(fig, ax.get_xticklabels())
    cell_w = max(MATRIX_CELL[0], header_w + AXIS_LABEL)  # no header runs into its neighbour's
    grid_w, grid_h = columns * cell_w, rows * MATRIX_CELL[1]
    left = text_inches(fig, ax.get_yticklabels())[0] + TICKS + AXIS_LABEL
    right_w = text_inches(fig, right.get_yticklabels())[0] + TICKS + AXIS_LABEL
    width = left + grid_w + right_w
    title = "Headline score per task and model (95% bootstrap CI); models grouped by family"
    head = fig.suptitle(wrap_to(fig, title + (f"\n{note}" if note else ""), width - 2 * AXIS_LABEL, fontsize=8),
                        fontsize=8, va="top")
    length = min(grid_w, MATRIX_BAR[1])
    bar.set_xlabel(wrap_to(fig, "colour: position between the floor (0) and the bound (1): the ceiling where it "
                                "bounds the score, else 1", grid_w, fontsize=8), fontsize=8)
    bar_h = (MATRIX_BAR[0] + TICKS + text_inches(fig, bar.get_xticklabels())[1]
             + text_inches(fig, [bar.xaxis.label])[1] + AXIS_LABEL)
    title_h = text_inches(fig, [head])[1]
    top = AXIS_LABEL + title_h + AXIS_LABEL + bar_h + AXIS_LABEL + header_h + TICKS
    bottom = AXIS_LABEL + (header_h + TICKS if rows > MATRIX_REPEAT else 0.0)
    height = top + grid_h + bottom
    fig.set_size_inches(width, height)
    head.set_y(1 - AXIS_LABEL / height)
    set_margins(fig, left=left, bottom=bottom, right=right_w, top=top)
    right.set_position(ax.get_position())
    y0 = height - (AXIS_LABEL + title_h + AXIS_LABEL + MATRIX_BAR[0])
    bar.set_position(((left + (grid_w - length) / 2) / width, y0 / height, length / width, MATRIX_BAR[0] / height))


def rank_correlation_figure(tasks: list[str], rho: np.ndarray, n: np.ndarray, min_n: int):
    """Spearman rank correlation between tasks over the models scored on both, with n per pair;
    n/a where fewer than ``min_n`` models are shared (no rho there can be told from chance)."""
    rho = np.where(n >= min_n, rho, np.nan)
    fig, ax = plt.subplots(figsize=(1.6 * len(tasks) + 3, 1.3 * len(tasks) + 2), constrained_layout=True)
    im = ax.imshow(rho, cmap="RdBu_r", vmin=-1, vmax=1)
    for i in range(len(tasks)):
        for j in range(len(tasks)):
            txt = "n/a" if np.isnan(rho[i, j]) else f"{rho[i, j]:.2f}"
            shade = (1.0, 1.0, 1.0) if np.isnan(rho[i, j]) else im.cmap(im.norm(rho[i, j]))
            ax.text(j, i, f"{txt}\nn={int(n[i, j])}", ha="center", va="center", fontsize=8,
                    color=text_color(shade))
    ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right", rotation_mode="anchor", fontsize=8)
    ax.set_yticks(range(len(tasks)), tasks, fontsize=8)
    fig.colorbar(im, ax=ax, shrink=0.7, label="Spearman rho")
    ax.set_title("Cross-task rank correlation of models (headline scores)\n"
                 f"n = models scored on both tasks; n/a below {min_n} or without spread", fontsize=9)
    return fig


def close(figs: dict[str, Any]) -> None:
    for f in figs.values():
        plt.close(f)
