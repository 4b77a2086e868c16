"""Rank groups: which models a task tells apart, with the familywise error of all its pairs held.

A task's answer is its family's primary score per model (:meth:`Family.primary_score`, the
report matrix's number, higher is more human-like). Two models are told apart when their
difference survives a test that holds the familywise error of all the task's k(k-1)/2 pairs at 5%:
among models that are all equal, the chance that any two get different letters stays near 5%
however many models a task ranks (one 95% interval per pair, uncorrected, splits 8 equal models on
80 stimuli in about 40% of experiments). Both statistics of a pair are recomputed on the *same*
resampled stimuli in every draw (SPEC section 6: paired model-vs-model bootstrap); the test is the
bootstrap's step-down max-|t| (:func:`told_apart`), the resampling analogue of Tukey's HSD. It
uses that every pair of a model shares its draws, so it is less conservative than Holm or
Bonferroni, whose bootstrap p-values would also be too coarse at 1,000 draws for 45 pairs (a
p-value under 0.05/45 needs fewer than 1.1 draws past 0); each draw is studentised by its own
standard error, which on 80 binary stimuli brings the familywise error from about 7.5% (the
bootstrap's standard error held fixed) to 5%. "Not told apart" is not transitive (a ~ b and b ~ c
with a and c apart), so groups are the maximal sets of models no two of which are told apart
(maximal cliques), lettered from the best one down, as a compact letter display: two models share
a letter exactly when the test does not tell them apart.

The paired statistic is the primary score written per stimulus (:class:`ItemValues`): a mean over
the stimuli a model answered of a per-stimulus value (1[r = modal answer] for B, proportion correct
for CHART-6 accuracy_all ...). Each draw resamples the whole test split once, for every model, and
each model's statistic is its mean over the answered stimuli in the draw, so nulls stay excluded as
the scorers exclude them. Where a primary score has no per-stimulus form here, or the per-stimulus
form does not reproduce the scorer's value (a family whose targets depend on the model, e.g. an
observer's own decisions scored against the others' modal answers), the groups of that task come
from the models' own 95% intervals instead, read as normal and independent, with Holm's
step-down over the pairs, and the method says so.

A censored value (the capacity fitted beyond the tested range) or a missing one (no answer
parseable) is reported as such and never ranked as a number. Pure numpy.
"""

from __future__ import annotations

import string
from statistics import NormalDist
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .bootstrap import by_draws, resample_indices
from .record import Score
from .tasks import Bootstrap, Family, get_family

if TYPE_CHECKING:
    from ..stimuli.base import StimulusSet

LEVEL = 0.95
# the familywise correction of the letters, as every surface names it
CORRECTION = "familywise 5% (step-down bootstrap max-|t|)"
UNPAIRED_CORRECTION = "familywise 5% (Holm)"


def number(x: float | None, decimals: int = 3) -> str:
    """The one rounding rule of every surface (terminal, summary matrix, report, registry
    scorecard): ``decimals`` fixed digits (the family's :meth:`~.tasks.Family.decimals_of`), '-'
    where there is no value."""
    return "-" if x is None or x != x else f"{x:.{decimals}f}"


def interval(score: Score, decimals: int = 3) -> str:
    """``[lo, hi]`` of a score's 95% interval by :func:`number`'s rule; '' where it has none."""
    return "" if score.ci_low is None else f"[{number(score.ci_low, decimals)}, {number(score.ci_high, decimals)}]"


def value_interval(score: Score, decimals: int = 3) -> str:
    """``value [lo, hi]``, as every surface shows a score."""
    return f"{number(score.value, decimals)} {interval(score, decimals)}".rstrip()


def shown_value(score: Score, decimals: int = 3) -> str:
    """:func:`value_interval`, and where the value is censored, on which side (``1.0 [1.0, 1.0]
    censored below``): the score tables' and the unranked tasks' form."""
    side = score.extra.get("censored")
    return value_interval(score, decimals) + (f" censored {side}" if side else "")


def verdict_text(family: Family, scores: Sequence[Score]) -> str:
    """An unranked task's answer for one model: its family's verdict scores as the tables print
    them (``capacity 7.9 [6.8, 9.1]; capacity_in_band 1``); '' for a family without a verdict."""
    by = {s.name: s for s in scores}
    return "; ".join(f"{n} {shown_value(by[n], family.decimals_of(n))}" for n in family.verdict if n in by)


