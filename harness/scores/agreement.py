"""Accuracy, behavioural agreement B and error consistency kappa, with human ceilings and floors.

Definitions follow SPEC section 6 and the Gestalt paper's appendix D:

- ``B = mean_i 1[r_i = h_i]`` over parseable trials (h_i the human modal response).
- Error consistency, aggregate form (the paper's Eq. 2): with model correctness m_i and panel
  per-item accuracy p_i, ``c_obs = mean_i[m_i p_i + (1-m_i)(1-p_i)]``,
  ``c_exp = a_m a_h + (1-a_m)(1-a_h)``, ``kappa = (c_obs - c_exp) / (1 - c_exp)``.
- Original form (Geirhos et al. 2020): the mean over observers j of kappa(m, h_j).

Edge case: ``c_exp = 1`` happens only when both sides are all correct (or all wrong); then
there are no errors whose consistency could be measured and all agreement is explained by
chance, so kappa is defined as 0 (its floor) instead of 0/0.

Every statistic is written for an index matrix (draws, n) so the bootstrap is one vectorised
call; kappa intervals recompute both c terms in every draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from ..stimuli.base import ObserverPanel, Stimulus, StimulusSet
from ..stimuli.silhouette import modal_response
from .bootstrap import (
    N_BOOT_DEFAULT,
    Statistic,
    bootstrap,
    by_draws,
    once_per_input,
    paired_difference,
    percentile_ci,
    recentred_ci,
    resample_indices,
)
from .record import Score
from .tasks import Bootstrap

_EPS = 1e-12


# -- statistics over an index matrix ------------------------------------------------------------

def mean_stat(values: np.ndarray) -> Statistic:
    """Mean of a per-item 0/1 (or real) vector: accuracy, B."""
    v = np.asarray(values, dtype=float)
    return lambda idx: v[idx].mean(axis=-1)


def _kappa(m: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Aggregate-form kappa along the last axis; m and h broadcast (h may be a probability)."""
    a_m, a_h = m.mean(axis=-1), h.mean(axis=-1)
    # mean(m h + (1 - m)(1 - h)), expanded: one product over the (draws, observers, items) arrays
    # of the bootstraps instead of five
    c_obs = 1 - a_m - a_h + 2 * (m * h).mean(axis=-1)
    c_exp = a_m * a_h + (1 - a_m) * (1 - a_h)
    denom = 1 - c_exp
    safe = np.where(denom > _EPS, denom, 1.0)
    return np.where(denom > _EPS, (c_obs - c_exp) / safe, 0.0)


def error_consistency(m: np.ndarray, p: np.ndarray) -> float:
    """Aggregate-form kappa of model correctness m against panel accuracy p."""
    return float(_kappa(np.asarray(m, float), np.asarray(p, float)))


def kappa_stat(m: np.ndarray, p: np.ndarray) -> Statistic:
    m, p = np.asarray(m, float), np.asarray(p, float)
    return lambda idx: _kappa(m[idx], p[idx])


def kappa_pairwise_stat(m: np.ndarray, observer_correct: np.ndarray) -> Statistic:
    """Original form: mean over observers of kappa(m, h_j); observer_correct is (J, n)."""
    m, h = np.asarray(m, float), np.asarray(observer_correct, float)
    return lambda idx: _kappa(m[idx][None], h[:, idx]).mean(axis=0)


def human_pairwise_kappa_stat(observer_correct: np.ndarray) -> Statistic:
    """Mean kappa over all observer pairs (45 for 10 observers): the human-human ceiling."""
    h = np.asarray(observer_correct, float)
    pairs = list(combinations(range(h.shape[0]), 2))
    a, b = (np.array(x) for x in zip(*pairs))
    return lambda idx: _kappa(h[a][:, idx], h[b][:, idx]).mean(axis=0)


def human_loo_kappa_stat(observer_correct: np.ndarray) -> Statistic:
    """Each observer against the leave-one-out mean accuracy of the others, averaged."""
    h = np.asarray(observer_correct, float)
    j = h.shape[0]
    loo = (h.sum(axis=0, keepdims=True) - h) / (j - 1)
    return lambda idx: _kappa(h[:, idx], loo[:, idx]).mean(axis=0)


