"""Repetitions at nonzero temperature are combined as the paper does before scoring."""

from harness.trials.records import per_stimulus


def rec(stim, rep, response, space="choice", truth=2):
    ok = response is not None
    return {"stimulus_id": stim, "rep": rep, "response": response, "response_space": space,
            "ground_truth": truth, "parse_status": "ok" if ok else "null:no_integer",
            "correct": (response == truth) if ok else None}


def test_majority_vote_nulls_excluded_and_ties_to_the_first():
    out = {r["stimulus_id"]: r for r in per_stimulus(
        [rec("a", 0, 1), rec("a", 1, 2), rec("a", 2, 2), rec("b", 0, None), rec("b", 1, 3),
         rec("c", 1, 3), rec("c", 0, 1), rec("d", 0, None), rec("d", 1, None)])}
    assert out["a"]["response"] == 2 and out["a"]["correct"] is True
    assert out["a"]["extras"]["rep_responses"] == [1, 2, 2]
    assert out["b"]["response"] == 3 and out["b"]["parse_status"] == "ok"
    assert out["c"]["response"] == 1  # 1-1 tie goes to the lowest repetition's answer
    assert out["d"]["response"] is None and out["d"]["parse_status"] == "null:all_reps_null"


def test_scalar_answers_are_averaged_and_single_reps_untouched():
    out = per_stimulus([rec("s", 0, 40.0, "scalar", 0.5), rec("s", 1, 50.0, "scalar", 0.5)])
    assert out[0]["response"] == 45.0 and out[0]["correct"] is None
    single = [rec("x", 0, 1)]
    assert per_stimulus(single) == single