@dataclass(frozen=True)
class ItemValues:
    """One model's primary statistic per test stimulus (test-split order): ``values[i]`` counts
    where ``answered[i]``; the statistic is their mean over the answered stimuli."""

    values: np.ndarray
    answered: np.ndarray

    def to_dict(self) -> dict[str, list]:
        """As the battery's intervals.json holds it (``primary_items``), for the report to rank
        the models paired as the recipe's end does."""
        return {"values": self.values.tolist(), "answered": self.answered.astype(int).tolist()}

    @classmethod
    def from_dict(cls, d: dict[str, list]) -> ItemValues:
        return cls(np.asarray(d["values"], float), np.asarray(d["answered"], bool))

    def statistic(self, idx: np.ndarray) -> np.ndarray:
        """The statistic of each row of resampled stimulus indices (NaN where none is answered)."""
        w = self.answered[idx].astype(float)
        total = w.sum(axis=-1)
        out = np.full(total.shape, np.nan)
        np.divide((self.values[idx] * w).sum(axis=-1), total, out=out, where=total > 0)
        return out


def _index(stimset: StimulusSet) -> dict[str, int]:
    return {s.stimulus_id: i for i, s in enumerate(stimset.test)}


def _per_stimulus(records: list[dict], stimset: StimulusSet,
                  value: Callable[[dict, int], float]) -> ItemValues:
    """``value(record, i)`` of each parseable record of test stimulus i; unanswered stimuli 0."""
    index = _index(stimset)
    values, answered = np.zeros(len(index)), np.zeros(len(index), bool)
    for r in records:
        i = index[r["stimulus_id"]]
        if r["parse_status"] == "ok":
            values[i], answered[i] = value(r, i), True
    return ItemValues(values, answered)


def _modal_match(records: list[dict], stimset: StimulusSet) -> ItemValues:
    """B of the classification family: 1[r = the panel's modal answer]."""
    test = stimset.test
    return _per_stimulus(records, stimset, lambda r, i: float(r["response"] == test[i].human_target))


def _primary_target_match(records: list[dict], stimset: StimulusSet) -> ItemValues:
    """B of the odd-one-out family: 1[chosen position = the primary reference's target]."""
    from ..stimuli.base import OddOneOutVotes
    from .odd_one_out import _position

    human = stimset.human_as(OddOneOutVotes)
    target = np.asarray(human.targets[human.primary])
    return _per_stimulus(records, stimset,
                         lambda r, i: float(_position(r, stimset.task_id) == target[i]))


def _count_correct(records: list[dict], stimset: StimulusSet) -> ItemValues:
    """Accuracy of the capacity family: 1[r = k]."""
    test = stimset.test
    return _per_stimulus(records, stimset,
                         lambda r, i: float(float(r["response"]) == int(test[i].ground_truth)))


def _item_accuracy_all(records: list[dict], stimset: StimulusSet) -> ItemValues:
    """CHART-6 accuracy_all: each item's proportion correct over all its presentations."""
    from .chart6 import item_table

    table = item_table(records, stimset)
    return ItemValues(np.nan_to_num(table.p_all), table.total > 0)


# (scoring family, primary score) -> its per-stimulus form
PER_STIMULUS: dict[tuple[str, str], Callable[[list[dict], StimulusSet], ItemValues]] = {
    ("classification_vs_observers", "B"): _modal_match,
    ("odd_one_out", "B"): _primary_target_match,
    ("capacity", "accuracy"): _count_correct,
    ("chart6", "accuracy_all"): _item_accuracy_all,
}


def primary_items(scoring: str, scores: list[Score], records: list[dict],
                  stimset: StimulusSet) -> ItemValues | None:
    """The task's primary statistic per stimulus for the records it was scored from, or None where
    the family has no per-stimulus form of it or that form does not reproduce the scored value."""
    primary = get_family(scoring).primary_score(scores)
    form = None if primary is None else PER_STIMULUS.get((scoring, primary.name))
    if form is None or primary is None or primary.value is None:
        return None
    items = form(records, stimset)
    value = items.statistic(np.arange(len(items.values))[None])[0]
    return items if np.isclose(value, primary.value, rtol=0, atol=1e-9) else None


def censored(score: Score) -> str | None:
    """Why a value cannot be ranked as a number: 'no value' or the side it is censored on."""
    if score.value is None:
        return "no value (no parseable answer)"
    side = score.extra.get("censored")
    return f"censored {side} the tested range (shown at its end)" if side else None


def bounding_ceiling(score: Score) -> float | None:
    """The score's human ceiling where it bounds the score (``extra['ceiling_is_bound']``: no
    model can pass it); None where there is none or a model can pass it (a cited ceiling, such
    as B's)."""
    return score.ceiling if score.ceiling is not None and score.extra.get("ceiling_is_bound") else None


