"""MLAE forms, percent vs fraction, Delta-MLAE, tests, Grad-CAM IoU and the mlae_vs_humans scorer."""

from __future__ import annotations

import subprocess
import sys
from itertools import permutations

import numpy as np
import pytest

from harness.scores import mlae as M
from harness.scores.tasks import get_scorer
from harness.stimuli.bars import haehn
from harness.stimuli.bars.tasks import build_grape, build_haehn
from harness.scores.tasks import Bootstrap


def test_log_abs_error_hand_worked():
    # |50 - 25| = 25 points -> log2(25.125); a perfect answer -> log2(1/8) = -3
    assert M.log_abs_error([0.5], [0.25], scale="fraction")[0] == pytest.approx(np.log2(25.125))
    assert M.log_abs_error([0.3], [0.3], scale="fraction")[0] == -3.0
    assert M.log_abs_error([30.0], [30.0], scale="percent")[0] == -3.0
    # 1 point off: log2(1.125)
    assert M.log_abs_error([0.41], [0.40], scale="fraction")[0] == pytest.approx(np.log2(1.125))


def test_percent_and_fraction_agree_and_mixups_are_caught():
    e, t = np.array([0.5, 0.2, 0.9]), np.array([0.25, 0.3, 0.9])
    for form in ("grape", "cleveland_mcgill", "haehn"):
        assert M.mlae(e, t, scale="fraction", form=form) == pytest.approx(
            M.mlae(e * 100, t * 100, scale="percent", form=form))
    with pytest.raises(ValueError, match="percent"):
        M.log_abs_error([50.0], [25.0], scale="fraction")
    with pytest.raises(ValueError, match="scale"):
        M.log_abs_error([0.5], [0.25], scale="ratio")


def test_midmean_of_eight_values():
    # sorted 1..8: the middle four (3, 4, 5, 6) -> 4.5, as GRAPE's Eq. 1 with n = 8
    assert M.midmean(np.array([8, 1, 7, 2, 6, 3, 5, 4.0])) == pytest.approx(4.5)
    # outliers in the outer quarters do not count
    assert M.midmean(np.array([-100, -50, 10, 10, 10, 10, 500, 900.0])) == pytest.approx(10.0)
    # n = 6: quartiles at 1.5 and 4.5 -> (0.5*2 + 3 + 4 + 0.5*5) / 3
    assert M.midmean(np.arange(1, 7.0)) == pytest.approx((1 + 3 + 4 + 2.5) / 3)
    # vectorised over rows, as the bootstrap uses it
    rows = np.array([[8, 1, 7, 2, 6, 3, 5, 4.0], [1, 1, 1, 1, 2, 2, 2, 2.0]])
    assert np.allclose(M.midmean(rows, axis=-1), [4.5, 1.5])


def test_three_forms_hand_worked():
    t = np.zeros(8)
    e = np.array([1, 2, 3, 4, 5, 6, 7, 8]) / 100  # errors 1..8 points
    lae = np.log2(np.arange(1, 9) + 0.125)
    assert M.mlae(e, t, scale="fraction", form="grape") == pytest.approx(lae.mean())
    assert M.mlae(e, t, scale="fraction", form="cleveland_mcgill") == pytest.approx(lae[2:6].mean())
    assert M.mlae(e, t, scale="fraction", form="haehn") == pytest.approx(np.log2(4.5 + 0.125))


def test_bootstrap_ci_and_chance_floor():
    rng = np.random.default_rng(0)
    t = rng.uniform(0.1, 1, 500)
    e = t + rng.normal(0, 0.03, 500)
    v, lo, hi = M.mlae_ci(e, t, scale="fraction", form="grape", seed=3)
    assert lo < v < hi and hi - lo < 0.5
    assert (v, lo, hi) == M.mlae_ci(e, t, scale="fraction", form="grape", seed=3)
    # Haehn: random guessing gives an MLAE of "about 4.7" (his form) on his 90 ordered value pairs
    cm = haehn.CM_VALUES.tolist()
    pairs = np.array([min(a, b) / max(a, b) for a, b in permutations(cm, 2)])
    assert 4.6 < M.chance_mlae(np.repeat(pairs, 20), scale="fraction", form="haehn") < 5.0


