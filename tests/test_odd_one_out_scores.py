"""Odd-one-out scorer: B against each reference, nulls, floors and ceilings on the real human data."""

import csv
from collections import Counter, defaultdict

import numpy as np
import pytest

from harness.scores.odd_one_out import (loo_majority_agreement, majority_agreement,
                                        score_odd_one_out)
from harness.scores.tasks import get_scorer
from harness.stimuli import mark_color
from tests.conftest import MIRROR

RESPONSES = MIRROR / "perceptual-kernels" / "derived" / "color_td_responses_long.csv"


def mark_color_answers():
    """stimulus id ('mark_013') -> {subject: the palette colour picked as the odd one out}, read
    straight from the release's long table of the 20 subjects x 120 triplets."""
    answers: dict[str, dict[int, int]] = defaultdict(dict)
    with open(RESPONSES, newline="") as f:
        for row in csv.DictReader(f):
            answers[f"mark_{row['i']}{row['j']}{row['k']}"][int(row["subject_row"])] = int(row["odd_choice"])
    return dict(answers)


@pytest.fixture(scope="module")
def stimset(sources):
    return mark_color.build(sources, seed=0)


def records(stimset, responses, null_every=0):
    out = []
    for i, (s, r) in enumerate(zip(stimset.test, responses)):
        null = null_every and i % null_every == 0
        out.append({"stimulus_id": s.stimulus_id, "response": None if null else int(r),
                    "parse_status": "null:no_number" if null else "ok",
                    "option_order": list(s.option_order)})
    return out


def by_name(scores):
    return {s.name: s for s in scores}


def test_registered():
    assert get_scorer("odd_one_out") is score_odd_one_out


def test_perfect_and_majority_responders(stimset):
    h = stimset.human
    perfect = by_name(score_odd_one_out(records(stimset, h.targets["kernel"]), stimset))
    assert perfect["B"].value == 1.0 and perfect["B"].ci_low == perfect["B"].ci_high == 1.0
    assert perfect["B"].n == 120 and perfect["B"].nulls == 0
    agree = np.mean(h.targets["kernel"] == h.targets["majority"])
    assert perfect["B_majority"].value == pytest.approx(agree)

    majority = by_name(score_odd_one_out(records(stimset, h.targets["majority"]), stimset))
    assert majority["B_majority"].value == 1.0
    tied = h.majority_tied
    # a tied majority of t options earns 1/t when ties are split; all 6 ties here are 2-way
    assert majority["B_majority"].extra["tied_items"] == int(tied.sum()) == 6
    assert majority["B_majority"].extra["B_ties_split"] == pytest.approx(1 - 0.5 * tied.mean())


def test_position_guessing_floor(stimset):
    h = stimset.human
    for k in (1, 2, 3):
        s = by_name(score_odd_one_out(records(stimset, [k] * 120), stimset))
        f_k = np.mean(h.targets["kernel"] == k)
        assert s["B"].value == pytest.approx(f_k)
        assert s["B_majority"].value == pytest.approx(np.mean(h.targets["majority"] == k))
        assert s["B"].floor == pytest.approx(max(np.mean(h.targets["kernel"] == j) for j in (1, 2, 3)))
        assert s["B"].extra["position_shares"][k - 1] == pytest.approx(f_k)


def test_references_reproduce_source(stimset):
    s = by_name(score_odd_one_out(records(stimset, [1] * 120), stimset))
    # SOURCE.md (perceptual-kernels): mean share of the majority answer 0.641; a left-out subject
    # agrees with the majority of the other 19 on 0.598 (ties split)
    assert s["human_individual_agreement"].value == pytest.approx(0.641, abs=0.001)
    assert s["human_individual_agreement_loo"].value == pytest.approx(0.598, abs=0.001)
    assert s["individual_agreement"].ceiling == s["human_individual_agreement"].value
    assert s["B"].ceiling == 0.863 and "not computed from sources" in s["B"].method
    assert s["B_majority"].extra["human_vs_reference"] == pytest.approx(
        s["human_individual_agreement"].value)
    lo, hi = s["human_individual_agreement_loo"].ci_low, s["human_individual_agreement_loo"].ci_high
    assert lo < s["human_individual_agreement_loo"].value < hi


