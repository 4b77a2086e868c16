"""CHART-6 figures (Verma et al. 2025), drawn from :func:`harness.scores.chart6.score_chart6` scores.

The paper's figures, and the entry points that draw them:

- Figure 4, valid-response rate per test and model (``valid_rate``);
- Figure 5, accuracy against the human accuracy, filled = valid responses only (upper bound,
  ``accuracy_valid``), empty = invalid counted wrong (lower bound, ``accuracy_all``), (A) the
  multiple-choice tests (proportion correct), (B) the numerical-response tests (relaxed accuracy);
- Figure 6, model vs human proportion correct by graph type and by task category
  (``<key>/<level>/{accuracy_valid,accuracy_all,human_accuracy}``);
- Figure 7, error-pattern r (``error_r_valid`` filled, ``error_r_all`` empty) against the
  split-half human noise ceiling (``noise_ceiling``).

:func:`chart6_battery_figures` draws one test of one model (logged with its MLflow run; with the
records it adds the per-item error-pattern scatter behind ``error_r``).
:func:`chart6_report_figures` draws the battery across models and tests.

Figure 6 pools tests, as the paper does, separately for multiple-choice and numerical-response
tests (its text reads the graph types that way). A pooled level is the item-weighted mean of the
tests' level means (each weighted by its ``n`` items), which is exactly the mean over the pooled
items. Its interval: with one test, that test's percentile interval; with several, items are
resampled within each test (a stratified bootstrap), whose variance is the weighted sum of the
tests' variances, each read from its 95% interval as (high - low) / 3.92: a normal approximation,
said so on the figure. The human value of a level is taken from the model that answered the most
items there (``human_accuracy`` is computed over the items a model answered, normally all).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..scores.chart6 import item_table  # noqa: E402
from ..scores.record import Score  # noqa: E402
from ..stimuli.chart6 import (ARITHMETIC_COMPUTATION, STATISTICAL_INFERENCE,  # noqa: E402
                              TESTS, VALUE_IDENTIFICATION)
from ..stimuli.registry import base_task_id  # noqa: E402
from .style import palette  # noqa: E402

TASK_PREFIX = "literacy.chart."
GROUPS = {"multiple-choice": "multiple-choice", "continuous": "numerical-response"}
Z95 = 1.959963984540054
BREAKDOWN = re.compile(r"^(?P<key>[a-z_]+)/(?P<level>.+)/(?P<metric>accuracy_valid|accuracy_all|human_accuracy)$")
BREAKDOWN_TITLES = {"graph_type": "graph type", "task_category": "task category",
                    "item_kind": "CALVI item kind"}
CATEGORY_ORDER = (VALUE_IDENTIFICATION, ARITHMETIC_COMPUTATION, STATISTICAL_INFERENCE)
HUMAN_COLOR = "0.15"
MEASURES = {"multiple-choice": "mean proportion correct",
            "numerical-response": "mean relaxed accuracy (within 5%)"}


# -- reading scores ------------------------------------------------------------------------------

def chart6_key(task_id: str) -> str:
    task_id = base_task_id(task_id)  # a variant (BASE:NAME) is drawn as its test
    key = task_id.removeprefix(TASK_PREFIX)
    if not task_id.startswith(TASK_PREFIX) or key not in TESTS:
        raise ValueError(f"{task_id!r} is not a CHART-6 task ({', '.join(t.task_id for t in TESTS.values())})")
    return key


def _by_name(scores: list[Score]) -> dict[str, Score]:
    return {s.name: s for s in scores}


def _yerr(s: Pooled) -> list[list[float]]:
    """Error-bar half-widths; none where the interval is missing."""
    if s.ci_low is None or s.ci_high is None or not np.isfinite([s.ci_low, s.ci_high]).all():
        return [[0.0], [0.0]]
    return [[max(s.value - s.ci_low, 0.0)], [max(s.ci_high - s.value, 0.0)]]


def _colors(labels: list[str]) -> dict[str, Any]:
    return palette(labels)


def _ordered_tests(by_model: dict[str, dict[str, list[Score]]]) -> list[str]:
    present = {chart6_key(t) for tasks in by_model.values() for t, s in tasks.items() if s}
    return [k for k in TESTS if k in present]


@dataclass(frozen=True)
class Pooled:
    """A finite value with its interval (None where it has none), over ``n`` items of ``tests``."""

    value: float
    ci_low: float | None
    ci_high: float | None
    n: int
    tests: int = 1


def _finite(s: Score | None) -> Pooled | None:
    """The score as a pool of its one test; None where it has no finite value to draw."""
    if s is None or s.value is None or not np.isfinite(s.value):
        return None
    return Pooled(s.value, s.ci_low, s.ci_high, s.n)


def pool(scores: list[Score]) -> Pooled | None:
    """Item-weighted mean of per-test scores over disjoint items (see the module docstring)."""
    points = [p for s in scores if (p := _finite(s)) is not None and p.n > 0]
    if not points:
        return None
    n = np.array([p.n for p in points], float)
    w = n / n.sum()
    value = float(w @ np.array([p.value for p in points]))
    if len(points) == 1:
        p = points[0]
        lo, hi = (p.ci_low, p.ci_high) if p.ci_low is not None else (value, value)
        return Pooled(value, lo, hi, int(n.sum()), 1)
    se = np.array([(p.ci_high - p.ci_low) / (2 * Z95) if p.ci_low is not None and p.ci_high is not None
                   else 0.0 for p in points])
    half = Z95 * float(np.sqrt((w ** 2 * se ** 2).sum()))
    return Pooled(value, max(value - half, 0.0), min(value + half, 1.0), int(n.sum()), len(points))


def breakdown_levels(tasks: dict[str, list[Score]], key: str, split_groups: bool
                     ) -> dict[str, dict[str, Pooled]]:
    """level label -> {metric: Pooled} for one model, pooling tests (within assessment group)."""
    parts: dict[str, dict[str, list[Score]]] = {}
    for task_id, scores in tasks.items():
        group = GROUPS[TESTS[chart6_key(task_id)].assessment]
        for s in scores:
            m = BREAKDOWN.match(s.name)
            if m is None or m["key"] != key:
                continue
            label = f"{m['level']} ({group})" if split_groups else m["level"]
            parts.setdefault(label, {}).setdefault(m["metric"], []).append(s)
    out: dict[str, dict[str, Pooled]] = {}
    for label, metrics in parts.items():
        pooled = {metric: p for metric, ss in metrics.items() if (p := pool(ss)) is not None}
        if pooled:
            out[label] = pooled
    return out


# -- drawing -------------------------------------------------------------------------------------

def _model_marks(ax, x: float, valid: Score | None, all_: Score | None, color, label: str,
                 dx: float) -> None:
    """Filled circle: valid responses only; empty circle: invalid counted wrong (the paper's code)."""
    if (v := _finite(valid)) is not None:
        ax.errorbar(x - dx, v.value, yerr=_yerr(v), fmt="o", color=color, ms=6, capsize=2,
                    label=label)
    if (a := _finite(all_)) is not None:
        ax.errorbar(x + dx, a.value, yerr=_yerr(a), fmt="o", color=color, mfc="white", ms=6,
                    capsize=2, label=label)


def _legend(ax, axes=(), extra: list | None = None, bounds: bool = True) -> None:
    """One legend on ``ax`` for the labelled artists of ``axes`` (default: ``ax``), deduplicated,
    with the filled/empty circle key and any ``extra`` (handle, label) pairs."""
    from matplotlib.lines import Line2D

    entries: dict[str, Any] = {}
    for a in axes or (ax,):
        for h, lab in zip(*a.get_legend_handles_labels()):
            entries.setdefault(lab, h)
    if bounds:
        entries["filled: valid responses only"] = Line2D([], [], marker="o", ls="", color="0.3")
        entries["empty: invalid counted wrong"] = Line2D([], [], marker="o", ls="", color="0.3", mfc="white")
    for h, lab in extra or []:
        entries[lab] = h
    ax.legend(list(entries.values()), list(entries), fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1))


