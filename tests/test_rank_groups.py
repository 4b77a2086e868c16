"""Rank groups per task: the paired bootstrap of two models' difference on the same resampled
stimuli, the per-stimulus form of each family's primary score, censored values left unranked,
and `gestalt recipe` ending with the groups and with where everything is."""

import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from harness.models.base import ModelSpec
from harness.scores.ranking import (
    ItemValues,
    letter_groups,
    position,
    primary_items,
    rank_task,
    studentised,
    told_apart,
)
from harness.scores.record import Score
from harness.scores.tasks import Bootstrap, get_family
from harness.stimuli.registry import get_task
from harness.trials.records import make_record
from tests.conftest import MIRROR, REPO

BOOT = Bootstrap(n_boot=400, seed=0)


def score(value, lo, hi, **kw):
    return Score(name="B", value=value, ci_low=lo, ci_high=hi, n=100, nulls=0, method="m", version="v", **kw)


def items(correct_on, n=100):
    values = np.zeros(n)
    values[list(correct_on)] = 1
    return ItemValues(values, np.ones(n, bool))


def test_a_paired_difference_tells_apart_what_overlapping_intervals_cannot():
    """b is right on a subset of a's stimuli: 0.60 vs 0.55, marginal intervals of about +-0.1
    overlap, but on the same resampled stimuli a - b is never below 0: told apart."""
    a, b = items(range(60)), items(range(55))
    assert told_apart([a, b], BOOT)[0, 1]
    ranking = rank_task({"b": (score(0.55, 0.45, 0.65), b), "a": (score(0.60, 0.50, 0.70), a)}, BOOT, "B")
    assert [(r.model_id, r.groups) for r in ranking.ranked] == [("a", "a"), ("b", "b")]
    assert "paired bootstrap over stimuli" in ranking.method and "familywise 5%" in ranking.method
    # without the per-stimulus form the task falls back to the models' own intervals, and says so
    unpaired = rank_task({"b": (score(0.55, 0.45, 0.65), None), "a": (score(0.60, 0.50, 0.70), a)}, BOOT, "B")
    assert [r.groups for r in unpaired.ranked] == ["a", "a"] and unpaired.method.startswith("NOT PAIRED")
    assert "familywise 5% (Holm)" in unpaired.method


def test_the_studentised_difference_is_the_paired_t_statistic():
    """With every stimulus answered, a pair's standard error is the paired t-test's: the standard
    deviation of the per-stimulus differences (n - 1) over sqrt(n), recomputed here."""
    rng = np.random.default_rng(4)
    va, vb = (rng.random(50) < 0.6).astype(float), (rng.random(50) < 0.5).astype(float)
    d, se = studentised([ItemValues(va, np.ones(50, bool)), ItemValues(vb, np.ones(50, bool))], np.arange(50)[None])
    assert d[0, 0, 1] == pytest.approx(va.mean() - vb.mean())
    assert se[0, 0, 1] == pytest.approx(np.std(va - vb, ddof=1) / np.sqrt(50))
    # with nulls: the delta method's error of a difference of two means over answered stimuli
    answered = rng.random(50) < 0.8
    d, se = studentised([ItemValues(va, answered), ItemValues(vb, np.ones(50, bool))], np.arange(50)[None])
    ma = va[answered].mean()
    influence = answered * (va - ma) / answered.mean() - (vb - vb.mean())
    assert d[0, 0, 1] == pytest.approx(ma - vb.mean())
    assert se[0, 0, 1] == pytest.approx(np.sqrt((influence ** 2).sum() / 49 / 50))


def simulated_rankings(models: int, stimuli: int, experiments: int, lift: float, p_range, seed: int):
    """Rank groups of ``experiments`` simulated tasks through ``rank_task``: every model answers
    each stimulus right with that stimulus's probability (drawn once per experiment from
    ``p_range``), the first model with ``lift`` more on every stimulus."""
    rng = np.random.default_rng(seed)
    for e in range(experiments):
        p = rng.uniform(*p_range, stimuli)
        entries = {}
        for m in range(models):
            v = (rng.random(stimuli) < p + (lift if m == 0 else 0.0)).astype(float)
            entries[f"m{m}"] = (score(v.mean(), 0.0, 1.0), ItemValues(v, np.ones(stimuli, bool)))
        ranking = rank_task(entries, Bootstrap(seed=e), "B")
        yield {r.model_id: set(r.groups) for r in ranking.ranked}


