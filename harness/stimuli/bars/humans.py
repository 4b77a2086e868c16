"""Published human MLAE for the position-length task, per Cleveland-McGill chart type.

- ``cleveland_mcgill_1984`` and ``heer_bostock_2010``: midmean-form MLAE with 95% CI half-widths
  (sources/haehn-perception/human_mlae_position_length.csv, as Haehn et al. entered them).
- ``grape_user_study``: mean-form MLAE with bootstrapped 95% CIs of GRAPE's lab study, for the
  unperturbed charts ("Standard") and the eight perturbed conditions
  (sources/grape/derived/user_study_mlae_by_type_condition_digitized.csv, digitised from the
  authors' figures, +-0.005). Each condition is tied to the OOD level it showed
  (derived/user_study_conditions.csv; :data:`CONDITIONS`).
- ``grape_progressive``: GRAPE's progressive studies (type 3 dot position, type 4 stroke width,
  type 5 background lightness), mean-form MLAE per level
  (derived/user_study_progressive_digitized.csv).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ...sources import DataError, Sources
from .grape import PARAMETERS, STACK_TYPES, check_type

HAEHN_FILE = "human_mlae_position_length.csv"
GRAPE_FILE = "derived/user_study_mlae_by_type_condition_digitized.csv"
PROGRESSIVE_FILE = "derived/user_study_progressive_digitized.csv"
CONDITIONS_FILE = "derived/user_study_conditions.csv"

_HAEHN_SOURCES = {"Cleveland & McGill 1984": "cleveland_mcgill_1984",
                  "Heer & Bostock 2010": "heer_bostock_2010"}

# User-study condition -> (parameter, level on bar types 1 and 3, level on stacked types 2, 4, 5),
# as described in derived/user_study_conditions.csv.
CONDITIONS: dict[str, tuple[str | None, Any, Any]] = {
    "Standard": (None, None, None),
    "Title position": ("title_position", 0.05, 0.05),
    "Stroke width": ("stroke_width", 2, 2),
    "Bar width": ("bar_width", 5, 27),
    "Bkgd color": ("background_lightness", -25.0, -25.0),
    "Stroke color": ("stroke_lightness", 25.0, 25.0),
    "Bar color": ("bar_lightness", -15.0, -15.0),
    "Bar length": ("bar_length", "both", "both"),
    "dot position": ("dot_position", 2, 3),
}


def _rows(path: Path) -> list[tuple[int, dict[str, str]]]:
    with open(path, newline="") as f:
        return list(enumerate(csv.DictReader(f), start=2))


def _num(path: Path, line: int, row: dict[str, str], key: str) -> float:
    try:
        return float(row[key])
    except (KeyError, ValueError) as e:
        raise DataError(f"{path}:{line}: column {key!r} is not a number ({row.get(key)!r})") from e


def human_references(sources: Sources, chart_type: int) -> dict[str, Any]:
    """Every published human MLAE for one chart type, with its CI and MLAE form."""
    chart_type = check_type(chart_type)
    refs: dict[str, Any] = {}
    path = sources.path("haehn-perception", HAEHN_FILE)
    for line, row in _rows(path):
        key = next((k for prefix, k in _HAEHN_SOURCES.items() if row["source"].startswith(prefix)), None)
        if key is None:
            raise DataError(f"{path}:{line}: unknown source {row['source']!r}")
        if int(row["cm_type"]) != chart_type:
            continue
        mean, half = _num(path, line, row, "mlae_mean"), _num(path, line, row, "ci95_halfwidth")
        refs[key] = {"mlae": mean, "ci_low": round(mean - half, 6), "ci_high": round(mean + half, 6),
                     "form": "midmean", "source": f"haehn-perception/{HAEHN_FILE}"}
    if set(refs) != set(_HAEHN_SOURCES.values()):
        raise DataError(f"{path}: missing human MLAE for type {chart_type}: "
                        f"{sorted(set(_HAEHN_SOURCES.values()) - set(refs))}")

    stacked = chart_type in STACK_TYPES
    conditions: dict[str, Any] = {}
    path = sources.path("grape", GRAPE_FILE)
    for line, row in _rows(path):
        if row["agent"] != "human" or int(row["inferred_cm_type"]) != chart_type:
            continue
        if row["condition"] not in CONDITIONS:
            raise DataError(f"{path}:{line}: unknown condition {row['condition']!r}")
        parameter, bar_level, stack_level = CONDITIONS[row["condition"]]
        conditions[row["condition"]] = {
            "parameter": parameter, "level": stack_level if stacked else bar_level,
            "mlae": _num(path, line, row, "mlae_mean"), "ci_low": _num(path, line, row, "ci95_low"),
            "ci_high": _num(path, line, row, "ci95_high")}
    missing = set(CONDITIONS) - set(conditions)
    if missing:
        raise DataError(f"{path}: no human rows for type {chart_type}, conditions {sorted(missing)}")
    refs["grape_user_study"] = {"form": "mean", "conditions": conditions,
                                "source": f"grape/{GRAPE_FILE}"}

    levels = []
    path = sources.path("grape", PROGRESSIVE_FILE)
    for line, row in _rows(path):
        if row["agent"] != "human" or row["quantity"] != "mlae" or int(row["inferred_cm_type"]) != chart_type:
            continue
        if row["parameter"] not in PARAMETERS:
            raise DataError(f"{path}:{line}: unknown parameter {row['parameter']!r}")
        value = _num(path, line, row, "parameter_value")
        levels.append({"parameter": PARAMETERS[row["parameter"]],
                       "level": float(value) if "lightness" in PARAMETERS[row["parameter"]] else int(value),
                       "mlae": _num(path, line, row, "value"), "ci_low": _num(path, line, row, "ci95_low"),
                       "ci_high": _num(path, line, row, "ci95_high")})
    if levels:
        refs["grape_progressive"] = {"form": "mean", "levels": levels, "source": f"grape/{PROGRESSIVE_FILE}"}
    return refs
