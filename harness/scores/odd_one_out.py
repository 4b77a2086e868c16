"""Odd-one-out scores: behavioural agreement B against each human reference, floors and ceilings.

For the triplet tasks (``similarity.chart.mark_color``, ``similarity.nat.things``) the stimulus
set carries, in test-split order and montage positions 1/2/3 (see harness.stimuli.montage):
``human['target_<name>']`` for each reference, ``human['primary_target']`` naming the one that is
``Stimulus.human_target``, and ``human['votes']`` (n x 3 individual odd-one-out choices).

- ``B`` (primary reference) and ``B_<name>`` (each further reference): mean 1[r_i = h_i] over
  parseable trials, percentile bootstrap over stimuli (1,000 draws, fixed seed); the null
  fraction v and the bracket (1-v)B .. (1-v)B+v are in ``extra`` (``B_full_low``/``_high``).
  Against a majority reference ``extra['B_ties_split']`` counts a response to any of t tied
  majority positions as 1/t, the expected value of a random tie-break.
- floor: the position-guessing floor max_k f_k, f_k the share of the reference's targets at
  montage position k over the test split, for the montage shuffle actually built (appendix D.3).
- ceiling: the human majority-agreement ceiling, mean over triplets of the share of individual
  responses that match the majority (0.672 on the 1,000 THINGS triplets). Also reported as its own
  score ``human_majority_agreement`` and, leaving each response out of the majority it is compared
  with (ties among the others' majority counted 1/t), ``human_loo_agreement``; for the kernel
  data every subject answered every triplet once, so that is leave-one-subject-out.
  ``extra['human_vs_reference']`` is the share of individual responses equal to that reference.
"""

from __future__ import annotations

import numpy as np

from .agreement import mean_stat, null_bracket, parseable
from .bootstrap import bootstrap
from .record import Score
from .tasks import Bootstrap

POSITIONS = (1, 2, 3)


def position_shares(targets: np.ndarray) -> list[float]:
    """f_k: share of targets at montage position k = 1, 2, 3."""
    t = np.asarray(targets)
    return [float(np.mean(t == k)) for k in POSITIONS]


def majority_agreement(votes: np.ndarray) -> np.ndarray:
    """Per triplet: share of the responses that chose the majority option."""
    v = np.asarray(votes, dtype=float)
    return v.max(axis=1) / v.sum(axis=1)


def loo_majority_agreement(votes: np.ndarray) -> np.ndarray:
    """Per triplet: each response vs the majority of the remaining ones, ties split, averaged."""
    v = np.asarray(votes, dtype=float)
    agree = np.zeros(len(v))
    for p in range(3):
        rest = v.copy()
        rest[:, p] -= 1
        top = rest == rest.max(axis=1, keepdims=True)
        agree += v[:, p] * top[:, p] / top.sum(axis=1)
    return agree / v.sum(axis=1)


def score_odd_one_out(records: list[dict], stimset, *, boot: Bootstrap = Bootstrap()) -> list[Score]:
    seed, n_boot = boot.seed, boot.n
    human = stimset.human
    test = stimset.test
    ids = [str(x) for x in human["stimulus_ids"]]
    if ids != [s.stimulus_id for s in test]:
        raise ValueError(f"{stimset.task_id}: human['stimulus_ids'] do not match the test split")
    index = {sid: i for i, sid in enumerate(ids)}
    seen = {}
    for r in records:
        sid = r["stimulus_id"]
        if sid not in index:
            raise ValueError(f"{stimset.task_id}: record for unknown stimulus {sid!r}")
        expected = test[index[sid]].option_order
        if r.get("option_order") is not None and tuple(r["option_order"]) != tuple(expected):
            raise ValueError(f"{stimset.task_id}/{sid}: record option_order {r['option_order']} "
                             f"!= the stimulus' {list(expected)}; responses refer to another montage")
        seen[sid] = r
    missing = set(index) - set(seen)
    if records and missing:
        raise ValueError(f"{stimset.task_id}: no record for {len(missing)} test stimuli, "
                         f"e.g. {sorted(missing)[0]}")

    votes = np.asarray(human["votes"])
    ceiling = bootstrap(mean_stat(majority_agreement(votes)), len(ids), n_boot, seed)
    loo = bootstrap(mean_stat(loo_majority_agreement(votes)), len(ids), n_boot, seed)
    human_scores = [
        Score(name="human_majority_agreement", value=ceiling[0], ci_low=ceiling[1],
              ci_high=ceiling[2], n=len(ids), nulls=0, version=stimset.version,
              method=f"mean over triplets of the share of responses matching the majority; "
                     f"bootstrap over triplets, {n_boot} draws"),
        Score(name="human_loo_agreement", value=loo[0], ci_low=loo[1], ci_high=loo[2],
              n=len(ids), nulls=0, version=stimset.version,
              method=f"each response vs the majority of the others (ties split), averaged per "
                     f"triplet; bootstrap over triplets, {n_boot} draws"),
    ]
    if not records:  # e.g. images unavailable: the human ceilings can still be reported
        return human_scores

    ok, nulls = parseable(records)
    items = np.array([index[r["stimulus_id"]] for r in ok], dtype=int)
    response = np.array([_position(r, stimset.task_id) for r in ok], dtype=int)
    n = len(ok)
    v = nulls / len(records)
    rows = np.arange(len(ids))

    primary = human["primary_target"]
    names = [primary] + sorted(k.removeprefix("target_") for k in human
                               if k.startswith("target_") and k != f"target_{primary}")
    scores = []
    for name in names:
        target = np.asarray(human[f"target_{name}"], dtype=int)
        match = (response == target[items]).astype(float)
        est = bootstrap(mean_stat(match), n, n_boot, seed)
        lo, hi = null_bracket(est[0], v)
        shares = position_shares(target)
        extra = {
            "reference": name,
            "null_fraction": v,
            "B_full_low": lo,
            "B_full_high": hi,
            "position_shares": shares,
            "human_vs_reference": float(np.mean(votes[rows, target - 1] / votes.sum(axis=1))),
            "human_loo_agreement": loo[0],
        }
        if name == "majority":
            top = votes == votes.max(axis=1, keepdims=True)
            split = top[items, response - 1] / top[items].sum(axis=1)
            extra["B_ties_split"] = float(split.mean()) if n else float("nan")
            extra["tied_items"] = int((top.sum(axis=1) > 1).sum())
        scores.append(Score(
            name="B" if name == primary else f"B_{name}",
            value=est[0], ci_low=est[1], ci_high=est[2], n=n, nulls=nulls,
            method=f"mean 1[r = {name} target] over parseable trials; percentile bootstrap over "
                   f"stimuli, {n_boot} draws, seed {seed}",
            version=stimset.version, ceiling=ceiling[0], floor=max(shares), extra=extra,
        ))
    return scores + human_scores


def _position(record: dict, task_id: str) -> int:
    r = record["response"]
    try:
        p = int(r)
    except (TypeError, ValueError):
        p = None
    if p not in POSITIONS or (isinstance(r, float) and r != p):
        raise ValueError(f"{task_id}/{record['stimulus_id']}: parseable response {r!r} is not "
                         f"a montage position 1, 2 or 3")
    return p
