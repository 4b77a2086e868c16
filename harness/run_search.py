"""The CHART-6 decoding search (Verma et al. 2025, section 1.4): pick each model's sampling setting on VLAT.

The paper searched temperature in {0.2, ..., 1.0} at top-p 1.0 and top-p in {0.2, ..., 1.0} at
temperature 1.0 (:func:`harness.readouts.chart6.decoding_grid`), kept for each model the setting
with the best VLAT performance, and then used that setting on the other five tests (its Table 2).

Every grid cell is a full recipe run of ``literacy.chart.vlat`` (the recipe's models, with the
cell's temperature and top-p, sampling rather than greedy), so each cell has its own records
(``<output_dir>/decoding-search/<cell>/``; a rerun resumes them), its own cache keys (the settings
are part of them) and its own MLflow runs, in the experiment ``<experiment>-decoding-search``,
tagged with the cell. "Best performance" is read as ``accuracy_all`` (invalid responses counted
wrong) by default: the valid-only accuracy rewards settings that rarely give a valid answer
(one valid, correct answer out of ten presentations scores 1.0). Ties go to the higher valid
rate, then to the earlier cell of the grid.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from collections.abc import Callable

from .errors import GestaltError
from .readouts.chart6 import GRID_TEMPERATURES, GRID_TOP_PS, decoding_grid
from .recipes import Recipe, load_recipe
from .run import run_recipe

SEARCH_TASK = "literacy.chart.vlat"
EXPERIMENT_SUFFIX = "-decoding-search"
METRICS = ("accuracy_all", "accuracy_valid")


def cell_name(setting: dict[str, float]) -> str:
    return f"temperature-{setting['temperature']:g}_top_p-{setting['top_p']:g}"


def cell_recipe(recipe: Recipe, setting: dict[str, float]) -> Recipe:
    """The recipe of one grid cell: VLAT only, the cell's sampling setting for every model.

    The setting goes into ``task_options.<VLAT>.readout``, which the runner applies over each
    model's own generation settings (a model's ``paper_model`` keeps its prefix/suffix; its
    Table 2 decoding and any ``greedy`` are replaced by the cell's)."""
    data = recipe.resolved()
    data["tasks"] = [SEARCH_TASK]
    options = data["task_options"].setdefault(SEARCH_TASK, {})
    options["readout"] = {**options.get("readout", {}), "temperature": setting["temperature"],
                             "top_p": setting["top_p"], "greedy": False}
    tracking = data["tracking"]
    tracking["experiment"] = tracking["experiment"] + EXPERIMENT_SUFFIX
    tracking["tags"] = {**tracking["tags"], "gestalt.search": "decoding",
                        "gestalt.search.temperature": f"{setting['temperature']:g}",
                        "gestalt.search.top_p": f"{setting['top_p']:g}"}
    data["output_dir"] = str(recipe.out_dir / "decoding-search" / cell_name(setting))
    return Recipe.model_validate(data)


def _value(scores: dict[str, Any], name: str) -> tuple[float, list[float] | None]:
    s = scores.get(name)
    if s is None or s.value is None or (isinstance(s.value, float) and math.isnan(s.value)):
        return float("nan"), None
    return float(s.value), [s.ci_low, s.ci_high]


