"""Series-count scores: accuracy, error, a(k) and a fitted capacity against the 6-12 band.

No per-trial human data exist for colour-series counting, so the human reference is the
categorical-colour capacity band (``stimset.human``, a :class:`~harness.stimuli.base.CapacityBand`,
6-12), read as effect replication: does accuracy as a function of the series count k fall below
0.5 inside the band?

- ``accuracy``: mean 1[r_i = k_i] over parseable trials; floor = the share of the most frequent k
  in the test split (what always answering that k scores).
- ``mae``: mean |r_i - k_i|; ``extra['constant_median_mae']`` is the error of always answering
  the median k.
- ``a_kNN``: accuracy at series count k, one score per tested k.
- ``capacity``: where a logistic psychometric curve a(k) = 1 / (1 + exp(-(b0 + b1 (k - kbar))))
  fitted to the per-k successes crosses 0.5 (k = kbar - b0 / b1, falling curves only). The fit is
  maximum likelihood with a Haldane 0.5 correction per level (half a success and half a failure
  added), which keeps it finite when a(k) steps from all-correct to all-wrong. A curve that does
  not fall through 0.5 within the tested k, or rises, is *censored*: above the grid when it stays
  above 0.5, below it otherwise; its value is then the grid's end and ``extra['censored']`` says
  which side.
- ``capacity_in_band``: 1.0 only when the capacity's 95% bootstrap interval lies inside the band
  (a censored draw lies outside every band); the share of draws in the band is in ``extra``.

Accuracy and MAE resample stimuli (percentile bootstrap, 1,000 draws, fixed seed). a(k) bands and
the capacity interval redraw the trials *within* each k, binomially at the level's
Haldane-corrected accuracy (s + 0.5) / (n + 1) (a parametric, stratified bootstrap), so every
level keeps its size in every draw and a level seen all right or all wrong still varies. Nulls
are excluded and counted, with the (1-v)x .. (1-v)x+v bracket for accuracy.
"""

from __future__ import annotations

import numpy as np

from ..stimuli.base import CapacityBand, StimulusSet
from .agreement import mean_stat, null_bracket, parseable
from .bootstrap import bootstrap, percentile_ci
from .record import Score
from .tasks import Bootstrap

FAIL_BELOW = 0.5
HALDANE = 0.5
NEWTON_STEPS = 12  # converges to machine precision in <= 8 on steps and flat curves
WITHIN_K = ("binomial redraws of the trials within each k at the level's Haldane-corrected "
            "accuracy (s + 0.5) / (n + 1), percentile interval")