def valid_rate_figure(by_model: dict[str, dict[str, list[Score]]]):
    """Figure 4: proportion of valid responses per test (bars: models; 95% item-bootstrap CI)."""
    tests = _ordered_tests(by_model)
    models = list(by_model)
    colors = _colors(models)
    fig, ax = plt.subplots(figsize=(1.2 * len(tests) + 0.25 * len(tests) * len(models) + 3, 4.2),
                           constrained_layout=True)
    width = 0.8 / len(models)
    for j, model in enumerate(models):
        for i, key in enumerate(tests):
            s = _finite(_by_name(by_model[model].get(TESTS[key].task_id, [])).get("valid_rate"))
            if s is None:
                continue
            x = i - 0.4 + width * (j + 0.5)
            ax.bar(x, s.value, width * 0.9, color=colors[model], label=model)
            ax.errorbar(x, s.value, yerr=_yerr(s), fmt="none", ecolor="k", capsize=2, lw=0.8)
    _legend(ax, bounds=False)
    ax.set_xticks(range(len(tests)), [TESTS[k].name for k in tests])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("proportion of valid responses")
    ax.set_title("CHART-6: valid responses per test (95% item-bootstrap CI)", fontsize=10)
    return fig


def _offsets(n: int, span: float = 0.7) -> tuple[np.ndarray, float]:
    """x offsets of n models around a test's tick, and the half-gap between a model's two marks."""
    step = span / n
    return -span / 2 + step * (np.arange(n) + 0.5), min(0.07, step / 4)


