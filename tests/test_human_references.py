"""Human references that mean what they say, each recomputed here from the raw source
files with plain pandas/numpy (never through the harness's own readers), and floors that are
exactly what a trivial strategy scores."""

import glob
import itertools

import numpy as np
import pandas as pd
import pytest

from harness.scores import odd_one_out
from harness.scores.agreement import score_classification_vs_observers
from harness.scores.odd_one_out import score_odd_one_out
from harness.stimuli import mark_color, silhouette, things
from harness.stimuli.base import ObserverPanel, OddOneOutVotes
from harness.scores.tasks import Bootstrap
from tests.conftest import MIRROR

PK = MIRROR / "perceptual-kernels"
THINGS_TRIPLETS = MIRROR / "things" / "LukasMut-VICE" / "data" / "test_triplets.csv"


# -- independent readers of the raw files ---------------------------------------------------------

def raw_color_votes():
    """(subjects, 120) odd colour chosen by each subject on each test triplet (lexicographic)."""
    raw = pd.read_csv(PK / "data/raw/color-td.txt", header=None)
    raw = raw.dropna(axis=1, how="all").astype(int).to_numpy()
    stored = raw.reshape(len(raw), 138, 3)[:, 8:128] - 4
    order = {t: k for k, t in enumerate(itertools.combinations(range(10), 3))}
    out = np.empty((len(raw), 120), dtype=int)
    for s, subject in enumerate(stored):
        for a, b, odd in subject:
            out[s, order[tuple(sorted((a, b, odd)))]] = odd
    return out


def counts_from_choices(choices):
    """Per triplet: the vote count of each chosen option (any labels), as a list of arrays."""
    return [np.unique(c, return_counts=True)[1] for c in choices]


def raw_things_votes():
    """Per unordered triplet (original item numbers): the odd item chosen by each worker, a
    worker's repeated responses to a triplet after the first left out."""
    df = pd.read_csv(THINGS_TRIPLETS, sep="\t", header=None,
                     names=["i1", "i2", "i3", "choice", "subject"])
    items = df[["i1", "i2", "i3"]].to_numpy()
    df["odd"] = items[np.arange(len(df)), df.choice.to_numpy() - 1]
    df["key"] = [tuple(sorted(r)) for r in items]
    df = df.drop_duplicates(["key", "subject"], keep="first")
    return df.groupby("key").odd.apply(np.array)


def individual_agreement(choices):
    return np.mean([c.max() / c.sum() for c in counts_from_choices(choices)])