def test_delta_deviation_normality_and_ttests():
    iid = np.array([1.0, 2.0, 3.0, 4.0])
    ood = np.array([2.0, 1.0, 5.0, 4.0])
    assert M.paired_delta(ood, iid)[0] == pytest.approx(0.5)  # (1 - 1 + 2 + 0) / 4
    assert M.paired_delta(ood, iid, absolute=True)[0] == pytest.approx(1.0)
    rng = np.random.default_rng(1)
    assert M.normality(rng.normal(size=500))[1] > 0.01
    assert M.normality(rng.exponential(size=500))[1] < 1e-6
    same = rng.normal(size=50)
    tests = M.deviation_ttests({"a": same, "b": same.copy(), "c": same + 3})
    by = {(x["a"], x["b"]): x for x in tests}
    assert by[("a", "b")]["p"] == pytest.approx(1.0) and by[("a", "c")]["p"] < 1e-10
    assert by[("a", "b")]["df"] == 98


def test_resize_bilinear_matches_torch():
    torch = pytest.importorskip("torch")
    heat = np.random.default_rng(0).random((7, 9))
    ours = M.resize_bilinear(heat, (150, 150))
    ref = torch.nn.functional.interpolate(torch.from_numpy(heat)[None, None], size=(150, 150),
                                          mode="bilinear", align_corners=False)[0, 0].numpy()
    assert np.allclose(ours, ref, atol=1e-9)


def test_gradcam_iou_threshold():
    mask = np.zeros((10, 10), bool)
    mask[2:5, 2:5] = True
    assert M.gradcam_iou(mask.astype(float), mask) == 1.0
    assert M.gradcam_iou((~mask).astype(float), mask) == 0.0
    heat = np.zeros((10, 10))
    heat[2:5, 2:5] = 0.7  # 0.7 * 255 = 178.5 < 200: below GRAPE's threshold
    heat[0, 0] = 1.0
    assert M.gradcam_iou(heat, mask) == 0.0
    assert M.gradcam_iou(heat, mask, threshold=150) == pytest.approx(9 / 10)


def test_scores_stage_never_imports_torch():
    code = "import sys, harness.scores.mlae; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the scorer --------------------------------------------------------------------------------

def _records(stimset, respond, prompt=False):
    out = []
    for s in stimset.test:
        r = respond(s)
        out.append({"stimulus_id": s.stimulus_id, "response": r, "ground_truth": s.ground_truth,
                    "parse_status": "ok" if r is not None else "null:no_number",
                    "manipulated_value": s.manipulated_value,
                    "prompt_id": stimset.prompt.prompt_id if prompt else None})
    return out


@pytest.fixture(scope="module")
def grape_set(sources):
    return build_grape(sources, 0, chart_type=1, n_train=4, n_val=2, n_test=80, n_ood=40,
                       ood={"bar_width": [5], "title_position": [0.05], "background_lightness": [-25.0]})


def test_scorer_perfect_and_human_references(grape_set, sources):
    scorer = get_scorer("mlae_vs_humans")
    scores = {s.name: s for s in scorer(_records(grape_set, lambda s: s.ground_truth), grape_set)}
    for name in ("mlae", "mlae_midmean", "mlae_haehn"):
        assert scores[name].value == pytest.approx(-3.0) and scores[name].n == 80 and scores[name].nulls == 0
        assert scores[name].floor > 3.5 and scores[name].ceiling is None
    standard = grape_set.human.standard
    assert scores["mlae"].extra["human"]["grape_user_study"]["mlae"] == standard.mlae
    assert "midmean" in scores["mlae_midmean"].method and "user study" in scores["mlae"].method
    assert scores["mlae_midmean"].extra["human"]["cleveland_mcgill_1984"]["mlae"] == 1.40
    assert scores["mlae_minus_human"].value == pytest.approx(-3.0 - 1.391)
    assert scores["mlae_midmean_minus_human"].value == pytest.approx(-3.0 - 1.40)
    assert scores["ood.bar_width.5.delta_mlae"].value == 0.0
    bw = scores["ood.bar_width.5.mlae"].extra["human"]["grape_user_study"]
    assert bw["condition"] == "Bar width"