@pytest.mark.parametrize("models, stimuli", [(8, 80), (10, 120)])
def test_equal_models_share_one_letter_but_about_5_percent_of_the_time(models, stimuli):
    """The familywise error: among equal models, the share of experiments in which any two get
    different letters stays near 5% however many pairs there are (an interval per pair without
    correction split them in 40% of experiments at 8 models and 69% at 10)."""
    experiments = 400
    split = sum(len({frozenset(g) for g in letters.values()}) > 1
                for letters in simulated_rankings(models, stimuli, experiments, 0.0, (0.2, 0.9), seed=models))
    assert split / experiments <= 0.07, split


def test_a_model_better_on_every_stimulus_stands_alone():
    """Power: among 6 models on 120 stimuli, one right 0.25 more often on every stimulus (the
    stimuli's probabilities from 0 to 0.75, so the better model's stay probabilities) shares a
    letter with no other model in at least 80% of experiments."""
    experiments = 300
    alone = sum(all(not (letters["m0"] & g) for m, g in letters.items() if m != "m0")
                for letters in simulated_rankings(6, 120, experiments, 0.25, (0.0, 0.75), seed=6))
    assert alone / experiments >= 0.80, alone


def test_groups_are_the_maximal_sets_not_told_apart():
    """a ~ b and b ~ c but a and c apart: b shares a letter with each, a and c none."""
    together = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]], bool)
    assert letter_groups([0, 1, 2, 3], together) == {0: "a", 1: "ab", 2: "b", 3: "c"}
    assert letter_groups([0, 1], np.ones((2, 2), bool)) == {0: "a", 1: "a"}


def test_a_thousand_models_none_told_apart_are_one_group():
    """A roster's worth of equal models is one clique as deep as it has members: the summary of an
    experiment of 1,000 such batteries once stopped on Python's recursion limit."""
    n = 1500
    assert set(letter_groups(list(range(n)), np.ones((n, n), bool)).values()) == {"a"}


def test_groups_are_the_maximal_cliques_whatever_the_graph():
    """Every model's letters name exactly the maximal sets it belongs to, checked by brute force
    over every subset of 7 models in random 'not told apart' graphs."""
    from itertools import combinations

    rng = np.random.default_rng(3)
    for _ in range(40):
        k = 7
        together = np.triu(rng.random((k, k)) < 0.5, 1)
        together = together | together.T | np.eye(k, dtype=bool)
        letters = letter_groups(list(range(k)), together)
        cliques = [set(c) for size in range(1, k + 1) for c in combinations(range(k), size)
                   if together[np.ix_(c, c)].all()]
        maximal = [c for c in cliques if not any(c < d for d in cliques)]
        groups = {label: {m for m, g in letters.items() if label in g} for label in set("".join(letters.values()))}
        assert sorted(map(sorted, groups.values())) == sorted(map(sorted, maximal))


def test_censored_and_missing_values_are_not_ranked():
    capacity = Score(name="capacity", value=1.0, ci_low=1.0, ci_high=1.0, n=200, nulls=0, method="m",
                     version="v", extra={"censored": "below"})
    none = Score(name="B", value=None, ci_low=None, ci_high=None, n=0, nulls=80, method="m", version="v")
    ranking = rank_task({"x": (capacity, None), "y": (none, None), "z": (None, None),
                         "w": (score(0.5, 0.4, 0.6), items(range(50)))}, BOOT, "capacity")
    assert [r.model_id for r in ranking.ranked] == ["w"]
    why = {m: reason for m, _, reason in ranking.unranked}
    assert why["x"].startswith("censored below") and why["y"].startswith("no value")
    assert why["z"] == "no primary score"


