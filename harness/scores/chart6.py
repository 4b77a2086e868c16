"""CHART-6 scores (Verma et al. 2025, sections 1.5 and 2) from per-presentation trial records.

Records arrive one per presentation (``rep`` 0..n-1). Validity is ``parse_status == 'ok'``;
correctness is recomputed here from the extracted ``response`` by the item's rule
(:func:`harness.stimuli.chart6.is_correct`: exact match for GGR/VLAT/CALVI, within 5% for
HOLF/HOLF-Multi/ChartQA-Human), so it never depends on what a runner filled in. Per item:

- model proportion correct over *valid* presentations (items with at least one valid response),
  and over *all* presentations with invalid ones counted wrong;
- human proportion correct (``stimset.human.prop_correct``, a
  :class:`~harness.stimuli.base.LiteracyItems`). Where that sample answered another format than
  models (GGR's default sample: a multiple-choice conversion of the numeric items), the human
  means, gap and error-pattern scores say so in their method and ``extra['format_mismatch']``.

Scores (each a :class:`Score` with a 95% percentile CI from 1,000 item-bootstrap draws):

- ``valid_rate``: valid presentations / all presentations.
- ``accuracy_valid`` (upper bound) and ``accuracy_all`` (lower bound): mean over items of the
  model's per-item proportion correct; ``floor`` = mean chance over items (1/k for an item with k
  options, 0 for open answers).
- ``human_accuracy`` over the items the model answered, and ``gap_valid`` / ``gap_all`` = model -
  human on the same items, paired over the same resampled items.
- ``error_r_valid`` / ``error_r_all``: Pearson r between the model's and the humans' per-item
  proportion correct; ``ceiling`` = the human noise ceiling.
- ``noise_ceiling``: split-half reliability of the human per-item proportions: participants are
  split at random into two halves ``n_splits`` times (default 1,000, seeded), each split's
  Pearson r between the halves' per-item proportions (items seen by someone in both halves) is
  Spearman-Brown corrected, ``2r / (1 + r)``; value = mean over splits, interval = 2.5/97.5
  percentiles of that sampling distribution (the paper's construction). Only where
  per-participant data exist (``human.participant_correct``).
- ``retest_r``: the same split-half construction over the model's presentations (the test-retest
  reliability of its per-item proportion correct, invalid counted wrong); ``extra`` has the mean
  share of presentation pairs giving the identical answer.
- breakdowns ``<key>/<level>/{accuracy_valid,accuracy_all,human_accuracy}`` for graph type, common
  task category and (CALVI) misleading vs standard items.

The paper's inferential statistics are functions over tidy arrays pooled across agents
(:func:`model_difference_test`, :func:`interaction_test`; :func:`split_half_reliability` for a
model's test-retest reliability on its own); no torch here.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence

import numpy as np
from scipy import stats

from ..stimuli.base import LiteracyItems, StimulusSet
from ..stimuli.chart6 import is_correct
from .bootstrap import Statistic, bootstrap, percentile_ci
from .record import Score
from .tasks import Bootstrap

N_SPLITS = 1000
BREAKDOWNS = ("graph_type", "task_category", "item_kind")


# -- per-item table ------------------------------------------------------------------------------

@dataclass
class ItemTable:
    """Per test item (stimset.test order): presentations, valid ones, correct ones."""

    ids: list[str]
    total: np.ndarray
    valid: np.ndarray
    correct: np.ndarray
    reps: np.ndarray  # (presentations, items): 1 correct, 0 wrong or invalid, NaN not presented
    answers: list[list[Any]]  # per item, the response of each presentation (None if invalid)

    @property
    def p_all(self) -> np.ndarray:
        return _ratio(self.correct, self.total)

    @property
    def p_valid(self) -> np.ndarray:
        return _ratio(self.correct, self.valid)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.full(np.shape(num), np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def item_table(records: list[dict], stimset: StimulusSet) -> ItemTable:
    test = stimset.test
    index = {s.stimulus_id: i for i, s in enumerate(test)}
    if any(int(r["rep"]) < 0 for r in records):
        raise ValueError(f"{stimset.task_id}: CHART-6 scores need one record per presentation, "
                         f"not repetitions combined into one (rep -1)")
    n_reps = 1 + max((int(r["rep"]) for r in records), default=0)
    reps = np.full((n_reps, len(test)), np.nan)
    answers: list[list[Any]] = [[] for _ in test]
    for r in records:
        i = index.get(r["stimulus_id"])
        if i is None:
            raise ValueError(f"{stimset.task_id}: record {r.get('trial_id')} is for unknown "
                             f"stimulus {r['stimulus_id']!r}")
        rep = int(r["rep"])
        if not np.isnan(reps[rep, i]):
            raise ValueError(f"{stimset.task_id}: two records for {r['stimulus_id']} rep {rep}")
        valid = r["parse_status"] == "ok"
        reps[rep, i] = float(valid and is_correct(test[i], r["response"]))
        answers[i].append(r["response"] if valid else None)
    n_valid = np.array([sum(a is not None for a in item) for item in answers], dtype=int)
    return ItemTable(ids=[s.stimulus_id for s in test], total=(~np.isnan(reps)).sum(axis=0),
                     valid=n_valid, correct=np.nansum(reps, axis=0).astype(int),
                     reps=reps, answers=answers)


# -- statistics over index matrices --------------------------------------------------------------

def _pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r along the last axis (NaN where either side is constant)."""
    xm = x - x.mean(axis=-1, keepdims=True)
    ym = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt((xm ** 2).sum(axis=-1) * (ym ** 2).sum(axis=-1))
    out = np.full(den.shape, np.nan)
    np.divide((xm * ym).sum(axis=-1), den, out=out, where=den > 1e-12)
    return out