def fit_logistic(levels: np.ndarray, successes: np.ndarray,
                 trials: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(b0, b1) of logit a(k) = b0 + b1 (k - mean(levels)), per row of successes (..., L).

    Newton-Raphson on the binomial likelihood with the Haldane correction, vectorised over all
    leading axes (bootstrap draws, simulated models). Levels with no trials carry no weight.
    """
    x = np.asarray(levels, float) - np.mean(levels)
    n = np.asarray(trials, float)
    has = n > 0
    s = np.where(has, np.asarray(successes, float) + HALDANE, 0.0)
    n = np.where(has, n + 2 * HALDANE, 0.0)
    shape = np.broadcast_shapes(s.shape, n.shape)[:-1]
    b0, b1 = np.zeros(shape), np.zeros(shape)
    for _ in range(NEWTON_STEPS):
        p = 1 / (1 + np.exp(-(b0[..., None] + b1[..., None] * x)))
        resid = s - n * p
        w = n * p * (1 - p)
        g0, g1 = resid.sum(-1), (resid * x).sum(-1)
        h00, h01, h11 = w.sum(-1) + 1e-9, (w * x).sum(-1), (w * x * x).sum(-1) + 1e-9
        det = h00 * h11 - h01 * h01
        b0 = b0 + (h11 * g0 - h01 * g1) / det
        b1 = b1 + (h00 * g1 - h01 * g0) / det
    return b0, b1


def crossing(levels: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """k where the fitted curve falls through 0.5; +inf / -inf when censored above / below."""
    lv = np.asarray(levels, float)
    centre, lo, hi = lv.mean(), lv.min(), lv.max()
    falling = b1 < 0
    k = centre - b0 / np.where(falling, b1, -1.0)
    above_at_top = b0 + b1 * (hi - centre) >= 0
    k = np.where(falling, k, np.where(above_at_top, np.inf, -np.inf))
    return np.where(k > hi, np.inf, np.where(k < lo, -np.inf, k))


def capacity_estimate(levels: np.ndarray, successes: np.ndarray, trials: np.ndarray,
                      band: tuple[int, int], n_boot: int, seed: int) -> dict:
    """Fitted capacity, its 95% interval and whether that interval lies inside ``band``.

    ``successes`` may carry leading axes (e.g. simulated models); every returned array then
    has them too. Bootstrap: successes redrawn binomially at each level's Haldane-corrected
    accuracy (s + 0.5) / (n + 1), the rate the fit itself uses: at the observed rate a level seen
    at 0/n or n/n never varies, and with 2 trials per k most levels are, so the interval held the
    estimator's target in only about 70% of simulated step models.
    """
    s = np.asarray(successes, float)
    n = np.asarray(trials, int)
    b0, b1 = fit_logistic(levels, s, n)
    cap = crossing(levels, b0, b1)
    rng = np.random.default_rng([seed, 30])
    rate = (s + HALDANE) / (n + 2 * HALDANE)
    draws = rng.binomial(n, rate, size=(n_boot, *s.shape)).astype(float)
    cap_draws = crossing(levels, *fit_logistic(levels, draws, n))
    lo = np.quantile(cap_draws, 0.025, axis=0, method="inverted_cdf")
    hi = np.quantile(cap_draws, 0.975, axis=0, method="inverted_cdf")
    in_draws = (cap_draws >= band[0]) & (cap_draws <= band[1])
    return {"capacity": cap, "ci_low": lo, "ci_high": hi, "b0": b0, "b1": b1,
            "in_band": (lo >= band[0]) & (hi <= band[1]), "p_in_band": in_draws.mean(axis=0),
            "a_draws": draws / np.maximum(n, 1)}


def _finite(value: float, levels: np.ndarray) -> float:
    """A censored (infinite) capacity as the end of the tested grid it lies beyond."""
    return float(np.clip(value, levels.min(), levels.max()))


def _side(value: float) -> str | None:
    return "above" if value == np.inf else "below" if value == -np.inf else None


def score_capacity(records: list[dict], stimset: StimulusSet, *,
                   boot: Bootstrap = Bootstrap()) -> list[Score]:
    seed, n_boot = boot.seed, boot.n_boot
    band_ref = stimset.human_as(CapacityBand)
    test = stimset.test
    index = {s.stimulus_id: i for i, s in enumerate(test)}
    unknown = [r["stimulus_id"] for r in records if r["stimulus_id"] not in index]
    if unknown:
        raise ValueError(f"{stimset.task_id}: record for unknown stimulus {unknown[0]!r}")
    missing = set(index) - {r["stimulus_id"] for r in records}
    if missing:
        raise ValueError(f"{stimset.task_id}: no record for {len(missing)} test stimuli, "
                         f"e.g. {sorted(missing)[0]}")
    band = (band_ref.low, band_ref.high)
    version = stimset.version
    all_k = np.array([int(s.ground_truth) for s in test])
    ok, nulls = parseable(records)
    k = np.array([int(test[index[r["stimulus_id"]]].ground_truth) for r in ok], dtype=int)
    r = np.array([float(rec["response"]) for rec in ok])
    correct = (r == k).astype(float)
    n = len(ok)
    v = nulls / len(records) if records else 0.0

    acc = bootstrap(mean_stat(correct), n, n_boot, seed)
    mae = bootstrap(mean_stat(np.abs(r - k)), n, n_boot, seed)
    lo, hi = null_bracket(acc[0], v)
    _, counts = np.unique(all_k, return_counts=True)
    scores = [
        Score(name="accuracy", value=acc[0], ci_low=acc[1], ci_high=acc[2], n=n, nulls=nulls,
              method=f"mean 1[r = k] over parseable trials; percentile bootstrap over stimuli, "
                     f"{n_boot} draws, seed {seed}",
              version=version, floor=float(counts.max() / counts.sum()),
              extra={"null_fraction": v, "accuracy_full_low": lo, "accuracy_full_high": hi}),
        Score(name="mae", value=mae[0], ci_low=mae[1], ci_high=mae[2], n=n, nulls=nulls,
              method=f"mean |r - k| over parseable trials; percentile bootstrap over stimuli, "
                     f"{n_boot} draws",
              version=version,
              extra={"constant_median_mae": float(np.abs(all_k - np.median(all_k)).mean())}),
    ]

    levels = np.unique(all_k)
    trials = np.array([np.sum(k == level) for level in levels])
    successes = np.array([correct[k == level].sum() for level in levels])
    if not trials.sum():  # every trial null: no curve, no capacity
        return scores
    est = capacity_estimate(levels, successes, trials, band, n_boot, seed)
    for level, n_k, s_k, draws in zip(levels, trials, successes, est["a_draws"].T):
        if not n_k:
            continue
        ci = percentile_ci(draws)
        scores.append(Score(
            name=f"a_k{level:02d}", value=float(s_k / n_k), ci_low=ci[0], ci_high=ci[1],
            n=int(n_k), nulls=int(np.sum(all_k == level)) - int(n_k), version=version,
            method=f"accuracy at k={level}; {WITHIN_K}, {n_boot} draws"))

    cap, c_lo, c_hi = (float(est[key]) for key in ("capacity", "ci_low", "ci_high"))
    in_band = bool(est["in_band"])
    curve = {int(level): float(s_k / n_k) for level, n_k, s_k in zip(levels, trials, successes) if n_k}
    fit = (f"k where a logistic psychometric curve fitted to a(k) (ML, Haldane 0.5 per level) "
           f"crosses {FAIL_BELOW}; {WITHIN_K}, {n_boot} draws")
    scores += [
        Score(name="capacity", value=_finite(cap, levels), ci_low=_finite(c_lo, levels),
              ci_high=_finite(c_hi, levels), n=n, nulls=nulls, method=fit, version=version,
              extra={"band": list(band), "in_band": in_band, "censored": _side(cap),
                     "ci_low_censored": _side(c_lo), "ci_high_censored": _side(c_hi),
                     "logistic_b0": float(est["b0"]), "logistic_b1": float(est["b1"]),
                     "logistic_centre": float(levels.mean()), "a_k": curve,
                     "trials_per_k": int(trials.min())}),
        Score(name="capacity_in_band", value=float(in_band), ci_low=None, ci_high=None, n=n,
              nulls=nulls, version=version,
              method=f"1 when the capacity's 95% interval lies inside the human categorical-colour "
                     f"band {band[0]}-{band[1]} ({band_ref.source})",
              extra={"band": list(band), "p_in_band_bootstrap": float(est["p_in_band"])}),
    ]
    return scores