def test_position_runs_from_floor_to_a_ceiling_that_bounds_the_score_else_to_1():
    bound = {"ceiling_is_bound": True}
    assert position(score(0.5, 0.4, 0.6, floor=0.25, ceiling=0.75, extra=bound)) == pytest.approx(0.5)
    # a ceiling a model can pass (B's cited one): against the score's maximum, never past 100%
    assert position(score(0.8, 0.7, 0.9, floor=0.25, ceiling=0.75)) == pytest.approx(0.55 / 0.75)
    assert position(score(0.5, 0.4, 0.6, floor=0.0)) == pytest.approx(0.5)  # no ceiling: against 1
    assert position(score(0.5, 0.4, 0.6)) == pytest.approx(0.5)  # no floor: from 0
    assert position(score(None, None, None, floor=0.25)) is None


def test_the_terminal_bar_and_the_report_matrix_show_one_position():
    """The rank groups' bar and the matrix's colour are the same number: a B past its cited
    ceiling is short of 100% in both, an individual agreement against its bounding ceiling."""
    from harness.reports.figures import agreement_matrix_figure, plt
    from harness.reports.terminal import _ranking_lines

    past = score(0.8, 0.7, 0.9, floor=0.25, ceiling=0.75)
    bounded = Score(name="individual_agreement", value=0.5, ci_low=0.4, ci_high=0.6, n=100, nulls=0, method="m",
                    version="v", floor=0.25, ceiling=0.75, extra={"ceiling_is_bound": True})
    cells = {("m", "b"): past, ("m", "ia"): bounded}
    fig = agreement_matrix_figure([("m", "f")], [("b", "B"), ("ia", "individual_agreement")], cells)
    colour = fig.axes[0].images[0].get_array()
    plt.close(fig)
    assert list(colour[0]) == pytest.approx([position(past), position(bounded)])
    for s, top in ((past, "1"), (bounded, "ceiling")):
        ranking = rank_task({"m": (s, None)}, BOOT, s.name)
        (line,) = [ln for ln in _ranking_lines("t", ranking) if " m " in ln]
        assert line.endswith(f"{top} {100 * position(s):.0f}%"), line


# -- the per-stimulus form reproduces each family's primary score ------------------------------------

def records_for(task_id, stimset, answer, reps=1):
    task = get_task(task_id)
    spec = ModelSpec(id="m", source="timm", name="x")
    out = []
    for k, s in enumerate(stimset.test):
        for rep in range(reps):
            response = answer(k, s, rep)
            out.append(make_record(task=task, stimset=stimset, stimulus=s, model_spec=spec, model_version="v",
                                   readout="r", rep=rep, n_reps=reps, response=response, raw_output=None,
                                   parse_status="ok" if response is not None else "null:no_answer",
                                   latency_s=0.0, seed=0, run_id="r", key="0" * 64))
    return out


def check_family(task_id, stimset, records):
    from harness.trials.records import per_stimulus

    task = get_task(task_id)
    scored = records if task.all_reps else per_stimulus(records)
    scores = get_family(task.scoring).score(scored, stimset, BOOT)
    primary = get_family(task.scoring).primary_score(scores)
    found = primary_items(task.scoring, scores, scored, stimset)
    assert found is not None, task_id
    assert found.statistic(np.arange(len(stimset.test))[None])[0] == pytest.approx(primary.value, abs=1e-12)
    return primary, found


def test_silhouette_b_per_stimulus_and_its_interval_are_the_scorers(sources):
    stimset = get_task("closure.nat.silhouette").build(sources)
    rng = np.random.default_rng(1)
    options = list(stimset.options)
    answers = [s.human_target if rng.random() < 0.5 else options[rng.integers(len(options))] for s in stimset.test]
    primary, found = check_family("closure.nat.silhouette", stimset,
                                  records_for("closure.nat.silhouette", stimset, lambda k, s, rep: answers[k]))
    assert primary.name == "B"
    # no nulls: the paired draws of one model are the scorer's own draws (same stimuli, same seed)
    from harness.scores.bootstrap import percentile_ci, resample_indices

    lo, hi = percentile_ci(found.statistic(resample_indices(len(stimset.test), BOOT.n_boot, BOOT.seed)))
    assert (lo, hi) == pytest.approx((primary.ci_low, primary.ci_high))
    # with nulls the statistic is over the answered stimuli, as B is
    check_family("closure.nat.silhouette", stimset, records_for(
        "closure.nat.silhouette", stimset, lambda k, s, rep: None if k % 7 == 0 else answers[k]))


