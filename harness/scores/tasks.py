"""Metric families: a task's ``scoring`` name -> the function that scores its records.

A scorer is ``fn(records: list[dict], stimset: StimulusSet, *, seed: int = 0) -> list[Score]``.
``records`` are validated TrialRecord dicts for the test split, nulls included: one per
stimulus after repetition aggregation, or every presentation for tasks declared ``all_reps``;
the human reference comes from ``stimset`` (per-item ``human_target`` and the task-level
``human`` arrays), whose images are never decoded here.
Scorers are pure numpy: this stage never imports torch.
"""

from __future__ import annotations

from ..lazy import lookup

SCORERS: dict[str, str] = {
    "classification_vs_observers": "harness.scores.agreement:score_classification_vs_observers",
    "odd_one_out": "harness.scores.odd_one_out:score_odd_one_out",
    "capacity": "harness.scores.capacity:score_capacity",
    "chart6": "harness.scores.chart6:score_chart6",
    "mlae_vs_humans": "harness.scores.mlae:score_mlae_vs_humans",
}


def get_scorer(name: str):
    return lookup(SCORERS, name, "scoring family")
