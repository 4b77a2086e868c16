"""Published human MLAE for the position-length task, per Cleveland-McGill chart type, as one
typed object per task (:class:`MLAEReferences`, ``StimulusSet.human``) that the scorer and the
figures read by attribute.

- ``cleveland_mcgill_1984`` and ``heer_bostock_2010``: midmean-form MLAE with 95% CI half-widths
  (sources/haehn-perception/human_mlae_position_length.csv, as Haehn et al. entered them).
- ``grape_user_study``: mean-form MLAE with bootstrapped 95% CIs of GRAPE's lab study, for the
  unperturbed charts ("Standard") and the eight perturbed conditions
  (sources/grape/derived/user_study_mlae_by_type_condition_digitized.csv, digitised from the
  authors' figures, +-0.005). Each condition is tied to the OOD level it showed by reading its
  settings from derived/user_study_conditions.csv and finding the level of
  derived/perturbation_levels.csv with exactly those settings (:func:`condition_levels`).
- ``grape_progressive``: GRAPE's progressive studies (type 3 dot position, type 4 stroke width,
  type 5 background lightness), mean-form MLAE per level
  (derived/user_study_progressive_digitized.csv).

Which MLAE form pairs with which reference: C&M and H&B report the midmean of the per-trial log
errors (the form of GRAPE's Eq. 1), so they pair with the ``mlae_midmean`` score; GRAPE's own
figures and code summarise the user study (and its CNNs) by the plain mean, so the user-study
references pair with the ``mlae`` score (scores/mlae.py, ``HUMAN_FOR_FORM``).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ...sources import DataError, Sources
from ..base import HumanReference
from .grape import PARAMETERS, STACK_TYPES, Level, check_type, perturbation_levels

HAEHN_FILE = "human_mlae_position_length.csv"
GRAPE_FILE = "derived/user_study_mlae_by_type_condition_digitized.csv"
PROGRESSIVE_FILE = "derived/user_study_progressive_digitized.csv"
CONDITIONS_FILE = "derived/user_study_conditions.csv"

_HAEHN_SOURCES = {"Cleveland & McGill 1984": "cleveland_mcgill_1984",
                  "Heer & Bostock 2010": "heer_bostock_2010"}
STANDARD = "Standard"


@dataclass(frozen=True)
class HumanMLAE:
    """One published human MLAE with its 95% CI. ``form``: the summary over trials."""

    mlae: float
    ci_low: float
    ci_high: float
    form: Literal["mean", "midmean"]
    source: str

    def values(self) -> dict[str, float]:
        """The numbers a score's ``extra`` carries."""
        return {"mlae": self.mlae, "ci_low": self.ci_low, "ci_high": self.ci_high}


@dataclass(frozen=True)
class ConditionMLAE(HumanMLAE):
    """A GRAPE user-study condition: the OOD ``parameter`` and ``level`` it showed (None for the
    unperturbed "Standard" charts)."""

    condition: str = STANDARD
    parameter: str | None = None
    level: Any = None


@dataclass(frozen=True)
class LevelMLAE(HumanMLAE):
    """One level of a GRAPE progressive study."""

    parameter: str = ""
    level: Any = None


