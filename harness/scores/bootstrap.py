"""Vectorised percentile bootstraps over stimuli.

Stimuli are the only sampled quantity (responses are deterministic, human references fixed), so
every interval resamples stimuli with replacement and recomputes the full statistic per draw.
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
