"""Bar-chart stimuli: pixel facts from reference/grape-generation.md, the sources' tables,
OOD levels that change one parameter, determinism, and fast renderer == PIL ImageDraw."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from harness.stimuli.bars import colours, grape, haehn, layout, pil_reference, render
from harness.stimuli.bars.humans import condition_levels, human_references
from harness.stimuli.bars.tasks import build_grape, build_haehn
from harness.stimuli.bars.words import WORDS
from harness.stimuli.registry import TASKS

BLACK = (0, 0, 0)


@pytest.fixture(scope="module")
def pools(sources):
    return colours.load_pools(sources)


def _charts(pools, chart_type, n=40, seed=0, split="train"):
    return grape.sample_grape(chart_type, n, np.random.default_rng(seed), pools, split)


def _img(c, i):
    return render.render(c, [i])[0]


# -- sources -------------------------------------------------------------------------------------

def test_generator_lightness_reproduces_the_colour_table(sources):
    rows = list(csv.DictReader(open(sources.path("grape", colours.POOLS_FILE))))
    rgb = np.array([[int(r["r"]), int(r["g"]), int(r["b"])] for r in rows])
    expected = np.array([float(r["L_as_grape_computes"]) for r in rows])
    assert np.array_equal(np.round(colours.grape_lightness(rgb), 2), expected)
    srgb = np.array([float(r["cielab_L_srgb"]) for r in rows])
    assert np.abs(colours.rgb_to_lab(rgb)[:, 0] - srgb).max() < 0.006


def test_pools_sizes_match_source_md(pools):
    assert {k: len(v) for k, v in pools.rgb.items()} == {"bg_color": 27, "bar_color": 73, "line_color": 29}


def test_lightness_shift_round_trip():
    rgb = np.array([[200, 100, 50], [90, 120, 160], [10, 20, 30]], np.uint8)
    assert np.array_equal(colours.shift_lightness(rgb, 0), rgb)
    shifted = colours.shift_lightness(rgb[:2], -10)
    assert np.allclose(colours.rgb_to_lab(shifted)[:, 0], colours.rgb_to_lab(rgb[:2])[:, 0] - 10, atol=0.5)


def test_human_references_equal_the_source_tables(sources):
    haehn_rows = list(csv.DictReader(open(sources.path("haehn-perception", "human_mlae_position_length.csv"))))
    grape_csv = sources.path("grape", "derived/user_study_mlae_by_type_condition_digitized.csv")
    grape_rows = list(csv.DictReader(open(grape_csv)))
    conditions_csv = sources.path("grape", "derived/user_study_conditions.csv")
    conditions = [r["condition"] for r in csv.DictReader(open(conditions_csv))]
    for t in range(1, 6):
        refs = human_references(sources, t)
        cm = next(r for r in haehn_rows if r["source"].startswith("Cleveland") and int(r["cm_type"]) == t)
        hb = next(r for r in haehn_rows if r["source"].startswith("Heer") and int(r["cm_type"]) == t)
        for ref, row in ((refs.cleveland_mcgill_1984, cm), (refs.heer_bostock_2010, hb)):
            half = float(row["ci95_halfwidth"])
            assert ref.mlae == float(row["mlae_mean"]) and ref.form == "midmean"
            assert ref.ci_low == pytest.approx(float(row["mlae_mean"]) - half)
            assert ref.ci_high == pytest.approx(float(row["mlae_mean"]) + half)
        mine = refs.grape_user_study
        theirs = {r["condition"]: r for r in grape_rows if r["agent"] == "human" and int(r["inferred_cm_type"]) == t}
        assert set(mine) == set(theirs) == set(conditions)
        for cond, row in theirs.items():
            assert (mine[cond].mlae, mine[cond].ci_low, mine[cond].ci_high, mine[cond].form) == (
                float(row["mlae_mean"]), float(row["ci95_low"]), float(row["ci95_high"]), "mean")
        assert not human_references(sources, t, "haehn").grape_user_study  # people never saw Haehn's charts
    # the five Cleveland-McGill values SOURCE.md quotes
    assert [human_references(sources, t).cleveland_mcgill_1984.mlae for t in range(1, 6)] == \
        [1.40, 1.72, 1.84, 2.35, 2.72]


def test_condition_levels_are_read_from_the_conditions_table(sources):
    """Each user-study condition is tied to the OOD level whose settings its description in
    derived/user_study_conditions.csv names (reference 4.1's table, written out here)."""
    bars = {"Standard": (None, None), "Title position": ("title_position", 0.05),
            "Stroke width": ("stroke_width", 2), "Bar width": ("bar_width", 5),
            "Bkgd color": ("background_lightness", -25.0), "Stroke color": ("stroke_lightness", 25.0),
            "Bar color": ("bar_lightness", -15.0), "Bar length": ("bar_length", "both"),
            "dot position": ("dot_position", 2)}
    stacks = {**bars, "Bar width": ("bar_width", 27), "dot position": ("dot_position", 3)}
    for t in range(1, 6):
        assert condition_levels(sources, t) == (bars if t in (1, 3) else stacks)
    levels = {(lv.parameter, lv.level) for lv in grape.perturbation_levels(sources, 2)}
    assert set(stacks.values()) - {(None, None)} <= levels


def test_levels_are_those_of_perturbation_levels_csv(sources):
    rows = list(csv.DictReader(open(sources.path("grape", grape.LEVELS_FILE))))
    for t, key in ((1, "barWidth"), (2, "stackWidth")):
        widths = {json.loads(r["changed_settings"])[key] for r in rows
                  if int(r["cm_type"]) == t and key in r["changed_settings"]}
        levels = {lv.level for lv in grape.perturbation_levels(sources, t) if lv.parameter == "bar_width"}
        assert levels == widths
    counts = {}
    for lv in grape.perturbation_levels(sources, 1):
        counts[lv.parameter] = counts.get(lv.parameter, 0) + 1
    # the paper: six levels by default, four for bar width, two for stroke width (types 1, 3);
    # title position keeps all seven (none is centred), bar length three ranges
    assert counts == {"bar_width": 4, "bar_lightness": 6, "background_lightness": 6, "stroke_lightness": 6,
                      "stroke_width": 2, "dot_position": 6, "title_position": 7, "title_font_size": 6,
                      "bar_length": 3}


# -- GRAPE pixel facts ---------------------------------------------------------------------------

def test_grape_canvas_axes_and_ticks(pools):
    for t in (1, 2):
        c = _charts(pools, t, 5)
        im = render.render(c)
        assert im.shape == (5, 150, 150, 3) and im.dtype == np.uint8
        img = im[0]
        assert (img[19:120, 34] == 0).all()  # y axis x = 19 + 15, rows 19-119
        assert (img[119, 35:135] == 0).all()  # x axis over the bar bottoms
        for y in (19, 44, 69, 94, 119):  # y ticks, 5 px left of the axis
            assert (img[y, 29:34] == 0).all()
        assert tuple(img[0, 149]) == tuple(c.background[0])
        lefts = [2 + 9 * k + (4 if k >= 5 else 0) for k in range(10)] if t == 1 else [10, 60]
        width = 7 if t == 1 else 30
        for x in lefts:  # x ticks under each element's centre, rows 120-123
            xt = int(x + width / 2 + 0.5) + 35
            assert (img[120:124, xt] == 0).all()
            assert (img[123:132, xt - 4:xt + 5] != img[0, 149]).any()  # its label, from row 123
        assert (img[120:123, 35 + lefts[0] - 1] == img[0, 149]).all()  # no tick between elements


def test_grape_bar_positions_heights_and_dots(pools):
    c = _charts(pools, 1, 30)
    for i in range(30):
        img = _img(c, i)
        bg, fill, stroke = (tuple(a) for a in (c.background[i], c.fills[i, 0], c.stroke[i]))
        for k in range(10):
            x = 35 + 2 + 9 * k + (4 if k >= 5 else 0)
            top = 119 - int(c.heights[i, k])
            assert tuple(img[118, x]) == stroke and tuple(img[118, x + 7]) == stroke  # 8 px wide
            assert tuple(img[118, x - 1]) == bg and tuple(img[118, x + 8]) == bg
            assert tuple(img[top, x + 3]) == stroke and tuple(img[top - 1, x + 3]) == bg
            dot = tuple(img[114, x + 3])  # 5 px above the baseline, at x + width // 2
            assert dot == (BLACK if k in c.marked[i] else fill)


def test_grape_marked_pairs_follow_type_rules(pools):
    n = 400
    m1 = _charts(pools, 1, n).marked
    assert (np.abs(m1[:, 0] - m1[:, 1]) == 1).all() and (m1[:, 0] // 5 == m1[:, 1] // 5).all()
    m3 = _charts(pools, 3, n).marked
    assert (m3[:, 0] // 5 != m3[:, 1] // 5).all()
    assert (_charts(pools, 2, n).marked == [0, 5]).all()
    m4 = _charts(pools, 4, n).marked
    assert (m4[:, 0] < 5).all() and (m4[:, 1] >= 5).all() and (m4[:, 0] == m4[:, 1] - 5).any()
    m5 = _charts(pools, 5, n).marked
    assert (m5[:, 0] // 5 == m5[:, 1] // 5).all() and (np.abs(m5[:, 0] - m5[:, 1]) == 1).all()


def test_grape_stacks_and_target_measured_from_pixels(pools):
    """Heights read off the image (stroke rows) give the recorded target."""
    for t in (2, 4, 5):
        c = _charts(pools, t, 20)
        assert (c.heights.reshape(20, 2, 5).sum(axis=2).max(axis=1) >= 95).all()  # taller stack ~99 px
        for i in range(20):
            img = _img(c, i)
            stroke = c.stroke[i]
            heights = []
            for k in c.marked[i]:
                s, j = divmod(int(k), 5)
                x = 35 + 10 + s * 50 + 2  # inside the stack, off the dot column
                col = (img[:120, x] == stroke).all(axis=1)
                rows = np.flatnonzero(col)  # segment boundary rows, bottom-up
                boundaries = sorted(set(rows.tolist()) | {119}, reverse=True)
                heights.append(boundaries[j] - boundaries[j + 1])
            assert min(heights) / max(heights) == pytest.approx(c.target[i])
            # dots at the marked segments' centres
            for (x, y) in layout.dot_points(c, i):
                assert tuple(img[y + 20, x + 35]) == BLACK


def test_grape_colours_come_from_pools_with_contrast(pools):
    for t in (1, 2):
        for split in ("train", "test"):
            c = _charts(pools, t, 200, split=split)
            bg_set = {tuple(x) for x in pools.rgb["bg_color"]}
            bar_set = {tuple(x) for x in pools.rgb["bar_color"]}
            line_set = {tuple(x) for x in pools.rgb["line_color"]}
            assert {tuple(x) for x in c.background} <= bg_set
            assert {tuple(x) for x in c.fills.reshape(-1, 3)} <= bar_set
            assert {tuple(x) for x in c.stroke} <= line_set
            lb, lf, ls = (colours.grape_lightness(a) for a in (c.background, c.fills, c.stroke))
            if t == 1:
                assert (np.abs(lf[:, 0] - lb) > 5).mean() > 0.99
            else:
                # the first fill is always drawable; later ones often exhaust the 100 draws at the
                # training threshold 5 (7 colours 5 L* apart barely fit the pool), rarely at 2
                thr = grape.STACK_FILL_MIN_DIFF[split]
                assert (np.abs(lf[:, 0] - lb) >= thr).all()
                if split == "test":
                    every = np.concatenate([lb[:, None], lf], axis=1)
                    gaps = np.abs(every[:, :, None] - every[:, None, :])[:, ~np.eye(6, dtype=bool)]
                    assert (gaps >= thr).all(axis=1).mean() > 0.97
            assert (np.abs(ls - lb) > 2).mean() > 0.99


def test_grape_title_centred_and_text_in_margins(pools):
    c = _charts(pools, 1, 10)
    for i in range(10):
        img = _img(c, i).astype(int)
        ink = (np.abs(img - c.background[i]).sum(axis=2) > 0)
        rows, cols = np.nonzero(ink[:19, 30:])  # the title band, right of the "100" label
        cols = cols + 30
        assert abs((cols.min() + cols.max()) / 2 - 74.5) <= 1.5
        assert ink[135:150, 35:135].any()  # x-axis title
        assert ink[20:130, 0:20].any()  # y-axis title


def test_target_ratio_statistics_match_the_reference(pools):
    t = _charts(pools, 1, 20000).target
    assert 0.10 < t.min() < 0.13 and t.max() == 1.0
    assert abs(t.mean() - 0.6) < 0.03  # reference checklist: about 0.58 (0.11-1.00)


# -- OOD levels ------------------------------------------------------------------------------------

_FIELDS_OF = {
    "bar_width": {"bar_width", "bar_gap"}, "stroke_width": {"line_thickness", "bar_gap"},
    "bar_lightness": {"fills"}, "background_lightness": {"background"}, "stroke_lightness": {"stroke"},
    "dot_position": {"dot_bottom", "dot_offset"}, "title_position": {"title_left"},
    "title_font_size": {"title_size"}, "bar_length": {"values", "heights"},
}


@pytest.mark.parametrize("chart_type", [1, 2])
def test_each_ood_level_changes_only_its_parameter(sources, pools, chart_type):
    base = _charts(pools, chart_type, 30, split="test")
    fields = [f.name for f in grape._ARRAY_FIELDS]
    for lv in grape.perturbation_levels(sources, chart_type):
        out = grape.apply_settings(base, lv.settings, np.random.default_rng(1))
        changed = {f for f in fields if not np.array_equal(getattr(out, f), getattr(base, f), equal_nan=True)}
        assert changed and changed <= _FIELDS_OF[lv.parameter], (lv, changed)
        assert grape.level_value(lv.parameter, out, lv.settings) == lv.level
        if lv.parameter != "bar_length":
            assert np.array_equal(out.target, base.target)
        ims, ref = render.render(out), render.render(base)
        diff = (ims != ref).any(axis=3).any(axis=0)
        if lv.parameter in ("title_position", "title_font_size"):
            assert diff.any() and not diff[20:].any()  # only the title band
        if lv.parameter == "dot_position":
            assert diff[20:119, 35:135].sum() <= 4 * 30 and not diff[:20].any()


def test_bar_length_levels_draw_from_their_ranges(sources, pools):
    base = _charts(pools, 1, 200, split="test")
    for lv in grape.perturbation_levels(sources, 1):
        if lv.parameter != "bar_length":
            continue
        v = grape.apply_settings(base, lv.settings, np.random.default_rng(2)).values
        r = lv.settings["values.valueRange"]
        inside = ((v >= r[0]) & (v < r[1])) | (((v >= r[2]) & (v < r[3])) if len(r) == 4 else False)
        assert inside.all()


def test_build_grape_ood_stimuli_are_perturbed_twins(sources):
    ss = build_grape(sources, 0, chart_type=3, n_train=20, n_val=10, n_test=30, n_ood=5,
                     ood={"bar_width": [5], "title_position": [0.05, 0.95]})
    ood = [s for s in ss.test if s.manipulated_value]
    assert len(ood) == 15 and len(ss.test) == 45 and ss.response_space == "scalar"
    ids = {s.stimulus_id: s for s in ss.stimuli}
    for s in ood:
        twin = ids[s.meta["base_id"]]
        assert twin.manipulated_value is None and twin.split == "test"
        if s.manipulated_value["parameter"] == "title_position":
            a, b = np.asarray(s.image), np.asarray(twin.image)
            assert s.ground_truth == twin.ground_truth and (a[20:] == b[20:]).all() and (a != b).any()
    with pytest.raises(ValueError, match="no level"):
        build_grape(sources, 0, n_train=5, n_val=5, n_test=5, n_ood=1, ood={"bar_width": [7]})
    with pytest.raises(ValueError, match="unknown OOD parameter"):
        build_grape(sources, 0, n_train=5, n_val=5, n_test=5, n_ood=1, ood=["colour"])


# -- renderers ------------------------------------------------------------------------------------

def test_fast_renderer_equals_pil_imagedraw(sources, pools):
    for t in grape.CHART_TYPES:
        c = _charts(pools, t, 12, seed=t)
        variants = [c] + [grape.apply_settings(c, lv.settings, np.random.default_rng(0))
                          for lv in grape.perturbation_levels(sources, t)[::5]]
        for v in variants:
            fast = render.render(v)
            for i in range(0, len(v), 3):
                assert np.array_equal(fast[i], np.asarray(pil_reference.draw_grape(v, i))), (t, i)
    for t in grape.CHART_TYPES:
        hc = haehn.sample_haehn_splits(t, {"test": 20}, np.random.default_rng(t))["test"]
        fast = render.render(hc)
        for i in range(20):
            assert np.array_equal(fast[i], np.asarray(pil_reference.draw_haehn(hc, i)))


def test_lazy_image_equals_batch_render_and_mask_variant(sources):
    ss = build_grape(sources, 1, chart_type=2, n_train=6, n_val=2, n_test=6, n_ood=2, ood=["dot_position"],
                     mask=True)
    batch = render.render_stimuli(ss.test)
    assert batch.shape == (len(ss.test), 150, 150, 4)
    for j, s in enumerate(ss.test):
        im = s.image
        assert im.mode == "RGBA" and np.array_equal(np.asarray(im), batch[j])
        src = s.image_source
        mask = np.zeros((150, 150), bool)
        for x0, y0, x1, y1 in layout.target_boxes(src.charts, src.index):
            mask[y0:y1 + 1, x0:x1 + 1] = True
        assert np.array_equal(batch[j, ..., 3] == 255, mask) and mask.sum() > 0


def test_words_are_distinct_and_the_prompt_is_verbatim():
    assert len(set(WORDS)) == len(WORDS) > 200
    spec = TASKS["ratio.chart.grape_type1"]
    assert spec.readouts["predict"] == "regression" and spec.scoring == "mlae_vs_humans"


# -- Haehn -----------------------------------------------------------------------------------------

def test_haehn_cm_values_and_label_disjoint_splits():
    assert haehn.CM_VALUES.tolist() == [10, 12, 15, 18, 22, 26, 32, 38, 46, 56]
    for t in grape.CHART_TYPES:
        sp = haehn.sample_haehn_splits(t, {"train": 600, "val": 200, "test": 200}, np.random.default_rng(t))
        assert [len(sp[s]) for s in ("train", "val", "test")] == [600, 200, 200]
        labels = {s: set(sp[s].target.round(9)) for s in sp}
        assert not labels["train"] & labels["val"] and not labels["train"] & labels["test"] \
            and not labels["val"] & labels["test"]
        marked = np.take_along_axis(sp["train"].values, sp["train"].marked, axis=1)
        assert np.isin(marked, haehn.CM_VALUES).all() and (marked[:, 0] != marked[:, 1]).all()


def test_haehn_pixel_facts():
    for t, pair in ((1, (1, 2)), (3, (1, 6))):
        c = haehn.sample_haehn_splits(t, {"test": 10}, np.random.default_rng(0))["test"]
        im = render.render(c)
        assert im.shape == (10, 100, 100) and set(np.unique(im)) <= {0, 255}
        for i in range(10):
            for k, left in enumerate((2, 11, 20, 29, 38, 55, 64, 73, 82, 91)):
                d = int(c.values[i, k])
                assert (im[i, 99 - d:100, left] == 255).all() and (im[i, 99 - d:100, left + 7] == 255).all()
                assert (im[i, 99 - d, left:left + 8] == 255).all()  # top line
                inside = im[i, 100 - d:100, left + 1:left + 7]  # no bottom line; only the dot inside
                assert int(inside.sum()) == (255 if k in pair else 0)
                assert im[i, 94, left + 3] == (255 if k in pair else 0)
    c = haehn.sample_haehn_splits(2, {"test": 10}, np.random.default_rng(0))["test"]
    im = render.render(c)
    for i in range(10):
        for x in (10, 40, 60, 90):
            assert im[i, 99, x] == 255
        a, b = int(c.values[i, 0]), int(c.values[i, 5])
        assert im[i, 99 - a // 2, 25] == 255 and im[i, 99 - b // 2, 75] == 255
    c4 = haehn.sample_haehn_splits(4, {"test": 200}, np.random.default_rng(0))["test"]
    lo = c4.values[:, :4].sum(axis=1), c4.values[:, 5:9].sum(axis=1)
    assert (lo[0] != lo[1]).all() and (lo[0] + c4.values[:, 4] != lo[1] + c4.values[:, 9]).all()
    c5 = haehn.sample_haehn_splits(5, {"test": 200}, np.random.default_rng(0))["test"]
    assert (c5.marked == [3, 4]).all() and (c5.values[:, 3] + c5.values[:, 4] <= 81).all()


def test_haehn_noise_is_per_chart_and_small():
    c = haehn.sample_haehn_splits(1, {"test": 4}, np.random.default_rng(0), noise=True)["test"]
    all4 = render.render(c)
    assert np.array_equal(all4[2], render.render(c, [2])[0])
    clean = render.render(haehn.HaehnCharts(1, c.values, c.marked, c.noise_seed, False))
    assert (all4[clean == 0] <= 12).all() and (all4[clean == 255] >= 242).all() and all4[clean == 0].any()


# -- determinism -----------------------------------------------------------------------------------

def test_builds_are_deterministic_by_seed(sources):
    kw = dict(chart_type=4, n_train=8, n_val=4, n_test=8, n_ood=2, ood=["stroke_width"])
    a, b, c = (build_grape(sources, s, **kw) for s in (3, 3, 4))
    assert a.sha256 == b.sha256 != c.sha256
    h1, h2 = (build_haehn(sources, 5, chart_type=5, n_train=8, n_val=4, n_test=4) for _ in range(2))
    assert h1.sha256 == h2.sha256
    # a split's charts do not depend on the other splits' sizes
    d = build_grape(sources, 3, chart_type=4, n_train=3, n_val=1, n_test=8, n_ood=2, ood=["stroke_width"])
    assert [s.sha256 for s in d.test] == [s.sha256 for s in a.test]


def test_augmentation_mixture_members(sources):
    members = grape.mixture(sources, "barLength_barWidth", 1)
    assert len(members) == 5 and sum(s for s, _ in members) == pytest.approx(1)
    ss = build_grape(sources, 0, chart_type=1, n_train=300, n_val=10, n_test=5, n_ood=0, ood="none",
                     augment="barLength_barWidth")
    charts = ss.train[0].image_source.charts
    assert set(np.unique(charts.bar_width)) == {4, 5, 6, 7, 8}
    assert charts.values.min() < 10 and charts.values.max() > 92  # [1, 100)
    with pytest.raises(ValueError, match="bar chart types"):
        grape.mixture(sources, "barWidth", 2)


# -- Haehn type 1, GRAPE section IV-B's widened parameter space ----------------------------------

def _haehn_parts(sp):
    """(all values, all marked, marked values) over the splits of ``sp``."""
    values = np.concatenate([c.values for c in sp.values()]).astype(np.int64)
    marked = np.concatenate([c.marked for c in sp.values()]).astype(np.int64)
    return values, marked, np.take_along_axis(values, marked, axis=1)


def _unmarked(values, marked):
    keep = np.ones(values.shape, bool)
    np.put_along_axis(keep, marked, False, axis=1)
    return values[keep]


def _assert_label_disjoint(sp):
    labels = {s: set(sp[s].target.round(9)) for s in sp}
    assert not labels["train"] & labels["val"] and not labels["train"] & labels["test"] \
        and not labels["val"] & labels["test"]


def _assert_haehn_bar_pixels(im, c, i):
    """Outline of every bar at its value's height; the only ink inside a bar is the dot, and it
    sits (row 94, left edge + 3) on the marked bars only."""
    pair = set(c.marked[i].tolist())
    for k, left in enumerate(layout.HAEHN_BAR_LEFT):
        d = int(c.values[i, k])
        assert (im[99 - d:100, left] == 255).all() and (im[99 - d:100, left + 7] == 255).all()
        assert (im[99 - d, left:left + 8] == 255).all()
        inside = im[100 - d:100, left + 1:left + 7]
        assert int(inside.sum()) == (255 if k in pair else 0)
        assert im[94, left + 3] == (255 if k in pair else 0)


SIZES = {"train": 3000, "val": 1000, "test": 1000}


def test_haehn_cm20_values_marked_from_the_twenty_value_set():
    s20 = 10.0 ** (1 + np.arange(20) / 24)  # s'_i = 10^(1 + (i-1)/24), i = 1..20
    assert haehn.CM20_VALUES.tolist() == np.round(s20).astype(int).tolist() \
        == [10, 11, 12, 13, 15, 16, 18, 20, 22, 24, 26, 29, 32, 35, 38, 42, 46, 51, 56, 62]
    sp = haehn.sample_haehn_splits(1, SIZES, np.random.default_rng(1), values="cleveland-mcgill-20")
    assert {s: len(c) for s, c in sp.items()} == SIZES
    values, marked, mv = _haehn_parts(sp)
    assert (marked == [1, 2]).all()
    assert np.isin(mv, haehn.CM20_VALUES).all() and (mv[:, 0] != mv[:, 1]).all()
    assert set(mv.ravel().tolist()) == set(haehn.CM20_VALUES.tolist())  # all 20 occur
    assert not np.isin(mv, haehn.CM_VALUES).all(axis=1).all()  # not only the 10 C&M values
    rest = _unmarked(values, marked)
    assert rest.min() == 10 and rest.max() == 92
    _assert_label_disjoint(sp)


def test_haehn_random_values_for_every_bar():
    sp = haehn.sample_haehn_splits(1, SIZES, np.random.default_rng(2), values="random")
    values, marked, mv = _haehn_parts(sp)
    assert (marked == [1, 2]).all()
    assert mv.min() == 10 and mv.max() == 92 and len(np.unique(mv)) == 83  # every integer of [10, 93)
    assert (values >= 10).all() and (values <= 92).all()
    _assert_label_disjoint(sp)
    for c in sp.values():  # the target is the smaller over the larger marked value
        v = np.take_along_axis(c.values, c.marked, axis=1).astype(float)
        assert np.allclose(c.target, v.min(axis=1) / v.max(axis=1))


@pytest.mark.parametrize("values", ["cleveland-mcgill", "random"])
def test_haehn_adjacent_marked_pairs(values):
    sp = haehn.sample_haehn_splits(1, SIZES, np.random.default_rng(3), values=values, marked="adjacent")
    values_, marked, mv = _haehn_parts(sp)
    assert (marked[:, 1] == marked[:, 0] + 1).all()
    assert set(marked[:, 0].tolist()) == set(range(9))  # j = 1..9, the pair across the gap too
    if values == "cleveland-mcgill":
        assert np.isin(mv, haehn.CM_VALUES).all() and (mv[:, 0] != mv[:, 1]).all()
        assert (_unmarked(values_, marked) <= 92).all()
    _assert_label_disjoint(sp)


def test_haehn_option_charts_render_dots_on_the_marked_bars(sources):
    ss = build_haehn(sources, 0, chart_type=1, n_train=40, n_val=10, n_test=40, values="random",
                     marked="adjacent")
    charts = ss.test[0].image_source.charts
    im = render.render_stimuli(ss.test)
    assert im.shape == (40, 100, 100) and set(np.unique(im)) <= {0, 255}
    assert len(set(charts.marked[:, 0].tolist())) > 3
    for i, s in enumerate(ss.test):
        _assert_haehn_bar_pixels(im[i], charts, i)
        a, b = (int(charts.values[i, k]) for k in charts.marked[i])
        assert s.ground_truth == pytest.approx(min(a, b) / max(a, b))
        assert s.meta["values"] == "random" and s.meta["marked"] == "adjacent"
    assert np.array_equal(np.asarray(ss.test[5].image), im[5])  # the lazy image is the batch's
    # the PIL reference renderer draws the same from the marked indices
    assert np.array_equal(im[7], np.asarray(pil_reference.draw_haehn(charts, 7)))


def test_haehn_options_keep_defaults_and_change_hashes(sources):
    def rng():
        return np.random.default_rng(4)

    base = haehn.sample_haehn_splits(1, {"test": 50}, rng())["test"]
    explicit = haehn.sample_haehn_splits(1, {"test": 50}, rng(), values="cleveland-mcgill",
                                         marked="fixed")["test"]
    assert explicit.content_hash() == base.content_hash()
    hashes = {base.content_hash()}
    for values, marked in (("cleveland-mcgill-20", "fixed"), ("random", "fixed"),
                           ("random", "adjacent"), ("cleveland-mcgill", "adjacent")):
        hashes.add(haehn.sample_haehn_splits(1, {"test": 50}, rng(), values=values,
                                             marked=marked)["test"].content_hash())
    assert len(hashes) == 5
    a = build_haehn(sources, 0, n_train=8, n_val=4, n_test=8)
    b = build_haehn(sources, 0, n_train=8, n_val=4, n_test=8, values="cleveland-mcgill-20")
    assert "values" not in a.test[0].meta and b.test[0].meta["values"] == "cleveland-mcgill-20"
    assert render.content_key(a.test) != render.content_key(b.test) and a.sha256 != b.sha256


def test_haehn_options_are_checked():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="values='cm20' is not known"):
        haehn.sample_haehn_splits(1, {"test": 5}, rng, values="cm20")
    with pytest.raises(ValueError, match="marked='random' is not known"):
        haehn.sample_haehn_splits(1, {"test": 5}, rng, marked="random")
    with pytest.raises(ValueError, match="values='random' applies to chart type 1 only"):
        haehn.sample_haehn_splits(3, {"test": 5}, rng, values="random")
    with pytest.raises(ValueError, match="marked='adjacent' applies to chart type 1 only"):
        build_haehn(None, 0, chart_type=2, n_train=4, n_val=2, n_test=2, marked="adjacent")


def test_parameter_space_recipe_runs_the_four_steps_as_task_variants(sources, capsys):
    from harness.cli import main
    from harness.models.registry import build_adapter
    from harness.recipes import load_recipe
    from harness.run import build_stimsets, model_specs, plan
    from tests.conftest import REPO

    path = REPO / "recipes/bars-parameter-space.yaml"
    recipe = load_recipe(path)
    steps = {"baseline": ("cleveland-mcgill", "fixed"), "step_a": ("cleveland-mcgill-20", "fixed"),
             "step_b": ("random", "fixed"), "step_c": ("random", "adjacent")}
    ids = [f"ratio.chart.haehn_type1:{step}" for step in steps]
    (p,) = plan(recipe)
    assert recipe.name == "bars-parameter-space" and p.model.name == "resnet152"
    assert [(t.task_id, r) for t, r in p.tasks] == [(t, "regression") for t in ids]
    opts = recipe.models[0].options
    assert (opts["optimizer"], opts["lr"], opts["weight_decay"]) == ("adamw", 1e-3, 1e-2)
    assert recipe.task_options == {
        t: {"n_train": 60000, "n_val": 20000, "n_test": 20000, "values": v, "marked": m}
        for t, (v, m) in zip(ids, steps.values())}
    build_adapter(model_specs(recipe)[0])  # every option is one the cnn adapter knows
    # each step's stimuli, small: sizes overridden per variant on the command line
    small = {f"task_options.{t}.{k}": n for t in ids for k, n in (("n_train", "30"), ("n_val", "10"),
                                                                   ("n_test", "20"))}
    r = load_recipe(path, small)
    sets = build_stimsets(r, sources, ids)
    assert len({s.sha256 for s in sets.values()}) == 4
    for t, (values, marked) in zip(ids, steps.values()):
        ss = sets[t]
        charts = ss.test[0].image_source.charts
        assert ss.task_id == t and len(ss.test) == 20 and len(ss.train) == 40
        assert ((charts.marked[:, 1] - charts.marked[:, 0]) == 1).all()
        assert ((charts.marked == [1, 2]).all()) == (marked == "fixed")
        mv = np.take_along_axis(charts.values, charts.marked, axis=1)
        pool = {"cleveland-mcgill": haehn.CM_VALUES, "cleveland-mcgill-20": haehn.CM20_VALUES}
        if values in pool:
            assert np.isin(mv, pool[values]).all()
        else:
            assert not np.isin(mv, haehn.CM20_VALUES).all()
    # the dry run through the command line (fire keeps the ':' of the option names)
    capsys.readouterr()
    # the recipe asks for cuda: on a machine without a GPU the dry run refuses it unless told cpu
    main(["recipe", str(path), "--dry-run", f"--data.mirror={sources.mirror}", "--runtime.device=cpu",
          *(f"--{k}={v}" for k, v in small.items())])
    out = capsys.readouterr().out
    for t in ids:
        assert f"  {t}: readout regression, 20 test x 1 rep(s) = 20 trials, probe-train 40" in out


def test_levels_config_or_paper(sources, pools):
    """``levels: paper`` swaps in the paper's title, lightness and bar-length levels; every other
    parameter keeps the released config's levels."""
    config = {(lv.parameter, lv.level) for lv in grape.perturbation_levels(sources, 1, "config")}
    paper_levels = grape.perturbation_levels(sources, 1, "paper")
    paper = {(lv.parameter, lv.level) for lv in paper_levels}

    def by(levels, p):
        return sorted(lv for q, lv in levels if q == p)

    assert by(config, "title_position") == [0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95]
    assert by(paper, "title_position") == sorted(f"centre{d:+.2f}" for d in (-.45, -.3, -.15, .15, .3, .45))
    assert 5.0 in by(config, "background_lightness") and max(by(paper, "background_lightness")) < 0
    assert -5.0 in by(config, "stroke_lightness") and min(by(paper, "stroke_lightness")) > 0
    assert by(paper, "bar_length") == ["1-10", "1-10+94-101", "94-101"]
    for p in ("bar_width", "bar_lightness", "stroke_width", "dot_position", "title_font_size"):
        assert by(paper, p) == by(config, p)
    # the paper's title moves the centred title by a share of the width; its bar lengths reach 100
    base = _charts(pools, 1, 20)
    shifted = grape.apply_settings(base, next(lv.settings for lv in paper_levels if lv.level == "centre+0.30"),
                                   np.random.default_rng(0))
    for i in range(3):
        ops = [layout.grape_title_ops(c, i)[-1] for c in (base, shifted)]
        assert ops[1][4] - ops[0][4] in (44, 45, 46) and ops[1][5] == ops[0][5]  # 0.30 * 150 = 45 px right
    long = grape.apply_settings(base, {"values.valueRange": [94, 101]}, np.random.default_rng(0))
    assert long.values.min() >= 94 and long.values.max() == 100
    ss = build_grape(sources, 0, chart_type=1, n_train=2, n_val=2, n_test=4, n_ood=2,
                     ood=["title_position"], levels="paper")
    assert {s.manipulated_value["level"] for s in ss.test if s.manipulated_value} == \
        {f"centre{d:+.2f}" for d in (-.45, -.3, -.15, .15, .3, .45)}
    with pytest.raises(ValueError, match="levels must be one of"):
        build_grape(sources, 0, n_train=2, n_val=2, n_test=2, n_ood=1, levels="prose")


# -- the authors' own example chart -----------------------------------------------------------------

def test_authors_example_type1_chart_is_reproduced(sources):
    """GRAPE's IID type-1 example chart (top-left of fig_example.png), re-drawn from the
    parameters read off its pixels: every pixel outside the text boxes is identical, and every
    text (title, axis titles, tick labels) sits where the authors' code puts it."""
    from benchmarks.bars_example_agreement import example_type1_chart

    ex, charts = example_type1_chart(sources)
    assert charts.heights[0].tolist() == [22, 63, 41, 50, 57, 12, 31, 82, 71, 27]
    assert charts.marked[0].tolist() == [8, 9]
    ours = render.render(charts)[0].astype(int)
    text = np.zeros((150, 150), bool)
    for op in [*layout.static_ops(layout.static_key(charts, 0)), *layout.grape_title_ops(charts, 0)]:
        if op[0] == layout.TEXT:
            _, word, size, rotated, x, y = op
            l, t, r, b = layout.text_bbox(word, size)
            w, h = (b - t, r - l) if rotated else (r - l, b - t)
            text[y - 1:y + h + 1, x - 1:x + w + 1] = True  # a pixel of hinting either side
    diff = np.abs(ours - ex.astype(int)).max(axis=2)
    assert (diff[~text] == 0).all()
    for op in layout.static_ops(layout.static_key(charts, 0)):  # tick labels: Arial's digit cells
        if op[0] == layout.TEXT:
            _, label, size, _, x, y = op
            l, t, r, b = layout.text_bbox(label, size)
            assert (diff[y - 1:y + b - t + 1, x - 1:x + r - l + 1] == 0).all(), label
    # inside the words' boxes only the glyphs' rasterisation differs (Arimo vs Arial hinting):
    # the ink lies in the same boxes, with a similar amount of it
    ink_ex, ink_ours = 255 - ex.astype(int).mean(axis=2), 255 - ours.mean(axis=2)
    assert ink_ex[~text].sum() == pytest.approx(ink_ours[~text].sum())
    assert ink_ours[text].sum() == pytest.approx(ink_ex[text].sum(), rel=0.15)
    for word_box in (text[:20], text[130:], text[:, :14]):  # title, x-axis title, y-axis title bands
        assert word_box.any()


def test_the_audit_shows_this_renderer_s_agreement_with_the_example(sources):
    from pathlib import Path

    from benchmarks.bars_example_agreement import agreement_row

    audit = (Path(__file__).resolve().parents[1] / "docs" / "grape-generator-audit.md").read_text()
    assert agreement_row(sources) in audit, (
        "run: python benchmarks/bars_example_agreement.py and put its row in docs/grape-generator-audit.md")


# -- the renderer's version names its pixels -------------------------------------------------------

# Stimulus hashes (and so trial cache keys) name a chart by its parameters and RENDER_VERSION
# (render.ChartImage.content_hash), not by its pixels. Pixels of a fixed set of charts of every
# generator and type, per renderer version: a change of any pixel must come with a new version.
PIXELS = {"1": "56db099577bad43f603002708c3fa0bf8992daaeb2e5c6d872f22ec8766390d2",
          "2": "a79c4f5493f384409852857b07dc3163190c3983cc3654541f10ecb54fa748e0",
          "3": "5c77a06efb9b79b889a0c9239f1be5be399e6d7d3ecf95d4b3fe326657ebce5d"}


def test_render_version_pins_the_pixels(sources, pools):
    import hashlib

    h = hashlib.sha256()
    for t in grape.CHART_TYPES:
        for split in ("train", "test"):
            h.update(render.render(_charts(pools, t, n=6, seed=7, split=split), mask=t == 1).tobytes())
        h.update(render.render(haehn.sample_haehn_splits(t, {"train": 6}, np.random.default_rng(7),
                                                         noise=t == 2)["train"]).tobytes())
    assert PIXELS.get(layout.RENDER_VERSION) == h.hexdigest(), (
        "rendered pixels changed: bump RENDER_VERSION in harness/stimuli/bars/layout.py and pin the "
        f"new digest {h.hexdigest()} here")


def test_chart_stimuli_hash_by_parameters(sources):
    a = build_grape(sources, 0, chart_type=1, n_train=4, n_val=2, n_test=4, n_ood=2, ood=["bar_width"])
    b = build_grape(sources, 0, chart_type=1, n_train=4, n_val=2, n_test=4, n_ood=2, ood=["bar_width"])
    assert [s.sha256 for s in a.stimuli] == [s.sha256 for s in b.stimuli]
    assert len({s.sha256 for s in a.stimuli}) == len(a.stimuli)  # every chart named apart
    twin = next(s for s in a.test if s.manipulated_value)
    base = next(s for s in a.test if s.stimulus_id == twin.meta["base_id"])
    assert twin.image_source.content_hash() != base.image_source.content_hash()
    masked = build_grape(sources, 0, chart_type=1, n_train=4, n_val=2, n_test=4, n_ood=2, ood=["bar_width"],
                         mask=True)
    assert masked.test[0].sha256 != a.test[0].sha256  # the mask channel is seen by the model


def test_chart_hashes_equal_one_chart_content_hashes(pools):
    """The per-chart hashes computed together (what names a chart stimulus, and so its trials'
    cache keys) are exactly the hash of a set holding that one chart, for every field and type."""
    sets = [_charts(pools, t, n=9, seed=3, split=split) for t in grape.CHART_TYPES for split in ("train", "test")]
    sets += [haehn.sample_haehn_splits(t, {"train": 9}, np.random.default_rng(3), noise=t == 2)["train"]
             for t in grape.CHART_TYPES]
    for charts in sets:
        expected = [charts.take([i]).content_hash() for i in range(len(charts))]
        assert charts.chart_hashes == expected
        assert len(set(expected)) == len(charts)
    one = render.ChartImage(sets[0], 4, mask=True)
    assert one.content_hash() != render.ChartImage(sets[0], 4).content_hash()