def decoding_search(recipe_path: str | Path, overrides: dict[str, Any] | None = None, *,
                    temperatures=GRID_TEMPERATURES, top_ps=GRID_TOP_PS, metric: str = "accuracy_all",
                    echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run every cell of the grid on VLAT; one row per model x cell.

    Rows are grouped by model (recipe order) and sorted by ``metric``, best first; the first row
    of each model has ``best: True`` (the setting to fix for the other tests). Each row: model,
    temperature, top_p, accuracy_all / accuracy_valid / valid_rate with their ``*_ci``, n_items,
    run_id, output_dir, and ``overrides`` (dotted recipe keys that fix the cell's setting for
    that model: pass them to ``gestalt recipe``)."""
    if metric not in METRICS:
        raise GestaltError(f"decoding search metric must be one of {METRICS}, not {metric!r}")
    recipe = load_recipe(recipe_path, overrides)
    if recipe.runtime.processes != 1:
        # each cell is a run_recipe, which closes the process group at its end; accelerate's
        # PartialState keeps its state per process, so the next cell would find no group
        raise GestaltError(f"{recipe_path}: the decoding search runs in one process; set "
                           f"runtime.processes: 1 (--runtime.processes=1), not {recipe.runtime.processes}")
    index = {m.id: i for i, m in enumerate(recipe.models)}
    grid = decoding_grid(temperatures, top_ps)
    rows: list[dict[str, Any]] = []
    for k, setting in enumerate(grid):
        cell = cell_recipe(recipe, setting)
        echo(f"decoding search {k + 1}/{len(grid)}: temperature {setting['temperature']:g}, "
             f"top-p {setting['top_p']:g} -> {cell.out_dir}")
        for result in run_recipe(cell, echo=echo):
            if SEARCH_TASK in result.unavailable:
                raise GestaltError(f"{SEARCH_TASK} is unavailable: {result.unavailable[SEARCH_TASK]}")
            if SEARCH_TASK not in result.scores:
                continue  # another process of a data-parallel run: only the main one scores
            scores = {s.name: s for s in result.scores[SEARCH_TASK]}
            row: dict[str, Any] = {"model": result.model_id, **setting, "cell": k}
            for name in ("accuracy_all", "accuracy_valid", "valid_rate"):
                row[name], row[f"{name}_ci"] = _value(scores, name)
            row["n_items"] = scores["accuracy_all"].n if "accuracy_all" in scores else 0
            i = index[result.model_id]
            row.update(run_id=result.run_id, output_dir=str(cell.out_dir), overrides={
                f"models.{i}.generation.temperature": setting["temperature"],
                f"models.{i}.generation.top_p": setting["top_p"]})
            rows.append(row)
    return rank_rows(rows, metric)


def rank_rows(rows: list[dict[str, Any]], metric: str = "accuracy_all") -> list[dict[str, Any]]:
    """Rows grouped by model (in order of first appearance), best ``metric`` first, then higher
    valid rate, then earlier grid cell; marks each model's first row ``best``. New dicts."""
    if metric not in METRICS:
        raise GestaltError(f"decoding search metric must be one of {METRICS}, not {metric!r}")
    order: dict[str, int] = {}
    for row in rows:
        order.setdefault(row["model"], len(order))

    def key(row):
        value, valid = row[metric], row["valid_rate"]
        return (order[row["model"]], -value if value == value else math.inf,
                -valid if valid == valid else math.inf, row["cell"])

    out = [dict(row) for row in sorted(rows, key=key)]
    for i, row in enumerate(out):
        row["best"] = i == 0 or out[i - 1]["model"] != row["model"]
    return out


def format_table(rows: list[dict[str, Any]], metric: str = "accuracy_all") -> str:
    """The search table as text, then each model's winning setting as recipe overrides."""
    def num(x):
        return "-" if x is None or x != x else f"{x:.3f}"

    def ci(x):
        return "" if not x or x[0] is None else f" [{num(x[0])}, {num(x[1])}]"

    header = ("model", "temperature", "top_p", "accuracy_all [95% CI]", "accuracy_valid [95% CI]",
              "valid_rate", "best")
    body = [(r["model"], f"{r['temperature']:g}", f"{r['top_p']:g}",
             num(r["accuracy_all"]) + ci(r["accuracy_all_ci"]),
             num(r["accuracy_valid"]) + ci(r["accuracy_valid_ci"]), num(r["valid_rate"]),
             "*" if r["best"] else "") for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip()
             for row in (header, tuple("-" * w for w in widths), *body)]
    lines.append(f"best by {metric} (fix these for the other tests):")
    for r in rows:
        if r["best"]:
            lines.append(f"  {r['model']}: " + " ".join(f"--{k}={v:g}" for k, v in r["overrides"].items()))
    return "\n".join(lines)
