"""Rank groups: which models a task tells apart, by the paired bootstrap of their difference.

A task's answer is its family's primary score per model (:meth:`Family.primary_score`, the
report matrix's number, higher is more human-like). Two models are told apart when the 95%
percentile interval of the difference of their primary statistics, both recomputed on the *same*
resampled stimuli in every draw (SPEC section 6: paired model-vs-model bootstrap), excludes 0;
otherwise they share a group. "Not told apart" is not transitive (a ~ b and b ~ c with a and c
apart), so groups are the maximal sets of models no two of which are told apart (maximal cliques),
lettered from the best one down, as a compact letter display: two models share a letter exactly
when their paired interval covers 0.

The paired statistic is the primary score written per stimulus (:class:`ItemValues`): a mean over
the stimuli a model answered of a per-stimulus value (1[r = modal answer] for B, proportion correct
for CHART-6 accuracy_all ...). Each draw resamples the whole test split once, for every model, and
each model's statistic is its mean over the answered stimuli in the draw, so nulls stay excluded as
the scorers exclude them. Where a primary score has no per-stimulus form here, or the per-stimulus
form does not reproduce the scorer's value (a family whose targets depend on the model, e.g. an
observer's own decisions scored against the others' modal answers), the groups of that task come
from overlapping 95% intervals instead, and the method says so.

A censored value (the capacity fitted beyond the tested range) or a missing one (no answer
parseable) is reported as such and never ranked as a number. Pure numpy.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .bootstrap import resample_indices
from .record import Score
from .tasks import Bootstrap, Family, get_family

if TYPE_CHECKING:
    from ..stimuli.base import StimulusSet

LEVEL = 0.95


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


def paired_differences(items: list[ItemValues], boot: Bootstrap) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the 95% interval of stat_a - stat_b for every pair of models, each a
    (models, models) matrix; one draw of stimuli serves every model."""
    n = len(items[0].values)
    idx = resample_indices(n, boot.n_boot, boot.seed)
    draws = np.stack([it.statistic(idx) for it in items])  # (models, draws)
    diff = draws[:, None, :] - draws[None, :, :]
    alpha = (1 - LEVEL) / 2
    lo, hi = np.nanquantile(diff, [alpha, 1 - alpha], axis=-1)
    return lo, hi


def letter_groups(order: list[int], together: np.ndarray) -> dict[int, str]:
    """Maximal cliques of the 'not told apart' graph, lettered by their best member (``order``
    best first): model -> its letters."""
    rank = {m: k for k, m in enumerate(order)}
    cliques: list[set[int]] = []

    def expand(r: set[int], p: set[int], x: set[int]) -> None:  # Bron-Kerbosch with a pivot
        if not p and not x:
            cliques.append(r)
            return
        pivot = max(p | x, key=lambda u: len(p & neighbours[u]))
        for v in sorted(p - neighbours[pivot], key=rank.__getitem__):
            expand(r | {v}, p & neighbours[v], x & neighbours[v])
            p = p - {v}
            x = x | {v}

    neighbours = {m: {o for o in order if o != m and together[m, o]} for m in order}
    expand(set(), set(order), set())
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
    if len(paired) == len(rankable) and len({len(it.values) for it in paired}) == 1:
        lo, hi = paired_differences(paired, boot)
        together = (lo <= 0) & (hi >= 0)
        method = (f"paired bootstrap of each difference on the same resampled stimuli, {boot.n_boot} "
                  f"draws, seed {boot.seed}; models sharing a letter are not told apart (its 95% "
                  f"interval covers 0)")
    else:
        low = np.array([np.nan if s.ci_low is None else s.ci_low for _, s, _ in rankable])
        high = np.array([np.nan if s.ci_high is None else s.ci_high for _, s, _ in rankable])
        together = ~((low[:, None] > high[None, :]) | (high[:, None] < low[None, :]))
        method = ("NOT PAIRED: overlapping 95% intervals (this score has no per-stimulus form "
                  "that reproduces it); models sharing a letter have overlapping intervals")
    letters = letter_groups(order, together)
    ranked = [Ranked(rankable[k][0], rankable[k][1], letters[k]) for k in order]
    return TaskRanking(score_name, ranked, unranked, method)