def _mean(v: np.ndarray) -> Statistic:
    return lambda idx: v[idx].mean(axis=-1)


def _r(x: np.ndarray, y: np.ndarray) -> Statistic:
    return lambda idx: _pearson(x[idx], y[idx])


def spearman_brown(r):
    """Reliability of the full set from the correlation r of its two halves: 2r / (1 + r)."""
    r = np.asarray(r, dtype=float)
    out = np.full(r.shape, np.nan)
    np.divide(2 * r, 1 + r, out=out, where=r > -1)
    return out if out.ndim else float(out)


def split_half(matrix: np.ndarray, n_splits: int = N_SPLITS, seed: int = 0) -> np.ndarray:
    """Spearman-Brown corrected split-half correlations, one per random split.

    ``matrix`` is (units, items), NaN where a unit (participant, presentation) has no value for
    an item. Each split puts a random floor(units/2) units in one half and the rest in the other;
    the halves' per-item means are correlated over items observed in both halves.
    """
    m = np.asarray(matrix, dtype=float)
    units = m.shape[0]
    if units < 2:
        return np.full(n_splits, np.nan)
    seen = (~np.isnan(m)).astype(float)
    values = np.nan_to_num(m)
    order = np.argsort(np.random.default_rng(seed).random((n_splits, units)), axis=1)
    half = np.zeros((n_splits, units))
    np.put_along_axis(half, order[:, : units // 2], 1.0, axis=1)
    n_a, n_b = half @ seen, (1 - half) @ seen
    mean_a = _ratio(half @ values, n_a)
    mean_b = _ratio((1 - half) @ values, n_b)
    both = (n_a > 0) & (n_b > 0)
    w = both.astype(float)
    k = w.sum(axis=1, keepdims=True)
    a = np.where(both, mean_a, 0.0)
    b = np.where(both, mean_b, 0.0)
    am = a - (a.sum(axis=1, keepdims=True) / np.maximum(k, 1))
    bm = b - (b.sum(axis=1, keepdims=True) / np.maximum(k, 1))
    am, bm = am * w, bm * w
    den = np.sqrt((am ** 2).sum(axis=1) * (bm ** 2).sum(axis=1))
    r = np.full(n_splits, np.nan)
    np.divide((am * bm).sum(axis=1), den, out=r, where=den > 1e-12)
    return spearman_brown(r)


def split_half_reliability(matrix: np.ndarray, n_splits: int = N_SPLITS, seed: int = 0
                           ) -> tuple[float, float, float]:
    """(mean, 2.5%, 97.5%) of :func:`split_half` over its random splits: the human noise ceiling
    (units = participants) or a model's test-retest reliability (units = presentations)."""
    draws = split_half(matrix, n_splits, seed)
    lo, hi = percentile_ci(draws)
    return float(np.nanmean(draws)) if np.isfinite(draws).any() else float("nan"), lo, hi


def answer_agreement(answers: Sequence[Sequence[Any]]) -> float:
    """Mean over items of the share of presentation pairs with the identical answer (an invalid
    response is the answer None: two failures agree)."""
    shares = []
    for item in answers:
        n = len(item)
        if n < 2:
            continue
        _, counts = np.unique(np.array([repr(a) for a in item]), return_counts=True)
        shares.append(float((counts * (counts - 1)).sum() / (n * (n - 1))))
    return float(np.mean(shares)) if shares else float("nan")


# -- the scorer ----------------------------------------------------------------------------------

def _chance(stimulus) -> float:
    options = stimulus.meta["options"]
    return 1.0 / len(options) if options else 0.0


def score_chart6(records: list[dict], stimset: StimulusSet, *, boot: Bootstrap = Bootstrap(),
                 n_splits: int = N_SPLITS) -> list[Score]:
    seed, n_boot = boot.seed, boot.n_boot
    table = item_table(records, stimset)
    test = stimset.test
    version = stimset.version
    scoring = "within 5% (relaxed accuracy)" if test and test[0].meta["scoring"] == "relaxed" \
        else "exact match"
    boot_method = f"percentile bootstrap over items, {n_boot} draws, seed {seed}"
    human = stimset.human_as(LiteracyItems)
    h = np.asarray(human.prop_correct, dtype=float)
    chance = np.array([_chance(s) for s in test])
    answered = table.total > 0
    has_valid = table.valid > 0

    def est(name, stat, n_items, method, *, n=None, nulls=0, **kw):
        value, lo, hi = bootstrap(stat, n_items, n_boot, seed)
        return Score(name=name, value=value, ci_low=lo, ci_high=hi,
                     n=n_items if n is None else n, nulls=nulls, method=method, version=version,
                     **kw)

    total, valid = table.total[answered], table.valid[answered]
    scores = [est("valid_rate", lambda idx: valid[idx].sum(-1) / total[idx].sum(-1),
                  int(answered.sum()), f"valid / all presentations; {boot_method}",
                  n=int(valid.sum()), nulls=int(total.sum() - valid.sum()))]
    scores += _accuracy_scores(table, h, chance, answered, has_valid, scoring, boot_method, est,
                               mismatch=human.format_mismatch)

    ceiling = None
    if human.participant_correct is not None:
        ceiling, lo, hi = split_half_reliability(human.participant_correct, n_splits, seed)
        scores.append(Score(
            name="noise_ceiling", value=ceiling, ci_low=lo, ci_high=hi,
            n=len(human.participants), nulls=0, version=version,
            method=(f"split-half over participants, Spearman-Brown 2r/(1+r); mean and 2.5/97.5 "
                    f"percentiles over {n_splits} random splits, seed {seed}"),
            extra={"sample": human.sample, "n_splits": n_splits}))
    for name, mask, m in (("error_r_valid", has_valid, table.p_valid),
                          ("error_r_all", answered, table.p_all)):
        keep = mask & ~np.isnan(h)
        if keep.sum() < 3:
            continue
        x, y = m[keep], h[keep]
        extra: dict[str, Any] = ({"p_value": float(stats.pearsonr(x, y).pvalue)}
                                 if np.ptp(x) > 0 and np.ptp(y) > 0 else {})
        if human.format_mismatch:
            extra["format_mismatch"] = human.format_mismatch
        scores.append(est(name, _r(x, y), int(keep.sum()),
                          f"Pearson r, model vs human per-item proportion correct ({scoring}); {boot_method}"
                          + (f"; {human.format_mismatch}" if human.format_mismatch else ""),
                          nulls=int((answered & ~keep).sum()), ceiling=ceiling, extra=extra))

    if table.reps.shape[0] >= 2 and answered.any():
        value, lo, hi = split_half_reliability(table.reps[:, answered], n_splits, seed)
        scores.append(Score(
            name="retest_r", value=value, ci_low=lo, ci_high=hi,
            n=table.reps.shape[0], nulls=0, version=version,
            method=(f"split-half over presentations (invalid = wrong), Spearman-Brown; mean and "
                    f"2.5/97.5 percentiles over {n_splits} random splits, seed {seed}"),
            extra={"answer_agreement": answer_agreement([a for a, ok in zip(table.answers, answered)
                                                         if ok])}))

    for key in BREAKDOWNS:
        labels = np.array([str(s.meta.get(key)) for s in test])
        for level in sorted({str(s.meta[key]) for s in test if s.meta.get(key) is not None}):
            group = labels == level
            scores += _accuracy_scores(table, h, chance, answered & group, has_valid & group,
                                       scoring, boot_method, est, prefix=f"{key}/{level}/", gaps=False,
                                       mismatch=human.format_mismatch)
    return scores


def _accuracy_scores(table, h, chance, answered, has_valid, scoring, boot_method, est, *, prefix="",
                     gaps=True, mismatch: str | None = None) -> list[Score]:
    out = []
    p_valid, p_all = table.p_valid[has_valid], table.p_all[answered]
    if has_valid.any():
        out.append(est(f"{prefix}accuracy_valid", _mean(p_valid), int(has_valid.sum()),
                       f"mean per-item proportion correct over valid responses ({scoring}); items "
                       f"with a valid response; {boot_method}",
                       nulls=int((answered & ~has_valid).sum()), floor=float(chance[has_valid].mean())))
    if answered.any():
        out.append(est(f"{prefix}accuracy_all", _mean(p_all), int(answered.sum()),
                       f"mean per-item proportion correct, invalid counted wrong ({scoring}); {boot_method}",
                       floor=float(chance[answered].mean())))
    with_h = answered & ~np.isnan(h)
    if with_h.any():
        out.append(est(f"{prefix}human_accuracy", _mean(h[with_h]), int(with_h.sum()),
                       f"mean human per-item proportion correct on the items the model answered; {boot_method}"
                       + (f"; {mismatch}" if mismatch else ""),
                       extra={"format_mismatch": mismatch} if mismatch else {}))
    if not gaps:
        return out
    for name, mask, p in (("gap_valid", has_valid, table.p_valid), ("gap_all", answered, table.p_all)):
        keep = mask & ~np.isnan(h)
        if not keep.any():
            continue
        out.append(est(name, lambda idx, a=p[keep], b=h[keep]: a[idx].mean(-1) - b[idx].mean(-1),
                       int(keep.sum()), f"model - human mean per-item proportion correct, paired "
                                        f"over the same resampled items ({scoring}); {boot_method}"
                                        + (f"; {mismatch}" if mismatch else ""),
                       extra={"format_mismatch": mismatch} if mismatch else {}))
    return out


# -- the paper's inferential statistics ----------------------------------------------------------

@dataclass(frozen=True)
class LRTest:
    statistic: float  # likelihood-ratio chi-square
    df: int
    p_value: float
    method: str
    converged: bool = True


def model_difference_test(correct: Sequence, model: Sequence, item: Sequence) -> LRTest:
    """Do agents differ in accuracy, items held constant? (paper: chi2(7) = 3,591 for 8 models)

    The paper fits a mixed-effects logistic regression of correctness on model with random
    intercepts per item and compares it to the item-only model by likelihood ratio. statsmodels
    has no frequentist binomial GLMM (``BinomialBayesMixedGLM`` is variational Bayes), so the item
    intercepts here are fixed effects: a binomial GLM on per-(item, model) counts with one
    intercept per item, with and without the model terms; chi2 df = models - 1. Items answered
    all-correct or all-wrong by everyone carry no information about model differences (their
    intercept diverges and contributes nothing to either likelihood) and are left out.
    """
    import statsmodels.api as sm

    y = np.asarray(correct, dtype=float)
    if not (len(y) == len(model) == len(item)):
        raise ValueError("correct, model and item must have the same length")
    models = np.unique(np.asarray(model))
    if len(models) < 2:
        raise ValueError("model_difference_test needs at least two models")
    cells: dict[tuple[Any, Any], tuple[float, int]] = {}
    for yi, mi, ii in zip(y, model, item):
        s, n = cells.get((ii, mi), (0.0, 0))
        cells[(ii, mi)] = (s + yi, n + 1)
    per_item: dict[Any, list[float]] = {}
    for (ii, _), (s, n) in cells.items():
        per_item.setdefault(ii, [0.0, 0])
        per_item[ii][0] += s
        per_item[ii][1] += n
    informative = sorted(i for i, (s, n) in per_item.items() if 0 < s < n)
    if not informative:
        raise ValueError("no item has both correct and incorrect responses")
    col = {i: k for k, i in enumerate(informative)}
    keys = [key for key in cells if key[0] in col]
    succ = np.array([cells[k][0] for k in keys])
    trials = np.array([cells[k][1] for k in keys])
    x_item = np.zeros((len(keys), len(informative)))
    x_item[np.arange(len(keys)), [col[k[0]] for k in keys]] = 1.0
    x_model = np.array([[float(k[1] == m) for m in models[1:]] for k in keys])
    endog = np.column_stack([succ, trials - succ])
    family = sm.families.Binomial()
    full = sm.GLM(endog, np.hstack([x_item, x_model]), family=family).fit()
    null = sm.GLM(endog, x_item, family=family).fit()
    lr = max(0.0, float(2 * (full.llf - null.llf)))
    df = len(models) - 1
    return LRTest(lr, df, float(stats.chi2.sf(lr, df)),
                  "approximation of the paper's mixed-effects logistic model: binomial GLM with "
                  "fixed item intercepts, with vs without model terms "
                  f"({len(informative)} informative items)")


def interaction_test(value: Sequence[float], agent: Sequence, factor: Sequence,
                     item: Sequence) -> LRTest:
    """Does the agent gap vary with an item factor (graph type, task category)?

    The paper's model: per-item proportion correct ~ agent * factor with random intercepts per
    item (a linear mixed model), compared by likelihood ratio with agent + factor; df = the
    number of interaction terms (levels - 1 with two agents: chi2(12) for 13 graph types,
    chi2(2) for 3 task categories). Fitted by maximum likelihood (not REML), as likelihood-ratio
    tests of fixed effects require.
    """
    import pandas as pd
    import statsmodels.formula.api as smf
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    df = pd.DataFrame({"value": np.asarray(value, float), "agent": np.asarray(agent).astype(str),
                       "factor": np.asarray(factor).astype(str), "item": np.asarray(item).astype(str)})
    if df["agent"].nunique() < 2 or df["factor"].nunique() < 2:
        raise ValueError("interaction_test needs at least two agents and two factor levels")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        full = smf.mixedlm("value ~ C(agent) * C(factor)", df, groups=df["item"]).fit(reml=False)
        reduced = smf.mixedlm("value ~ C(agent) + C(factor)", df, groups=df["item"]).fit(reml=False)
    converged = bool(full.converged and reduced.converged
                     and not any(issubclass(w.category, ConvergenceWarning) for w in caught))
    lr = max(0.0, float(2 * (full.llf - reduced.llf)))
    dof = len(full.fe_params) - len(reduced.fe_params)
    return LRTest(lr, dof, float(stats.chi2.sf(lr, dof)),
                  "linear mixed model (ML), random item intercepts: agent*factor vs agent+factor",
                  converged)