def test_mark_color_b_per_stimulus(sources):
    stimset = get_task("similarity.chart.mark_color").build(sources)
    check_family("similarity.chart.mark_color", stimset, records_for(
        "similarity.chart.mark_color", stimset, lambda k, s, rep: None if k % 9 == 0 else 1 + k % 3))


def test_series_count_accuracy_per_stimulus(sources):
    stimset = get_task("similarity.chart.series_count").build(sources)
    check_family("similarity.chart.series_count", stimset, records_for(
        "similarity.chart.series_count", stimset,
        lambda k, s, rep: None if k % 11 == 0 else int(s.ground_truth) + (k % 3 == 0)))


def test_chart6_accuracy_all_per_stimulus(vlat):
    def answer(k, s, rep):
        options = s.meta["options"]
        return None if (k + rep) % 5 == 0 else (s.ground_truth if (k * 3 + rep) % 4 else options[0])

    primary, _ = check_family("literacy.chart.vlat", vlat, records_for("literacy.chart.vlat", vlat, answer, reps=3))
    assert primary.name == "accuracy_all"


# -- the terminal answer ---------------------------------------------------------------------------

CONSTANT = '''
class Constant:
    fingerprint = {{"answer": "{answer}"}}

    def generate(self, image, prompt, settings):
        return "{answer}"


def build():
    return Constant()
'''


def test_recipe_ends_with_rank_groups_and_where_everything_is(tmp_path):
    models = [{"id": "shape-rule", "source": "python", "name": str(REPO / "examples/rule_based.py") + ":build"}]
    for answer in ("knife", "dog"):
        (tmp_path / f"{answer}.py").write_text(CONSTANT.format(answer=answer))
        models.append({"id": f"always-{answer}", "source": "python", "name": f"{tmp_path}/{answer}.py:build"})
    recipe = {"name": "answer", "models": models, "tasks": ["closure.nat.silhouette", "similarity.nat.things"],
              "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
              "runtime": {"processes": 1, "device": "cpu", "progress": False},
              "data": {"mirror": str(MIRROR)},
              "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "answer"},
              "output_dir": str(tmp_path / "out")}
    path = tmp_path / "answer.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "GESTALT_THINGS_IMAGES"}
    done = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path)], capture_output=True,
                          text=True, env=dict(env, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"), timeout=900)
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    # the reason THINGS is unavailable: once, not once per model
    things = [line for line in out.splitlines() if "similarity.nat.things" in line and "unavailable" in line]
    reason = things[0].split("unavailable", 1)[1]
    assert len(reason) > 40 and out.count(reason) == 1, things

    answer = done.stdout[done.stdout.index("rank groups"):]
    block = answer[answer.index("closure.nat.silhouette"):answer.index("similarity.nat.things")]
    rows = {line.split()[1]: line.split() for line in block.splitlines()[1:] if line.startswith("  ")
            and len(line.split()) > 2 and line.split()[1] in {m["id"] for m in models}}
    assert set(rows) == {"shape-rule", "always-knife", "always-dog"}, block
    assert "paired bootstrap" in block
    # each with its value, interval and position between floor and ceiling
    for row in rows.values():
        assert row[2].replace(".", "").isdigit() and row[3].startswith("[")
    assert "floor 0.125" in block and "ceiling" in block
    assert "similarity.nat.things: unavailable" in answer
    # the last lines: where everything is, one line each
    lines = done.stdout.strip().splitlines()
    where = lines[max(i for i, line in enumerate(lines) if line.startswith("records  ")):]
    assert str(tmp_path / "out") in where[0], where
    assert [line.split()[0] for line in where[1:4]] == ["figures", "report", "MLflow"], where
    assert all(line.split()[0] in {"figures", "report", "MLflow", "summary"} for line in where[1:]), where