def loo_modal_agreement_draws(labels: np.ndarray, n_labels: int, items: np.ndarray,
                              observers: np.ndarray, na_as_miss: bool = False) -> np.ndarray:
    """Share of (observer, item) answers equal to the modal answer of the *other* observers.

    The human B reference for a forced-choice task: how often one person reproduces the others'
    mode. ``labels`` is items x observers (label index, -1 = no answer: neither votes nor counts);
    ``items`` (draws, n) and ``observers`` (draws, J) index one bootstrap draw per row. An
    observer drawn twice is never compared with its own copy. A tie among the others' modes
    counts a match as 1/len(modes), the expected value of a random tie-break. An observer's own
    non-response is left out of the share, or, ``na_as_miss``, counted as a miss.
    """
    labels = np.asarray(labels)

    def block(rows: slice) -> np.ndarray:
        obs = observers[rows]
        r = labels[items[rows, :, None], obs[:, None, :]]  # (draws, n, J)
        onehot = (r[..., None] == np.arange(n_labels)) & (r[..., None] >= 0)
        counts = onehot.sum(axis=2)  # (draws, n, labels)
        hits = np.zeros(len(obs))
        total = np.zeros(len(obs))
        for j in range(obs.shape[1]):
            copies = (obs == obs[:, j:j + 1]).sum(axis=1)[:, None, None]
            others = counts - copies * onehot[:, :, j]
            top = others.max(axis=-1, keepdims=True)
            modes = (others == top) & (top > 0)
            own = onehot[:, :, j]
            counted = (own.any(axis=-1) | na_as_miss) & (top[..., 0] > 0)
            hits += ((modes & own).sum(axis=-1) / np.maximum(modes.sum(axis=-1), 1) * counted).sum(axis=1)
            total += counted.sum(axis=1)
        return hits / np.maximum(total, 1)

    return by_draws(block, items.shape[0], items.shape[1])


def human_loo_modal_agreement(observer_responses: list[list[str]], missing: str = "na") -> float:
    """:func:`loo_modal_agreement_draws` for one panel, ``observer_responses[i][j]`` the answer of
    observer j on item i (``missing`` where none)."""
    r = np.asarray(observer_responses, dtype=object)
    vocab = sorted({a for a in r.ravel() if a != missing})
    code = {a: k for k, a in enumerate(vocab)}
    labels = np.vectorize(lambda a: code.get(a, -1), otypes=[int])(r)
    n, j = labels.shape
    return float(loo_modal_agreement_draws(labels, len(vocab), np.arange(n)[None],
                                           np.arange(j)[None])[0])


def observer_indices(n_observers: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, J) observers drawn with replacement: the second level of a two-level bootstrap."""
    return np.random.default_rng([seed, 20]).integers(0, n_observers, size=(n_boot, n_observers))


def two_level_pairwise_kappa(h: np.ndarray, items: np.ndarray, observers: np.ndarray) -> np.ndarray:
    """Mean kappa over pairs of resampled observers that are not copies of one observer."""
    h = np.asarray(h, float)
    a, b = (np.array(x) for x in zip(*combinations(range(observers.shape[1]), 2)))

    def block(rows: slice) -> np.ndarray:
        hs = h[observers[rows, :, None], items[rows, None, :]]  # (draws, J, n)
        k = _kappa(hs[:, a], hs[:, b])
        valid = observers[rows][:, a] != observers[rows][:, b]
        return (k * valid).sum(axis=1) / np.maximum(valid.sum(axis=1), 1)

    return by_draws(block, items.shape[0], items.shape[1])


def two_level_loo_kappa(h: np.ndarray, items: np.ndarray, observers: np.ndarray) -> np.ndarray:
    """Each resampled observer vs the mean of the others that are not its copies, averaged."""
    h = np.asarray(h, float)

    def block(rows: slice) -> np.ndarray:
        obs = observers[rows]
        hs = h[obs[:, :, None], items[rows, None, :]]
        copies = (obs[:, :, None] == obs[:, None, :]).sum(axis=2)[..., None]  # (draws, J, 1)
        total = hs.sum(axis=1, keepdims=True)
        others = (total - copies * hs) / np.maximum(obs.shape[1] - copies, 1)
        return _kappa(hs, others).mean(axis=1)

    return by_draws(block, items.shape[0], items.shape[1])


# -- null accounting ----------------------------------------------------------------------------

def null_bracket(b: float, null_fraction: float) -> tuple[float, float]:
    """(1-v)B <= B_full <= (1-v)B + v: where B would land had nulls been scored either way.
    With every answer null (v = 1, B undefined) that is anywhere from 0 to 1."""
    if null_fraction == 1:
        return 0.0, 1.0
    return (1 - null_fraction) * b, (1 - null_fraction) * b + null_fraction


def parseable(records: list[dict]) -> tuple[list[dict], int]:
    ok = [r for r in records if r["parse_status"] == "ok"]
    return ok, len(records) - len(ok)


# -- the silhouette scorer ----------------------------------------------------------------------

def best_constant(targets: list[Any]) -> float:
    """What always giving the most frequent target scores: a constant answer's floor."""
    return max(targets.count(t) for t in set(targets)) / len(targets)


