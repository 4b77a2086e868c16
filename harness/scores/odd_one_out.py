"""Odd-one-out scores: B against each human reference, individual agreement, floors and ceilings.

For the triplet tasks (``similarity.chart.mark_color``, ``similarity.nat.things``) the stimulus
set's ``human`` is an :class:`~harness.stimuli.base.OddOneOutVotes`: in test-split order and
montage positions 1/2/3, each reference's targets (the primary one is ``Stimulus.human_target``)
and the n x 3 counts of individual odd-one-out votes.

Model scores (over parseable trials; the null fraction v and the bracket (1-v)x .. (1-v)x+v in
``extra``):

- ``B`` (primary reference) and ``B_<name>``: mean 1[r_i = h_i]. Ceiling: the paper's cited 0.863
  test-retest consistency of the human modal choice on THINGS triplets (:data:`CITED_B_CEILING`;
  not computable from these sources). The colour triplets borrow it: their source
  (:func:`b_ceiling_source`) says so and names their own ``human_majority_split_half``.
  Matching a consensus more often than people re-match it is not meaningful, so B above it is
  not better; B can still reach 1, and that ceiling is a reference, not a bound. B's ``extra``
  carries the task's own ``human_majority_split_half`` beside it.
  Against a majority reference ``extra['B_ties_split']`` counts a response to any of t tied
  majority positions as 1/t.
- ``individual_agreement``: mean over the answered triplets of the share of human votes equal to
  the model's choice. Its ceiling is exactly what always choosing the majority scores on those same
  triplets (``human_individual_agreement`` when nothing is null), so (value - floor) /
  (ceiling - floor) cannot exceed 1.
- Floors: the best a position-only (constant) strategy scores on these targets, max_k of the
  score of always answering k (for B: max_k f_k, f_k the share of targets at position k).

Human references (scores named ``human_*``):

- ``human_individual_agreement``: mean over triplets of the share of votes matching the majority;
  ``human_individual_agreement_loo``: each vote vs the majority of the others (ties split).
- ``human_majority_split_half``: the raters of each triplet split at random into two halves
  (sizes floor(m/2) and ceil(m/2)); 1 when the halves' majorities agree, ties split (1/(t_a t_b)
  per shared tied option); averaged over ``n_boot`` random splits. Spearman-Brown is *not*
  applied: it is the consistency of half-panel majorities, a lower reference for the full panel.
- ``human_modal_test_retest``: the cited 0.863, with its source.

Intervals: percentile bootstrap over triplets (one level, ``ci_low``/``ci_high``) and, for every
human-derived quantity and for ``individual_agreement``, a crossed two-level bootstrap in
``extra['ci_low_two_level']`` / ``['ci_high_two_level']``: the triplets and the raters are
resampled jointly, a drawn rater bringing their answers on every drawn triplet they rated (the
mark colours' 20 subjects answered all 120 triplets; a THINGS worker answered some of the
triplets), so a person's consistent leaning counts once per person, not once per triplet. The
draws are re-centred on the estimate (bootstrap.recentred_ci). Each record's method names both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..stimuli.base import OddOneOutVotes, StimulusSet
from .agreement import mean_stat, null_bracket, parseable
from .bootstrap import (
    bootstrap,
    once_per_input,
    percentile_ci,
    recentred_ci,
    resample_indices,
)
from .record import Score
from .tasks import Bootstrap

POSITIONS = (1, 2, 3)
CITED_B_CEILING = 0.863
CITED_B_CEILING_SOURCE = (
    "published test-retest consistency of the human modal choice on THINGS triplets (Gestalt paper, "
    "appendix D.3), not computed from sources")
THINGS_TASK = "similarity.nat.things"  # the triplets the cited figure was measured on


def b_ceiling_source(task_id: str, split_half: float) -> str:
    """What B's cited ceiling is for ``task_id``: THINGS' own figure, or one borrowed from THINGS
    beside the task's own ``human_majority_split_half`` (``split_half``)."""
    if task_id.partition(":")[0] == THINGS_TASK:
        return f"cited: {CITED_B_CEILING_SOURCE}"
    return (f"cited: {CITED_B_CEILING_SOURCE}; borrowed: not measured on {task_id}, whose own "
            f"human_majority_split_half is {split_half:.3f}")
