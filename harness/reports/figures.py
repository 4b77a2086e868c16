"""Figures of one model battery, drawn from records, scores and the human reference.

Each figure function returns a matplotlib Figure (Agg backend; nothing needs a display) and
uses only data a reader can recompute from the logged records and intervals.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..scores.agreement import _kappa  # noqa: E402
from ..scores.record import Score  # noqa: E402


def _score(scores: list[Score], name: str) -> Score | None:
    return next((s for s in scores if s.name == name), None)


def confusion_figure(records: list[dict], stimset, model_id: str):
    """Model vs human confusion (rows: true class, columns: response) on the test split."""
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
    fig, axes = plt.subplots(1, 2, figsize=(13, 6), constrained_layout=True)
    for ax, mat, title in ((axes[0], model, f"{model_id}"), (axes[1], human, "human observers")):
        rows = mat / np.maximum(mat.sum(axis=1, keepdims=True), 1)
        im = ax.imshow(rows, vmin=0, vmax=1, cmap="Blues")
        ax.set_xticks(range(len(classes)), classes, rotation=90, fontsize=8)
        ax.set_yticks(range(len(classes)), classes, fontsize=8)
        ax.set_xlabel("response")
        ax.set_ylabel("true class")
        ax.set_title(f"{title}: share of responses per true class")
    fig.colorbar(im, ax=axes, shrink=0.7)
    fig.suptitle(f"{stimset.task_id}: confusion on the test split (n={len(stimset.test)})")
    return fig


def accuracy_kappa_figure(points: list[dict[str, Any]], stimset, title: str = ""):
    """Accuracy vs error consistency with the human ceiling band and each observer.

    ``points``: [{"label", "accuracy": Score, "kappa": Score}] for one or many models.
    """
    oc = np.asarray(stimset.human["observer_correct"], float)
    j = oc.shape[0]
    loo = (oc.sum(axis=0, keepdims=True) - oc) / (j - 1)
    obs_kappa = _kappa(oc, loo)
    fig, ax = plt.subplots(figsize=(6.5, 5), constrained_layout=True)
    first = points[0]["kappa"] if points else None
    if first is not None and first.ceiling is not None:
        lo, hi = first.extra.get("ceiling_ci", [first.ceiling, first.ceiling])
        ax.axhspan(lo, hi, color="0.85", label=f"human ceiling {first.ceiling:.3f} (95% CI)")
        ax.axhline(first.ceiling, color="0.5", lw=1)
    ax.scatter(oc.mean(axis=1), obs_kappa, marker="^", color="0.4", label="observers (vs LOO panel)")
    for pt in points:
        a, k = pt["accuracy"], pt["kappa"]
        ax.errorbar(a.value, k.value, xerr=[[a.value - a.ci_low], [a.ci_high - a.value]],
                    yerr=[[k.value - k.ci_low], [k.ci_high - k.value]], fmt="o", capsize=3,
                    label=pt["label"])
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("accuracy (95% bootstrap CI)")
    ax.set_ylabel("error consistency kappa vs panel")
    ax.set_xlim(0, 1)
    ax.set_title(title or f"{stimset.task_id}: accuracy vs kappa")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def battery_figures(task_id: str, records: list[dict], scores: list[Score], stimset,
                    model_id: str) -> dict[str, Any]:
    """name -> Figure for one task of one model's battery."""
    figs: dict[str, Any] = {}
    if stimset.human.get("observer_correct") is not None and _score(scores, "kappa"):
        figs[f"{task_id}.confusion.png"] = confusion_figure(records, stimset, model_id)
        figs[f"{task_id}.accuracy_vs_kappa.png"] = accuracy_kappa_figure(
            [{"label": model_id, "accuracy": _score(scores, "accuracy"), "kappa": _score(scores, "kappa")}],
            stimset)
    return figs


def close(figs: dict[str, Any]) -> None:
    for f in figs.values():
        plt.close(f)