ONE_LEVEL = "percentile bootstrap over stimuli"
TWO_LEVEL = ("two-level crossed bootstrap: stimuli x observers resampled jointly (a drawn observer "
             "brings their answers on every drawn stimulus), percentile re-centred on the estimate")


def _pairwise_kappas(h: np.ndarray) -> np.ndarray:
    a, b = (np.array(x) for x in zip(*combinations(range(h.shape[0]), 2)))
    return _kappa(h[a], h[b])


@dataclass(frozen=True)
class PanelReferences:
    """The panel's own references on the full test split (they do not depend on the model)."""

    ceil_pair: tuple[float, float, float]  # human_kappa_pairwise: value, one-level CI
    ceil_loo: tuple[float, float, float]  # human_kappa_loo
    pair_two: tuple[float, float]  # two-level CIs of the two
    loo_two: tuple[float, float]
    b_ceiling: float  # human_loo_modal_agreement, with its one- and two-level CIs
    b_ceiling_na_as_miss: float  # the same with the observers' non-responses counted as misses
    b_ceil_one: tuple[float, float]
    b_ceil_two: tuple[float, float]
    pairwise: np.ndarray  # kappa of each observer pair
    loo_each: np.ndarray  # kappa of each observer vs the others' mean
    accuracy_each: np.ndarray


@once_per_input
def panel_references(human_all: np.ndarray, labels: np.ndarray, n_labels: int, n_boot: int,
                     n_boot_kappa: int, seed: int) -> PanelReferences:
    """``human_all`` observers x items correct, ``labels`` items x observers answer index."""
    j_obs, n_all = human_all.shape
    items_k = resample_indices(n_all, n_boot_kappa, seed)
    obs_k = observer_indices(j_obs, n_boot_kappa, seed)
    ceil_pair = bootstrap(human_pairwise_kappa_stat(human_all), n_all, n_boot_kappa, seed)
    ceil_loo = bootstrap(human_loo_kappa_stat(human_all), n_all, n_boot_kappa, seed)
    identity = np.arange(j_obs)[None]
    items_b = resample_indices(n_all, n_boot, seed)
    b_ceiling = float(loo_modal_agreement_draws(labels, n_labels, np.arange(n_all)[None], identity)[0])
    return PanelReferences(
        ceil_pair=ceil_pair, ceil_loo=ceil_loo,
        pair_two=recentred_ci(ceil_pair[0], two_level_pairwise_kappa(human_all, items_k, obs_k)),
        loo_two=recentred_ci(ceil_loo[0], two_level_loo_kappa(human_all, items_k, obs_k)),
        b_ceiling=b_ceiling,
        b_ceiling_na_as_miss=float(loo_modal_agreement_draws(labels, n_labels, np.arange(n_all)[None], identity,
                                                             na_as_miss=True)[0]),
        b_ceil_one=percentile_ci(loo_modal_agreement_draws(labels, n_labels, items_b,
                                                           np.repeat(identity, n_boot, axis=0))),
        b_ceil_two=recentred_ci(b_ceiling, loo_modal_agreement_draws(
            labels, n_labels, items_b, observer_indices(j_obs, n_boot, seed))),
        pairwise=_pairwise_kappas(human_all),
        loo_each=_kappa(human_all, (human_all.sum(axis=0) - human_all) / (j_obs - 1)),
        accuracy_each=human_all.mean(axis=1))