@dataclass(frozen=True)
class MLAEReferences(HumanReference):
    """Every published human MLAE for one chart type (the bar-chart tasks' ``StimulusSet.human``).

    ``grape_user_study`` maps condition name to its reference; it and ``grape_progressive`` are
    empty for Haehn's stimuli, which GRAPE's participants never saw.
    """

    chart_type: int
    generator: str
    cleveland_mcgill_1984: HumanMLAE
    heer_bostock_2010: HumanMLAE
    grape_user_study: dict[str, ConditionMLAE] = field(default_factory=dict)
    grape_progressive: tuple[LevelMLAE, ...] = ()

    @property
    def published_midmean(self) -> dict[str, HumanMLAE]:
        """The midmean-form references by name (they pair with the ``mlae_midmean`` score)."""
        return {"cleveland_mcgill_1984": self.cleveland_mcgill_1984, "heer_bostock_2010": self.heer_bostock_2010}

    @property
    def standard(self) -> ConditionMLAE | None:
        """The user study's unperturbed condition."""
        return self.grape_user_study.get(STANDARD)

    def condition_for(self, parameter: str, level: Any) -> ConditionMLAE | None:
        return next((c for c in self.grape_user_study.values()
                     if c.parameter == parameter and c.level == level), None)

    def progressive_for(self, parameter: str, level: Any) -> LevelMLAE | None:
        return next((lv for lv in self.grape_progressive
                     if lv.parameter == parameter and lv.level == level), None)

    def without_grape(self) -> MLAEReferences:
        return MLAEReferences(self.chart_type, "haehn", self.cleveland_mcgill_1984, self.heer_bostock_2010)


def _rows(path: Path) -> list[tuple[int, dict[str, str]]]:
    with open(path, newline="") as f:
        return list(enumerate(csv.DictReader(f), start=2))


def _num(path: Path, line: int, row: dict[str, str], key: str) -> float:
    try:
        return float(row[key])
    except (KeyError, ValueError) as e:
        raise DataError(f"{path}:{line}: column {key!r} is not a number ({row.get(key)!r})") from e


# How user_study_conditions.csv writes settings: "key=value", "L* shift -25 (FLAG)" (a CIELAB
# lightness shift switched on by FLAG) and "valueRange [1,10) U [93,100)".
_SETTING = re.compile(r"([A-Za-z][\w.]*)=([+-]?[\w.]+)")
_L_SHIFT = re.compile(r"L\* shift ([+-]?\d+(?:\.\d+)?) \((\w+)\)")
_RANGE = re.compile(r"valueRange ((?:\[\d+,\d+\)(?: U )?)+)")


def _value(text: str) -> Any:
    try:
        return json.loads(text.lstrip("+"))
    except json.JSONDecodeError:
        return text


def _described(text: str) -> tuple[dict[str, Any], tuple[str, float] | None]:
    """The settings a condition's description names, and its lightness shift (flag, value)."""
    settings = {k: _value(v) for k, v in _SETTING.findall(text)}
    m = _RANGE.search(text)
    if m:
        settings["values.valueRange"] = [int(x) for x in re.findall(r"\d+", m.group(1))]
    shift = _L_SHIFT.search(text)
    return settings, (shift.group(2), float(shift.group(1))) if shift else None


def _matches(level: Level, settings: dict[str, Any], shift: tuple[str, float] | None) -> bool:
    if shift is not None:
        flag, value = shift
        return level.settings.get(flag) is True and value in [
            v for k, v in level.settings.items() if k != flag and not isinstance(v, bool)]
    # the description may leave out a setting the generator ignores (fixBarGap on stacked types)
    return bool(settings) and all(level.settings.get(k) == v for k, v in settings.items())


def condition_levels(sources: Sources, chart_type: int) -> dict[str, tuple[str | None, Any]]:
    """User-study condition -> (parameter, level) of the OOD level it showed on this chart type,
    read from derived/user_study_conditions.csv against the config's levels."""
    chart_type = check_type(chart_type)
    column = "stacked_types_2_4_5" if chart_type in STACK_TYPES else "bar_chart_types_1_and_3"
    levels = perturbation_levels(sources, chart_type)
    path = sources.path("grape", CONDITIONS_FILE)
    out: dict[str, tuple[str | None, Any]] = {}
    for line, row in _rows(path):
        # "same" (perhaps with a remark) repeats the bar types' settings
        text = row["bar_chart_types_1_and_3"] if row[column].startswith("same") else row[column]
        if row["condition"] == STANDARD:
            out[STANDARD] = (None, None)
            continue
        settings, shift = _described(text)
        found = [lv for lv in levels if _matches(lv, settings, shift)]
        if len(found) != 1:
            raise DataError(f"{path}:{line}: condition {row['condition']!r} matches {len(found)} OOD "
                            f"levels of chart type {chart_type} ({text!r})")
        out[row["condition"]] = (found[0].parameter, found[0].level)
    return out


