"""Series-count scorer: accuracy, MAE, a(k), capacity against the 6-12 band."""

import numpy as np
import pytest

from harness.scores.capacity import capacity, score_capacity, stratified_indices
from harness.scores.tasks import get_scorer
from harness.stimuli import series_count


@pytest.fixture(scope="module")
def stimset():
    return series_count.build(None, seed=0, n_train=0)


def records(stimset, respond, null_ids=()):
    out = []
    for s in stimset.test:
        null = s.stimulus_id in null_ids
        out.append({"stimulus_id": s.stimulus_id, "parse_status": "null:no_number" if null else "ok",
                    "response": None if null else respond(s.ground_truth),
                    "option_order": None})
    return out


def by_name(scores):
    return {s.name: s for s in scores}


def test_registered():
    assert get_scorer("capacity") is score_capacity


def test_oracle_is_censored_at_the_top(stimset):
    s = by_name(score_capacity(records(stimset, lambda k: k), stimset))
    assert s["accuracy"].value == 1.0 and s["mae"].value == 0.0
    assert s["accuracy"].floor == pytest.approx(2 / 40)
    assert s["capacity"].value == 20 and s["capacity"].extra["censored"]
    assert s["capacity_in_band"].value == 0.0
    assert [n for n in s if n.startswith("a_k")] == [f"a_k{k:02d}" for k in range(1, 21)]
    assert all(s[f"a_k{k:02d}"].value == 1.0 and s[f"a_k{k:02d}"].n == 2 for k in range(1, 21))


@pytest.mark.parametrize("limit, in_band", [(8, True), (4, False), (12, True), (13, False)])
def test_capacity_is_the_last_k_before_the_fall(stimset, limit, in_band):
    s = by_name(score_capacity(records(stimset, lambda k: k if k <= limit else k - 1), stimset))
    assert s["capacity"].value == limit and not s["capacity"].extra["censored"]
    assert s["capacity"].ci_low == s["capacity"].ci_high == limit  # each level all right or all wrong
    assert s["capacity_in_band"].value == float(in_band)
    assert s["capacity"].extra["in_band"] is in_band
    assert s["mae"].value == pytest.approx(sum(k > limit for k in range(1, 21)) / 20)


def test_half_right_level_does_not_fall(stimset):
    # a(k) = 0.5 is not "below 0.5": with one of the two k=7 plots wrong, capacity stays higher
    wrong = {s.stimulus_id for s in stimset.test if s.ground_truth == 7}
    wrong = {sorted(wrong)[0]}
    recs = [dict(r, response=r["response"] + (r["stimulus_id"] in wrong))
            for r in records(stimset, lambda k: k if k <= 10 else 1)]
    s = by_name(score_capacity(recs, stimset))
    assert s["a_k07"].value == 0.5 and s["capacity"].value == 10
    assert s["a_k07"].ci_low == 0.0 and s["a_k07"].ci_high == 1.0


def test_first_level_failing_gives_zero(stimset):
    s = by_name(score_capacity(records(stimset, lambda k: k + 1), stimset))
    assert s["capacity"].value == 0 and s["accuracy"].value == 0.0 and s["mae"].value == 1.0


def test_nulls(stimset):
    nulls = {s.stimulus_id for s in stimset.test if s.ground_truth in (3, 15)}
    nulls.add(next(s.stimulus_id for s in stimset.test if s.ground_truth == 5))
    s = by_name(score_capacity(records(stimset, lambda k: k, nulls), stimset))
    assert s["accuracy"].nulls == 5 and s["accuracy"].n == 35
    assert s["accuracy"].extra["accuracy_full_low"] == pytest.approx(35 / 40)
    assert "a_k03" not in s and s["a_k05"].n == 1 and s["a_k05"].nulls == 1
    everything = {x.stimulus_id for x in stimset.test}
    only = by_name(score_capacity(records(stimset, lambda k: k, everything), stimset))
    assert set(only) == {"accuracy", "mae"} and only["accuracy"].nulls == 40


def test_capacity_vectorised_matches_a_loop():
    rng = np.random.default_rng(0)
    levels = np.arange(3, 15)
    a = rng.choice([0.0, 0.5, 1.0], size=(200, len(levels)), p=[0.15, 0.25, 0.6])
    cap, censored = capacity(levels, a)
    for row, c, cen in zip(a, cap, censored):
        expected = levels[-1]
        for i, v in enumerate(row):
            if v < 0.5:
                expected = levels[i - 1] if i else levels[0] - 1
                break
        assert c == expected and cen == (row >= 0.5).all()


def test_stratified_indices_stay_in_stratum():
    strata = np.array([1, 1, 2, 2, 2, 5])
    idx = stratified_indices(strata, 300, seed=0)
    assert idx.shape == (300, 6)
    assert (strata[idx] == strata[None, :]).all()
    assert len(np.unique(idx[:, 2])) == 3


def test_bad_records(stimset):
    recs = records(stimset, lambda k: k)
    with pytest.raises(ValueError, match="no record for 1 test stimuli"):
        score_capacity(recs[1:], stimset)
    with pytest.raises(ValueError, match="unknown stimulus 'nope'"):
        score_capacity(recs + [dict(recs[0], stimulus_id="nope")], stimset)