def test_scorer_noisy_percent_answers_nulls_and_deltas(grape_set):
    rng = np.random.default_rng(0)
    noise = {s.stimulus_id: rng.normal(0, 0.05) for s in grape_set.test if not s.manipulated_value}

    def respond(s):
        if s.stimulus_id.endswith("000003"):
            return None  # unparseable answers are nulls, never errors
        worse = 0.1 if (s.manipulated_value or {}).get("parameter") == "background_lightness" else 0.0
        # a prompt model's percent; a perturbed chart gets its IID twin's error (+ worse)
        return 100 * (s.ground_truth + noise[s.meta.get("base_id", s.stimulus_id)] + worse)

    scores = {s.name: s for s in get_scorer("mlae_vs_humans")(_records(grape_set, respond, prompt=True),
                                                               grape_set)}
    est = np.array([noise[s.stimulus_id] for s in grape_set.test if not s.manipulated_value
                    and not s.stimulus_id.endswith("000003")])
    assert scores["mlae"].value == pytest.approx(np.log2(100 * np.abs(est) + 0.125).mean())
    assert scores["mlae"].nulls == 1 and scores["mlae"].n == 79
    assert scores["ood.title_position.0.05.delta_mlae"].value == pytest.approx(0.0, abs=1e-9)
    assert scores["ood.background_lightness.-25.0.delta_mlae"].value > 1.0
    assert scores["ood.background_lightness.-25.0.deviation"].value >= \
        scores["ood.background_lightness.-25.0.delta_mlae"].value
    assert "human_delta_mlae" in scores["ood.background_lightness.-25.0.delta_mlae"].extra
    assert 0 <= scores["lae_normality_p"].value <= 1
    tt = scores["deviation_ttests_significant"]
    assert tt.n == 3 and len(tt.extra["tests"]) == 3 and tt.value >= 1 / 3


def test_scorer_gradcam_iou_from_extras(sources):
    ss = build_haehn(sources, 0, chart_type=1, n_train=4, n_val=2, n_test=12)
    recs = _records(ss, lambda s: s.ground_truth)
    from harness.stimuli.bars.render import target_masks
    for r, s in zip(recs, ss.test):
        mask = target_masks(s.image_source.charts, [s.image_source.index])[0]
        small = mask.reshape(25, 4, 25, 4).mean(axis=(1, 3))  # a CAM that sees exactly the bars
        r["extras"] = {"gradcam": {"shape": [25, 25], "values": small.ravel().tolist()}}
    scores = {s.name: s for s in get_scorer("mlae_vs_humans")(recs, ss)}
    assert scores["gradcam_iou"].n == 12 and scores["gradcam_iou"].value > 0.5
    # Haehn's stimuli are compared with Cleveland & McGill's and Heer & Bostock's people only
    assert "mlae_minus_human" not in scores and "human" not in scores["mlae"].extra
    assert scores["mlae_midmean_minus_human"].extra["human_reference"] == "cleveland_mcgill_1984"


def _authors_folder(tmp_path, sources, n=24):
    """A test set in the layout GRAPE's generator writes (input/*.png, target/*.json = [ratio]);
    drawn here by gestalt's renderer, standing in for the authors' rendered charts."""
    from PIL import Image

    from harness.stimuli.bars import colours, grape, render

    charts = grape.sample_grape(1, n, np.random.default_rng(5), colours.load_pools(sources), "test")
    (tmp_path / "input").mkdir()
    (tmp_path / "target").mkdir()
    for i, (img, t) in enumerate(zip(render.render(charts), charts.target.tolist())):
        Image.fromarray(img).save(tmp_path / "input" / f"bar_type1_{i}.png")
        (tmp_path / "target" / f"bar_type1_{i}.json").write_text(f"[{t}]")
    (tmp_path / "target" / "bar_type1_0_r.json").write_text("[2.0]")  # the generator's other outputs
    return tmp_path


def test_authors_rendered_charts_are_scored_beside_the_iid_charts(tmp_path, sources):
    folder = _authors_folder(tmp_path, sources)
    ss = build_grape(sources, 0, chart_type=1, n_train=4, n_val=2, n_test=40, n_ood=2, ood="none",
                     authors_test=str(folder))
    authors = [s for s in ss.test if s.manipulated_value]
    assert len(authors) == 24 and [s.meta["file"] for s in authors[:3]] == [
        "bar_type1_0.png", "bar_type1_1.png", "bar_type1_2.png"]
    assert authors[0].image.size == (150, 150) and 0 < authors[0].ground_truth <= 1

    def respond(s):  # off by 2 points on the authors' charts, by 1 on gestalt's
        return s.ground_truth + (0.02 if s.manipulated_value else 0.01)

    scores = {s.name: s for s in get_scorer("mlae_vs_humans")(_records(ss, respond), ss, boot=Bootstrap(seed=0))}
    assert scores["mlae"].n == 40 and scores["rendered_by.grape-authors.mlae"].n == 24
    gap = scores["rendered_by.grape-authors.mlae_gap"]
    assert gap.value == pytest.approx(np.log2(2.125) - np.log2(1.125))
    assert gap.ci_low <= gap.value <= gap.ci_high
    assert not any(n.startswith("ood.") for n in scores)


