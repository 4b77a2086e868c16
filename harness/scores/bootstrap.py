"""Vectorised percentile bootstraps over stimuli.

Model responses are deterministic, so a model score's interval resamples stimuli with replacement
and recomputes the full statistic per draw. Human-derived quantities (ceilings, and model scores
measured against the panel) also carry a two-level interval that redraws the observers too
(:func:`recentred_ci`).
A statistic is written once for a 2-D index matrix: ``stat(idx)`` gets ``idx`` of shape
(draws, n) and returns (draws,), so the point estimate is ``stat(arange(n)[None])[0]``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Statistic = Callable[[np.ndarray], np.ndarray]

N_BOOT_DEFAULT = 1000
N_BOOT_KAPPA = 2000
SEED_DEFAULT = 0


def resample_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def percentile_ci(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    draws = draws[~np.isnan(draws)]
    if draws.size == 0:
        return float("nan"), float("nan")
    alpha = (1 - level) / 2
    lo, hi = np.quantile(draws, [alpha, 1 - alpha])
    return float(lo), float(hi)


def bootstrap(stat: Statistic, n: int, n_boot: int = N_BOOT_DEFAULT, seed: int = SEED_DEFAULT,
              level: float = 0.95) -> tuple[float, float, float]:
    """(value, ci_low, ci_high) of ``stat`` over n stimuli."""
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    value = float(stat(np.arange(n)[None, :])[0])
    lo, hi = percentile_ci(stat(resample_indices(n, n_boot, seed)), level)
    return value, lo, hi


def paired_difference(stat_a: Statistic, stat_b: Statistic, n: int, n_boot: int = N_BOOT_DEFAULT,
                      seed: int = SEED_DEFAULT, level: float = 0.95) -> tuple[float, float, float]:
    """Bootstrap of stat_a - stat_b with the *same* resampled stimuli for both models.

    Both models answered the identical stimulus set, so the paired interval is tighter than the
    overlap of two marginal intervals.
    """
    return bootstrap(lambda idx: stat_a(idx) - stat_b(idx), n, n_boot, seed, level)


def recentred_ci(value: float, draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of ``draws`` shifted so their mean is ``value``.

    Used for the two-level (stimuli x observers) bootstrap: redrawing the observers changes the
    expectation of statistics built on majorities and modes (a resampled half-panel's majority is
    noisier than the real one), so the draws carry the spread but not the location.
    """
    d = np.asarray(draws, float)
    d = d[~np.isnan(d)]
    if d.size == 0:
        return float("nan"), float("nan")
    return percentile_ci(d - (d.mean() - value), level)
