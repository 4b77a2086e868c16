"""gestalt's GRAPE type-1 charts against 500 charts rendered by the authors' own generator
(sources/grape/authors-test-type1-dev): what is the same, pixel for pixel and in distribution,
and what is left (docs/grape-generator-audit.md)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.stimuli.bars import axis_digits, colours, grape
from harness.stimuli.bars.authors import AUTHORS, read_type1_charts
from harness.stimuli.bars.render import render_grape
from harness.stimuli.bars.tasks import build_grape
from tests.conftest import MIRROR, REPO

DEV = MIRROR / "grape" / "authors-test-type1-dev"
TEXT_FREE = (slice(19, 124), slice(30, 150))  # the plot area with its axes and ticks, no text
X_TICK_LABELS = (slice(124, 134), slice(30, 150))
Y_TICK_LABELS = (slice(10, 125), slice(14, 30))

def same_distribution(observed: np.ndarray, expected: np.ndarray) -> bool:
    """Chi-square goodness of fit at the 0.1% level; cells expected below 5 are pooled, and a
    cell that cannot occur (expected 0) must be empty."""
    if observed[expected == 0].any():
        return False
    expected = expected * observed.sum() / expected.sum()
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return bool(stats.chisquare(obs[keep], exp[keep]).pvalue > 0.001)


@pytest.fixture(scope="module")
def dev(sources):
    """The authors' charts as the ``authors_test`` task option reads them: images, targets, parameters."""
    ss = build_grape(sources, 0, chart_type=1, n_train=2, n_val=2, n_test=2, n_ood=1, ood="none",
                     authors_test=str(DEV))
    authors = [s for s in ss.test if s.meta.get("generator") == AUTHORS]
    images = np.stack([np.asarray(s.image.convert("RGB")) for s in authors])
    return images, np.array([s.ground_truth for s in authors]), read_type1_charts(images)


def test_every_authors_chart_is_redrawn_identically_outside_its_words(dev):
    """Bars, gaps, strokes, dots, axes, ticks, colours and the tick labels: the same pixels (no
    anti-aliasing outside the text, Arial's digit cells in the labels); only the three words
    (glyphs and the words themselves) differ."""
    images, truth, charts = dev
    assert len(images) == 500
    assert np.allclose(charts.target, truth, atol=1e-9)  # the parameters read back give the target
    redrawn = render_grape(charts)
    for region in (TEXT_FREE, X_TICK_LABELS, Y_TICK_LABELS):
        assert np.array_equal(redrawn[(slice(None), *region)], images[(slice(None), *region)])
    assert (redrawn != images).any(axis=(1, 2, 3)).all()  # every chart's words differ


def _coverage(images: np.ndarray, bg: np.ndarray) -> np.ndarray:
    """(h, w) coverage of black ink over the pixels of (n, h, w, 3) charts: the one value in 0-255
    that Pillow's blend out = round(bg * (255 - a) / 255) maps to every chart's colour on its own
    background ``bg`` (n, 3) (-1 where no value fits all charts, -2 where more than one does)."""
    bg = bg.astype(np.int64)
    a = np.arange(256)
    blended = (bg[:, :, None] * (255 - a) + 127) // 255  # (n, 3, 256); Pillow's rounding
    fits = (blended[:, None, None] == images.astype(np.int64)[..., None]).all(axis=(0, 3))  # (h, w, 256)
    return np.where(fits.sum(axis=2) == 1, fits.argmax(axis=2), np.where(fits.any(axis=2), -2, -1))


def test_the_tick_label_digits_are_arial_s_cells_measured_on_the_authors_charts(dev):
    """Every tick label of all 500 authors' charts, measured: each pixel's coverage is one value
    shared by all charts, and each label is its digits' 7 x 5 cells side by side, 5 px apart, as
    axis_digits.py keeps them."""
    images = dev[0]
    bg = images[:, 5, 5]
    measured: dict[str, list[np.ndarray]] = {}

    def label(rows: slice, cols: slice, text: str, tick_row: int | None = None) -> None:
        cover = _coverage(images[:, rows, cols], bg)
        assert (cover >= 0).all(), f"label {text!r}: a pixel without one coverage on all charts"
        ys, xs = np.nonzero(cover)
        top, left = rows.start + ys.min(), cols.start + xs.min()
        cells = _coverage(images[:, top:top + 7, left:left + 5 * len(text)], bg)
        if tick_row is not None:  # the y axis's tick (x 29-33) covers the label's last column there
            cells[tick_row - top, 29 - left:] = -1
        for k, digit in enumerate(text):
            measured.setdefault(digit, []).append(cells[:, 5 * k:5 * k + 5])

    ticks = np.flatnonzero((images[0, 120:124] == 0).all(axis=(0, 2)))  # the x ticks' columns
    assert len(ticks) == 10
    for k, tick in enumerate(ticks):  # a label's ink spans tick - 3 ... tick + 1 ("10": tick - 5 ... tick + 4)
        wide = k == 9
        label(slice(124, 134), slice(tick - 4 - wide, tick + 3 + 2 * wide), str(k + 1))
    for text, row in (("100", 19), ("75", 44), ("50", 69), ("25", 94), ("0", 119)):
        label(slice(row - 5, row + 5), slice(14, 29), text, tick_row=row)
    assert sorted(measured) == list("0123456789")
    for digit, seen in measured.items():
        agree = [np.array_equal(a[seen_both], b[seen_both])
                 for a, b in zip(seen, seen[1:]) if (seen_both := (a >= 0) & (b >= 0)).any()]
        assert all(agree), f"digit {digit!r} drawn differently in two labels"
        full = max(seen, key=lambda a: int((a >= 0).sum()))
        assert (full >= 0).all()
        assert np.array_equal(full, axis_digits.CELLS[digit]), (
            f"digit {digit!r} measured as {[bytes(r.astype(np.uint8)).hex() for r in full]}")
    assert axis_digits.CELLS["8"].any(axis=1).sum() == 7  # Arial's hinted digits are 7 rows tall, Arimo's 6


