"""Vectorised percentile bootstraps over stimuli.

Model responses are deterministic, so a model score's interval resamples stimuli with replacement
and recomputes the full statistic per draw. Human-derived quantities (ceilings, and model scores
measured against the panel) also carry a two-level interval that redraws the observers too,
crossed with the stimuli: a drawn observer brings their answers on every drawn stimulus, so a
person's consistent leaning is resampled as one unit (:func:`recentred_ci`).
A statistic is written once for a 2-D index matrix: ``stat(idx)`` gets ``idx`` of shape
(draws, n) and returns (draws,), so the point estimate is ``stat(arange(n)[None])[0]``.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    from .record import Score

F = TypeVar("F", bound=Callable[..., Any])

Statistic = Callable[[np.ndarray], np.ndarray]

N_BOOT_DEFAULT = 1000
N_BOOT_KAPPA = 2000
SEED_DEFAULT = 0


def resample_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


# draw x stimulus cells a statistic sees at once: statistics over observer pairs make arrays 45
# times that size, so a block stays near 70 MB at any number of stimuli or draws
BLOCK_CELLS = 1 << 16


def by_draws(fn: Callable[[slice], np.ndarray], n_draws: int, n: int) -> np.ndarray:
    """``fn(rows)`` over blocks of bootstrap draws, concatenated: each draw is computed alone, so
    the values are those of one call over every draw, in bounded memory."""
    step = max(1, BLOCK_CELLS // max(n, 1))
    return np.concatenate([fn(slice(i, min(i + step, n_draws))) for i in range(0, max(n_draws, 1), step)])


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
    idx = resample_indices(n, n_boot, seed)
    lo, hi = percentile_ci(by_draws(lambda rows: stat(idx[rows]), n_boot, n), level)
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


# A method clause (methods separate clauses with "; ") that says how an interval was computed
INTERVAL_WORDS = ("bootstrap", "redraw", "percentile")


def interval_methods(scores: Iterable[Score]) -> list[str]:
    """How the intervals of ``scores`` were computed, in their own words: the clauses of each
    score's ``method`` that name the resampling, distinct, in order. Captions and scorecards quote
    them instead of one fixed sentence, because the scorers resample different levels (stimuli;
    stimuli x observers; trials within each k; random split halves). Scores without an interval
    contribute nothing."""
    out: dict[str, None] = {}
    for s in scores:
        if s.ci_low is None or s.ci_high is None:
            continue
        for clause in s.method.split("; "):
            if any(word in clause for word in INTERVAL_WORDS):
                out[clause.strip()] = None
    return list(out)


def _content_key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ("array", data.dtype.str, data.shape, hashlib.sha256(data.tobytes()).hexdigest())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *map(_content_key, value))
    return value


def once_per_input(fn: F, maxsize: int = 32) -> F:
    """``fn`` (pure, over human data and bootstrap settings) computed once per process per distinct
    input, keyed by the arrays' content. Human references do not depend on the model: a roster of
    N models would otherwise draw the same bootstraps N times. Callers must not mutate the result."""
    cache: OrderedDict[Any, Any] = OrderedDict()

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        key = tuple(_content_key(a) for a in args)
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        value = cache[key] = fn(*args)
        if len(cache) > maxsize:
            cache.popitem(last=False)
        return value

    wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
