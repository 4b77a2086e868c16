"""The terminal's answer to a run: the score table, the rank groups per task with their legend
(the run's answer), each drawn from the batteries' results as the run returns them. Its
neighbours draw the same answer for MLflow (``summary.py``) and for the report (``report.py``)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..scores.bootstrap import interval_methods
from ..scores.ranking import (
    ItemValues,
    TaskRanking,
    bounding_ceiling,
    number,
    position,
    rank_task,
    shown_value,
    value_interval,
    verdict_text,
)
from ..scores.record import Score
from ..scores.tasks import Bootstrap, Family, get_family
from ..stimuli.registry import get_task


@dataclass
class BatteryResult:
    model_id: str
    run_id: str
    scores: dict[str, list[Score]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    unscored: dict[str, str] = field(default_factory=dict)  # task -> why it has trials but no scores
    # task -> its primary score per stimulus (the rank groups' paired bootstrap); None where the
    # family has no per-stimulus form of it
    items: dict[str, ItemValues | None] = field(default_factory=dict)
    model_calls: int = 0
    new_trials: int = 0
    up_to_date: bool = False  # nothing changed since run_id finished: no run made, nothing computed
    records_digest: str = ""  # of the record files its finished run holds (the summary's fingerprint)
    failed: str | None = None  # why the battery's run ended FAILED (every trial null, or failed calls left)
    failed_calls: int = 0  # trials whose call failed: a rerun sends them again, the scores wait for them
    needs_change: bool = False  # FAILED the same way again on a rerun until something changes
    left_out: str | None = None  # why the model was not run (it cannot run here yet), with its fix
    # wall seconds per task and phase: trials (model calls and stimulus preparation), scores,
    # figures (drawn; saved in the background), tracking (MLflow logging; the battery's own under
    # "battery"); what benchmarks/overhead.py reports as the harness's share
    seconds: defaultdict[str, defaultdict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float)))


def summary_table(results: list[BatteryResult]) -> str:
    """One line per model x task x headline score of its family: value [95% CI], floor,
    ceiling, nulls; a FAILED battery's values marked provisional. Human references, per-level
    curves and breakdowns stay in intervals.json and the report."""
    rows = []
    for r in results:
        mark = " provisional" if r.failed else ""
        for task_id, scores in r.scores.items():
            family = get_family(get_task(task_id).scoring)
            for s in family.headline_scores(scores):
                d = family.decimals_of(s.name)
                shown = shown_value(s, d) + mark
                rows.append((r.model_id, task_id, s.name, shown, number(s.floor, d),
                             number(s.ceiling, d), f"{s.nulls}/{s.n + s.nulls}"))
        for task_id in r.unavailable:
            rows.append((r.model_id, task_id, "unavailable", "", "", "", ""))
        for task_id, why in r.unscored.items():
            rows.append((r.model_id, task_id, why, "", "", "", ""))
    header = ("model", "task", "score", "value [95% CI]", "floor", "ceiling", "nulls")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(row):
        return "  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip()

    table = [line(header), line(["-" * w for w in widths]), *map(line, rows)]
    return "\n".join(table + human_reference_lines(results))


def human_reference_lines(results: list[BatteryResult]) -> list[str]:
    """The human references once per task (they do not depend on the model), each with the first
    clause of its method: what it is, and for a cited constant, where it comes from."""
    seen: dict[str, str] = {}
    for r in results:
        for task_id, scores in r.scores.items():
            for s in scores:
                key = f"{task_id}  {s.name}"
                if s.name.startswith("human_") and key not in seen:
                    seen[key] = f"{key}  {value_interval(s)}  {s.method.split(';')[0]}"
    return ["", "human references:", *seen.values()] if seen else []


def answer_lines(results: list[BatteryResult], boot: Bootstrap) -> list[str]:
    """The run's answer: per task, the models in rank groups (best first), each with its primary
    score, 95% interval and position between floor and ceiling; censored and missing values and
    unavailable tasks named, not ranked; a FAILED battery's scores are provisional (failed calls
    left, or a budget that stopped it): named below the ranked models, never ranked beside them."""
    lines = ["", "rank groups per task (best first; models sharing a letter are not told apart, with 5% "
             "familywise error over each task's pairs):"]
    for task_id in dict.fromkeys(t for r in results for t in [*r.scores, *r.unavailable]):
        family = get_family(get_task(task_id).scoring)
        scored = [r for r in results if task_id in r.scores and not r.failed]
        provisional = [_provisional_line(r, task_id, (family.lead_name,)) for r in results
                       if task_id in r.scores and r.failed]
        if not scored and provisional:
            lines += [f"{task_id}  no finished model to rank", *provisional]
            continue
        if not scored:
            lines.append(f"{task_id}: unavailable for every model (the reason is above)")
            continue
        if not family.ranked:
            lines.append(f"{task_id}: not ranked: {family.unranked}")
            lines += _verdict_lines(family, {r.model_id: r.scores[task_id] for r in scored})
            lines += provisional
            continue
        entries = {r.model_id: (_primary(family.primary, r.scores[task_id]), r.items.get(task_id))
                   for r in scored}
        ranking = rank_task(entries, boot, family.primary[0])
        lines += _ranking_lines(task_id, ranking, family.decimals_of(ranking.score_name))
        lines += provisional
        lines += [f"  -     {r.model_id}  unavailable" for r in results if task_id in r.unavailable]
    return lines + legend_lines(results)



LEGEND_BAR = ("the value's position from the task's floor (0%) to its human ceiling where no model can pass",
              "that ceiling, else to 1, the score's maximum (B can pass its ceiling: a reference); < below the floor")
LEGEND_CENSORED = ("a capacity fitted beyond the tested series counts, shown at the grid's end (not its value),",
                   "never ranked")



def legend_lines(results: list[BatteryResult]) -> list[str]:
    """Every score the table and the groups show, in words (one line per name; a name two
    families use, such as B, once per meaning), what the bar spans, and what censored means."""
    terms: dict[tuple[str, str], str] = {}  # (score, words) -> the first task showing it
    for r in results:
        for task_id, scores in r.scores.items():
            family = get_family(get_task(task_id).scoring)
            for s in family.headline_scores(scores):
                words = family.term(s.name)
                if words:
                    terms.setdefault((s.name, words), task_id)
    if not terms:
        return []
    meanings = Counter(name for name, _ in terms)
    named = [(name if meanings[name] == 1 else f"{name} ({task.rsplit('.', 1)[-1]})", words)
             for (name, words), task in terms.items()]
    width = max(len(n) for n in [*(name for name, _ in named), "censored"])
    rows = [*named, *(("bar" if i == 0 else "", w) for i, w in enumerate(LEGEND_BAR))]
    if any(s.extra.get("censored") for r in results for scores in r.scores.values() for s in scores):
        rows += [("censored" if i == 0 else "", w) for i, w in enumerate(LEGEND_CENSORED)]
    rows += interval_rows(results)
    return ["", "legend:", *(f"  {name:<{width}}  {words}" for name, words in rows)]


def interval_rows(results: list[BatteryResult]) -> list[tuple[str, str]]:
    """What each task's headline 95% intervals resample (stimuli, triplets, trials within each k
    ...), in the scores' own words (the first interval clause of each method), once per task:
    ``silhouette: over stimuli (accuracy, B, kappa)``. The legend says it beside the numbers, so
    the unit is read where the interval is."""
    rows: list[tuple[str, str]] = []
    for task_id in dict.fromkeys(t for r in results for t in r.scores):
        scores = next(r.scores[task_id] for r in results if task_id in r.scores)
        units: dict[str, list[str]] = {}
        for score in get_family(get_task(task_id).scoring).headline_scores(scores):
            how = interval_methods([score])
            if how:
                unit = re.search(r"\b(?:over|redraws of) .+?(?= at |,|;|$)", how[0])
                units.setdefault(unit.group(0) if unit else how[0], []).append(score.name)
        if units:
            rows.append(("95% CI" if not rows else "", f"{task_id.rsplit('.', 1)[-1]}: " + "; ".join(
                f"{unit} ({', '.join(names)})" for unit, names in units.items())))
    return rows


def _verdict_lines(family: Family, scores: dict[str, list[Score]]) -> list[str]:
    """An unranked task's models, each with its family's verdict scores as the table shows them."""
    width = max(len(m) for m in scores)
    return [f"  {'-':<5} {m:<{width}}  {text}" for m, given in scores.items() if (text := verdict_text(family, given))]


def _provisional_line(r: BatteryResult, task_id: str, primary: tuple[str, ...]) -> str:
    """A FAILED battery's headline (``primary``: its family's lead name), named provisional with
    what it waits for."""
    s = _primary(primary, r.scores[task_id]) if primary else None
    shown = "" if s is None or s.value is None else f"{number(s.value)} "
    why = (f"{r.failed_calls} failed calls left (a rerun sends them)" if r.failed_calls
           else f"run FAILED ({r.failed})")
    return f"  -     {r.model_id}  {shown}provisional: {why}"


def _primary(names: tuple[str, ...], scores: list[Score]) -> Score | None:
    """The family's primary score; one with no value (nothing parseable) is still named."""
    by = {s.name: s for s in scores}
    with_value = [by[n] for n in names if n in by and by[n].value is not None]
    return next(iter(with_value), next((by[n] for n in names if n in by), None))


