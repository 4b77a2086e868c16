"""The report's tables: one row per (model, task) headline score with its CI, floor, ceiling, n,
nulls and null bracket; the human references; the cross-task rank correlations; and their CSV,
markdown and cell formatting, one rounding rule for every surface."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from ..own_files import own_file
from ..scores.agreement import null_bracket
from ..scores.ranking import censored, number
from ..scores.tasks import family_of
from .runs import BatteryRunData

BRACKETED = re.compile(r"^(B|B_\w+|accuracy)$")  # proportions over parseable trials


def score_rows(runs: list[BatteryRunData], tasks: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for r in runs:
        for task in tasks:
            v = r.null_rate(task)
            if task in r.unavailable:
                rows.append({"model": r.model, "family": r.family, "task": task, "score": "",
                             "note": f"unavailable: {r.unavailable[task]}", "run_id": r.run_of(task)})
                continue
            family = family_of(task)
            for s in r.scores.get(task, []):
                if family is None or not family.is_headline(s.name):
                    continue
                low = high = None
                if BRACKETED.match(s.name) and (s.value is not None or s.null_rate == 1):
                    # every answer null: B is undefined and the bracket 0 .. 1
                    low, high = null_bracket(s.value if s.value is not None else math.nan, s.null_rate)
                rows.append({
                    "model": r.model, "family": r.family, "task": task, "score": s.name,
                    "value": s.value, "ci_low": s.ci_low, "ci_high": s.ci_high, "floor": s.floor,
                    "ceiling": s.ceiling, "n": s.n, "nulls": s.nulls, "task_null_rate": v,
                    "full_low": low, "full_high": high, "version": s.version, "note": "",
                    "censored": censored(s) if s.value is not None else None,
                    "ceiling_source": s.ceiling_source, "run_id": r.run_of(task)})
    return rows


COLUMNS = ("model", "family", "task", "score", "value", "ci_low", "ci_high", "floor", "ceiling",
           "n", "nulls", "task_null_rate", "full_low", "full_high", "version", "note", "censored",
           "ceiling_source", "run_id")


def human_rows(runs: list[BatteryRunData], tasks: list[str]) -> list[dict[str, Any]]:
    """The human reference scores (identical across models of one stimulus set), once per task."""
    rows = []
    for task in tasks:
        src = next((r for r in runs if any(s.name.startswith("human_") for s in r.scores.get(task, []))),
                   None)
        for s in [] if src is None else src.scores[task]:
            if s.name.startswith("human_"):
                rows.append({"task": task, "score": s.name, "value": s.value, "ci_low": s.ci_low,
                             "ci_high": s.ci_high, "n": s.n, "method": s.method})
    return rows


def rank_correlations(values: dict[str, dict[str, float]], tasks: list[str]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Spearman rho between each pair of tasks over the models scored on both.

    ``values``: task -> {model: headline value}. Returns (rho, n) as (T, T) arrays; rho is NaN
    where fewer than 3 models are shared or one side has no spread (a rank correlation of two
    points, or of constants, says nothing). Ties get average ranks (scipy's convention).
    """
    t = len(tasks)
    rho, n = np.full((t, t), np.nan), np.zeros((t, t), dtype=int)
    for i, a in enumerate(tasks):
        for j, b in enumerate(tasks):
            shared = sorted(set(values.get(a, {})) & set(values.get(b, {})))
            n[i, j] = len(shared)
            x = np.array([values[a][m] for m in shared])
            y = np.array([values[b][m] for m in shared])
            if len(shared) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
                rho[i, j] = float(stats.spearmanr(x, y).statistic)
    return rho, n


def cell(v: Any, digits: int = 3) -> str:
    """A table cell: numbers by the one rounding rule (:func:`~harness.scores.ranking.number`),
    nothing where there is no value."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return number(v, digits)
    return str(v)


def ci_cell(row: dict[str, Any]) -> str:
    d = decimals(row)
    return "" if row.get("ci_low") is None else f"[{cell(row['ci_low'], d)}, {cell(row['ci_high'], d)}]"


def decimals(row: dict[str, Any]) -> int:
    """The decimals of a row's score, its family's (:meth:`~harness.scores.tasks.Family.decimals_of`)."""
    family = family_of(row["task"]) if row.get("task") else None
    return 3 if family is None else family.decimals_of(row.get("score", ""))


def value_cell(row: dict[str, Any]) -> str:
    """A row's value as every table shows it: a censored one says so beside the number."""
    return cell(row["value"], decimals(row)) + (f" ({row['censored']})" if row.get("censored") else "")


def ceiling_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Per task and score shown with a ceiling: the ceiling, what it is and its source."""
    seen = {(r["task"], r["score"]): [r["task"], r["score"], cell(r["ceiling"]), r["ceiling_source"] or "not stated"]
            for r in rows if not r["note"] and r.get("ceiling") is not None}
    return list(seen.values())


CEILING_HEAD = ["task", "score", "ceiling", "what the ceiling is, and its source"]


def bracket_cell(row: dict[str, Any]) -> str:
    return "" if row.get("full_low") is None else f"{cell(row['full_low'])} .. {cell(row['full_high'])}"


def write_csv(rows: list[dict[str, Any]], path: Path, columns=COLUMNS) -> None:
    with own_file(path, newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({c: ("" if row.get(c) is None else row.get(c)) for c in columns})


# Shown only when some trial was null: otherwise (1-v)x .. (1-v)x+v is x .. x and says nothing.
BRACKET_HEADER = "if nulls were scored: (1-v)x .. (1-v)x+v, v = null rate"


def any_nulls(rows: list[dict[str, Any]]) -> bool:
    return any(r.get("nulls") for r in rows if not r.get("note"))


def markdown_table(rows: list[dict[str, Any]]) -> str:
    bracket = any_nulls(rows)
    head = ["model", "family", "task", "score", "value [95% CI]", "floor", "ceiling", "n", "nulls",
            "null rate", *([BRACKET_HEADER] if bracket else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r["note"]:
            cells = [r["model"], r["family"], r["task"], "", r["note"].replace("|", "/"),
                     "", "", "", "", ""]
        else:
            cells = [r["model"], r["family"], r["task"], r["score"], f"{value_cell(r)} {ci_cell(r)}",
                     cell(r["floor"], decimals(r)), cell(r["ceiling"], decimals(r)), cell(r["n"]), cell(r["nulls"]),
                     cell(r["task_null_rate"])]
        cells += [bracket_cell(r) if not r["note"] else ""] if bracket else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
def task_rows(runs: list[BatteryRunData], tasks: list[str]) -> list[list[str]]:
    """Every task of the runs: which models it was scored for and, where not, why."""
    out = []
    for t in tasks:
        scored = [r.model for r in runs if t in r.scores]
        missing = sorted({f"{why}" for r in runs if (why := r.unavailable.get(t))})
        out.append([t, ", ".join(scored) or "-", "; ".join(missing)])
    return out



def history_rows(history: list[dict[str, Any]]) -> list[list[str]]:
    """[model, run, recipe, tasks it answers, tasks a later run answers (by which)] per battery."""
    return [[h["model"], h["run_id"], h["recipe"], ", ".join(h["answers"]) or "-",
             "; ".join(f"{t} (by {rid[:8]})" for t, rid in h["superseded"].items())] for h in history]
