"""GRAPE's standard bar charts as parameters: sampling, perturbations, augmentation mixtures.

Everything here follows reference/grape-generation.md (sections 3 and 4) and the generator's
JSON configs in sources/grape/configs. A batch of charts is a struct of arrays
(:class:`GrapeCharts`); pixels are drawn elsewhere (layout.py, render.py), so a set of 60,000
training charts costs a few megabytes until it is rendered.

Sampling (IID, per chart, vectorised over the batch):
- values: 10 integers uniform in [10, 93) (``valueRange``); bar types: height in px = value
  (``pixelValue`` true); stacked types: every segment = max(1, floor(v * 99 / larger stack
  total)) px, computed exactly in integers (GRAPE uses floats; the two differ only when v * 99 /
  total lies within float rounding of an integer).
- marked pair: type 1 a bar and its neighbour in the same group of five; type 3 one bar in each
  group; type 2 the bottom segments; type 4 one segment in each stack, independently; type 5 two
  adjacent segments of one stack.
- colours: background from ``bg_color``; bar types one fill redrawn until its (generator) L*
  differs from the background by more than 5; stacked types 6 fills drawn in turn, each redrawn
  until it differs by at least 5 (training) or 2 (test) from every colour drawn before and the
  background, the first 5 used; stroke from ``line_color`` redrawn until it differs by more than
  2 from all of them. At most ``MAX_COLOUR_DRAWS`` draws each, then the last draw is kept.
- words: title, x-axis title, y-axis title from :data:`words.WORDS`.
- target: smaller / larger marked height in pixels.

Perturbations and mixtures are GRAPE config settings (``barWidth``, ``lineThickness``,
``mark.bottomValue`` ...) applied to a batch by :func:`apply_settings`, so the OOD levels of
derived/perturbation_levels.csv and the augmentation mixtures of configs/data/set/
posLen_tp_mix_*.json are read from the sources, never retyped.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, fields, replace
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from ...sources import DataError, Sources
from .colours import ColourPools, shift_lightness
from .words import WORDS

BAR_TYPES = (1, 3)
STACK_TYPES = (2, 4, 5)
CHART_TYPES = BAR_TYPES + STACK_TYPES
N_VALUES = 10
STACK_SEGMENTS = 5
VALUE_RANGE = (10, 93)
STACK_SPACE = 99  # plot height 100 - top padding 0 - bottom padding 1

# IID settings (configs/data/set/detail/posLen_random_c/position_length_type_{t}.json).
BAR_WIDTH = 7
STACK_WIDTH = 30
LINE_THICKNESS = 1
DOT_BOTTOM = 5  # mark.bottomValue, bar types: px above the baseline
DOT_OFFSET = 0  # mark.dotDeviation, stacked types: px right of the segment centre
TITLE_SIZE = 12

MAX_COLOUR_DRAWS = 100
BAR_FILL_MIN_DIFF = 5  # strictly greater
STROKE_MIN_DIFF = 2  # strictly greater
STACK_FILL_MIN_DIFF = {"train": 5, "test": 2}  # at least
STACK_FILLS_DRAWN = 6

LEVELS_FILE = "derived/perturbation_levels.csv"
IID_CONFIG = "configs/data/set/detail/posLen_random_c/position_length_type_{t}.json"
MIX_CONFIG = "configs/data/set/posLen_tp_mix_{name}.json"
MIX_NAMES = ("barWidth", "dotpos", "title", "barLength_barWidth", "barLength_dotpos",
             "barLength_title", "barWidth_dotpos", "barWidth_title", "dotpos_title")

# GRAPE's parameter names (perturbation_levels.csv) -> the names stimuli and scores use.
PARAMETERS = {
    "barWidth": "bar_width",
    "barColorL": "bar_lightness",
    "bgColorL": "background_lightness",
    "strokeColorL": "stroke_lightness",
    "strokeWidth": "stroke_width",
    "markPosition": "dot_position",
    "title": "title_position",
    "titleFontSize": "title_font_size",
    "data": "bar_length",
}


@dataclass(frozen=True)
class GrapeCharts:
    """n charts of one type. Colours uint8 RGB; ``fills[:, j]`` colours segment j of both stacks
    (bar types use ``fills[:, 0]`` for every bar); ``bar_gap`` -1 = the generator's automatic gap;
    ``title_left`` NaN = centred title, else its left edge as a fraction of the 150-px width;
    ``title_shift`` moves a centred title by that fraction of the width (the paper's levels)."""

    chart_type: int
    values: np.ndarray  # (n, 10) data values
    heights: np.ndarray  # (n, 10) px
    marked: np.ndarray  # (n, 2) indices into values (stacks: 0-4 left, 5-9 right)
    background: np.ndarray  # (n, 3)
    fills: np.ndarray  # (n, 5, 3)
    stroke: np.ndarray  # (n, 3)
    bar_width: np.ndarray  # (n,)
    bar_gap: np.ndarray  # (n,)
    line_thickness: np.ndarray  # (n,)
    dot_bottom: np.ndarray  # (n,)
    dot_offset: np.ndarray  # (n,)
    title_left: np.ndarray  # (n,) float
    title_shift: np.ndarray  # (n,) float
    title_size: np.ndarray  # (n,)
    words: np.ndarray  # (n, 3): title, x-axis title, y-axis title

    def __len__(self) -> int:
        return len(self.values)

    @property
    def is_stacked(self) -> bool:
        return self.chart_type in STACK_TYPES

    @property
    def target(self) -> np.ndarray:
        h = np.take_along_axis(self.heights, self.marked, axis=1).astype(np.float64)
        return h.min(axis=1) / h.max(axis=1)

    def take(self, idx) -> GrapeCharts:
        idx = np.asarray(idx)
        return replace(self, **{f.name: getattr(self, f.name)[idx] for f in _ARRAY_FIELDS})

    def with_values(self, values: np.ndarray) -> GrapeCharts:
        return replace(self, values=values, heights=heights_from_values(self.chart_type, values))

    def content_hash(self) -> str:
        """sha256 of every parameter: with the renderer version it fixes every pixel."""
        h = hashlib.sha256(f"grape|{self.chart_type}".encode())
        for f in _ARRAY_FIELDS:
            a = np.ascontiguousarray(getattr(self, f.name))
            h.update(f"{f.name}{a.dtype}{a.shape}".encode())
            h.update(a.tobytes())
        return h.hexdigest()

    @cached_property
    def chart_hashes(self) -> list[str]:
        """``take([i]).content_hash()`` for every chart i, computed together."""
        return per_chart_sha256(f"grape|{self.chart_type}", [(f.name, getattr(self, f.name)) for f in _ARRAY_FIELDS])

    @staticmethod
    def concat(parts: list[GrapeCharts]) -> GrapeCharts:
        arrays: dict[str, Any] = {f.name: np.concatenate([getattr(p, f.name) for p in parts])
                                  for f in _ARRAY_FIELDS}
        return replace(parts[0], **arrays)


_ARRAY_FIELDS = [f for f in fields(GrapeCharts) if f.name != "chart_type"]


def per_chart_sha256(header: str, arrays: list[tuple[str, np.ndarray]]) -> list[str]:
    """Per row i, the sha256 that ``content_hash`` gives a set holding only chart i: the header,
    then per field its name, dtype and one-row shape and the row's bytes. One message per row is
    laid out in a single uint8 array, so hashing a set of 100,000 charts is 100,000 sha256 calls
    on short messages, not 100,000 ``take`` copies of every field."""
    n = len(arrays[0][1])
    if n == 0:
        return []
    columns = [np.frombuffer(header.encode(), np.uint8)]
    for name, a in arrays:
        a = np.ascontiguousarray(a)
        columns.append(np.frombuffer(f"{name}{a.dtype}{(1, *a.shape[1:])}".encode(), np.uint8))
        columns.append(a.reshape(n, -1).view(np.uint8))
    rows = np.concatenate([np.broadcast_to(c, (n, len(c))) if c.ndim == 1 else c for c in columns], axis=1)
    return [hashlib.sha256(row).hexdigest() for row in rows]


def check_type(chart_type: int) -> int:
    if chart_type not in CHART_TYPES:
        raise ValueError(f"chart_type must be one of {CHART_TYPES}, got {chart_type!r}")
    return int(chart_type)


def heights_from_values(chart_type: int, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.int64)
    if chart_type in BAR_TYPES:
        return values.astype(np.int16)
    totals = values.reshape(len(values), 2, STACK_SEGMENTS).sum(axis=2).max(axis=1)
    return np.maximum(1, values * STACK_SPACE // totals[:, None]).astype(np.int16)


def mark_pairs(chart_type: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 2) marked indices by the type's rule (reference 3.2-3.3)."""
    if chart_type == 1:
        i = rng.integers(0, N_VALUES, n)
        pos = i % 5
        step = np.where(rng.integers(0, 2, n) == 1, 1, -1)
        step = np.where(pos == 0, 1, np.where(pos == 4, -1, step))
        return np.stack([i, i + step], axis=1)
    if chart_type == 3:
        i = rng.integers(0, N_VALUES, n)
        other = np.where(i < 5, 5, 0) + rng.integers(0, 5, n)
        return np.stack([i, other], axis=1)
    if chart_type == 2:
        return np.tile([0, STACK_SEGMENTS], (n, 1))
    if chart_type == 4:
        return np.stack([rng.integers(0, 5, n), STACK_SEGMENTS + rng.integers(0, 5, n)], axis=1)
    stack = rng.integers(0, 2, n) * STACK_SEGMENTS
    j = rng.integers(0, STACK_SEGMENTS, n)
    partner = np.where(j == STACK_SEGMENTS - 1, j - 1, j + 1)
    return np.stack([stack + j, stack + partner], axis=1)


def _first_ok(candidates: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Per row, the first acceptable candidate, else the last draw (GRAPE's give-up rule)."""
    first = np.where(ok.any(axis=1), ok.argmax(axis=1), ok.shape[1] - 1)
    return candidates[np.arange(len(candidates)), first]


def sample_colours(chart_type: int, n: int, rng: np.random.Generator, pools: ColourPools,
                   split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bg_l, bar_l, line_l = (pools.lightness[k] for k in ("bg_color", "bar_color", "line_color"))
    bg = rng.integers(0, len(bg_l), n)
    drawn_l = [bg_l[bg]]  # lightness of every colour in the chart so far
    if chart_type in BAR_TYPES:
        cand = rng.integers(0, len(bar_l), (n, MAX_COLOUR_DRAWS))
        fill = _first_ok(cand, np.abs(bar_l[cand] - drawn_l[0][:, None]) > BAR_FILL_MIN_DIFF)
        fills = np.repeat(fill[:, None], STACK_SEGMENTS, axis=1)
        drawn_l.append(bar_l[fill])
    else:
        threshold = STACK_FILL_MIN_DIFF[split]
        chosen = []
        for _ in range(STACK_FILLS_DRAWN):
            cand = rng.integers(0, len(bar_l), (n, MAX_COLOUR_DRAWS))
            prior = np.stack(drawn_l, axis=1)  # (n, k)
            ok = (np.abs(bar_l[cand][:, :, None] - prior[:, None, :]) >= threshold).all(axis=2)
            pick = _first_ok(cand, ok)
            chosen.append(pick)
            drawn_l.append(bar_l[pick])
        fills = np.stack(chosen[:STACK_SEGMENTS], axis=1)
    cand = rng.integers(0, len(line_l), (n, MAX_COLOUR_DRAWS))
    prior = np.stack(drawn_l, axis=1)
    ok = (np.abs(line_l[cand][:, :, None] - prior[:, None, :]) > STROKE_MIN_DIFF).all(axis=2)
    stroke = _first_ok(cand, ok)
    return (pools.rgb["bg_color"][bg], pools.rgb["bar_color"][fills], pools.rgb["line_color"][stroke])


def sample_grape(chart_type: int, n: int, rng: np.random.Generator, pools: ColourPools,
                 split: str = "train") -> GrapeCharts:
    """n IID charts; ``split`` ('train' or 'test') picks the stacked colour threshold."""
    chart_type = check_type(chart_type)
    if split not in STACK_FILL_MIN_DIFF:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    values = rng.integers(*VALUE_RANGE, (n, N_VALUES)).astype(np.int16)
    marked = mark_pairs(chart_type, n, rng).astype(np.int8)
    background, fills, stroke = sample_colours(chart_type, n, rng, pools, split)
    words = rng.integers(0, len(WORDS), (n, 3)).astype(np.int16)
    stacked = chart_type in STACK_TYPES

    def full(v, dtype=np.int16):
        return np.full(n, v, dtype=dtype)

    return GrapeCharts(
        chart_type=chart_type, values=values, heights=heights_from_values(chart_type, values),
        marked=marked, background=background, fills=fills, stroke=stroke,
        bar_width=full(STACK_WIDTH if stacked else BAR_WIDTH), bar_gap=full(-1),
        line_thickness=full(LINE_THICKNESS), dot_bottom=full(DOT_BOTTOM),
        dot_offset=full(DOT_OFFSET), title_left=full(np.nan, np.float32), title_shift=full(0, np.float32),
        title_size=full(TITLE_SIZE), words=words)


# -- GRAPE config settings ------------------------------------------------------------------------

_FLAGS = {"barLABperturbation", "LABperturbation", "strokeLABperturbation", "outdata", "train"}


def draw_values(ranges: list[int], n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 10) values from ``values.valueRange``: [lo, hi) or two ranges mixed 50/50 per value."""
    if len(ranges) == 2:
        return rng.integers(ranges[0], ranges[1], (n, N_VALUES)).astype(np.int16)
    if len(ranges) == 4:
        low = rng.integers(ranges[0], ranges[1], (n, N_VALUES))
        high = rng.integers(ranges[2], ranges[3], (n, N_VALUES))
        return np.where(rng.integers(0, 2, (n, N_VALUES)) == 1, high, low).astype(np.int16)
    raise ValueError(f"values.valueRange must hold 2 or 4 numbers, got {ranges!r}")


def apply_settings(charts: GrapeCharts, settings: dict[str, Any], rng: np.random.Generator,
                   where: str = "settings") -> GrapeCharts:
    """The batch with GRAPE config ``settings`` applied (flattened keys as in the CSV).

    Only the named parameter changes: values, colours and words stay those of the batch, so a
    perturbed chart is its IID twin with one property altered. ``rng`` draws new values for
    ``values.valueRange``. An unknown key is an error naming it and ``where``.
    """
    n, stacked = len(charts), charts.is_stacked
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in _FLAGS:
            continue
        if key in ("barWidth", "stackWidth"):
            if (key == "stackWidth") != stacked:
                raise ValueError(f"{where}: {key} does not apply to chart type {charts.chart_type}")
            out["bar_width"] = np.full(n, int(value), np.int16)
        elif key == "fixBarGap":
            if not stacked:  # the stacked generator has a fixed stack gap and ignores it
                out["bar_gap"] = np.full(n, int(value), np.int16)
        elif key == "lineThickness":
            out["line_thickness"] = np.full(n, int(value), np.int16)
        elif key == "barcolorL_perturbation":
            out["fills"] = shift_lightness(charts.fills, float(value))
        elif key == "bgcolorL_perturbation":
            out["background"] = shift_lightness(charts.background, float(value))
        elif key == "strokecolorL_perturbation":
            out["stroke"] = shift_lightness(charts.stroke, float(value))
        elif key == "mark.bottomValue":
            out["dot_bottom"] = np.full(n, int(value), np.int16)
        elif key == "mark.dotDeviation":
            out["dot_offset"] = np.full(n, int(value), np.int16)
        elif key == "TitlePosition":
            if value != "left":
                raise ValueError(f"{where}: TitlePosition {value!r} is not supported (only 'left')")
            pad = settings.get("TitlePaddingLeft")
            if pad is None:
                raise ValueError(f"{where}: TitlePosition 'left' needs TitlePaddingLeft")
            out["title_left"] = np.full(n, round(float(pad), 4), np.float32)
        elif key == "TitlePaddingLeft":
            continue  # read with TitlePosition
        elif key == PAPER_TITLE_SHIFT:
            out["title_shift"] = np.full(n, round(float(value), 4), np.float32)
        elif key == "TitleFontSize":
            out["title_size"] = np.full(n, int(value), np.int16)
        elif key == "values.valueRange":
            values = draw_values(list(value), n, rng)
            out["values"], out["heights"] = values, heights_from_values(charts.chart_type, values)
        else:
            raise ValueError(f"{where}: unsupported GRAPE setting {key!r}")
    return replace(charts, **out)


def _range_label(ranges: list[int]) -> str:
    return "both" if len(ranges) == 4 else f"{ranges[0]}-{ranges[1]}"


def level_value(parameter: str, charts: GrapeCharts, settings: dict[str, Any]) -> Any:
    """The level of ``parameter`` in perturbed ``charts`` (all charts share it)."""
    if parameter == "bar_width":
        return int(charts.bar_width[0])
    if parameter == "stroke_width":
        return int(charts.line_thickness[0])
    if parameter == "bar_lightness":
        return float(settings.get("barcolorL_perturbation", 0))
    if parameter == "background_lightness":
        return float(settings.get("bgcolorL_perturbation", 0))
    if parameter == "stroke_lightness":
        return float(settings.get("strokecolorL_perturbation", 0))
    if parameter == "dot_position":
        return int(charts.dot_offset[0] if charts.is_stacked else charts.dot_bottom[0])
    if parameter == "title_position":
        left, shift = float(charts.title_left[0]), float(charts.title_shift[0])
        if not np.isnan(left):
            return round(left, 2)
        return f"centre{shift:+.2f}" if shift else "centre"
    if parameter == "title_font_size":
        return int(charts.title_size[0])
    if parameter == "bar_length":
        return _range_label(settings["values.valueRange"]) if "values.valueRange" in settings \
            else _range_label(list(VALUE_RANGE))
    raise ValueError(f"unknown perturbation parameter {parameter!r}; known: {sorted(PARAMETERS.values())}")


@dataclass(frozen=True)
class Level:
    """One OOD test level of one parameter for one chart type (a row of perturbation_levels.csv)."""

    parameter: str  # harness name, e.g. "bar_width"
    level: Any  # e.g. 5, -15.0, 0.05, "1-10"
    settings: dict[str, Any]
    testdata: str  # GRAPE's name of the level, e.g. "testdata_1"
    grape_parameter: str


def iid_level(parameter: str, chart_type: int) -> Any:
    stacked = chart_type in STACK_TYPES
    return {"bar_width": STACK_WIDTH if stacked else BAR_WIDTH, "stroke_width": LINE_THICKNESS,
            "bar_lightness": 0.0, "background_lightness": 0.0, "stroke_lightness": 0.0,
            "dot_position": DOT_OFFSET if stacked else DOT_BOTTOM, "title_position": "centre",
            "title_font_size": TITLE_SIZE, "bar_length": _range_label(list(VALUE_RANGE))}[parameter]


LEVEL_FORMS = ("config", "paper")
PAPER_TITLE_SHIFT = "paper.titleShift"  # not a GRAPE config key: the paper's centred-title offset
# The paper's prose (section IV-A, "Test Stimuli"), where it differs from the released config:
PAPER_TITLE_SHIFTS = (-0.45, -0.30, -0.15, 0.15, 0.30, 0.45)  # "moved by 15% of the canvas width
# three times from the center to both the left and right direction"
PAPER_BAR_LENGTHS = ([1, 10], [94, 101], [1, 10, 94, 101])  # "[1,9] U [94,100]" (integers)


def perturbation_levels(sources: Sources, chart_type: int, form: str = "config") -> list[Level]:
    """The OOD levels of a chart type, in file order.

    ``form`` "config": derived/perturbation_levels.csv, the released generator configs. Rows
    whose setting equals the IID value (each parameter's reference row, a ``{}`` row or a zero
    lightness shift, which a proper CIELAB round trip leaves unchanged) are left out: they would
    repeat the IID test set.
    ``form`` "paper": the levels the paper's text describes, where it differs from the config:
    the title's centre moved by +-15/30/45% of the width (config: left edge at 0.05 ... 0.95 of
    the width); the background only darkened and the stroke only lightened (the config also
    has background +5 and stroke -5); bar lengths from [1, 9] U [94, 100] (config [1, 10) U
    [93, 100)). Every other parameter keeps the config's levels.
    """
    if form not in LEVEL_FORMS:
        raise ValueError(f"levels must be one of {LEVEL_FORMS}, got {form!r}")
    levels = list(_levels(str(sources.path("grape", LEVELS_FILE)), check_type(chart_type)))
    if form == "config":
        return levels
    probe = _probe_chart(chart_type)
    out: list[Level] = []
    for lv in levels:
        if lv.parameter in ("title_position", "bar_length"):
            continue
        if (lv.parameter, np.sign(lv.level) if isinstance(lv.level, float) else 0) in (
                ("background_lightness", 1.0), ("stroke_lightness", -1.0)):
            continue
        out.append(lv)
    settings: dict[str, Any]
    for shift in PAPER_TITLE_SHIFTS:
        settings = {PAPER_TITLE_SHIFT: shift}
        out.append(Level("title_position", level_value("title_position", apply_settings(
            probe, settings, np.random.default_rng(0)), settings), settings, "paper", "title"))
    for ranges in PAPER_BAR_LENGTHS:
        settings = {"values.valueRange": list(ranges)}
        label = "+".join(f"{lo}-{hi}" for lo, hi in zip(ranges[::2], ranges[1::2]))
        out.append(Level("bar_length", label, settings, "paper", "data"))
    return out


@lru_cache(maxsize=8)
def _levels(path: str, chart_type: int) -> tuple[Level, ...]:
    probe = _probe_chart(chart_type)
    out, seen = [], set()
    with open(path, newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            if int(row["cm_type"]) != chart_type or row["is_iid_reference"] == "True":
                continue
            where = f"{path}:{line}"
            if row["parameter"] not in PARAMETERS:
                raise DataError(f"{where}: unknown parameter {row['parameter']!r}")
            parameter = PARAMETERS[row["parameter"]]
            try:
                settings = json.loads(row["changed_settings"])
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: changed_settings is not JSON ({e})") from e
            level = level_value(parameter, apply_settings(probe, settings, np.random.default_rng(0), where),
                                settings)
            if level == iid_level(parameter, chart_type) or (parameter, level) in seen:
                continue
            seen.add((parameter, level))
            out.append(Level(parameter, level, settings, row["testdata"], row["parameter"]))
    if not out:
        raise DataError(f"{path}: no perturbation levels for chart type {chart_type}")
    return tuple(out)


@lru_cache(maxsize=8)
def _probe_chart(chart_type: int) -> GrapeCharts:
    """One neutral chart to read levels off settings (colours irrelevant)."""
    stacked = chart_type in STACK_TYPES

    def one(v, dt=np.int16):
        return np.array([v], dtype=dt)

    values = np.full((1, N_VALUES), 50, np.int16)
    return GrapeCharts(chart_type, values, heights_from_values(chart_type, values),
                       np.array([[0, 1]], np.int8), np.zeros((1, 3), np.uint8),
                       np.zeros((1, 5, 3), np.uint8), np.zeros((1, 3), np.uint8),
                       one(STACK_WIDTH if stacked else BAR_WIDTH), one(-1), one(LINE_THICKNESS),
                       one(DOT_BOTTOM), one(DOT_OFFSET), one(np.nan, np.float32), one(0, np.float32),
                       one(TITLE_SIZE),
                       np.zeros((1, 3), np.int16))


# -- augmentation mixtures ------------------------------------------------------------------------

def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _read_json(sources: Sources, relpath: str) -> dict[str, Any]:
    path = sources.path("grape", relpath)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not JSON ({e})") from e


def mixture(sources: Sources, name: str, chart_type: int) -> list[tuple[float, dict[str, Any]]]:
    """(share, settings) of each generator of GRAPE's augmentation mixture ``name``.

    GRAPE defines the mixtures for type-1 bar charts (configs/data/set/posLen_tp_mix_*.json);
    the settings are each member config's difference from the IID type-1 config, so they apply
    equally to type 3 (same generator, same IID config).
    """
    if name not in MIX_NAMES:
        raise ValueError(f"unknown augmentation mixture {name!r}; known: {', '.join(MIX_NAMES)}")
    if chart_type not in BAR_TYPES:
        raise ValueError(f"augmentation mixtures exist for bar chart types {BAR_TYPES} only, "
                         f"not type {chart_type}")
    base = _flatten(_read_json(sources, IID_CONFIG.format(t=1)))
    mix_path = MIX_CONFIG.format(name=name)
    out = []
    for gen in _read_json(sources, mix_path)["param"]["generators"]:
        include = gen["param"].removeprefix("{$include}").strip()
        member = _flatten(_read_json(sources, f"configs/data/set/{include}"))
        diff = {k: v for k, v in member.items() if k != "fileName" and base.get(k) != v}
        out.append((float(gen["ratio"]), diff))
    total = sum(share for share, _ in out)
    if abs(total - 1) > 1e-6:
        raise DataError(f"grape/{mix_path}: generator ratios sum to {total}, not 1")
    return out


def apply_mixture(charts: GrapeCharts, members: list[tuple[float, dict[str, Any]]],
                  rng: np.random.Generator, where: str) -> tuple[GrapeCharts, np.ndarray]:
    """Each chart gets one member's settings, drawn with the members' shares; returns the
    charts and each chart's member index."""
    shares = np.array([s for s, _ in members])
    which = rng.choice(len(members), size=len(charts), p=shares / shares.sum())
    parts, order = [], []
    for k, (_, settings) in enumerate(members):
        idx = np.flatnonzero(which == k)
        if len(idx):
            parts.append(apply_settings(charts.take(idx), settings, rng, f"{where} member {k}"))
            order.append(idx)
    merged = GrapeCharts.concat(parts)
    return merged.take(np.argsort(np.concatenate(order), kind="stable")), which