def test_the_words_are_as_long_as_the_authors(dev):
    """GRAPE draws its titles from the RandomWords package's nouns; gestalt's re-drawings of the
    same charts (words drawn from the same list) have words of the same length distribution: the
    ink extent along each word, two-sample Kolmogorov-Smirnov at the 0.1% level."""
    images, _, charts = dev
    redrawn = render_grape(charts)
    for rows, cols, along in ((slice(0, 19), slice(31, 150), 1), (slice(134, 150), slice(31, 150), 1),
                              (slice(0, 150), slice(0, 14), 2)):  # title, x-axis title, y-axis title
        def lengths(charts, rows=rows, cols=cols, along=along):
            inked = (charts[:, rows, cols] != charts[:, 5:6, 5:6]).any(axis=3).any(axis=along)
            return np.array([np.ptp(np.flatnonzero(a)) + 1 for a in inked])

        assert stats.ks_2samp(lengths(images), lengths(redrawn)).pvalue > 0.001, (rows, cols)


def test_the_authors_values_and_marks_follow_gestalt_s_distribution(dev):
    _, _, charts = dev
    lo, hi = grape.VALUE_RANGE
    assert charts.heights.min() >= lo and charts.heights.max() < hi
    counts = np.bincount(charts.heights.ravel() - lo, minlength=hi - lo)
    assert same_distribution(counts, np.full(hi - lo, 1.0))  # uniform integers in [10, 93)
    first = np.bincount(charts.marked[:, 0], minlength=10)  # the lower index of the marked pair
    ours = grape.mark_pairs(1, 200_000, np.random.default_rng(0)).min(axis=1)
    assert same_distribution(first, np.bincount(ours, minlength=10).astype(float))


def test_the_authors_colours_come_from_the_pools_by_gestalt_s_rule(dev, sources):
    _, _, charts = dev
    pools = colours.load_pools(sources)

    def index(rgb, pool):
        table = pools.rgb[pool]
        hit = (rgb[:, None, :] == table[None]).all(axis=2)
        assert hit.any(axis=1).all(), f"a colour outside {pool}"
        return hit.argmax(axis=1)

    bg, fill, line = (index(charts.background, "bg_color"), index(charts.fills[:, 0], "bar_color"),
                      index(charts.stroke, "line_color"))
    bg_l, bar_l, line_l = (pools.lightness[k][i] for k, i in (("bg_color", bg), ("bar_color", fill),
                                                               ("line_color", line)))
    assert (np.abs(bar_l - bg_l) > grape.BAR_FILL_MIN_DIFF).all()
    assert ((np.abs(line_l - bg_l) > grape.STROKE_MIN_DIFF) & (np.abs(line_l - bar_l) > grape.STROKE_MIN_DIFF)).all()
    ours = grape.sample_grape(1, 100_000, np.random.default_rng(0), pools, "test")
    for got, drawn, pool in ((bg, ours.background, "bg_color"), (fill, ours.fills[:, 0], "bar_color"),
                             (line, ours.stroke, "line_color")):
        n = len(pools.rgb[pool])
        expected = np.bincount(index(drawn, pool), minlength=n).astype(float)
        assert same_distribution(np.bincount(got, minlength=n), expected), pool


def test_the_audit_shows_what_the_gap_data_file_gives():
    from benchmarks.bars_generator_gap import table

    assert table() in (REPO / "docs" / "grape-generator-audit.md").read_text(), \
        "run: python benchmarks/bars_generator_gap.py --table, paste into docs/grape-generator-audit.md"


def test_every_seed_s_gap_covers_0_on_the_dev_charts():
    """What the audit concludes from the data file: for every trained seed, the paired gap between
    the authors' charts and their re-drawings, and the unpaired gap to gestalt's IID charts, have
    95% intervals that cover 0; the tick labels and the plot area move nothing (the y tick labels'
    region also holds the first letters of the longest titles)."""
    import csv

    from benchmarks.bars_generator_gap import HEADLINE, RESULTS

    with RESULTS.open(newline="") as f:
        rows = list(csv.DictReader(f))
    seeds = {r["seed"] for r in rows}
    assert len(seeds) >= 3
    for seed in seeds:
        for scored, against, _ in HEADLINE:
            (r,) = [r for r in rows if (r["seed"], r["comparison"], r["against"]) == (seed, scored, against)]
            assert float(r["ci_low"]) <= 0 <= float(r["ci_high"]), r
    for r in rows:
        if r["comparison"].endswith(("x tick labels", "y tick labels", "plot area")):
            assert abs(float(r["difference"])) < 0.005, r
    # the recipe's own gap score, against its test split, for the same seeds' networks
    with (REPO / "benchmarks" / "results" / "bars_seeds.csv").open(newline="") as f:
        recipe_gaps = [r for r in csv.DictReader(f) if r["score"] == "rendered_by.grape-authors.mlae_gap"]
    assert {r["seed"] for r in recipe_gaps} == seeds
    for r in recipe_gaps:
        assert float(r["ci_low"]) <= 0 <= float(r["ci_high"]), r

