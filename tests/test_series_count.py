"""similarity.chart.series_count: rendered scatterplots, splits, determinism, palette."""

from pathlib import Path

import numpy as np
import pytest

from harness.stimuli import series_count
from harness.stimuli.base import png_bytes

PAPER = Path(__file__).resolve().parents[2] / "shared" / "papers" / "gestalt-grouping-battery.txt"


@pytest.fixture(scope="module")
def stimset():
    return series_count.build(None, seed=0)


def hex_rgb(h):
    return tuple(int(h[i:i + 2], 16) for i in (1, 3, 5))


def interior_colours(image):
    """Colours of pixels whose 3x3 neighbourhood is uniform (point interiors, not blended edges)."""
    a = np.asarray(image).astype(int)
    code = (a[..., 0] << 16) | (a[..., 1] << 8) | a[..., 2]
    centre = code[1:-1, 1:-1]
    uniform = np.ones_like(centre, dtype=bool)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            uniform &= code[dy:dy + centre.shape[0], dx:dx + centre.shape[1]] == centre
    return {f"#{c:06x}" for c in np.unique(centre[uniform])} - {"#ffffff"}


def test_splits_and_k_design(stimset):
    """At least 10 test trials per k, over a grid below, inside and above 6-12."""
    test, train = stimset.test, stimset.train
    assert len(test) == 200 and len(train) == 200
    ks = [s.ground_truth for s in test]
    assert min(ks) < 6 and max(ks) > 12
    assert sorted(set(ks)) == list(range(1, 21)) and all(ks.count(k) == 10 for k in set(ks))
    assert all(s.manipulated_value == s.ground_truth for s in stimset.stimuli)
    assert stimset.response_space == "count" and stimset.options == tuple(range(1, 21))
    assert (stimset.human.low, stimset.human.high) == (6, 12)
    assert not {s.stimulus_id for s in test} & {s.stimulus_id for s in train}
    assert not {s.sha256 for s in test} & {s.sha256 for s in train}


def test_paper40_variant_keeps_the_papers_design(sources):
    from harness.stimuli.registry import get_task

    paper = get_task("similarity.chart.series_count:paper40").build(sources, seed=0, n_train=0)
    ks = [s.ground_truth for s in paper.test]
    assert len(ks) == 40 and all(ks.count(k) == 2 for k in range(1, 21))
    assert paper.task_id == "similarity.chart.series_count:paper40"
    with pytest.raises(ValueError, match="design"):
        series_count.build(None, design="paper41")


def test_each_plot_shows_k_colours_and_the_point_rule(stimset):
    for s in stimset.test:
        image = s.image
        assert image.size == (series_count.SIZE, series_count.SIZE)
        colours = interior_colours(image)
        assert colours == set(s.meta["colors"]) and len(colours) == s.ground_truth
        sizes = s.meta["series_sizes"]
        assert sum(sizes) == series_count.N_POINTS and max(sizes) - min(sizes) <= 1
        # no axes or frame: the border strip is white
        arr = np.asarray(image)
        assert (arr[:8] == 255).all() and (arr[:, :8] == 255).all()


def test_points_keep_their_distance():
    pts = series_count.scatter_points(np.random.default_rng(3), series_count.N_POINTS)
    d = np.hypot(*(pts[:, None] - pts[None]).transpose(2, 0, 1))
    assert d[np.triu_indices(len(pts), 1)].min() >= series_count.MIN_GAP
    lo = series_count.MARGIN + series_count.POINT_DIAMETER / 2
    assert pts.min() >= lo and pts.max() <= series_count.SIZE - lo


def test_palette_is_tableau20():
    import matplotlib

    tab20 = matplotlib.colormaps["tab20"].colors
    assert series_count.PALETTE == tuple(matplotlib.colors.to_hex(c) for c in tab20)


def test_deterministic_and_seed_changes_plots_not_targets():
    stimset = series_count.build(None, seed=0, n_test=40, n_train=20)
    again = series_count.build(None, seed=0, n_test=40, n_train=20)
    assert again.sha256 == stimset.sha256
    for a, b in zip(stimset.test[:4], again.test[:4]):
        assert png_bytes(a.image) == png_bytes(b.image)
    other = series_count.build(None, seed=1, n_test=40, n_train=20)
    assert [s.ground_truth for s in other.stimuli] == [s.ground_truth for s in stimset.stimuli]
    assert [s.stimulus_id for s in other.stimuli] == [s.stimulus_id for s in stimset.stimuli]
    assert all(png_bytes(a.image) != png_bytes(b.image)
               for a, b in zip(stimset.test[:4], other.test[:4]))


def test_options_and_bad_k():
    small = series_count.build(None, seed=0, n_test=6, n_train=12, k_values=(2, 9, 15))
    assert [s.ground_truth for s in small.test] == [2, 9, 15, 2, 9, 15]
    with pytest.raises(ValueError, match="k_values must lie in 1..20"):
        series_count.build(None, k_values=(0, 3))


def test_prompt_is_verbatim_from_the_paper(stimset):
    assert f"series counting: {stimset.prompt.text}\n" in PAPER.read_text()
    assert stimset.prompt.prompt_id == "similarity.chart.series_count.v2"
