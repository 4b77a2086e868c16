"""``similarity.chart.series_count``: how many colour series are in a scatterplot?

No per-trial human data exist for this task (sources/tseng-categorical-scatterplots/SOURCE.md,
"Not found"); the human reference is the 6-12 categorical-colour capacity band (Healey 1996;
Ware 2013; Szafir 2018, as the Gestalt paper cites them). The task is effect replication: whether
a model's accuracy a(k) bends where human capacity does.

Design (every number below is a module constant or a build option):
- k, the number of colour series, runs over ``k_values`` = 1..20 (below, inside and above 6-12).
  Test (option ``design``): ``default`` = 200 stimuli, 10 per k, enough per level to fit the
  psychometric curve whose 0.5 crossing is the capacity (harness.scores.capacity); ``paper40`` =
  the paper's 40 (2 per k, a(k) only 0, 0.5 or 1: the same estimator, a wide interval). The
  variant ``similarity.chart.series_count:paper40`` sets ``design: paper40``; ``n_test``
  overrides either. k is assigned cyclically. Probe-train: ``n_train`` = 200 (10 per k), drawn
  from a separate random stream, so the splits share no scatterplot.
- Colours: the k series get k distinct colours drawn (seeded) from Tableau-20 / D3 category20
  (``PALETTE``: 10 hues, each dark and light; the dark ten are the Tableau-10 of the mark-colour
  task). A random subset per plot keeps which colours appear from revealing k.
- Point-count rule: every plot has ``N_POINTS`` = 120 points in all, split as evenly as possible
  over the k series (the first 120 mod k series in drawn order get one more). A fixed total keeps
  density and dot count from revealing k: only colour does.
- Plot: ``SIZE`` = 320 px square, white, no axes, legend or frame (an axis or legend would not
  be the field of points the capacity literature measures). Points are filled circles of
  ``POINT_DIAMETER`` = 10 px, uniform in the area ``MARGIN`` px inside the border, at least
  ``MIN_GAP`` = 12 px apart centre to centre so no point hides another. Drawn at 4x and reduced
  with a box filter (anti-aliased edges; deterministic).
- Seeds: stimulus ``i`` of a split draws from ``default_rng([seed, split, i])``. Changing the seed
  changes colours and positions, never k (the target).
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Literal

import numpy as np
from PIL import Image, ImageDraw
from pydantic import Field

from ..sources import Sources
from .base import CapacityBand, Prompt, Split, Stimulus, StimulusSet
from .registry import TaskOptions

TASK_ID = "similarity.chart.series_count"
VERSION = "2"  # 2: 10 test trials per k (design default); fitted capacity
CAPACITY_BAND = (6, 12)
# D3 schemeCategory20 (= Tableau-20, matplotlib "tab20"), in its published order.
PALETTE = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
    "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
    "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
)
K_VALUES = tuple(range(1, 21))
DESIGNS = {"default": 200, "paper40": 40}  # test stimuli per design
Design = Literal["default", "paper40"]
BAND_SOURCE = "Healey 1996; Ware 2013; Szafir 2018, as the Gestalt paper cites them"
N_TRAIN = 200
MAX_ITEMS = 100_000  # a split's scatterplots: 500x the paper's, still drawn in minutes
N_POINTS = 120
SIZE = 320
MARGIN = 16
POINT_DIAMETER = 10
MIN_GAP = 12
SUPERSAMPLE = 4
_SPLIT_STREAM = {"test": 0, "train": 1}

PROMPT = Prompt(
    prompt_id=f"{TASK_ID}.v{VERSION}",
    text=(
        "How many distinct color series (groups of same-colored points) are in this scatterplot? "
        "Answer with a single integer."
    ),
)


def scatter_points(rng: np.random.Generator, n: int) -> np.ndarray:
    """n point centres (pixels), uniform in the plot area, pairwise at least MIN_GAP apart."""
    lo, hi = MARGIN + POINT_DIAMETER / 2, SIZE - MARGIN - POINT_DIAMETER / 2
    points = np.empty((n, 2))
    m = 0
    for _ in range(200 * n):
        if m == n:
            return points
        c = rng.uniform(lo, hi, size=2)
        if not m or np.hypot(points[:m, 0] - c[0], points[:m, 1] - c[1]).min() >= MIN_GAP:
            points[m] = c
            m += 1
    if m == n:
        return points
    raise RuntimeError(f"could not place {n} points {MIN_GAP} px apart in a {SIZE} px plot")


def series_sizes(k: int, n_points: int = N_POINTS) -> list[int]:
    base, extra = divmod(n_points, k)
    return [base + (s < extra) for s in range(k)]


def render_scatter(points: tuple[tuple[float, float], ...], colors: tuple[str, ...]) -> Image.Image:
    big = Image.new("RGB", (SIZE * SUPERSAMPLE, SIZE * SUPERSAMPLE), "white")
    draw = ImageDraw.Draw(big)
    r = POINT_DIAMETER * SUPERSAMPLE / 2
    for (x, y), color in zip(points, colors):
        cx, cy = x * SUPERSAMPLE, y * SUPERSAMPLE
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=color)
    return big.reduce(SUPERSAMPLE)


def layout(seed: int, split: Split, index: int, k: int) -> tuple[list[str], list[int], tuple, tuple]:
    """One scatterplot's series colours and sizes, point centres and point colours, from its own
    random stream (so a stimulus is named by (seed, split, index, k) and drawn only when shown)."""
    rng = np.random.default_rng([seed, _SPLIT_STREAM[split], index])
    series_colors = [PALETTE[c] for c in rng.choice(len(PALETTE), size=k, replace=False)]
    sizes = series_sizes(k)
    points = scatter_points(rng, N_POINTS)
    # Shuffled so that no series is tied to the order points were placed (and drawn) in.
    by_series = [c for c, n in zip(series_colors, sizes) for _ in range(n)]
    point_colors = tuple(by_series[i] for i in rng.permutation(N_POINTS))
    return (series_colors, sizes, tuple((round(float(x), 3), round(float(y), 3)) for x, y in points),
            point_colors)


def render_stimulus(seed: int, split: Split, index: int, k: int) -> Image.Image:
    _, _, points, point_colors = layout(seed, split, index, k)
    return render_scatter(points, point_colors)


def make_stimulus(seed: int, split: Split, index: int, k: int) -> Stimulus:
    # the series colours are the stream's first draw: the points are placed only when drawn
    rng = np.random.default_rng([seed, _SPLIT_STREAM[split], index])
    series_colors = [PALETTE[c] for c in rng.choice(len(PALETTE), size=k, replace=False)]
    return Stimulus(
        stimulus_id=f"series_{split}_{index:03d}_k{k:02d}",
        split=split,
        ground_truth=k,
        manipulated_value=k,
        image_source=partial(render_stimulus, seed, split, index, k),
        meta={"k": k, "colors": series_colors, "series_sizes": series_sizes(k)},
    )


class Options(TaskOptions):
    design: Design = "default"
    n_test: int | None = Field(None, ge=1, le=MAX_ITEMS)  # None: the design's count
    n_train: int = Field(N_TRAIN, ge=0, le=MAX_ITEMS)
    k_values: tuple[Annotated[int, Field(ge=1, le=len(PALETTE))], ...] = Field(K_VALUES, min_length=1, strict=False)


def build(sources: Sources | None = None, seed: int = 0, design: Design = "default",
          n_test: int | None = None, n_train: int = N_TRAIN,
          k_values: tuple[int, ...] = K_VALUES) -> StimulusSet:
    """``sources`` is unused (the stimuli are generated); kept for the builder signature."""
    if design not in DESIGNS:
        raise ValueError(f"{TASK_ID}: design must be one of {', '.join(DESIGNS)}, got {design!r}")
    n_test = DESIGNS[design] if n_test is None else n_test
    k_values = tuple(int(k) for k in k_values)
    if not k_values or min(k_values) < 1 or max(k_values) > len(PALETTE):
        raise ValueError(f"{TASK_ID}: k_values must lie in 1..{len(PALETTE)}, got {k_values}")
    sizes: tuple[tuple[Split, int], ...] = (("train", n_train), ("test", n_test))
    stimuli = [make_stimulus(seed, split, i, k_values[i % len(k_values)])
               for split, n in sizes for i in range(n)]
    return StimulusSet(
        task_id=TASK_ID,
        version=VERSION,
        response_space="count",
        stimuli=stimuli,
        human_ref_id="capacity_band_6_12",
        prompt=PROMPT,
        options=tuple(range(min(k_values), max(k_values) + 1)),
        human=CapacityBand(low=CAPACITY_BAND[0], high=CAPACITY_BAND[1], source=BAND_SOURCE),
        seed=seed,
    )