ONE_LEVEL = "percentile bootstrap over triplets"
TWO_LEVEL = ("two-level crossed bootstrap: triplets and raters resampled jointly (a drawn rater "
             "brings their answers on every drawn triplet they rated), percentile re-centred on "
             "the estimate")


def position_shares(targets: np.ndarray) -> list[float]:
    """f_k: share of targets at montage position k = 1, 2, 3."""
    t = np.asarray(targets)
    return [float(np.mean(t == k)) for k in POSITIONS]


def majority_agreement(votes: np.ndarray) -> np.ndarray:
    """Per triplet (last axis = the 3 options): share of the votes for the majority option."""
    v = np.asarray(votes, dtype=float)
    return v.max(axis=-1) / v.sum(axis=-1)


def loo_majority_agreement(votes: np.ndarray) -> np.ndarray:
    """Per triplet: each vote vs the majority of the remaining ones, ties split, averaged."""
    v = np.asarray(votes, dtype=float)
    agree = np.zeros(v.shape[:-1])
    for p in range(3):
        rest = v.copy()
        rest[..., p] -= 1
        top = rest == rest.max(axis=-1, keepdims=True)
        agree += v[..., p] * top[..., p] / top.sum(axis=-1)
    return agree / v.sum(axis=-1)


def split_halves(votes: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Vote counts of two random rater halves per triplet (sizes floor(m/2), ceil(m/2))."""
    v = np.asarray(votes, dtype=np.int64)
    size = v.sum(axis=-1) // 2
    a0 = rng.hypergeometric(v[..., 0], v[..., 1] + v[..., 2], size)
    a1 = rng.hypergeometric(v[..., 1], v[..., 2], size - a0)
    half = np.stack([a0, a1, size - a0 - a1], axis=-1)
    return half, v - half


def majority_match(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Chance that two vote counts' majorities agree, each tie broken at random."""
    top_a = a == a.max(axis=-1, keepdims=True)
    top_b = b == b.max(axis=-1, keepdims=True)
    return (top_a & top_b).sum(axis=-1) / (top_a.sum(axis=-1) * top_b.sum(axis=-1))


def rater_weights(n_raters: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_raters): how often each rater is drawn when as many raters as there are are
    drawn with replacement; a rater's weight applies to all their answers at once."""
    drawn = np.random.default_rng([seed, 11]).integers(0, n_raters, size=(n_boot, n_raters))
    weights = np.zeros((n_boot, n_raters))
    np.add.at(weights, (np.arange(n_boot)[:, None], drawn), 1)
    return weights


def _per_triplet_mean(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mean over the last axis (triplets) of the valid entries; NaN where none is valid."""
    count = valid.sum(axis=-1)
    total = np.where(valid, values, 0.0).sum(axis=-1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def crossed_draws(raters: np.ndarray, choices: np.ndarray, idx: np.ndarray, weights: np.ndarray,
                  rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The crossed (triplets x raters) bootstrap of the human references, one row per draw.

    ``idx`` (draws, n) resamples the triplets and ``weights`` (draws, raters) the raters, jointly
    across triplets: a rater drawn twice counts twice on every drawn triplet they answered, one
    not drawn on none. Per draw: the weighted votes of each drawn triplet (``votes``, draws x n x
    3), the majority agreement, the leave-one-out agreement (each answer vs the majority of the
    *other* raters: a rater's copies are never their own others) and the agreement of the
    majorities of two random halves of each triplet's raters (a rater's copies stay in one half).
    A triplet none of whose raters is drawn (or with an empty half) drops out of that draw.
    """
    chunk = max(1, 2_000_000 // max(1, idx.shape[1] * raters.shape[1]))  # bounds the memory
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("votes", "majority", "loo", "split_half")}
    m = (raters >= 0).sum(axis=1)
    for start in range(0, len(idx), chunk):
        t = idx[start:start + chunk]
        rows = np.arange(len(t))[:, None, None]
        slot_rater = raters[t]
        w = np.where(slot_rater >= 0, weights[start:start + chunk][rows, np.maximum(slot_rater, 0)], 0.0)
        onehot = choices[t][..., None] == np.array(POSITIONS)  # (draws, n, R, 3)
        cast = w[..., None] * onehot
        votes = cast.sum(axis=2)
        total = votes.sum(axis=-1)
        out["votes"].append(votes)
        out["majority"].append(_per_triplet_mean(votes.max(axis=-1) / np.maximum(total, 1), total > 0))
        others = votes[:, :, None, :] - cast  # (draws, n, R, 3): the other raters' votes
        top = (others == others.max(axis=-1, keepdims=True)) & (others.sum(axis=-1, keepdims=True) > 0)
        agree = (top & onehot).sum(axis=-1) / np.maximum(top.sum(axis=-1), 1)
        counted = w * top.any(axis=-1)
        per_triplet = (counted * agree).sum(axis=-1)
        weight = counted.sum(axis=-1)
        out["loo"].append(_per_triplet_mean(per_triplet / np.maximum(weight, 1), weight > 0))
        keys = np.where(slot_rater >= 0, rng.random(slot_rater.shape), 2.0)
        rank = np.argsort(np.argsort(keys, axis=-1), axis=-1)
        in_a = (rank < (m[t] // 2)[..., None])[..., None]
        half_a, half_b = (cast * in_a).sum(axis=2), (cast * ~in_a).sum(axis=2)  # empty slots weigh 0
        both = (half_a.sum(axis=-1) > 0) & (half_b.sum(axis=-1) > 0)
        out["split_half"].append(_per_triplet_mean(majority_match(half_a, half_b), both))
    return {k: np.concatenate(v) for k, v in out.items()}


def _interval(value: float, draws: np.ndarray, two_level: bool = False) -> tuple[float, float, float]:
    lo, hi = recentred_ci(value, draws) if two_level else percentile_ci(np.asarray(draws, float))
    return value, lo, hi


@once_per_input
def human_references(votes: np.ndarray, raters: np.ndarray, choices: np.ndarray, n_boot: int,
                     seed: int) -> dict[str, dict[str, Any]]:
    """Each human reference: value, one-level (triplets) and crossed (triplets x raters) 95%
    intervals."""
    v = np.asarray(votes, dtype=np.int64)
    n = len(v)
    rng = np.random.default_rng([seed, 10])
    idx = resample_indices(n, n_boot, seed)
    crossed = crossed_draws(raters, choices, idx, rater_weights(int(raters.max()) + 1, n_boot, seed),
                            np.random.default_rng([seed, 12]))
    out: dict[str, dict[str, Any]] = {}
    for name, per_triplet, key in (("human_individual_agreement", majority_agreement, "majority"),
                                   ("human_individual_agreement_loo", loo_majority_agreement, "loo")):
        values = per_triplet(v)
        out[name] = {"one": _interval(float(values.mean()), values[idx].mean(axis=-1)),
                     "two": _interval(float(values.mean()), crossed[key], True)}
    # split half: the point is the mean over n_boot random splits; each one-level draw resamples
    # triplets under a fresh split
    half_a, half_b = split_halves(np.broadcast_to(v, (n_boot, *v.shape)), rng)
    per_split = majority_match(half_a, half_b)
    value = float(per_split.mean())
    one = per_split[np.arange(n_boot)[:, None], idx].mean(axis=-1)
    out["human_majority_split_half"] = {"one": _interval(value, one),
                                        "two": _interval(value, crossed["split_half"], True)}
    out["_crossed_votes"] = {"idx": idx, "votes": crossed["votes"]}
    return out


def _two_level_extra(two: tuple[float, float, float]) -> dict[str, Any]:
    return {"ci_low_two_level": two[1], "ci_high_two_level": two[2], "ci_method": ONE_LEVEL,
            "ci_two_level_method": TWO_LEVEL}


HUMAN_METHODS = {
    "human_individual_agreement": "mean over triplets of the share of votes matching the majority",
    "human_individual_agreement_loo": "each vote vs the majority of the other votes (ties split), "
                                      "averaged per triplet",
    "human_majority_split_half": "agreement of the majorities of two random halves of each "
                                 "triplet's raters (ties split), mean over random splits; "
                                 "Spearman-Brown not applied",
}


def _interval_method(boot: Bootstrap) -> str:
    return f"{ONE_LEVEL}, {boot.n_boot} draws, seed {boot.seed}; {TWO_LEVEL} in extra"


def checked_index(records: list[dict], stimset: StimulusSet, human: OddOneOutVotes) -> dict[str, int]:
    """Each test triplet's position in the human data, after checking that the records answer
    these montages (same option order) and, where there are records, every one of them."""
    test = stimset.test
    ids = list(human.stimulus_ids)
    if ids != [s.stimulus_id for s in test]:
        raise ValueError(f"{stimset.task_id}: human.stimulus_ids do not match the test split")
    index = {sid: i for i, sid in enumerate(ids)}
    seen = set()
    for r in records:
        sid = r["stimulus_id"]
        if sid not in index:
            raise ValueError(f"{stimset.task_id}: record for unknown stimulus {sid!r}")
        expected = test[index[sid]].option_order or ()
        if r.get("option_order") is not None and tuple(r["option_order"]) != tuple(expected):
            raise ValueError(f"{stimset.task_id}/{sid}: record option_order {r['option_order']} "
                             f"!= the stimulus' {list(expected)}; responses refer to another montage")
        seen.add(sid)
    missing = set(index) - seen
    if records and missing:
        raise ValueError(f"{stimset.task_id}: no record for {len(missing)} test stimuli, "
                         f"e.g. {sorted(missing)[0]}")
    return index


@dataclass(frozen=True)
class RaterReferences:
    """The human references of a task's triplets and what the model's scores take from them."""

    scores: list[Score]  # the human_* records, the cited test-retest consistency last
    split_half: float  # human_majority_split_half, shown beside B's cited ceiling
    ceiling_source: str  # where B's cited ceiling comes from
    crossed: dict[str, np.ndarray]  # the crossed bootstrap's resampled triplets ("idx") and votes


def rater_references(human: OddOneOutVotes, stimset: StimulusSet, boot: Bootstrap) -> RaterReferences:
    """The human_* scores: agreement with the majority, leave-one-out, the split-half
    consistency of the majority, and the cited test-retest figure."""
    version = stimset.version
    # a copy: the result is shared
    refs = dict(human_references(np.asarray(human.votes), np.asarray(human.raters),
                                 np.asarray(human.choices), boot.n_boot, boot.seed))
    crossed = refs.pop("_crossed_votes")
    interval_method = _interval_method(boot)
    scores = [
        Score(name=name, value=est["one"][0], ci_low=est["one"][1], ci_high=est["one"][2],
              n=len(human.stimulus_ids), nulls=0, version=version,
              method=f"{HUMAN_METHODS[name]}; {interval_method}", extra=_two_level_extra(est["two"]))
        for name, est in refs.items()
    ]
    split_half = refs["human_majority_split_half"]["one"][0]
    ceiling_source = b_ceiling_source(stimset.task_id, split_half)
    scores.append(Score(
        name="human_modal_test_retest", value=CITED_B_CEILING, ci_low=None, ci_high=None, n=0,
        nulls=0, version=version, method=ceiling_source, extra={"cited": True}))
    return RaterReferences(scores, split_half, ceiling_source, crossed)


@dataclass(frozen=True)
class Choices:
    """The model's parseable odd-one-out choices; nulls are counted, never scored."""

    items: np.ndarray  # each choice's triplet, as an index into the human data
    position: np.ndarray  # the chosen montage position, 1, 2 or 3
    nulls: int
    null_fraction: float  # v

    @property
    def n(self) -> int:
        return len(self.items)


def model_choices(records: list[dict], index: dict[str, int], task_id: str) -> Choices:
    ok, nulls = parseable(records)
    return Choices(items=np.array([index[r["stimulus_id"]] for r in ok], dtype=int),
                   position=np.array([_position(r, task_id) for r in ok], dtype=int),
                   nulls=nulls, null_fraction=nulls / len(records))


def b_scores(choices: Choices, human: OddOneOutVotes, refs: RaterReferences, stimset: StimulusSet,
             boot: Bootstrap) -> list[Score]:
    """B against each human reference, with the position-only floor and the cited ceiling."""
    seed, n_boot = boot.seed, boot.n_boot
    items, response, n, v = choices.items, choices.position, choices.n, choices.null_fraction
    votes = np.asarray(human.votes)
    shares = votes / votes.sum(axis=1)[:, None]
    scores = []
    for name, target in human.targets.items():
        match = (response == target[items]).astype(float)
        est = bootstrap(mean_stat(match), n, n_boot, seed)
        lo, hi = null_bracket(est[0], v)
        f = position_shares(target)
        extra: dict[str, Any] = {
            "reference": name,
            "null_fraction": v,
            "B_full_low": lo,
            "B_full_high": hi,
            "position_shares": f,
            "human_vs_reference": float(np.mean(shares[np.arange(len(votes)), target - 1])),
            "ceiling_source": refs.ceiling_source,
            # the task's own agreement among its raters, beside the cited ceiling it borrows
            "human_majority_split_half": refs.split_half,
        }
        if name == "majority":
            top = votes == votes.max(axis=1, keepdims=True)
            split = top[items, response - 1] / top[items].sum(axis=1)
            extra["B_ties_split"] = float(split.mean()) if n else float("nan")
            extra["tied_items"] = int((top.sum(axis=1) > 1).sum())
        scores.append(Score(
            name="B" if name == human.primary else f"B_{name}",
            value=est[0], ci_low=est[1], ci_high=est[2], n=n, nulls=choices.nulls,
            method=f"mean 1[r = {name} target] over parseable trials; {ONE_LEVEL}, {n_boot} "
                   f"draws, seed {seed}; ceiling: {CITED_B_CEILING}, {refs.ceiling_source}",
            version=stimset.version, ceiling=CITED_B_CEILING, floor=max(f), extra=extra))
    return scores


def individual_agreement(choices: Choices, human: OddOneOutVotes, refs: RaterReferences,
                         stimset: StimulusSet, boot: Bootstrap) -> Score:
    """The share of human votes equal to the model's choice, with its ceiling (always choosing
    the majority) and floor (the best constant position) over the same answered triplets."""
    items, response, n, v = choices.items, choices.position, choices.n, choices.null_fraction
    votes = np.asarray(human.votes)
    shares = votes / votes.sum(axis=1)[:, None]
    agree = shares[items, response - 1]
    est = bootstrap(mean_stat(agree), n, boot.n_boot, boot.seed)
    # the crossed draws reuse the references' resampled triplets and raters, so model and
    # ceiling intervals come from the same draws
    lookup = np.full(len(votes), -1)
    lookup[items] = np.arange(n)
    draw_idx, draw_votes = refs.crossed["idx"], refs.crossed["votes"]
    two = (est[0], float("nan"), float("nan"))  # every answer null: no draw holds an answer
    if n:
        answered = lookup[draw_idx]
        resp = np.where(answered >= 0, response[np.maximum(answered, 0)], 1) - 1
        drawn = draw_votes.sum(axis=-1)
        got = np.take_along_axis(draw_votes, resp[..., None], axis=-1)[..., 0] / np.maximum(drawn, 1)
        two = _interval(est[0], _per_triplet_mean(got, (answered >= 0) & (drawn > 0)), True)
    # ceiling and floor over the same answered triplets as the score: over all of them, a model
    # that answers only where people agree most would beat the ceiling
    scored = items if n else np.arange(len(votes))
    ceiling = float(majority_agreement(votes)[scored].mean())
    lo, hi = null_bracket(est[0], v)
    return Score(
        name="individual_agreement", value=est[0], ci_low=est[1], ci_high=est[2], n=n,
        nulls=choices.nulls, version=stimset.version,
        method=f"mean over triplets of the share of human votes equal to the model's choice; "
               f"{_interval_method(boot)}; ceiling: human_individual_agreement (always choosing the "
               f"majority) over the same {n} answered triplets",
        ceiling=ceiling, floor=float(shares[scored].mean(axis=0).max()),
        extra={"ceiling_is_bound": True, "null_fraction": v, "individual_agreement_full_low": lo,
               "individual_agreement_full_high": hi, **_two_level_extra(two)})


def score_odd_one_out(records: list[dict], stimset: StimulusSet, *,
                      boot: Bootstrap = Bootstrap()) -> list[Score]:
    """B against each reference and individual agreement, then the human references; without
    records (e.g. images unavailable) the human references alone."""
    human = stimset.human_as(OddOneOutVotes)
    index = checked_index(records, stimset, human)
    refs = rater_references(human, stimset, boot)
    if not records:
        return refs.scores
    choices = model_choices(records, index, stimset.task_id)
    return (b_scores(choices, human, refs, stimset, boot)
            + [individual_agreement(choices, human, refs, stimset, boot)] + refs.scores)


def _position(record: dict, task_id: str) -> int:
    r = record["response"]
    try:
        p = int(r)
    except (TypeError, ValueError):
        p = None
    if p not in POSITIONS or (isinstance(r, float) and r != p):
        raise ValueError(f"{task_id}/{record['stimulus_id']}: parseable response {r!r} is not "
                         f"a montage position 1, 2 or 3")
    return p
