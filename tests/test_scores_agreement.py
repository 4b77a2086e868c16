"""Metrics against hand-worked examples, and the human ceilings recomputed independently from sources."""

import glob
import itertools
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from harness.scores.agreement import (
    compare_models,
    error_consistency,
    human_loo_kappa_stat,
    human_loo_modal_agreement,
    human_pairwise_kappa_stat,
    kappa_pairwise_stat,
    kappa_stat,
    mean_stat,
    null_bracket,
    score_classification_vs_observers,
)
from harness.scores.bootstrap import bootstrap, paired_difference
from harness.scores.tasks import Bootstrap

ALL = lambda n: np.arange(n)[None, :]  # noqa: E731  (the point-estimate index matrix)


def test_kappa_hand_worked_binary():
    # m = 1,1,0,0 ; h = 1,0,0,0: c_obs = 3/4, a_m = 1/2, a_h = 1/4,
    # c_exp = 1/2*1/4 + 1/2*3/4 = 1/2, kappa = (3/4 - 1/2) / (1/2) = 1/2
    assert error_consistency([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.5)


def test_kappa_hand_worked_probabilistic_reference():
    # m = 1,0 ; p = 0.8,0.4: c_obs = (0.8 + 0.6)/2 = 0.7, a_m = .5, a_h = .6, c_exp = .3 + .2 = .5
    assert error_consistency([1, 0], [0.8, 0.4]) == pytest.approx((0.7 - 0.5) / 0.5)


def test_kappa_perfect_disagreement_and_agreement():
    assert error_consistency([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
    assert error_consistency([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)


@pytest.mark.parametrize("m,h", [([1, 1, 1], [1, 1, 1]), ([0, 0], [0, 0])])
def test_kappa_c_exp_one_is_defined_as_zero(m, h):
    # all correct (or all wrong) on both sides: c_exp = 1, no error to be consistent on -> 0, no 0/0
    with np.errstate(all="raise"):
        assert error_consistency(m, h) == 0.0


def test_kappa_pairwise_equals_mean_of_per_observer_kappas():
    m = np.array([1, 0, 1, 1, 0, 1])
    obs = np.array([[1, 0, 1, 0, 0, 1], [1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 0, 1]])
    expected = np.mean([error_consistency(m, o) for o in obs])
    assert kappa_pairwise_stat(m, obs)(ALL(6))[0] == pytest.approx(expected)
    # c_obs is linear in h, so the aggregate form differs only through the chance term
    assert kappa_stat(m, obs.mean(0))(ALL(6))[0] != pytest.approx(expected)


def test_accuracy_and_B_are_means_and_bracket():
    assert mean_stat([1, 0, 1, 1])(ALL(4))[0] == pytest.approx(0.75)
    lo, hi = null_bracket(0.8, 0.1)
    assert (lo, hi) == pytest.approx((0.72, 0.82))


def test_bootstrap_is_seeded_vectorised_and_brackets_the_value():
    x = np.r_[np.ones(30), np.zeros(10)]
    v1 = bootstrap(mean_stat(x), 40, 1000, seed=3)
    v2 = bootstrap(mean_stat(x), 40, 1000, seed=3)
    assert v1 == v2 and v1[1] < v1[0] == 0.75 < v1[2]
    y = np.random.default_rng(1).random(40)  # continuous, so another seed moves the bounds
    assert bootstrap(mean_stat(y), 40, 1000, seed=4) != bootstrap(mean_stat(y), 40, 1000, seed=3)


def test_paired_difference_is_tighter_than_marginals():
    rng = np.random.default_rng(0)
    base = rng.random(200) < 0.7
    a = base.astype(float)
    b = a.copy()
    b[:10] = 1 - b[:10]  # b differs from a on 10 items only
    d, lo, hi = paired_difference(mean_stat(a), mean_stat(b), 200, 1000, seed=0)
    _, alo, ahi = bootstrap(mean_stat(a), 200, 1000, seed=0)
    assert d == pytest.approx(a.mean() - b.mean())
    assert (hi - lo) < (ahi - alo) / 2
    assert compare_models(a, b)[0] == pytest.approx(d)
    with pytest.raises(ValueError):
        compare_models(a, b[:-1])


def test_loo_modal_agreement_counts_ties_as_expected_value():
    # item 1: others of observer 0 are (a, b): tie -> 1/2 for 'a'; observer 1 vs (a, b)... etc.
    responses = [["a", "a", "b"]]
    # obs0 'a' vs others [a,b] tie -> 0.5 ; obs1 'a' vs [a,b] -> 0.5 ; obs2 'b' vs [a,a] -> 0
    assert human_loo_modal_agreement(responses) == pytest.approx(1 / 3)
    assert human_loo_modal_agreement([["a", "na", "a"]]) == pytest.approx(1.0)


# -- published-data facts and ceilings, recomputed from the raw CSVs without the harness --------

def _raw(mirror):
    files = sorted(glob.glob(str(mirror / "geirhos-silhouettes/raw-data/silhouette-filled-experiment/*subject-*.csv")))
    df = pd.concat([pd.read_csv(f, keep_default_na=False) for f in files])
    df["image"] = df.imagename.str.rsplit("_", n=1).str[-1].str.replace(".png", "", regex=False)
    df["number"] = df.image.str.extract(r"(\d+)$").astype(int)
    return df


def _cohen(a, b):
    po = np.mean(a == b)
    pe = a.mean() * b.mean() + (1 - a.mean()) * (1 - b.mean())
    return (po - pe) / (1 - pe)


def test_published_data_facts(sources):
    from tests.conftest import MIRROR

    df = _raw(MIRROR)
    assert df.subj.nunique() == 10
    assert len(df) == 1600
    assert (df.object_response == "na").sum() == 22
    per_subject = df.groupby("subj").object_response.apply(lambda s: (s == "na").sum()).tolist()
    assert per_subject == [0, 5, 0, 0, 2, 4, 2, 4, 3, 2]


def test_human_ceiling_matches_independent_recomputation(sources):
    from harness.stimuli.silhouette import build
    from tests.conftest import MIRROR

    df = _raw(MIRROR)
    test = df[df.number >= 6].copy()
    test["correct"] = (test.object_response == test.category).astype(float)
    wide = test.pivot(index="subj", columns="image", values="correct")
    pair = np.mean([_cohen(wide.loc[a].values, wide.loc[b].values)
                    for a, b in itertools.combinations(wide.index, 2)])
    assert len(list(itertools.combinations(wide.index, 2))) == 45
    assert pair == pytest.approx(0.4925, abs=5e-4)  # SPEC 3.1

    stimset = build(sources)
    oc = stimset.human.correct
    assert oc.shape == (10, 80)
    harness_pair = human_pairwise_kappa_stat(oc)(ALL(80))[0]
    assert round(harness_pair, 3) == round(pair, 3)
    # each observer vs the leave-one-out mean of the other nine (the paper's 0.487 convention)
    loo = np.mean([error_consistency(wide.loc[s].values, wide.drop(index=s).values.mean(0))
                   for s in wide.index])
    assert human_loo_kappa_stat(oc)(ALL(80))[0] == pytest.approx(loo, abs=1e-9)


def test_silhouette_scorer_on_a_perfect_and_a_modal_model(sources):
    from harness.stimuli.silhouette import build

    stimset = build(sources)

    def records(answer):
        return [{"stimulus_id": s.stimulus_id, "response": answer(s), "parse_status": "ok"}
                for s in stimset.test]

    truth = {s.name: s for s in score_classification_vs_observers(records(lambda s: s.ground_truth), stimset,
                                                                 boot=Bootstrap(n_boot=200, n_boot_kappa=200))}
    assert truth["accuracy"].value == 1.0
    assert truth["kappa"].value == 0.0  # all correct: c_exp = 1 -> defined as 0
    assert truth["kappa"].floor == 0.0 and truth["accuracy"].floor == pytest.approx(1 / 16)
    modal = {s.name: s for s in score_classification_vs_observers(records(lambda s: s.human_target), stimset,
                                                                 boot=Bootstrap(n_boot=200, n_boot_kappa=200))}
    assert modal["B"].value == 1.0
    assert modal["kappa"].ceiling == pytest.approx(0.4925, abs=5e-4)
    # nulls are excluded and counted, and B is bracketed
    recs = records(lambda s: s.human_target)
    for r in recs[:8]:
        r.update(response=None, parse_status="null:no_label")
    boot = Bootstrap(n_boot=200, n_boot_kappa=200)
    scored = {s.name: s for s in score_classification_vs_observers(recs, stimset, boot=boot)}
    assert scored["B"].n == 72 and scored["B"].nulls == 8
    assert scored["B"].extra["B_full_low"] == pytest.approx(0.9)
    assert scored["B"].extra["B_full_high"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no record"):
        score_classification_vs_observers(recs[1:], stimset)


def test_scores_never_import_torch():
    code = ("import sys, harness.scores.agreement, harness.scores.bootstrap, harness.scores.tasks; "
            "import harness.scores.record; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_two_level_kappas_of_a_full_cue_conflict_panel_stay_in_bounded_memory():
    """1,200 images x 10 observers x 2,000 draws (the full cue-conflict set): the observer-pair
    arrays are made a block of draws at a time (all at once they took 2.8 GB), with the values of
    one pass over every draw."""
    import tracemalloc
    from itertools import combinations

    from harness.scores.agreement import (_kappa, human_pairwise_kappa_stat, observer_indices,
                                          two_level_pairwise_kappa)
    from harness.scores.bootstrap import bootstrap, resample_indices

    rng = np.random.default_rng(0)
    h = (rng.random((10, 1200)) < 0.8).astype(float)
    items, observers = resample_indices(1200, 2000, 0), observer_indices(10, 2000, 0)
    tracemalloc.start()
    try:
        draws = two_level_pairwise_kappa(h, items, observers)
        ceiling = bootstrap(human_pairwise_kappa_stat(h), 1200, 2000, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 300e6, f"{peak / 1e6:.0f} MB"
    a, b = (np.array(x) for x in zip(*combinations(range(10), 2)))
    hs = h[observers[:40, :, None], items[:40, None, :]]
    valid = observers[:40, a] != observers[:40, b]
    whole = (_kappa(hs[:, a], hs[:, b]) * valid).sum(axis=1) / valid.sum(axis=1)
    assert np.array_equal(draws[:40], whole)
    assert ceiling[0] == human_pairwise_kappa_stat(h)(np.arange(1200)[None])[0]