def _ranking_lines(task_id: str, ranking: TaskRanking, decimals: int = 3) -> list[str]:
    first = ranking.ranked[0].score if ranking.ranked else None
    anchors = "" if first is None else (f"; floor {number(first.floor, decimals)}, " + (
        "no ceiling (position against 1)" if first.ceiling is None else f"ceiling {number(first.ceiling, decimals)}" + (
            "" if bounding_ceiling(first) is not None else " (not a bound: position against 1)")))
    lines = [f"{task_id}  {ranking.score_name}{anchors}"]
    width = max(len(m) for m in [*(r.model_id for r in ranking.ranked), *(u[0] for u in ranking.unranked)])
    for r in ranking.ranked:
        s = r.score
        nulls = f"  {s.nulls} of {s.n + s.nulls} null" if s.nulls else ""
        lines.append(f"  {r.groups:<5} {r.model_id:<{width}}  {value_interval(s, decimals):<{11 + 3 * decimals}}  "
                     f"{_position_text(position(s), '1' if bounding_ceiling(s) is None else 'ceiling')}{nulls}")
    for model, unranked, why in ranking.unranked:
        shown = "" if unranked is None or unranked.value is None else f"{value_interval(unranked, decimals)} "
        lines.append(f"  {'-':<5} {model:<{width}}  {shown}{why}")
    if ranking.method:
        lines.append(f"  groups: {ranking.method}")
    return lines


def _position_text(p: float | None, top: str) -> str:
    """floor |####......| ceiling (or 1) and the percentage; an arrow where the value lies beyond."""
    if p is None:
        return ""
    filled = round(min(max(p, 0.0), 1.0) * 10)
    return (f"floor {'<' if p < 0 else '|'}{'#' * filled}{'.' * (10 - filled)}{'>' if p > 1 else '|'} "
            f"{top} {100 * p:.0f}%")


def incomplete_line(left: list[tuple[str, str]]) -> str:
    """The last line of a run (and of its dry run) that left models out: (model id, why) each."""
    why = "; ".join(f"{m} ({reason.removeprefix(f'model {m!r}: ')})" for m, reason in left)
    return (f"incomplete: {len(left)} model{'s' if len(left) > 1 else ''} left out: {why}; "
            f"once fixed, a rerun adds their batteries (the finished ones stay as they are)")