@dataclass(frozen=True)
class ModelAnswers:
    """The model's parseable answers on the test split; nulls are counted, never scored."""

    items: np.ndarray  # test-split index of each parseable answer
    response: list[Any]
    correct: np.ndarray  # m_i: 1 where the answer is the true class
    nulls: int
    null_fraction: float  # v

    @property
    def n(self) -> int:
        return len(self.items)


def model_answers(records: list[dict], stimset: StimulusSet) -> ModelAnswers:
    """The parseable answers, after checking that the records cover every test stimulus."""
    test = stimset.test
    index = {s.stimulus_id: i for i, s in enumerate(test)}
    missing = set(index) - {r["stimulus_id"] for r in records}
    if missing:
        raise ValueError(f"{stimset.task_id}: no record for {len(missing)} test stimuli, "
                         f"e.g. {sorted(missing)[0]}")
    ok, nulls = parseable(records)
    items = np.array([index[r["stimulus_id"]] for r in ok], dtype=int)
    correct = np.array([r["response"] == test[i].ground_truth for r, i in zip(ok, items)], float)
    return ModelAnswers(items=items, response=[r["response"] for r in ok], correct=correct, nulls=nulls,
                        null_fraction=nulls / len(records) if records else 0.0)


@dataclass(frozen=True)
class ComparedPanel:
    """The observers the model is compared with, on the full test split."""

    correct: np.ndarray  # observers x items, 1 where the observer named the true class
    responses: np.ndarray  # items x observers
    modal: list[str]  # the modal answer per item, B's target
    note: str  # the method clause naming the observers left out, if any


def panel_without_own_decisions(panel: ObserverPanel, test: list[Stimulus],
                                records: list[dict]) -> ComparedPanel:
    """The panel, less the observers whose own decisions the records are (``source: decisions``).

    Their decisions are compared with the panel without them, everywhere: in kappa's p_i, in the
    modal answers B is scored against and in the B and kappa ceilings. With them, the observer
    is partly compared with itself.
    """
    correct = np.asarray(panel.correct, float)
    responses = np.asarray(panel.responses, dtype=object)
    own = {str((r.get("extras") or {}).get("observer")) for r in records} & set(panel.observers)
    if not own:
        return ComparedPanel(correct, responses, [s.human_target for s in test], "")
    keep = [j for j, o in enumerate(panel.observers) if o not in own]
    correct, responses = correct[keep], responses[:, keep]
    return ComparedPanel(
        correct, responses, [modal_response(list(row), s.ground_truth) for row, s in zip(responses, test)],
        f"; leave-one-out: observer {', '.join(sorted(own))}'s own decisions vs the modal answers, "
        f"accuracies and ceilings of the other {len(keep)} observers")


