"""Figure captions and scorecards say how each interval was computed, in the scores' own words:
the scorers resample different levels (stimuli; trials within each k; random split halves), so
no one fixed sentence can describe them all."""

from harness.reports.report import BatteryRunData, figure_caption
from harness.scores.bootstrap import interval_methods
from harness.scores.capacity import score_capacity
from harness.scores.record import Score
from harness.scores.tasks import Bootstrap
from harness.stimuli import series_count
from harness.tracking.scorecards import scorecard_markdown

COUNT = "similarity.chart.series_count"


def capacity_scores():
    stimset = series_count.build(None, seed=0, n_train=0)
    records = [{"stimulus_id": s.stimulus_id, "parse_status": "ok", "option_order": None,
                "response": s.ground_truth if s.ground_truth <= 8 else s.ground_truth - 1}
               for s in stimset.test]
    return score_capacity(records, stimset, boot=Bootstrap(n_boot=100))


def split_half_score(name):
    return Score(name=name, value=0.8, ci_low=0.7, ci_high=0.9, n=40, nulls=0, version="1",
                 method="split-half over participants, Spearman-Brown 2r/(1+r); mean and 2.5/97.5 "
                        "percentiles over 200 random splits, seed 0")


def run_with(task, scores):
    return BatteryRunData(run_id="r", model="m", family="f", recipe="x", params={}, tags={},
                          metrics={}, scores={task: scores}, unavailable={})


def test_interval_methods_are_the_scores_own_clauses():
    scores = capacity_scores()
    methods = interval_methods([s for s in scores if s.name.startswith("a_k")])
    assert len(methods) == 1 and "within each k" in methods[0] and "over stimuli" not in methods[0]
    both = interval_methods(scores)
    assert any("over stimuli" in m for m in both) and any("within each k" in m for m in both)
    assert interval_methods([split_half_score("noise_ceiling")]) == [
        "mean and 2.5/97.5 percentiles over 200 random splits, seed 0"]


def test_a_k_caption_says_binomial_redraws_within_each_k():
    caption = figure_caption(f"{COUNT}.a_k.png", run_with(COUNT, capacity_scores()))
    assert "within each k" in caption
    assert "over stimuli" not in caption


def test_scorecard_interval_wording_comes_from_the_scores_shown():
    card = scorecard_markdown("m", "r", {COUNT: {"scores": [s.to_dict() for s in capacity_scores()]}})
    head = card.splitlines()[0]
    assert "within each k" in head and "over stimuli" in head
    assert "Intervals: 95% bootstrap over stimuli." not in head


def test_scorecard_says_what_each_ceiling_is():
    """The mark colours' B ceiling is a cited test-retest figure from THINGS, not agreement among
    these raters: the scorecard names it and shows the task's own split-half beside it."""
    from harness.scores.odd_one_out import score_odd_one_out
    from harness.stimuli import mark_color
    from harness.sources import Sources
    from tests.conftest import MIRROR

    stimset = mark_color.build(Sources(mirror=MIRROR), seed=0)
    records = [{"stimulus_id": s.stimulus_id, "response": 1, "parse_status": "ok",
                "option_order": list(s.option_order)} for s in stimset.test]
    scores = score_odd_one_out(records, stimset, boot=Bootstrap(n_boot=100))
    card = scorecard_markdown("m", "r", {"similarity.chart.mark_color": {"scores": [s.to_dict() for s in scores]}})
    assert "ceiling: agreement among people." not in card
    assert "test-retest" in card and "human_majority_split_half is 0.71" in card
