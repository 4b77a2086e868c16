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

from itertools import combinations

import numpy as np

from .bootstrap import N_BOOT_DEFAULT, Statistic, bootstrap, paired_difference
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
    c_obs = (m * h + (1 - m) * (1 - h)).mean(axis=-1)
    a_m, a_h = m.mean(axis=-1), h.mean(axis=-1)
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


def human_loo_modal_agreement(observer_responses: list[list[str]], missing: str = "na") -> float:
    """Share of (observer, item) answers equal to the modal answer of the *other* observers.

    The B ceiling for a forced-choice task: how often one person reproduces the others' mode.
    ``observer_responses[i][j]`` is observer j's answer on item i; missing answers neither vote
    nor count. A tie among the others' modes counts a match as 1/len(modes), the expected value
    of a random tie-break, so the ceiling does not depend on an arbitrary rule.
    """
    hits, total = 0.0, 0
    for answers in observer_responses:
        for j, own in enumerate(answers):
            if own == missing:
                continue
            others = [a for k, a in enumerate(answers) if k != j and a != missing]
            if not others:
                continue
            labels, counts = np.unique(others, return_counts=True)
            modes = labels[counts == counts.max()]
            hits += (own in modes) / len(modes)
            total += 1
    return hits / total if total else float("nan")


# -- null accounting ----------------------------------------------------------------------------

def null_bracket(b: float, null_fraction: float) -> tuple[float, float]:
    """(1-v)B <= B_full <= (1-v)B + v: where B would land had nulls been scored either way."""
    return (1 - null_fraction) * b, (1 - null_fraction) * b + null_fraction


def parseable(records: list[dict]) -> tuple[list[dict], int]:
    ok = [r for r in records if r["parse_status"] == "ok"]
    return ok, len(records) - len(ok)


# -- the silhouette scorer ----------------------------------------------------------------------

def score_classification_vs_observers(records: list[dict], stimset, *,
                                      boot: Bootstrap = Bootstrap()) -> list[Score]:
    """Accuracy, B vs the modal response, kappa (both forms) and the human ceilings.

    Records must cover the test split once each; nulls are excluded from every statistic and
    counted. Human arrays are restricted to the same parseable items as the model.
    """
    seed, n_boot, n_boot_kappa = boot.seed, boot.n, boot.n_kappa
    test = stimset.test
    index = {s.stimulus_id: i for i, s in enumerate(test)}
    missing = set(index) - {r["stimulus_id"] for r in records}
    if missing:
        raise ValueError(f"{stimset.task_id}: no record for {len(missing)} test stimuli, "
                         f"e.g. {sorted(missing)[0]}")
    ok, nulls = parseable(records)
    items = np.array([index[r["stimulus_id"]] for r in ok], dtype=int)
    response = [r["response"] for r in ok]
    m = np.array([r["response"] == test[i].ground_truth for r, i in zip(ok, items)], float)
    match = np.array([r == test[i].human_target for r, i in zip(response, items)], float)
    observer_correct = np.asarray(stimset.human["observer_correct"], float)
    p = observer_correct.mean(axis=0)
    n = len(ok)
    v = nulls / len(records) if records else 0.0
    chance = 1 / stimset.human["n_classes"]
    version = stimset.version

    human_all = observer_correct  # the ceilings describe the panel on the full test split
    n_all = human_all.shape[1]
    ceil_pair = bootstrap(human_pairwise_kappa_stat(human_all), n_all, n_boot_kappa, seed)
    ceil_loo = bootstrap(human_loo_kappa_stat(human_all), n_all, n_boot_kappa, seed)
    b_ceiling = human_loo_modal_agreement([s.meta["observer_responses"] for s in test])

    acc = bootstrap(mean_stat(m), n, n_boot, seed)
    b = bootstrap(mean_stat(match), n, n_boot, seed)
    kap = bootstrap(kappa_stat(m, p[items]), n, n_boot_kappa, seed)
    kap_pw = bootstrap(kappa_pairwise_stat(m, observer_correct[:, items]), n, n_boot_kappa, seed)
    lo, hi = null_bracket(b[0], v)

    def rec(name, est, method, **kw):
        return Score(name=name, value=est[0], ci_low=est[1], ci_high=est[2], n=n, nulls=nulls,
                     method=method, version=version, **kw)

    return [
        rec("accuracy", acc, f"mean 1[r=g]; percentile bootstrap over stimuli, {n_boot} draws",
            floor=chance, extra={"human_accuracy": float(p.mean())}),
        rec("B", b, f"mean 1[r=modal human response]; percentile bootstrap, {n_boot} draws",
            floor=chance, ceiling=b_ceiling, extra={"B_full_low": lo, "B_full_high": hi,
                                                    "null_fraction": v}),
        rec("kappa", kap, f"aggregate error consistency vs panel p_i; bootstrap {n_boot_kappa} draws",
            floor=0.0, ceiling=ceil_pair[0],
            extra={"ceiling_ci": [ceil_pair[1], ceil_pair[2]], "ceiling_loo": ceil_loo[0]}),
        rec("kappa_pairwise", kap_pw,
            f"mean over observers of kappa(m, h_j); bootstrap {n_boot_kappa} draws",
            floor=0.0, ceiling=ceil_pair[0]),
        Score(name="human_kappa_pairwise", value=ceil_pair[0], ci_low=ceil_pair[1],
              ci_high=ceil_pair[2], n=n_all, nulls=0, version=version,
              method=f"mean kappa over {human_all.shape[0] * (human_all.shape[0] - 1) // 2} "
                     f"observer pairs, na counted incorrect; bootstrap {n_boot_kappa} draws"),
        Score(name="human_kappa_loo", value=ceil_loo[0], ci_low=ceil_loo[1], ci_high=ceil_loo[2],
              n=n_all, nulls=0, version=version,
              method=f"each observer vs leave-one-out panel mean; bootstrap {n_boot_kappa} draws"),
    ]


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