def error_consistency_two_level(answers: ModelAnswers, panel_correct: np.ndarray, kap: float,
                                kap_pw: float, n_boot_kappa: int,
                                seed: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Two-level intervals of kappa (aggregate form) and kappa_pairwise: the model's items
    resampled, the panel's observers too, each draw's observers bringing their answers on the
    drawn items."""
    n = answers.n
    if not n:  # every answer null: nothing to resample
        return (float("nan"), float("nan")), (float("nan"), float("nan"))
    obs_k = observer_indices(panel_correct.shape[0], n_boot_kappa, seed)
    model_idx = resample_indices(n, n_boot_kappa, seed)
    m, items = answers.correct, answers.items

    def two_level(rows: slice) -> np.ndarray:
        panel_draw = panel_correct[obs_k[rows, :, None], items[model_idx[rows]][:, None, :]]  # (draws, J, n)
        m_draw = m[model_idx[rows]]
        return np.stack([_kappa(m_draw, panel_draw.mean(axis=1)),
                         _kappa(m_draw[:, None, :], panel_draw).mean(axis=1)], axis=1)

    both = by_draws(two_level, n_boot_kappa, n)
    return recentred_ci(kap, both[:, 0]), recentred_ci(kap_pw, both[:, 1])


def _two_level_extra(ci: tuple[float, float]) -> dict[str, Any]:
    return {"ci_low_two_level": ci[0], "ci_high_two_level": ci[1], "ci_method": ONE_LEVEL,
            "ci_two_level_method": TWO_LEVEL}


def _kappa_interval(n_boot_kappa: int) -> str:
    return f"{ONE_LEVEL}, {n_boot_kappa} draws; {TWO_LEVEL} in extra"


def _b_ceiling_words(ref: PanelReferences) -> tuple[str, dict[str, Any]]:
    """How the B ceiling treats non-responses, in words and in ``extra``: a person who gave no
    answer ("na") neither matched nor missed the others' mode, so the ceiling is over the answers
    given; counting each non-response as a miss gives the lower figure beside it."""
    return (f"the observers' non-responses left out (counted as misses: "
            f"{ref.b_ceiling_na_as_miss:.3f}, in extra)"), {"ceiling_na_as_miss": ref.b_ceiling_na_as_miss}


def model_scores(answers: ModelAnswers, compared: ComparedPanel, ref: PanelReferences,
                 stimset: StimulusSet, boot: Bootstrap) -> list[Score]:
    """Accuracy, B vs the modal answers and kappa in both forms, with their floors and ceilings.

    Floors are what a constant answer scores on these targets: accuracy max share of a true class
    (1/16), B max share of a modal answer (0.125: "knife" is modal on 10 of 80), kappa 0.
    """
    seed, n_boot, n_boot_kappa = boot.seed, boot.n_boot, boot.n_boot_kappa
    n, m, items, note = answers.n, answers.correct, answers.items, compared.note
    p = compared.correct.mean(axis=0)
    match = np.array([r == compared.modal[i] for r, i in zip(answers.response, items)], float)
    acc = bootstrap(mean_stat(m), n, n_boot, seed)
    b = bootstrap(mean_stat(match), n, n_boot, seed)
    kap = bootstrap(kappa_stat(m, p[items]), n, n_boot_kappa, seed)
    kap_pw = bootstrap(kappa_pairwise_stat(m, compared.correct[:, items]), n, n_boot_kappa, seed)
    kap_two, kap_pw_two = error_consistency_two_level(answers, compared.correct, kap[0], kap_pw[0],
                                                      n_boot_kappa, seed)
    lo, hi = null_bracket(b[0], answers.null_fraction)
    na_words, na_extra = _b_ceiling_words(ref)
    kboot = _kappa_interval(n_boot_kappa)

    def rec(name: str, est: tuple[float, float, float], method: str, **kw: Any) -> Score:
        return Score(name=name, value=est[0], ci_low=est[1], ci_high=est[2], n=n, nulls=answers.nulls,
                     method=method, version=stimset.version, **kw)

    return [
        rec("accuracy", acc, f"mean 1[r=g]; {ONE_LEVEL}, {n_boot} draws; floor: best constant "
            "answer", floor=best_constant([s.ground_truth for s in stimset.test]),
            extra={"human_accuracy": float(p.mean())}),
        rec("B", b, f"mean 1[r=modal human response]; {ONE_LEVEL}, {n_boot} draws; floor: best "
            f"constant answer vs the modal answers; ceiling: human_loo_modal_agreement, {na_words}" + note,
            floor=best_constant(compared.modal), ceiling=ref.b_ceiling,
            extra={"B_full_low": lo, "B_full_high": hi, "null_fraction": answers.null_fraction, **na_extra}),
        rec("kappa", kap, f"aggregate error consistency vs panel p_i; {kboot}" + note,
            floor=0.0, ceiling=ref.ceil_pair[0],
            extra={"ceiling_ci": [ref.ceil_pair[1], ref.ceil_pair[2]], "ceiling_loo": ref.ceil_loo[0],
                   **_two_level_extra(kap_two)}),
        rec("kappa_pairwise", kap_pw, f"mean over observers of kappa(m, h_j); {kboot}" + note,
            floor=0.0, ceiling=ref.ceil_pair[0], extra=_two_level_extra(kap_pw_two)),
    ]


def observer_ceilings(compared: ComparedPanel, ref: PanelReferences, panel: ObserverPanel,
                      stimset: StimulusSet, boot: Bootstrap) -> list[Score]:
    """The panel's own references: kappa between observers (pairs, and each vs the others),
    each observer's agreement with the others' modal answer, and observer accuracy, each with the
    range over pairs or observers and the paper's range where it reports one."""
    seed, n_boot = boot.seed, boot.n_boot
    n_all = compared.correct.shape[1]
    na_words, na_extra = _b_ceiling_words(ref)
    kboot = _kappa_interval(boot.n_boot_kappa)

    def human(name: str, est: tuple[float, float, float], method: str,
              extra: dict[str, Any]) -> Score:
        return Score(name=name, value=est[0], ci_low=est[1], ci_high=est[2], n=n_all, nulls=0,
                     version=stimset.version, method=f"{method}; {panel.split}{compared.note}", extra=extra)

    def spread(values: np.ndarray, paper: str) -> dict[str, Any]:
        out: dict[str, Any] = {"range_min": float(values.min()), "range_max": float(values.max())}
        if paper in panel.paper_ranges:  # the paper's ranges, where it reports them
            out["paper_range"] = list(panel.paper_ranges[paper])
        return out

    return [
        human("human_kappa_pairwise", ref.ceil_pair,
              f"mean kappa over {len(ref.pairwise)} observer pairs, na counted incorrect; {kboot}; "
              "range = min-max over pairs",
              {**_two_level_extra(ref.pair_two), **spread(ref.pairwise, "kappa_pairwise")}),
        human("human_kappa_loo", ref.ceil_loo,
              f"each observer vs leave-one-out panel mean; {kboot}; range = min-max over observers",
              {**_two_level_extra(ref.loo_two), **spread(ref.loo_each, "kappa_loo")}),
        human("human_loo_modal_agreement", (ref.b_ceiling, *ref.b_ceil_one),
              f"share of answers equal to the other observers' modal answer (ties split), {na_words}; "
              f"{ONE_LEVEL}, {n_boot} draws; {TWO_LEVEL} in extra",
              {**_two_level_extra(ref.b_ceil_two), **na_extra}),
        human("human_accuracy", bootstrap(mean_stat(compared.correct.mean(axis=0)), n_all, n_boot, seed),
              f"mean observer accuracy; {ONE_LEVEL}, {n_boot} draws; range = min-max over "
              "observers", spread(ref.accuracy_each, "accuracy")),
    ]


def score_classification_vs_observers(records: list[dict], stimset: StimulusSet, *,
                                      boot: Bootstrap = Bootstrap()) -> list[Score]:
    """Accuracy, B vs the modal response, kappa (both forms) and the human references.

    Records must cover the test split once each; nulls are excluded from every statistic and
    counted. Human arrays are restricted to the same parseable items as the model. Every human
    reference and kappa carry a two-level (stimuli x observers) interval beside the one-level
    one: ``extra['ci_low_two_level']``/``['ci_high_two_level']``.
    """
    panel = stimset.human_as(ObserverPanel)
    answers = model_answers(records, stimset)
    compared = panel_without_own_decisions(panel, stimset.test, records)
    # human references describe the panel on the full test split
    vocab = {c: k for k, c in enumerate(stimset.options)}
    labels = np.vectorize(lambda a: vocab.get(a, -1), otypes=[int])(compared.responses)
    ref = panel_references(compared.correct, labels, len(vocab), boot.n_boot, boot.n_boot_kappa, boot.seed)
    return (model_scores(answers, compared, ref, stimset, boot)
            + observer_ceilings(compared, ref, panel, stimset, boot))


def compare_models(correct_a: np.ndarray, correct_b: np.ndarray, *, seed: int = 0,
                   n_boot: int = N_BOOT_DEFAULT) -> tuple[float, float, float]:
    """Paired bootstrap of a difference in a per-item mean (accuracy or B) between two models.

    Both arrays are over the same stimuli in the same order (items null for either model must
    be dropped by the caller first).
    """
    a, b = np.asarray(correct_a, float), np.asarray(correct_b, float)
    if a.shape != b.shape:
        raise ValueError(f"paired comparison needs the same stimuli: {a.shape} vs {b.shape}")
    return paired_difference(mean_stat(a), mean_stat(b), len(a), n_boot, seed)