def _haehn(sources: Sources, chart_type: int) -> dict[str, HumanMLAE]:
    refs = {}
    path = sources.path("haehn-perception", HAEHN_FILE)
    for line, row in _rows(path):
        key = next((k for prefix, k in _HAEHN_SOURCES.items() if row["source"].startswith(prefix)), None)
        if key is None:
            raise DataError(f"{path}:{line}: unknown source {row['source']!r}")
        if int(row["cm_type"]) != chart_type:
            continue
        mean, half = _num(path, line, row, "mlae_mean"), _num(path, line, row, "ci95_halfwidth")
        refs[key] = HumanMLAE(mean, round(mean - half, 6), round(mean + half, 6), "midmean",
                              f"haehn-perception/{HAEHN_FILE}")
    if set(refs) != set(_HAEHN_SOURCES.values()):
        raise DataError(f"{path}: missing human MLAE for type {chart_type}: "
                        f"{sorted(set(_HAEHN_SOURCES.values()) - set(refs))}")
    return refs


def human_references(sources: Sources, chart_type: int, generator: str = "grape") -> MLAEReferences:
    """Every published human MLAE for one chart type; GRAPE's own only for GRAPE's charts."""
    chart_type = check_type(chart_type)
    haehn = _haehn(sources, chart_type)
    refs = MLAEReferences(chart_type, "grape", haehn["cleveland_mcgill_1984"], haehn["heer_bostock_2010"],
                          _user_study(sources, chart_type), _progressive(sources, chart_type))
    return refs if generator == "grape" else refs.without_grape()


def _user_study(sources: Sources, chart_type: int) -> dict[str, ConditionMLAE]:
    shown = condition_levels(sources, chart_type)
    conditions: dict[str, ConditionMLAE] = {}
    path = sources.path("grape", GRAPE_FILE)
    for line, row in _rows(path):
        if row["agent"] != "human" or int(row["inferred_cm_type"]) != chart_type:
            continue
        if row["condition"] not in shown:
            raise DataError(f"{path}:{line}: condition {row['condition']!r} is not in grape/{CONDITIONS_FILE}")
        parameter, level = shown[row["condition"]]
        conditions[row["condition"]] = ConditionMLAE(
            _num(path, line, row, "mlae_mean"), _num(path, line, row, "ci95_low"),
            _num(path, line, row, "ci95_high"), "mean", f"grape/{GRAPE_FILE}",
            row["condition"], parameter, level)
    missing = set(shown) - set(conditions)
    if missing:
        raise DataError(f"{path}: no human rows for type {chart_type}, conditions {sorted(missing)}")
    return conditions


def _progressive(sources: Sources, chart_type: int) -> tuple[LevelMLAE, ...]:
    levels = []
    path = sources.path("grape", PROGRESSIVE_FILE)
    for line, row in _rows(path):
        if row["agent"] != "human" or row["quantity"] != "mlae" or int(row["inferred_cm_type"]) != chart_type:
            continue
        if row["parameter"] not in PARAMETERS:
            raise DataError(f"{path}:{line}: unknown parameter {row['parameter']!r}")
        parameter = PARAMETERS[row["parameter"]]
        value = _num(path, line, row, "parameter_value")
        # the level as the OOD stimuli name it (a lightness shift is a float, widths and px ints)
        level = float(value) if "lightness" in parameter else int(value)
        levels.append(LevelMLAE(_num(path, line, row, "value"), _num(path, line, row, "ci95_low"),
                                _num(path, line, row, "ci95_high"), "mean", f"grape/{PROGRESSIVE_FILE}",
                                parameter, level))
    return tuple(levels)
