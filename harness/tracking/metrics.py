"""What a battery run logs as metrics, params and tables: at most :data:`MAX_RUN_METRICS`
metric names per run whatever the battery (:class:`MetricPlan`), named and rounded as each
task's scoring family declares them, and the records as MLflow tables."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models.api_costs import USAGE_METRICS
from ..scores.record import Score
from ..scores.tasks import Family, family_of

PLAIN_DIGITS = 4  # significant digits of a number that has no interval


def decimals_for(ci_low: float | None, ci_high: float | None) -> int | None:
    """Decimals an interval justifies: its half-width to two significant digits (0.06 -> 3)."""
    if ci_low is None or ci_high is None or not math.isfinite(ci_high - ci_low) or ci_high <= ci_low:
        return None
    return max(0, 1 - math.floor(math.log10((ci_high - ci_low) / 2)))


def rounded(value: float, decimals: int | None) -> float:
    if not math.isfinite(value) or value == 0:
        return value
    if decimals is None:
        decimals = PLAIN_DIGITS - 1 - math.floor(math.log10(abs(value)))
    return round(value, max(decimals, 0))


MAX_RUN_METRICS = 40  # metric names per run: the runs table, Compare and the charts stay readable
# a headline's metrics, in the order their names sort (MLflow's runs table and Compare sort by name)
HEADLINE_SUFFIXES = ("", "_ci_lower", "_ci_upper")
# a headline's reference points, the same for every model of a task: run params, not metrics
ANCHOR_SUFFIXES = ("_floor", "_ceiling")
RUN_TOTALS = ("model_calls",)  # the battery's own totals, besides an API model's USAGE_METRICS
# what a battery logs per task beyond its headline, in the order room is given to it
OPTIONAL_KINDS = ("interval", "counts", "secondary")


@dataclass(frozen=True)
class MetricPlan:
    """Which metrics a battery run logs, decided from its tasks before the first is scored, so a
    run holds at most :data:`MAX_RUN_METRICS` names whatever its battery: every task's headline,
    then the run's totals, then each kind of :data:`OPTIONAL_KINDS` in turn (headline intervals,
    n and null rate, the family's secondary scores) for every task or for none, while it fits.
    Training curves take what room is left (:meth:`BatteryRun.log_training`). Whatever is left
    out is in intervals.json (every score and interval) and the run's params (floor, ceiling)."""

    tasks: tuple[str, ...]
    totals: tuple[str, ...]
    kinds: frozenset[str]
    headlines: int  # how many of the tasks (in order) log a headline: all but past the cap

    def task_names(self, task_id: str) -> list[str]:
        """The metric names of a task as its family declares them."""
        family = family_of(task_id)
        if family is None or self.tasks.index(task_id) >= self.headlines:
            return []
        short = family.short_name(task_id, family.lead_name)
        names = [short + s for s in HEADLINE_SUFFIXES if s == "" or "interval" in self.kinds]
        if "counts" in self.kinds:
            names += [f"{task_id}/n", f"{task_id}/null_rate"]
        if "secondary" in self.kinds:
            names += [f"{task_id}/{s}" for s in family.secondary]
        return names

    def names(self) -> list[str]:
        return [*(n for t in self.tasks for n in self.task_names(t)), *self.totals]


def plan_metrics(tasks: Sequence[str], totals: Sequence[str] = RUN_TOTALS) -> MetricPlan:
    """The :class:`MetricPlan` of a battery of ``tasks`` whose run logs ``totals``. Its kinds
    leave room for an API model's totals whatever the model, so every model of a battery logs
    the same metrics (its runs compare column by column)."""
    tasks, totals = tuple(tasks), tuple(totals)
    widest = max(totals, RUN_TOTALS + USAGE_METRICS, key=len)
    plan = MetricPlan(tasks, widest, frozenset(), min(len(tasks), MAX_RUN_METRICS - len(widest)))
    for kind in OPTIONAL_KINDS:  # in order: a kind that does not fit leaves out the ones after it
        wider = MetricPlan(tasks, widest, plan.kinds | {kind}, plan.headlines)
        if len(wider.names()) > MAX_RUN_METRICS:
            break
        plan = wider
    return MetricPlan(tasks, totals, plan.kinds, plan.headlines)


def score_metrics(task_id: str, scores: Iterable[Score], family: Family | None,
                  kinds: Iterable[str] = OPTIONAL_KINDS) -> dict[str, float]:
    """A task's run metrics, as its scoring family declares them: the task's headline
    (:meth:`Family.lead_score`) under its short name, with ``_ci_lower`` and ``_ci_upper`` for
    the ``interval`` kind, and the family's few secondary scores as ``<task>/<score>`` for the
    ``secondary`` kind. Values are rounded to their interval. Every other score and interval is
    in intervals.json."""
    if family is None:  # a task this harness no longer declares
        return {}
    kinds = set(kinds)
    scores = list(scores)
    out: dict[str, float] = {}
    lead = family.lead_score(scores)
    if lead is not None and lead.value is not None and math.isfinite(lead.value):
        short = family.short_name(task_id, lead.name)
        digits = decimals_for(lead.ci_low, lead.ci_high)
        for suffix, v in zip(HEADLINE_SUFFIXES, (lead.value, lead.ci_low, lead.ci_high)):
            if (suffix == "" or "interval" in kinds) and v is not None and math.isfinite(v):
                out[short + suffix] = rounded(float(v), digits)
    if "secondary" in kinds:
        for s in scores:
            if s.name in family.secondary and s.value is not None and math.isfinite(s.value):
                out[f"{task_id}/{s.name}"] = rounded(float(s.value), decimals_for(s.ci_low, s.ci_high))
    return out


def anchor_params(task_id: str, scores: Iterable[Score], family: Family | None) -> dict[str, float]:
    """The headline's floor and ceiling as run params ``<headline>_floor``/``_ceiling`` (four
    significant digits: references, not this estimate)."""
    lead = None if family is None else family.lead_score(list(scores))
    if family is None or lead is None:
        return {}
    short = family.short_name(task_id, lead.name)
    return {short + suffix: rounded(float(v), None) for suffix, v in zip(ANCHOR_SUFFIXES, (lead.floor, lead.ceiling))
            if v is not None and math.isfinite(v)}


def record_key_order() -> list[str]:
    from ..trials import records

    schema = json.loads((Path(records.__file__).parent / "trial_record.schema.json").read_text())
    return list(schema["properties"])


def ordered_record(record: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """The record's keys in the schema's order (identity, response, correctness first)."""
    return {**{k: record[k] for k in order if k in record},
            **{k: v for k, v in record.items() if k not in order}}


def records_table(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Ordered records as an MLflow table in pandas' "split" layout (``columns``, ``data``: what
    ``mlflow.log_table`` writes and ``mlflow.load_table`` reads); nested values as compact JSON,
    so every cell is a scalar."""
    keys = list(dict.fromkeys(k for r in rows for k in r))

    def cell(v: Any) -> Any:
        return json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else v

    return {"columns": keys, "data": [[cell(r.get(k)) for k in keys] for r in rows]}