def accuracy_figure(by_model: dict[str, dict[str, list[Score]]]):
    """Figure 5: model accuracy bounds vs human accuracy, (A) multiple-choice, (B) numerical tests."""
    tests = _ordered_tests(by_model)
    panels = [(g, [k for k in tests if GROUPS[TESTS[k].assessment] == g]) for g in GROUPS.values()]
    panels = [(g, ks) for g, ks in panels if ks]
    models = list(by_model)
    colors = _colors(models)
    offsets, dx = _offsets(len(models) + 1)  # the first slot is the humans'
    fig, axes = plt.subplots(1, len(panels), squeeze=False, constrained_layout=True,
                             figsize=(1.3 * len(tests) + 0.3 * len(tests) * len(models) + 3.5, 4.6),
                             gridspec_kw={"width_ratios": [len(ks) for _, ks in panels]})
    row = list(axes[0])
    for ax, letter, (group, keys) in zip(row, "AB", panels):
        for i, key in enumerate(keys):
            task_id = TESTS[key].task_id
            named = [_by_name(by_model[m].get(task_id, [])) for m in models]
            human = _human_reference([n.get("human_accuracy") for n in named])
            if human is not None:
                ax.errorbar(i + offsets[0], human.value, yerr=_yerr(human), fmt="D", color=HUMAN_COLOR,
                            ms=6, capsize=3, label="humans")
            floor = next((n["accuracy_all"].floor for n in named
                          if "accuracy_all" in n and n["accuracy_all"].floor), None)
            if floor:
                ax.hlines(floor, i - 0.4, i + 0.4, color="tab:red", lw=1.2, label="chance (mean over items)")
            for model, n, x in zip(models, named, offsets[1:]):
                _model_marks(ax, i + x, n.get("accuracy_valid"), n.get("accuracy_all"), colors[model],
                             model, dx)
        ax.set_xticks(range(len(keys)), [_test_label(k, by_model) for k in keys])
        ax.set_xlim(-0.5, len(keys) - 0.5)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel(MEASURES[group])
        ax.set_title(f"({letter}) {group} tests", fontsize=10)
    _legend(row[-1], row)
    who = models[0] if len(models) == 1 else "model"
    fig.suptitle(f"CHART-6: {who} accuracy vs humans (95% item-bootstrap CIs)", fontsize=11)
    return fig