def test_loo_agreement_by_brute_force():
    rng = np.random.default_rng(1)
    votes = rng.integers(0, 6, size=(30, 3)) + np.eye(3, dtype=int)[rng.integers(0, 3, 30)]
    expected = []
    for v in votes:
        responses = [p for p in range(3) for _ in range(v[p])]
        hits = 0.0
        for i, own in enumerate(responses):
            rest = np.bincount(np.delete(responses, i), minlength=3)
            modes = np.flatnonzero(rest == rest.max())
            hits += (own in modes) / len(modes)
        expected.append(hits / len(responses))
    assert np.allclose(loo_majority_agreement(votes), expected)
    assert np.allclose(majority_agreement(votes), votes.max(1) / votes.sum(1))


def test_nulls_are_excluded_and_bracketed(stimset):
    h = stimset.human
    s = by_name(score_odd_one_out(records(stimset, h.targets["kernel"], null_every=4), stimset))["B"]
    assert s.nulls == 30 and s.n == 90 and s.value == 1.0
    assert s.extra["null_fraction"] == pytest.approx(0.25)
    assert s.extra["B_full_low"] == pytest.approx(0.75) and s.extra["B_full_high"] == pytest.approx(1.0)


def test_bootstrap_interval_is_seeded(stimset):
    rng = np.random.default_rng(0)
    recs = records(stimset, rng.integers(1, 4, 120))
    a = by_name(score_odd_one_out(recs, stimset))["B"]
    b = by_name(score_odd_one_out(recs, stimset))["B"]
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    assert a.ci_low < a.value < a.ci_high
    assert a.ci_high - a.ci_low < 2 * 0.089 * 1.1  # appendix D.1: half-width <= 0.089 at n=120


def test_bad_records_are_named(stimset):
    recs = records(stimset, [1] * 120)
    recs[3]["option_order"] = list(reversed(recs[3]["option_order"]))  # differs: 3 distinct items
    with pytest.raises(ValueError, match=f"{stimset.test[3].stimulus_id}: record option_order"):
        score_odd_one_out(recs, stimset)
    recs = records(stimset, [1] * 120)
    recs[5]["response"] = 4
    with pytest.raises(ValueError, match="is not a montage position"):
        score_odd_one_out(recs, stimset)
    with pytest.raises(ValueError, match="no record for 1 test stimuli"):
        score_odd_one_out(records(stimset, [1] * 120)[1:], stimset)
    recs = records(stimset, [1] * 120) + [{"stimulus_id": "mark_999", "response": 1,
                                           "parse_status": "ok", "option_order": None}]
    with pytest.raises(ValueError, match="unknown stimulus 'mark_999'"):
        score_odd_one_out(recs, stimset)


def test_individual_agreement_ceiling_is_over_the_answered_triplets(stimset):
    """A model that picks the majority on the most unanimous triplets and answers nothing else
    must not beat its ceiling: the ceiling is the majority share over the same answered triplets."""
    answers = mark_color_answers()
    share, majority_colour = {}, {}
    for sid, by_subject in answers.items():
        (colour, top), = Counter(by_subject.values()).most_common(1)
        share[sid], majority_colour[sid] = top / len(by_subject), colour
    answered = set(sorted(share, key=lambda sid: -share[sid])[:63])
    recs = []
    for st in stimset.test:
        sid = st.stimulus_id
        ok = sid in answered
        recs.append({"stimulus_id": sid, "parse_status": "ok" if ok else "null:no_number",
                     "response": st.meta["colors"].index(majority_colour[sid]) + 1 if ok else None,
                     "option_order": list(st.option_order)})
    s = by_name(score_odd_one_out(recs, stimset))["individual_agreement"]
    ceiling = float(np.mean([share[sid] for sid in answered]))
    assert s.n == 63 and s.nulls == 57
    assert s.value == pytest.approx(ceiling, abs=1e-12)  # the majority everywhere it answered
    assert s.ceiling == pytest.approx(ceiling, abs=1e-12) and s.value <= s.ceiling + 1e-12
    v = 57 / 120
    assert s.extra["individual_agreement_full_low"] == pytest.approx((1 - v) * s.value)
    assert s.extra["individual_agreement_full_high"] == pytest.approx((1 - v) * s.value + v)


def test_b_shows_the_task_s_own_split_half_beside_the_cited_ceiling(stimset):
    s = by_name(score_odd_one_out(records(stimset, [1] * 120), stimset))
    split = s["human_majority_split_half"].value
    assert round(split, 3) == 0.718
    for name in ("B", "B_majority"):
        assert s[name].ceiling == 0.863
        assert s[name].extra["human_majority_split_half"] == split
        assert "test-retest" in s[name].ceiling_source and "0.718" in s[name].ceiling_source