def test_authors_test_set_bad_input_names_the_file(tmp_path, sources):
    from harness.sources import DataError

    folder = _authors_folder(tmp_path, sources, n=3)
    (folder / "target" / "bar_type1_1.json").unlink()
    with pytest.raises(DataError, match="bar_type1_1.json"):
        build_grape(sources, 0, n_train=2, n_val=2, n_test=2, n_ood=1, ood="none", authors_test=str(folder))
    with pytest.raises(DataError, match="input/ and target/"):
        build_grape(sources, 0, n_train=2, n_val=2, n_test=2, n_ood=1, ood="none",
                    authors_test=str(folder / "input"))
    with pytest.raises(ValueError, match="no target mask"):
        build_grape(sources, 0, n_train=2, n_val=2, n_test=2, n_ood=1, ood="none", mask=True,
                    authors_test=str(folder))


# -- the difference with people carries both sides' uncertainty ----------------------------------

def test_minus_human_combines_the_model_and_the_published_human_interval_in_quadrature():
    human = {"mlae": 1.391, "ci_low": 1.011, "ci_high": 1.771}
    value, lo, hi, clause = M.minus_human(-0.378, -0.445, -0.308, human)
    assert value == pytest.approx(-1.769)
    # low end: the model's lower half-width with people's upper one (a larger human MLAE lowers
    # the difference); high end the other two
    assert lo == pytest.approx(-1.769 - np.hypot(0.067, 0.380))
    assert hi == pytest.approx(-1.769 + np.hypot(0.070, 0.380))
    assert "quadrature" in clause and "published" in clause
    # no published human interval: the model's interval shifted, and the clause says so
    value, lo, hi, clause = M.minus_human(-0.378, -0.445, -0.308, {"mlae": 1.391})
    assert (lo, hi) == pytest.approx((-0.445 - 1.391, -0.308 - 1.391))
    assert "model side only" in clause


def test_minus_human_scores_are_as_wide_as_people_s_published_interval(grape_set):
    scores = {s.name: s for s in get_scorer("mlae_vs_humans")(_records(grape_set, lambda s: s.ground_truth),
                                                              grape_set)}
    # a perfect answerer's MLAE is exactly -3 on every draw: the whole width is people's
    us, cm = grape_set.human.standard, grape_set.human.cleveland_mcgill_1984
    for name, h in (("mlae_minus_human", us), ("mlae_midmean_minus_human", cm)):
        s = scores[name]
        assert s.ci_low == pytest.approx(-3.0 - h.ci_high) and s.ci_high == pytest.approx(-3.0 - h.ci_low), name
        assert "quadrature" in s.method and "bootstrap over test charts" in s.method, name


def test_every_mlae_interval_names_what_it_resamples_and_that_seeds_are_not_in_it(grape_set):
    from harness.scores.bootstrap import interval_methods

    rng = np.random.default_rng(1)
    scores = get_scorer("mlae_vs_humans")(
        _records(grape_set, lambda s: float(np.clip(s.ground_truth + rng.normal(0, 0.05), 0, 1))), grape_set,
        boot=Bootstrap(n_boot=200))
    with_interval = [s for s in scores if s.ci_low is not None]
    assert {s.name for s in with_interval} >= {"mlae", "mlae_minus_human", "ood.bar_width.5.delta_mlae"}
    for s in with_interval:
        (clause, *_) = interval_methods([s]) or [""]
        assert "over" in clause and "charts" in clause and "draws" in clause, (s.name, s.method)
    for name in ("mlae", "mlae_midmean", "mlae_haehn", "mlae_minus_human"):
        assert "one training seed" in next(s for s in scores if s.name == name).method, name


def test_gradcam_iou_names_its_resampling(sources):
    ss = build_haehn(sources, 0, chart_type=1, n_train=4, n_val=2, n_test=12)
    recs = _records(ss, lambda s: s.ground_truth)
    for r in recs:
        r["extras"] = {"gradcam": {"shape": [2, 2], "values": [0.0, 1.0, 0.0, 1.0]}}
    (iou,) = [s for s in get_scorer("mlae_vs_humans")(recs, ss, boot=Bootstrap(n_boot=150)) if s.name == "gradcam_iou"]
    assert "percentile bootstrap over charts, 150 draws" in iou.method