def position(score: Score) -> float | None:
    """Where the value lies from the floor (0; the score's 0 where it has none) to the top (1):
    the human ceiling where it bounds the score (:func:`bounding_ceiling`), else the score's
    maximum 1, so no value passes 1. The terminal's bar and the report's matrix both show it.
    None without a value, or where the top is not above the floor."""
    if score.value is None:
        return None
    floor = score.floor if score.floor is not None else 0.0
    top = bounding_ceiling(score)
    top = 1.0 if top is None else top
    return (score.value - floor) / (top - floor) if top > floor else None


@dataclass(frozen=True)
class Ranked:
    model_id: str
    score: Score
    groups: str  # letters of the groups it belongs to


@dataclass(frozen=True)
class TaskRanking:
    score_name: str
    ranked: list[Ranked]  # best first
    unranked: list[tuple[str, Score | None, str]]  # (model, score, why it is not ranked)
    method: str  # how the groups were formed


def studentised(items: list[ItemValues], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each pair's difference stat_a - stat_b and its standard error, in every row of resampled
    stimulus indices: ((draws, models, models), the same). The error is the delta method's for a
    mean over the answered stimuli (each stimulus's influence w (v - stat) / mean(w), the pair's
    the difference of the two), with n - 1 in the denominator, as a paired t-test has it."""
    n = idx.shape[1]
    v = np.stack([it.values for it in items], axis=-1)[idx]  # (draws, stimuli, models)
    w = np.stack([it.answered for it in items], axis=-1)[idx].astype(float)
    share = w.mean(axis=1)  # (draws, models)
    stat = np.divide((v * w).sum(axis=1), w.sum(axis=1), out=np.full(share.shape, np.nan), where=share > 0)
    influence = np.divide(w * (v - np.nan_to_num(stat)[:, None, :]), share[:, None, :],
                          out=np.zeros_like(v), where=share[:, None, :] > 0)
    m = influence.transpose(0, 2, 1) @ influence / n
    own = np.einsum("baa->ba", m)
    var = np.maximum(own[:, :, None] + own[:, None, :] - 2 * m, 0.0) / max(n - 1, 1)
    return stat[:, :, None] - stat[:, None, :], np.sqrt(var)


def told_apart(items: list[ItemValues], boot: Bootstrap) -> np.ndarray:
    """Which pairs of models a task tells apart with the familywise error of all pairs held at 5%:
    a (models, models) boolean matrix. The bootstrap-t's max-|t| (the resampling analogue of
    Tukey's HSD), step-down (Romano and Wolf 2005): the pairs in order of their |t| = |d| / se, each
    told apart while its |t| exceeds the 95th percentile over draws of the largest |t*| = |d* - d|
    / se* among it and the pairs after it, each draw studentised by its own standard error (so the
    percentile carries how uncertain the error itself is, as Student's t does). One draw of stimuli
    serves every model."""
    k, n = len(items), len(items[0].values)
    upper = np.triu_indices(k, 1)
    if not upper[0].size:
        return np.zeros((k, k), bool)
    diff, se = (x[0][upper] for x in studentised(items, np.arange(n)[None]))
    t_obs = np.where(se > 0, np.abs(diff) / np.where(se > 0, se, 1.0), np.where(diff != 0, np.inf, 0.0))
    idx = resample_indices(n, boot.n_boot, boot.seed)
    t_star = by_draws(lambda rows: _t_star(items, idx[rows], diff, upper), boot.n_boot, n * k)
    order = np.argsort(-t_obs, kind="stable")
    # the largest |t*| among each pair and every pair after it in that order: a suffix maximum
    beyond = np.fmax.accumulate(t_star[:, order[::-1]], axis=1)[:, ::-1]
    critical = np.nanquantile(beyond, LEVEL, axis=0)
    apart = np.zeros(len(order), bool)
    apart[order] = np.logical_and.accumulate(t_obs[order] > critical)
    out = np.zeros((k, k), bool)
    out[upper] = apart
    return out | out.T


def _t_star(items: list[ItemValues], idx: np.ndarray, diff: np.ndarray, upper: tuple[np.ndarray, ...]) -> np.ndarray:
    """|d* - d| / se* of every pair in each row of ``idx`` (0 where a draw's pair never varies,
    NaN where a model answered none of the drawn stimuli)."""
    d, se = studentised(items, idx)
    d, se = d[:, upper[0], upper[1]], se[:, upper[0], upper[1]]
    return np.abs(np.divide(d - diff, se, out=np.where(np.isnan(d), np.nan, 0.0), where=se > 0))


def holm_overlap(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Which pairs are told apart from the models' own 95% intervals alone: each read as a normal
    interval (standard error = its width / 3.92), the two as independent, Holm's step-down over
    the pairs' two-sided p-values at a familywise 5%. A model without an interval is told apart
    from none."""
    k = len(values)
    upper = np.triu_indices(k, 1)
    se = (high - low) / (2 * NormalDist().inv_cdf(1 - (1 - LEVEL) / 2))
    z = np.abs(values[:, None] - values[None, :])[upper] / np.hypot(se[:, None], se[None, :])[upper]
    p = np.array([1.0 if np.isnan(x) else 2 * (1 - NormalDist().cdf(x)) for x in z])
    order = np.argsort(p, kind="stable")
    apart = np.zeros(len(p), bool)
    apart[order] = np.logical_and.accumulate(p[order] <= (1 - LEVEL) / (len(p) - np.arange(len(p))))
    out = np.zeros((k, k), bool)
    out[upper] = apart
    return out | out.T


def letter_groups(order: list[int], together: np.ndarray) -> dict[int, str]:
    """Maximal cliques of the 'not told apart' graph, lettered by their best member (``order``
    best first): model -> its letters."""
    rank = {m: k for k, m in enumerate(order)}
    cliques: list[set[int]] = []
    neighbours = {m: {o for o in order if o != m and together[m, o]} for m in order}
    # Bron-Kerbosch with a pivot, on a stack of its own: a clique is as deep as it has members, and
    # a roster of a thousand models none of which is told apart is one clique of a thousand
    stack: list[tuple[set[int], set[int], set[int]]] = [(set(), set(order), set())]
    while stack:
        r, p, x = stack.pop()
        if not p and not x:
            cliques.append(r)
            continue
        pivot = max(p | x, key=lambda u: len(p & neighbours[u]))
        for v in sorted(p - neighbours[pivot], key=rank.__getitem__):
            stack.append((r | {v}, p & neighbours[v], x & neighbours[v]))
            p = p - {v}
            x = x | {v}
    cliques.sort(key=lambda c: sorted(rank[m] for m in c))
    names = string.ascii_lowercase + string.ascii_uppercase
    labels = [names[k] if k < len(names) else f"g{k}" for k in range(len(cliques))]
    return {m: "".join(label for label, c in zip(labels, cliques) if m in c) for m in order}


def rank_task(entries: dict[str, tuple[Score | None, ItemValues | None]], boot: Bootstrap,
              score_name: str) -> TaskRanking:
    """Rank groups of the models of one task: ``entries`` model -> (primary score, its
    per-stimulus form or None)."""
    unranked: list[tuple[str, Score | None, str]] = []
    rankable: list[tuple[str, Score, ItemValues | None]] = []
    for model, (score, items) in entries.items():
        why = "no primary score" if score is None else censored(score)
        if score is None or why:
            unranked.append((model, score, why or ""))
        else:
            rankable.append((model, score, items))
    if not rankable:
        return TaskRanking(score_name, [], unranked, "")
    order = sorted(range(len(rankable)), key=lambda k: -(rankable[k][1].value or 0.0))
    paired = [items for _, _, items in rankable if items is not None]
    pairs = len(rankable) * (len(rankable) - 1) // 2
    if len(paired) == len(rankable) and len({len(it.values) for it in paired}) == 1:
        together = ~told_apart(paired, boot)
        method = (f"{CORRECTION} over {pairs} pairs: paired bootstrap over stimuli, both models of a pair "
                  f"on the same resampled stimuli, {boot.n_boot} draws, seed {boot.seed}; models sharing a "
                  f"letter are not told apart")
    else:
        low = np.array([np.nan if s.ci_low is None else s.ci_low for _, s, _ in rankable])
        high = np.array([np.nan if s.ci_high is None else s.ci_high for _, s, _ in rankable])
        together = ~holm_overlap(np.array([s.value for _, s, _ in rankable], float), low, high)
        method = (f"NOT PAIRED, {UNPAIRED_CORRECTION} over {pairs} pairs: each model's own 95% interval "
                  f"(bootstrap over stimuli) read as normal, the two as independent (this score has no "
                  f"per-stimulus form that reproduces it); models sharing a letter are not told apart")
    letters = letter_groups(order, together)
    ranked = [Ranked(rankable[k][0], rankable[k][1], letters[k]) for k in order]
    return TaskRanking(score_name, ranked, unranked, method)