def _test_label(key: str, by_model: dict[str, dict[str, list[Score]]]) -> str:
    """The test's name; for a single model also its valid-response rate (Figure 4 in one line)."""
    if len(by_model) != 1:
        return TESTS[key].name
    (tasks,) = by_model.values()
    s = _finite(_by_name(tasks.get(TESTS[key].task_id, [])).get("valid_rate"))
    if s is None:
        return TESTS[key].name
    return f"{TESTS[key].name}\nvalid responses {s.value:.2f} [{s.ci_low:.2f}, {s.ci_high:.2f}]"


def _human_reference(scores: list[Score | None]) -> Pooled | None:
    """The human accuracy over the most items any model answered (see the module docstring)."""
    ok = [p for s in scores if (p := _finite(s)) is not None]
    return max(ok, key=lambda s: s.n) if ok else None


def error_pattern_figure(by_model: dict[str, dict[str, list[Score]]]):
    """Figure 7: model-human error-pattern r per test against the human noise ceiling band."""
    tests = _ordered_tests(by_model)
    models = list(by_model)
    colors = _colors(models)
    offsets, dx = _offsets(len(models))
    fig, ax = plt.subplots(figsize=(1.3 * len(tests) + 0.3 * len(tests) * len(models) + 3.5, 4.6),
                           constrained_layout=True)
    lowest = 0.0
    for i, key in enumerate(tests):
        task_id = TESTS[key].task_id
        named = [_by_name(by_model[m].get(task_id, [])) for m in models]
        ceiling = next((p for n in named if (p := _finite(n.get("noise_ceiling"))) is not None), None)
        if ceiling is not None:
            if ceiling.ci_low is not None and ceiling.ci_high is not None:
                ax.fill_between([i - 0.45, i + 0.45], ceiling.ci_low, ceiling.ci_high, color="0.82",
                                lw=0, label="human noise ceiling (2.5-97.5% of splits)")
            ax.hlines(ceiling.value, i - 0.45, i + 0.45, color="0.35", lw=1.2)
            ax.annotate(f"{ceiling.value:.2f}", (i + 0.45, ceiling.value), fontsize=7, xytext=(1, 3),
                        textcoords="offset points", ha="right")
        for model, n, x in zip(models, named, offsets):
            _model_marks(ax, i + x, n.get("error_r_valid"), n.get("error_r_all"), colors[model], model, dx)
            for s in (n.get("error_r_valid"), n.get("error_r_all")):
                if (p := _finite(s)) is not None:
                    lowest = min(lowest, p.value if p.ci_low is None else p.ci_low)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xticks(range(len(tests)), [TESTS[k].name for k in tests])
    ax.set_xlim(-0.5, len(tests) - 0.5)
    ax.set_ylim(min(-0.2, lowest - 0.05), 1.05)
    ax.set_ylabel("Pearson r, model vs human per-item accuracy")
    ax.set_title("CHART-6: error-pattern correlation with humans vs the split-half noise ceiling\n"
                 "(95% item-bootstrap CIs; a test without per-participant data has no ceiling)",
                 fontsize=10)
    _legend(ax)
    return fig


def _level_order(key: str, levels: dict[str, dict[str, Pooled]]) -> list[str]:
    """Rows grouped by assessment group; task categories in the paper's order, other levels by
    descending human accuracy (the easiest for people on top)."""
    rank = {c: i for i, c in enumerate(CATEGORY_ORDER)}

    def order(label: str):
        level, _, group = label.partition(" (")
        h = levels[label].get("human_accuracy")
        within = rank.get(level, len(rank)) if key == "task_category" else (-h.value if h else 0.0)
        return group, within, level

    return sorted(levels, key=order)


