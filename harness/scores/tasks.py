"""Scoring families: a task's ``scoring`` name -> its scorer and its headline scores.

One entry per family (docs/design.md, "Scoring"). A scorer is
``fn(records: list[dict], stimset: StimulusSet, *, boot: Bootstrap) -> list[Score]``: the one
call the run, ``gestalt score`` and the tests make, so every interval follows the recipe's
``bootstrap`` settings. ``records`` are validated TrialRecord dicts for the test split, nulls
included: one per stimulus after repetition aggregation, or every presentation for tasks
declared ``all_reps``; the human reference comes from ``stimset``, whose images are never
decoded here.

``headline`` names a family's own scores that summarise a model (patterns as in
:mod:`fnmatch`); ``primary`` is the task's single number on a higher-is-better scale between
floor and ceiling (the report's matrix, ranking and rank correlations; None for an error
measure such as MLAE). The run summary, the scorecards and the report all read them from here.
Scorers are pure numpy: this stage never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Literal

from ..lazy import resolve
from .bootstrap import N_BOOT_DEFAULT, N_BOOT_KAPPA, SEED_DEFAULT
from .record import Score

if TYPE_CHECKING:
    from ..stimuli.base import StimulusSet


@dataclass(frozen=True)
class Bootstrap:
    """How every interval of a battery is computed: ``n`` draws (``n_kappa`` for the kappa
    family's slower-converging statistics), one ``seed``, percentile intervals over stimuli."""

    n: int = N_BOOT_DEFAULT
    seed: int = SEED_DEFAULT
    method: Literal["percentile"] = "percentile"
    n_kappa: int = N_BOOT_KAPPA


Scorer = Callable[..., list[Score]]


@dataclass(frozen=True)
class Family:
    name: str
    scorer: str  # "module:function"
    headline: tuple[str, ...]  # fnmatch patterns of the model's headline scores, most telling first
    primary: tuple[str, ...] = ()  # the task's single number: the first of these with a value

    def score(self, records: list[dict], stimset: StimulusSet, boot: Bootstrap) -> list[Score]:
        fn: Scorer = resolve(self.scorer)
        return fn(records, stimset, boot=boot)

    def is_headline(self, name: str) -> bool:
        return any(fnmatchcase(name, p) for p in self.headline)

    def headline_scores(self, scores: Sequence[Score]) -> list[Score]:
        return [s for s in scores if self.is_headline(s.name)]

    def primary_score(self, scores: Sequence[Score]) -> Score | None:
        by = {s.name: s for s in scores if s.value is not None}
        return next((by[n] for n in self.primary if n in by), None)


FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("classification_vs_observers", "harness.scores.agreement:score_classification_vs_observers",
           ("B", "accuracy", "kappa", "kappa_pairwise"), primary=("B",)),
    Family("odd_one_out", "harness.scores.odd_one_out:score_odd_one_out", ("B", "B_*", "individual_agreement"),
           primary=("B",)),
    Family("capacity", "harness.scores.capacity:score_capacity",
           ("accuracy", "capacity", "capacity_in_band", "mae"), primary=("accuracy",)),
    Family("chart6", "harness.scores.chart6:score_chart6",
           ("accuracy_all", "accuracy_valid", "valid_rate", "gap_all", "gap_valid", "error_r_valid",
            "error_r_all", "retest_r"), primary=("accuracy_all",)),
    Family("mlae_vs_humans", "harness.scores.mlae:score_mlae_vs_humans",
           ("mlae", "mlae_midmean", "mlae_haehn", "mlae_minus_human", "mlae_midmean_minus_human",
            "gradcam_iou")),
]}


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise KeyError(f"unknown scoring family {name!r}; known: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]


def get_scorer(name: str) -> Scorer:
    """The scorer function of a family (for calling it on hand-made records)."""
    return resolve(get_family(name).scorer)


def family_of(task_id: str) -> Family | None:
    """The scoring family of a task id; None for a task this harness no longer declares (an old
    run read by the report)."""
    from ..stimuli.registry import TASKS, base_task_id

    spec = TASKS.get(base_task_id(task_id))
    return None if spec is None else get_family(spec.scoring)
