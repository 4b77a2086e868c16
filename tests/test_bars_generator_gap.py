"""gestalt's GRAPE type-1 charts against 500 charts rendered by the authors' own generator
(sources/grape/authors-test-type1-dev): what is the same, pixel for pixel and in distribution,
and what is left (docs/grape-generator-audit.md)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.stimuli.bars import colours, grape
from harness.stimuli.bars.authors import AUTHORS, read_type1_charts
from harness.stimuli.bars.render import render_grape
from harness.stimuli.bars.tasks import build_grape
from tests.conftest import MIRROR, REPO

DEV = MIRROR / "grape" / "authors-test-type1-dev"
TEXT_FREE = (slice(19, 124), slice(30, 150))  # the plot area with its axes and ticks, no text

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


def test_every_authors_chart_is_redrawn_identically_outside_its_text(dev):
    """Bars, gaps, strokes, dots, axes, ticks and colours: the same pixels (no anti-aliasing
    either side); only the text (glyphs and words) differs."""
    images, truth, charts = dev
    assert len(images) == 500
    assert np.allclose(charts.target, truth, atol=1e-9)  # the parameters read back give the target
    redrawn = render_grape(charts)
    assert np.array_equal(redrawn[(slice(None), *TEXT_FREE)], images[(slice(None), *TEXT_FREE)])
    assert (redrawn != images).any(axis=(1, 2, 3)).all()  # every chart's text differs

    def label_rows(charts):  # rows holding ink of the x tick labels "1" ... "10"
        band = charts[:, 124:134, 31:150]
        return int((band != charts[:, 5:6, 5:6]).any(axis=(0, 2, 3)).sum())

    assert (label_rows(images), label_rows(redrawn)) == (7, 6)  # Arial's hinted digits are a row taller


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