def breakdown_figure(key: str, per_model: dict[str, dict[str, dict[str, Pooled]]], title: str,
                     measure: str = "mean proportion correct (relaxed accuracy for numerical-response tests)"):
    """Figure 6: proportion correct per level (graph type, task category) for humans and models.

    ``per_model``: model -> level -> {metric: Pooled}. Each model's legend entry carries the
    Pearson r over levels between its lower-bound accuracy and the humans' (the paper's reading:
    are the levels that are hard for people hard for the model?) and its mean gap."""
    models = list(per_model)
    colors = _colors(models)
    union: dict[str, dict[str, Pooled]] = {}
    for levels in per_model.values():
        for label, metrics in levels.items():
            h = metrics.get("human_accuracy")
            cur = union.get(label, {}).get("human_accuracy")
            if label not in union or (h is not None and (cur is None or h.n > cur.n)):
                union[label] = metrics
    rows = _level_order(key, union)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.8), constrained_layout=True)
    span = 0.7
    step = span / (len(models) + 1)  # the first slot is the humans'
    approx = False
    for y, label in enumerate(rows):
        h = union[label].get("human_accuracy")
        if h is not None:
            ax.errorbar(h.value, y - span / 2 + step / 2, xerr=_yerr(h), fmt="D", color=HUMAN_COLOR,
                        ms=6, capsize=2, label="humans")
            approx |= h.tests > 1
        for j, model in enumerate(models):
            metrics = per_model[model].get(label, {})
            yy = y - span / 2 + step * (j + 1.5)
            for metric, face, dy in (("accuracy_valid", None, -step / 5), ("accuracy_all", "white", step / 5)):
                p = metrics.get(metric)
                if p is None:
                    continue
                approx |= p.tests > 1
                ax.errorbar(p.value, yy + dy, xerr=_yerr(p), fmt="o", color=colors[model], mfc=face,
                            ms=5, capsize=2)
    from matplotlib.lines import Line2D

    extra = [(Line2D([], [], marker="o", ls="", color=colors[m]), _agreement_label(m, per_model[m]))
             for m in models]
    ax.set_yticks(range(len(rows)), [r.replace("_", " ") for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel(measure)
    note = ("95% CIs; pooled over tests: stratified-bootstrap normal approximation"
            if approx else "95% item-bootstrap CIs")
    ax.set_title(f"{title}\n({note})", fontsize=10)
    _legend(ax, extra=extra)
    return fig


def _agreement_label(model: str, levels: dict[str, dict[str, Pooled]]) -> str:
    pairs = [(m["accuracy_all"].value, m["human_accuracy"].value) for m in levels.values()
             if "accuracy_all" in m and "human_accuracy" in m]
    if not pairs:
        return model
    a, h = np.array(pairs).T
    gap = f"mean gap {np.mean(a - h):+.2f}"
    if len(pairs) >= 3 and np.ptp(a) > 0 and np.ptp(h) > 0:
        return f"{model} (r with humans over levels {np.corrcoef(a, h)[0, 1]:.2f}, {gap})"
    return f"{model} ({gap})"


def item_scatter_figure(records: list[dict], scores: list[Score], stimset, model_id: str):
    """The error-pattern vectors behind ``error_r``: per item, model vs human proportion correct."""
    table = item_table(records, stimset)
    human = np.asarray(stimset.human.prop_correct, float)
    named = _by_name(scores)
    fig, ax = plt.subplots(figsize=(5.6, 5.2), constrained_layout=True)
    ax.plot([0, 1], [0, 1], color="0.7", lw=0.8, ls="--")
    rng = np.random.default_rng(0)  # jitter only: many items share a proportion
    jitter = rng.uniform(-0.012, 0.012, size=(2, len(table.ids)))
    valid = table.valid > 0
    ax.scatter(human[valid] + jitter[0, valid], table.p_valid[valid] + jitter[1, valid], s=18,
               color="tab:blue", alpha=0.7, label="valid responses only")
    answered = table.total > 0
    ax.scatter(human[answered] + jitter[0, answered], table.p_all[answered] + jitter[1, answered], s=24,
               facecolors="none", edgecolors="tab:orange", label="invalid counted wrong")
    lines = []
    for name, what in (("error_r_valid", "valid only"), ("error_r_all", "invalid wrong")):
        s = _finite(named.get(name))
        if s is not None:
            lines.append(f"r ({what}) = {s.value:.2f} [{s.ci_low:.2f}, {s.ci_high:.2f}], {s.n} items")
    ceiling = _finite(named.get("noise_ceiling"))
    if ceiling is not None:
        lines.append(f"human noise ceiling {ceiling.value:.2f} [{ceiling.ci_low:.2f}, {ceiling.ci_high:.2f}]")
    ax.text(0.02, 0.98, "\n".join(lines), transform=ax.transAxes, fontsize=7, va="top")
    ax.set_xlim(-0.04, 1.04)
    ax.set_ylim(-0.04, 1.04)
    ax.set_xlabel("human proportion correct per item")
    ax.set_ylabel(f"{model_id} proportion correct per item")
    ax.set_title(f"{stimset.task_id}: error patterns, {len(table.ids)} items", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return fig


# -- entry points --------------------------------------------------------------------------------

def chart6_battery_figures(task_id: str, records: list[dict], scores: list[Score], stimset,
                           model_id: str) -> dict[str, Any]:
    """name -> Figure for one CHART-6 test of one model's run (the per-item scatter only where
    the test has human data)."""
    test = TESTS[chart6_key(task_id)]
    figs: dict[str, Any] = {}
    if _finite(_by_name(scores).get("valid_rate")) is not None:
        figs[f"{task_id}.accuracy.png"] = accuracy_figure({model_id: {task_id: scores}})
    human = np.asarray(stimset.human.prop_correct if stimset is not None else [], float)
    if records and np.isfinite(human).any():
        figs[f"{task_id}.error_pattern.png"] = item_scatter_figure(records, scores, stimset, model_id)
    for key, title in BREAKDOWN_TITLES.items():
        levels = breakdown_levels({task_id: scores}, key, split_groups=False)
        if levels:
            figs[f"{task_id}.by_{key}.png"] = breakdown_figure(
                key, {model_id: levels}, f"{test.name}: {model_id} vs humans by {title}",
                MEASURES[GROUPS[test.assessment]])
    return figs


def chart6_report_figures(by_model: dict[str, dict[str, list[Score]]]) -> dict[str, Any]:
    """name -> Figure across models and tests; ``by_model``: model id -> CHART-6 task id -> scores.

    Non-CHART-6 tasks in the mapping are ignored, so a whole battery's scores can be passed."""
    chart = {m: {t: s for t, s in tasks.items() if t.startswith(TASK_PREFIX) and s}
             for m, tasks in by_model.items()}
    chart = {m: tasks for m, tasks in chart.items() if tasks}
    if not chart:
        return {}
    figs = {"chart6.valid_rate.png": valid_rate_figure(chart),
            "chart6.accuracy.png": accuracy_figure(chart),
            "chart6.error_pattern.png": error_pattern_figure(chart)}
    groups = {GROUPS[TESTS[chart6_key(t)].assessment] for tasks in chart.values() for t in tasks}
    for key in ("graph_type", "task_category"):
        per_model = {m: levels for m, tasks in chart.items()
                     if (levels := breakdown_levels(tasks, key, split_groups=len(groups) > 1))}
        if per_model:
            figs[f"chart6.by_{key}.png"] = breakdown_figure(
                key, per_model, f"CHART-6: models vs humans by {BREAKDOWN_TITLES[key]}, tests pooled")
    return figs