def split_half(choices, n_splits, seed):
    """Majority agreement of two random halves (floor/ceil) of each triplet's raters, ties split."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for c in choices:
        labels = np.unique(c)
        for _ in range(n_splits):
            perm = rng.permutation(c)
            a, b = perm[: len(c) // 2], perm[len(c) // 2:]
            ca = np.array([(a == x).sum() for x in labels])
            cb = np.array([(b == x).sum() for x in labels])
            ta, tb = ca == ca.max(), cb == cb.max()
            total += (ta & tb).sum() / (ta.sum() * tb.sum())
    return total / (len(choices) * n_splits)


def records(stimset, responses):
    return [{"stimulus_id": s.stimulus_id, "response": r, "parse_status": "ok",
             "option_order": list(s.option_order) if s.option_order else None}
            for s, r in zip(stimset.test, responses)]


def by_name(scores):
    return {s.name: s for s in scores}


@pytest.fixture(scope="module")
def marks(sources):
    return mark_color.build(sources, seed=0)


@pytest.fixture(scope="module")
def things500(sources):
    return things.build(sources, seed=0, n_triplets=500)


# -- section 1: ceilings --------------------------------------------------------------------------

def test_b_ceiling_is_the_cited_test_retest_consistency(marks):
    s = by_name(score_odd_one_out(records(marks, marks.human.targets["kernel"]), marks, boot=Bootstrap(n_boot=200)))
    assert s["B"].ceiling == s["B_majority"].ceiling == 0.863 == odd_one_out.CITED_B_CEILING
    assert "not computed from sources" in s["B"].method and "Gestalt paper" in s["B"].method
    cited = s["human_modal_test_retest"]
    assert cited.value == 0.863 and cited.ci_low is None and "not computed" in cited.method
    # a model reproducing the target scores B = 1 (above the cited ceiling: it is a reference)
    assert s["B"].value == 1.0


def test_mark_color_references_from_the_raw_votes(marks):
    votes = raw_color_votes()
    choices = [votes[:, t] for t in range(120)]
    s = by_name(score_odd_one_out([], marks, boot=Bootstrap(n_boot=300)))
    expected = individual_agreement(choices)
    assert expected == pytest.approx(0.641, abs=5e-4)
    assert s["human_individual_agreement"].value == pytest.approx(expected, abs=1e-12)
    # leave-one-subject-out: each vote vs the majority of the other 19, ties split
    loo = []
    for c in choices:
        for j in range(len(c)):
            rest = np.delete(c, j)
            labels, n = np.unique(rest, return_counts=True)
            modes = labels[n == n.max()]
            loo.append((c[j] in modes) / len(modes))
    assert s["human_individual_agreement_loo"].value == pytest.approx(np.mean(loo), abs=1e-12)
    # split half: two random halves of the 20 subjects (Monte Carlo on both sides)
    independent = split_half(choices, 400, seed=7)
    assert s["human_majority_split_half"].value == pytest.approx(independent, abs=0.01)
    assert "Spearman-Brown not applied" in s["human_majority_split_half"].method
    lo, hi = s["human_majority_split_half"].ci_low, s["human_majority_split_half"].ci_high
    assert lo < independent < hi


def test_things_references_from_the_raw_triplets(sources):
    full = things.build(sources, seed=0)
    choices = list(raw_things_votes())
    assert len(choices) == 1000
    s = by_name(score_odd_one_out([], full, boot=Bootstrap(n_boot=200)))
    assert s["human_individual_agreement"].value == pytest.approx(individual_agreement(choices),
                                                                  abs=1e-12)
    assert s["human_individual_agreement"].value == pytest.approx(0.674, abs=5e-4)
    assert s["human_majority_split_half"].value == pytest.approx(split_half(choices, 60, 3),
                                                                 abs=0.01)


def test_individual_agreement_is_bounded_by_its_human_ceiling(marks):
    h = marks.human
    votes = h.votes
    majority = votes.argmax(axis=1) + 1
    s = by_name(score_odd_one_out(records(marks, majority), marks, boot=Bootstrap(n_boot=200)))
    top = s["individual_agreement"]
    # always choosing the majority reaches the ceiling exactly: normalised score 1
    assert top.value == pytest.approx(top.ceiling, abs=1e-12)
    assert top.extra["ceiling_is_bound"] is True
    rng = np.random.default_rng(0)
    for _ in range(20):
        got = by_name(score_odd_one_out(records(marks, rng.integers(1, 4, 120)), marks, boot=Bootstrap(n_boot=100)))
        ia = got["individual_agreement"]
        assert (ia.value - ia.floor) / (ia.ceiling - ia.floor) <= 1


def test_matrix_figure_never_exceeds_one_and_clips_nothing():
    from harness.reports.figures import agreement_matrix_figure
    from harness.scores.record import Score

    over = Score(name="B", value=1.0, ci_low=1.0, ci_high=1.0, n=120, nulls=0, method="", version="2",
                 ceiling=0.863, floor=1 / 3)
    bound = Score(name="individual_agreement", value=0.641, ci_low=0.6, ci_high=0.7, n=120,
                  nulls=0, method="", version="2", ceiling=0.641, floor=0.35,
                  extra={"ceiling_is_bound": True})
    below = Score(name="accuracy", value=0.0, ci_low=0.0, ci_high=0.0, n=80, nulls=0, method="",
                  version="2", floor=0.7)
    fig = agreement_matrix_figure([("m", "f")], [("a", "B"), ("b", "individual_agreement"),
                                                 ("c", "accuracy")],
                                  {("m", "a"): over, ("m", "b"): bound, ("m", "c"): below})
    image = fig.axes[0].images[0]
    frac = np.asarray(image.get_array())
    assert frac[0, 0] == pytest.approx(1.0) and frac[0, 1] == pytest.approx(1.0)
    assert frac[0, 2] == pytest.approx(-0.7 / 0.3)
    assert image.norm.vmin <= frac.min() and image.norm.vmax >= frac.max()  # nothing clipped


# -- section 2: floors ----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_mark_color_target_positions_are_balanced(sources, seed):
    stimset = mark_color.build(sources, seed=seed)
    positions = np.array([s.human_target for s in stimset.test])
    assert np.bincount(positions, minlength=4)[1:].tolist() == [40, 40, 40]


@pytest.mark.parametrize("seed", range(3))
def test_things_sample_positions_are_as_balanced_as_500_allows(sources, seed):
    stimset = things.build(sources, seed=seed, n_triplets=500)
    counts = np.bincount([s.human_target for s in stimset.test], minlength=4)[1:]
    assert sorted(counts.tolist()) == [166, 167, 167]


@pytest.mark.parametrize("task", ["marks", "things500"])
def test_constant_answer_models_score_exactly_at_the_floor(task, request):
    stimset = request.getfixturevalue(task)
    n = len(stimset.test)
    results = [by_name(score_odd_one_out(records(stimset, [k] * n), stimset, boot=Bootstrap(n_boot=100)))
               for k in (1, 2, 3)]
    for name in [n for n in results[0] if n == "B" or n.startswith("B_")] + ["individual_agreement"]:
        best = max(r[name].value for r in results)
        assert results[0][name].floor == pytest.approx(best, abs=1e-12), name
    assert results[0]["B"].floor == pytest.approx(np.ceil(n / 3) / n)
    # a position-only model that follows the montage, not the content, is no better
    position_only = [1 + i % 3 for i in range(n)]
    s = by_name(score_odd_one_out(records(stimset, position_only), stimset, boot=Bootstrap(n_boot=100)))
    assert s["B"].value <= s["B"].floor + 1e-12


def silhouette_raw():
    files = sorted(glob.glob(str(MIRROR / "geirhos-silhouettes/raw-data/silhouette-filled-experiment/*subject-*.csv")))
    df = pd.concat([pd.read_csv(f, keep_default_na=False) for f in files])
    df["image"] = df.imagename.str.rsplit("_", n=1).str[-1].str.replace(".png", "", regex=False)
    df["number"] = df.image.str.extract(r"(\d+)$").astype(int)
    return df[df.number >= 6]


def test_silhouette_floors_are_the_best_constant_answer(sources):
    stimset = silhouette.build(sources)
    assert isinstance(stimset.human, ObserverPanel)
    raw = silhouette_raw()

    def modal(group):
        answers = group[group.object_response != "na"].object_response.value_counts()
        modes = sorted(answers[answers == answers.max()].index)
        truth = group.category.iloc[0]
        return truth if truth in modes else modes[0]

    modal_answers = raw.groupby("image").apply(modal, include_groups=False)
    assert modal_answers.value_counts().iloc[0] == 10 and modal_answers.value_counts().index[0] == "knife"
    for answer, b_value, acc_value in (("knife", 0.125, 1 / 16), ("bear", None, 1 / 16)):
        recs = [{"stimulus_id": s.stimulus_id, "response": answer, "parse_status": "ok"}
                for s in stimset.test]
        s = by_name(score_classification_vs_observers(recs, stimset, boot=Bootstrap(n_boot=100, n_boot_kappa=100)))
        assert s["B"].floor == pytest.approx(0.125) and s["accuracy"].floor == pytest.approx(1 / 16)
        assert s["accuracy"].value == pytest.approx(acc_value)
        if b_value is not None:  # the best constant answer lands exactly on the floor
            assert s["B"].value == pytest.approx(b_value)
        assert s["B"].value <= s["B"].floor


# -- section 4: this harness's silhouette split and its ranges ------------------------------------

def _cohen(a, b):
    po = np.mean(a == b)
    pe = a.mean() * b.mean() + (1 - a.mean()) * (1 - b.mean())
    return (po - pe) / (1 - pe)


def test_silhouette_split_is_labelled_and_ranges_reported(sources):
    stimset = silhouette.build(sources)
    assert "this harness's split" in stimset.human.split
    raw = silhouette_raw()
    raw = raw.assign(correct=(raw.object_response == raw.category).astype(float))
    wide = raw.pivot(index="subj", columns="image", values="correct")
    pairs = [_cohen(wide.loc[a].values, wide.loc[b].values)
             for a, b in itertools.combinations(wide.index, 2)]
    loo = [_cohen_p(wide.loc[s].values, wide.drop(index=s).values.mean(0)) for s in wide.index]
    acc = wide.mean(axis=1)
    recs = [{"stimulus_id": s.stimulus_id, "response": s.ground_truth, "parse_status": "ok"}
            for s in stimset.test]
    s = by_name(score_classification_vs_observers(recs, stimset, boot=Bootstrap(n_boot=100, n_boot_kappa=100)))
    for name, values in (("human_kappa_pairwise", pairs), ("human_kappa_loo", loo),
                         ("human_accuracy", acc)):
        assert s[name].extra["range_min"] == pytest.approx(min(values), abs=1e-12)
        assert s[name].extra["range_max"] == pytest.approx(max(values), abs=1e-12)
        assert "this harness's split" in s[name].method
    assert s["human_kappa_pairwise"].extra["paper_range"] == [0.150, 0.812]


def _cohen_p(m, p):
    c_obs = np.mean(m * p + (1 - m) * (1 - p))
    c_exp = m.mean() * p.mean() + (1 - m.mean()) * (1 - p.mean())
    return (c_obs - c_exp) / (1 - c_exp)


# -- section 5: two-level intervals ---------------------------------------------------------------

def test_two_level_intervals_are_named_and_include_observer_variance(sources, marks):
    stimset = silhouette.build(sources)
    recs = [{"stimulus_id": s.stimulus_id, "response": s.human_target, "parse_status": "ok"}
            for s in stimset.test]
    s = by_name(score_classification_vs_observers(recs, stimset, boot=Bootstrap(n_boot=300, n_boot_kappa=300)))
    for name in ("kappa", "kappa_pairwise", "human_kappa_pairwise", "human_kappa_loo",
                 "human_loo_modal_agreement"):
        x = s[name]
        assert "stimuli x observers" in x.extra["ci_two_level_method"], name
        assert x.ci_low is not None and x.extra["ci_low_two_level"] <= x.value <= x.extra["ci_high_two_level"]
    pair = s["human_kappa_pairwise"]
    assert (pair.extra["ci_high_two_level"] - pair.extra["ci_low_two_level"]
            > pair.ci_high - pair.ci_low)
    o = by_name(score_odd_one_out(records(marks, [1] * 120), marks, boot=Bootstrap(n_boot=300)))
    for name in ("human_individual_agreement", "human_individual_agreement_loo",
                 "human_majority_split_half", "individual_agreement"):
        assert "two-level" in o[name].extra["ci_two_level_method"], name
        assert o[name].extra["ci_low_two_level"] <= o[name].value <= o[name].extra["ci_high_two_level"]


def crossed_bootstrap_widths(votes, n_boot, seed):
    """95% percentile widths of the mark colours' three human references under a crossed
    bootstrap: triplets and subjects drawn with replacement, each drawn subject bringing their
    answers on every drawn triplet. ``votes`` is (subjects, triplets) of odd colours. The
    leave-one-out never compares a subject with a copy of themselves; the split half splits the
    original subjects of each triplet at random into halves of 10, each subject weighing as often
    as drawn (a subject's copies in one half)."""
    rng = np.random.default_rng(seed)
    n_subj, n_trip = votes.shape
    colours = np.arange(10)
    draws = {"ia": [], "loo": [], "half": []}
    for _ in range(n_boot):
        t, subj = rng.integers(0, n_trip, n_trip), rng.integers(0, n_subj, n_subj)
        panel = votes[subj][:, t]
        counts = (panel[..., None] == colours).sum(axis=0)  # (triplets, colours)
        draws["ia"].append(np.mean(counts.max(axis=1) / n_subj))
        hits = []
        for j in range(n_subj):
            own = panel[j][:, None] == colours
            others = counts - (subj == subj[j]).sum() * own
            top = others == others.max(axis=1, keepdims=True)
            hits.append((top & own).sum(axis=1) / top.sum(axis=1))
        draws["loo"].append(np.mean(hits))
        weight = np.bincount(subj, minlength=n_subj)[:, None, None]
        answers = votes[:, t][..., None] == colours  # (subjects, triplets, colours)
        in_a = (np.argsort(np.argsort(rng.random((n_subj, n_trip)), axis=0), axis=0) < n_subj // 2)[..., None]
        a, b = (weight * answers * in_a).sum(axis=0), (weight * answers * ~in_a).sum(axis=0)
        ok = (a.sum(axis=1) > 0) & (b.sum(axis=1) > 0)
        ta, tb = a == a.max(axis=1, keepdims=True), b == b.max(axis=1, keepdims=True)
        draws["half"].append(np.mean(((ta & tb).sum(axis=1) / (ta.sum(axis=1) * tb.sum(axis=1)))[ok]))
    return {k: float(np.subtract(*np.quantile(v, [0.975, 0.025]))) for k, v in draws.items()}


def test_odd_one_out_intervals_resample_subjects_across_triplets(marks):
    """All 20 subjects answered all 120 triplets and lean differently: the interval resamples them
    jointly across triplets, as well as the triplets, and is 30-60% wider than one that redraws
    each triplet's votes independently (0.064, 0.089, 0.165)."""
    widths = crossed_bootstrap_widths(raw_color_votes(), 1000, seed=5)
    s = by_name(score_odd_one_out([], marks, boot=Bootstrap(n_boot=1000)))
    for name, key in (("human_individual_agreement", "ia"), ("human_individual_agreement_loo", "loo"),
                      ("human_majority_split_half", "half")):
        x = s[name]
        width = x.extra["ci_high_two_level"] - x.extra["ci_low_two_level"]
        assert width == pytest.approx(widths[key], rel=0.15), name
        assert "triplets and raters resampled jointly" in x.extra["ci_two_level_method"], name
        assert "triplets and raters resampled jointly" in x.method, name
    assert widths["ia"] > 0.08 and widths["loo"] > 0.12 and widths["half"] > 0.2


def test_one_builder_for_the_odd_one_out_votes(marks, things500):
    for stimset in (marks, things500):
        h = stimset.human
        assert isinstance(h, OddOneOutVotes)
        assert list(h.stimulus_ids) == [s.stimulus_id for s in stimset.test]
        assert np.array_equal(h.votes, [s.meta["votes"] for s in stimset.test])
        assert np.array_equal(h.targets[h.primary], [s.human_target for s in stimset.test])


# -- the silhouette B ceiling and the observers' non-responses ------------------------------------

def loo_modal_agreement_from_raw(na_as_miss):
    """Each observer's answer on each test image against the modal answer of the other nine (their
    non-responses neither vote nor count; ties split), over every answer, or, ``na_as_miss``, over
    every (observer, image) with an observer's own non-response a miss."""
    wide = silhouette_raw().pivot(index="image", columns="subj", values="object_response")
    hits, total = 0.0, 0
    for _, row in wide.iterrows():
        for subj, answer in row.items():
            others = row.drop(subj)
            counts = others[others != "na"].value_counts()
            modes = set(counts[counts == counts.max()].index)
            if answer == "na" and not na_as_miss:
                continue
            total += 1
            hits += (answer in modes) / len(modes)
    return hits / total


def test_silhouette_b_ceiling_says_how_non_responses_count(sources):
    without, as_miss = loo_modal_agreement_from_raw(False), loo_modal_agreement_from_raw(True)
    assert round(without, 3) == 0.791 and round(as_miss, 3) == 0.779
    stimset = silhouette.build(sources)
    recs = [{"stimulus_id": s.stimulus_id, "response": s.human_target, "parse_status": "ok"}
            for s in stimset.test]
    s = by_name(score_classification_vs_observers(recs, stimset, boot=Bootstrap(n_boot=100, n_boot_kappa=100)))
    for name in ("B", "human_loo_modal_agreement"):
        got = s[name].ceiling if name == "B" else s[name].value
        assert got == pytest.approx(without, abs=1e-12), name
        assert s[name].extra["ceiling_na_as_miss"] == pytest.approx(as_miss, abs=1e-12), name
        assert "non-responses" in s[name].method and "0.779" in s[name].method, name
