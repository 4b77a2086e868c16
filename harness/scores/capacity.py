"""Series-count scores: accuracy, error, a(k) and the capacity estimate against the 6-12 band.

No per-trial human data exist for colour-series counting, so the human reference is the
categorical-colour capacity band (``stimset.human['capacity_band']``, 6-12), read as effect
replication: does accuracy as a function of the series count k bend inside the band?

- ``accuracy``: mean 1[r_i = k_i] over parseable trials; floor = the share of the most frequent k
  in the test split (what always answering that k scores).
- ``mae``: mean |r_i - k_i|; ``extra['constant_median_mae']`` is the error of always answering
  the median k.
- ``a_kNN``: accuracy at series count k, one score per tested k.
- ``capacity``: the largest tested k before a(k) first falls below 0.5, scanning k upwards
  (the level below the first k with a(k) < 0.5; k_min - 1 when the first level already fails;
  k_max, flagged ``censored``, when none does). Levels with no parseable trial are skipped.
- ``capacity_in_band``: 1.0 when the capacity lies in the band, else 0.0, with the share of
  bootstrap draws in the band in ``extra``.

Accuracy and MAE resample stimuli (1,000 draws, fixed seed). a(k) bands and the capacity interval
resample stimuli *within* each k (stratified), so every level keeps its size in every draw and
the curve is defined throughout. Nulls are excluded and counted, with the (1-v)x .. (1-v)x+v
bracket for accuracy.
"""

from __future__ import annotations

import numpy as np

from .agreement import mean_stat, null_bracket, parseable
from .bootstrap import bootstrap, percentile_ci
from .record import Score
from .tasks import Bootstrap

FAIL_BELOW = 0.5


def stratified_indices(strata: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) resampling indices in which each column is drawn from its own stratum."""
    strata = np.asarray(strata)
    rng = np.random.default_rng(seed)
    idx = np.empty((n_boot, len(strata)), dtype=int)
    for level in np.unique(strata):
        members = np.flatnonzero(strata == level)
        idx[:, members] = rng.choice(members, size=(n_boot, len(members)))
    return idx


def capacity(levels: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Capacity per row of a (..., L) over ascending levels, and whether it is censored."""
    levels = np.asarray(levels)
    fails = np.asarray(a) < FAIL_BELOW
    first = fails.argmax(axis=-1)
    below = np.where(first > 0, levels[np.maximum(first - 1, 0)], levels[0] - 1)
    censored = ~fails.any(axis=-1)
    return np.where(censored, levels[-1], below), censored


def score_capacity(records: list[dict], stimset, *, boot: Bootstrap = Bootstrap()) -> list[Score]:
    seed, n_boot = boot.seed, boot.n
    test = stimset.test
    index = {s.stimulus_id: i for i, s in enumerate(test)}
    unknown = [r["stimulus_id"] for r in records if r["stimulus_id"] not in index]
    if unknown:
        raise ValueError(f"{stimset.task_id}: record for unknown stimulus {unknown[0]!r}")
    missing = set(index) - {r["stimulus_id"] for r in records}
    if missing:
        raise ValueError(f"{stimset.task_id}: no record for {len(missing)} test stimuli, "
                         f"e.g. {sorted(missing)[0]}")
    band = tuple(int(x) for x in stimset.human["capacity_band"])
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
              method=f"mean |r - k| over parseable trials; percentile bootstrap, {n_boot} draws",
              version=version,
              extra={"constant_median_mae": float(np.abs(all_k - np.median(all_k)).mean())}),
    ]

    levels = np.unique(k)
    if not len(levels):  # every trial null: no curve, no capacity
        return scores
    idx = stratified_indices(k, n_boot, seed)
    members = [np.flatnonzero(k == level) for level in levels]
    a_point = np.array([correct[m].mean() for m in members])
    a_draws = np.stack([correct[idx[:, m]].mean(axis=1) for m in members], axis=1)
    for level, m, a, draws in zip(levels, members, a_point, a_draws.T):
        ci = percentile_ci(draws)
        scores.append(Score(
            name=f"a_k{level:02d}", value=float(a), ci_low=ci[0], ci_high=ci[1], n=len(m),
            nulls=int(np.sum(all_k == level)) - len(m), version=version,
            method=f"accuracy at k={level}; bootstrap within k, {n_boot} draws"))

    cap, censored = capacity(levels, a_point)
    cap_draws, _ = capacity(levels, a_draws)
    cap_ci = percentile_ci(cap_draws.astype(float))
    in_band = bool(band[0] <= cap <= band[1])
    p_in_band = float(np.mean((cap_draws >= band[0]) & (cap_draws <= band[1])))
    curve = {int(level): float(a) for level, a in zip(levels, a_point)}
    scores += [
        Score(name="capacity", value=float(cap), ci_low=cap_ci[0], ci_high=cap_ci[1], n=n,
              nulls=nulls,
              method=f"largest k before a(k) < {FAIL_BELOW}; bootstrap within k, {n_boot} draws",
              version=version,
              extra={"band": list(band), "in_band": in_band, "censored": bool(censored),
                     "a_k": curve}),
        Score(name="capacity_in_band", value=float(in_band), ci_low=None, ci_high=None, n=n,
              nulls=nulls, version=version,
              method=f"capacity within the human categorical-colour band {band[0]}-{band[1]}",
              extra={"band": list(band), "p_in_band_bootstrap": p_in_band}),
    ]
    return scores
