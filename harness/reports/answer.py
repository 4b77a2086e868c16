"""The experiment's answer: each (model, task) from the latest finished battery that ran it
(:func:`answers`, with the history of the runs it replaced), the models in the paper's family
order, each task's headline, the rank groups, and the summary run with the answer's figures (the
matrix and the dissociation of accuracy and error consistency)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..scores.ranking import CORRECTION, UNPAIRED_CORRECTION, ItemValues, position, rank_task, value_interval
from ..scores.record import Score
from ..scores.tasks import Bootstrap, family_of
from ..tracking.batteries import RECORDS_DIGEST, answer_fingerprint
from . import figures as F
from .runs import BatteryRunData, load_runs
from .style import DPI, family_colors
from .summary import Groups, ModelRun, Summary, answer_text, log_summary
from .tables import cell

# The paper's family order (supervised, self-supervised, contrastive V-L, open VLM, closed), with
# the spellings recipes use; other families follow alphabetically, "unknown" last.
FAMILY_ORDER = ("supervised", "self-supervised", "ssl", "contrastive-vl", "cvl", "open-vlm", "vlm",
                "closed", "api", "cnn-from-scratch")


@dataclass(frozen=True)
class Answers:
    """Each model's answer (one per model, its cells drawn from the runs answering them) and the
    history: every run read, with the tasks it answers and those a later run answers instead."""

    models: list[BatteryRunData]
    history: list[dict[str, Any]]  # newest first
    fingerprint: str  # of every run read (:func:`~harness.tracking.batteries.answer_fingerprint`)

    def history_in(self, runs: list[BatteryRunData]) -> list[dict[str, Any]]:
        """The history in the order of the models ``runs``, each model's newest run first."""
        order = {r.model: i for i, r in enumerate(runs)}
        return sorted(self.history, key=lambda h: order[h["model"]])


def answers(runs: list[BatteryRunData]) -> Answers:
    """Each (model, task) from the latest of ``runs`` that scored that task for that model (a run
    where it was unavailable only where none scored it), whatever recipe ran it: a recipe over
    other tasks or other models adds to the answer, and a run a later one replaces stays in the
    history, never silently dropped."""
    by_model: dict[str, list[BatteryRunData]] = {}
    for r in sorted(runs, key=lambda r: -r.start_time):
        by_model.setdefault(r.model, []).append(r)
    models, answering = [], {}
    for newest_first in by_model.values():
        newest = newest_first[0]
        merged = replace(newest, scores={}, unavailable={}, items={}, stimuli={}, figures={}, task_runs={},
                         digests={})
        for r in newest_first:
            for task in [*r.scores, *r.unavailable]:
                if task in merged.scores or (task in merged.unavailable and task not in r.scores):
                    continue
                merged.unavailable.pop(task, None)
                if task in r.scores:
                    merged.scores[task] = r.scores[task]
                    merged.stimuli[task] = r.stimuli.get(task, "")
                    if task in r.items:
                        merged.items[task] = r.items[task]
                else:
                    merged.unavailable[task] = r.unavailable[task]
                merged.task_runs[task] = r.run_id
        merged.task_runs = {t: merged.task_runs[t] for t in [*merged.scores, *merged.unavailable]}
        by_id = {r.run_id: r for r in newest_first}
        for task, rid in merged.task_runs.items():
            merged.figures.update({n: png for n, png in by_id[rid].figures.items() if n.startswith(f"{task}.")})
            merged.digests[rid] = by_id[rid].tags.get(RECORDS_DIGEST, "")
        answering.update({(merged.model, t): rid for t, rid in merged.task_runs.items()})
        models.append(merged)
    history = []
    for r in sorted(runs, key=lambda r: -r.start_time):
        tasks = [*r.scores, *r.unavailable]
        history.append({"model": r.model, "family": r.family, "run_id": r.run_id, "recipe": r.recipe,
                        "answers": [t for t in tasks if answering[(r.model, t)] == r.run_id],
                        "superseded": {t: answering[(r.model, t)] for t in tasks
                                       if answering[(r.model, t)] != r.run_id}})
    return Answers(models, history, answer_fingerprint(
        [(r.model, r.run_id, r.tags.get(RECORDS_DIGEST, "")) for r in runs]))


def family_rank(family: str) -> tuple[int, str]:
    if family in FAMILY_ORDER:
        return FAMILY_ORDER.index(family), family
    return (len(FAMILY_ORDER) + (family == "unknown"), family)


def task_order(runs: list[BatteryRunData]) -> list[str]:
    """Tasks in the order the first runs logged them (recipe order)."""
    out: dict[str, None] = {}
    for r in runs:
        out.update(dict.fromkeys([*r.scores, *r.unavailable]))
    return list(out)


def headline(task_id: str, scores: list[Score]) -> Score | None:
    """The task's one headline (:meth:`~harness.scores.tasks.Family.lead_score`, as on every
    surface) for a task on the matrix: one whose family has a primary score (MLAE's error
    measures are drawn per run)."""
    family = family_of(task_id)
    return None if family is None or not family.primary else family.lead_score(scores)


def orders(task_id: str) -> bool:
    """Whether the task's headline orders models (a ranked family): what the models' order, the
    matrix's colour and the rank correlations read; series counting's capacity in or out of
    people's band has no order."""
    family = family_of(task_id)
    return family is not None and family.ranked


def ordered_models(runs: list[BatteryRunData], tasks: list[str]) -> list[BatteryRunData]:
    """Grouped by family (paper order); within a family by the mean position between floor and
    ceiling (:func:`~harness.scores.ranking.position`, the matrix's colour) over the headline
    scores, best first, then by id."""
    def within(r: BatteryRunData) -> float:
        fr = [p for t in tasks if orders(t) and (s := headline(t, r.scores.get(t, []))) is not None
              and (p := position(s)) is not None]
        return -float(np.mean(fr)) if fr else math.inf

    return sorted(runs, key=lambda r: (family_rank(r.family), within(r), r.model))


def to_png(fig) -> bytes:
    """A figure as PNG bytes at the report's resolution; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    F.plt.close(fig)
    return buf.getvalue()


@dataclass
class Headlines:
    """The headline score of every (model, task), and each task's headline score name."""

    cells: dict[tuple[str, str], Score]
    names: dict[str, str]  # task -> score name, for tasks some model has one for
    unavailable: dict[tuple[str, str], str]

    def values(self) -> dict[str, dict[str, float]]:
        """task -> {model: headline value} of the tasks whose headline orders models (:func:`orders`;
        a cell's headline always has a value: lead_score)."""
        return {t: {m: s.value for (m, tt), s in self.cells.items() if tt == t and s.value is not None}
                for t in self.names if orders(t)}


def headlines(runs: list[BatteryRunData], tasks: list[str]) -> Headlines:
    cells: dict[tuple[str, str], Score] = {}
    names: dict[str, str] = {}
    unavailable: dict[tuple[str, str], str] = {}
    for r in runs:
        for t in tasks:
            s = headline(t, r.scores.get(t, []))
            if s is not None:
                cells[(r.model, t)] = s
                names.setdefault(t, s.name)
            if t in r.unavailable:
                unavailable[(r.model, t)] = r.unavailable[t]
    return Headlines(cells, {t: names[t] for t in tasks if t in names}, unavailable)


# The scores each figure draws with error bars or bands (fnmatch patterns); a per-task figure of
# another kind draws its family's headline scores. Captions quote these scores' own interval
def rank_groups(heads: Headlines, runs: list[BatteryRunData],
                items: dict[str, dict[str, ItemValues | None]] | None = None) -> Groups:
    """The rank groups of the terminal (:func:`~harness.scores.ranking.rank_task`, the same
    inputs): paired bootstrap on the same stimuli from each battery's logged primary scores per
    stimulus (``items``, model -> task -> values, where a recipe's end has them and the run
    predates their logging), with the bootstrap its recipe ranked with. Only models that ran a
    task on the same stimulus set are ranked against each other: a pairing over stimuli, and a
    comparison at all, needs the same stimuli."""
    given = items or {}
    boot = runs[0].bootstrap() if runs else Bootstrap()
    letters: dict[tuple[str, str], str] = {}
    shown: dict[tuple[str, str], str] = {}
    methods: dict[str, str] = {}
    unranked, apart = [], []
    for task, name in heads.names.items():
        family = family_of(task)
        if family is not None and not family.ranked:  # as the terminal: named, never lettered
            unranked.append(f"{task} ({family.unranked})")
            continue
        logged = {r.model: r.items.get(task) for r in runs}
        stimuli = {r.model: r.stimuli.get(task, "") for r in runs}
        sets: dict[str, dict[str, tuple[Score | None, ItemValues | None]]] = {}
        for (m, t), s in heads.cells.items():
            if t == task:
                sets.setdefault(stimuli.get(m, ""), {})[m] = (s, given.get(m, {}).get(task) or logged.get(m))
        d = 3 if family is None else family.decimals_of(name)
        how = []
        for entries in sets.values():
            ranking = rank_task(entries, boot, name)
            how.append(ranking.method)
            for r in ranking.ranked:
                letters[(r.model_id, task)] = r.groups
                shown[(r.model_id, task)] = value_interval(r.score, d)
        methods[task] = "; ".join(dict.fromkeys(sorted(how, key=lambda m: not m.startswith("NOT PAIRED"))))
        if len(sets) > 1:
            each = "; ".join(f"set {sha[:12] or 'unrecorded'}: {', '.join(ms)}" for sha, ms in sets.items())
            methods[task] += f"; ranked within each of its {len(sets)} stimulus sets only ({each})"
            apart.append(f"{task} ({each})")
    unpaired = [t for t, m in methods.items() if m.startswith("NOT PAIRED")]
    note = (f"letters: rank groups (models sharing a letter are not told apart), {CORRECTION} over each "
            f"task's pairs of models: paired bootstrap over stimuli ({boot.n_boot} draws, seed {boot.seed})")
    if unpaired:
        note += (f"; NOT PAIRED for {', '.join(unpaired)} ({UNPAIRED_CORRECTION} over the models' own 95% "
                 f"intervals: its runs logged no per-stimulus values, or its score has no per-stimulus form)")
    if apart:
        note += (f"; models that ran a task on different stimulus sets are not ranked against each other, "
                 f"each set ranked on its own: {'; '.join(apart)}")
    if unranked:
        note += f"; not ranked: {'; '.join(unranked)}"
    return Groups(letters, shown, note, methods, answer_fingerprint(
        [(r.model, rid, digest) for r in runs for rid, digest in r.sources().items()]),
        {(r.model, t): r.run_of(t) for r in runs for t in heads.names if (r.model, t) in heads.cells})


def experiment_summary(tracking_uri: str, experiment: str, run_ids: list[str] | None = None,
                       items: dict[str, dict[str, ItemValues | None]] | None = None) -> Summary | None:
    """The experiment's summary run after a command that changed its batteries
    (:mod:`~harness.reports.summary`): the answer of every FINISHED battery of the experiment
    (:func:`answers`), not only of the command's own runs ``run_ids``, whose per-stimulus values
    ``items`` (model -> task -> values) stand in where those runs did not log them; rank groups
    paired as the terminal's. None where no task has a headline on the matrix's scale (MLAE
    tasks alone: their figures are per run)."""
    found = answers(load_runs(tracking_uri, experiment))
    # a command's values stand in only for the cells its own runs answer
    mine = set(run_ids or ())
    given = {r.model: {t: v for t, v in by_task.items() if r.run_of(t) in mine}
             for r in found.models if (by_task := (items or {}).get(r.model))}
    return _summary_of(tracking_uri, experiment, found, given)


def _summary_of(tracking_uri: str, experiment: str, found: Answers,
                items: dict[str, dict[str, ItemValues | None]] | None = None) -> Summary | None:
    tasks = task_order(found.models)
    runs = ordered_models(found.models, tasks)
    heads = headlines(runs, tasks)
    # the summary run is drawn from every run read, the ones a later run supersedes included, so a
    # no-op rerun can tell from the store alone that nothing it is drawn from changed
    groups = replace(rank_groups(heads, runs, items), fingerprint=found.fingerprint)
    figures = answer_figures(runs, heads, groups)
    return (log_summary_run(tracking_uri, experiment, runs, heads, figures, groups, found.history_in(runs))
            if figures else None)


def log_summary_run(tracking_uri: str, experiment: str, runs: list[BatteryRunData], heads: Headlines,
                    figures: dict[str, bytes], groups: Groups, history: list[dict[str, Any]]) -> Summary:
    """The summary run of the answer ``runs``: its figures, each cell's answer text, the tasks'
    short metric names and ceilings, and the history (:func:`~harness.reports.summary.log_summary`)."""
    texts = {(r.model, t): answer_text(t, r.scores[t], groups.letters.get((r.model, t), ""))
             for r in runs for t in heads.names if (r.model, t) in heads.cells}
    metrics = {t: f.short_name(t, name) for t, name in heads.names.items() if (f := family_of(t)) is not None}
    ceilings = {t: f"`{t}` {s.name}: ceiling {cell(s.ceiling)}, {s.ceiling_source or 'source not stated'}"
                for (_, t), s in heads.cells.items() if s.ceiling is not None}
    return log_summary(tracking_uri, experiment, runs[0].experiment_id,
                       [ModelRun(r.model, r.family, r.run_id, r.tags, r.task_runs)
                        for r in runs],
                       heads.names, figures, groups, texts, metrics,
                       [ceilings[t] for t in heads.names if t in ceilings], history)


def answer_figures(runs: list[BatteryRunData], heads: Headlines, groups: Groups) -> dict[str, bytes]:
    """The experiment's answer, as the paper draws it: the matrix (name ``matrix.png``) and, for
    the first task whose family draws accuracy against error consistency, the dissociation of
    the two (``accuracy_vs_kappa.png``; the silhouettes in the shipped battery)."""
    out: dict[str, bytes] = {}
    if heads.names:
        out["matrix.png"] = to_png(F.agreement_matrix_figure(
            [(r.model, r.family) for r in runs], list(heads.names.items()), heads.cells,
            heads.unavailable, groups=groups.letters, groups_note=groups.note))
    out.update(accuracy_vs_kappa(runs, drawn_by("accuracy_vs_kappa", list(heads.names))))
    return out


def accuracy_vs_kappa(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
    """The first task's accuracy against error consistency, one point per model."""
    colors = family_colors([r.family for r in runs])
    out: dict[str, bytes] = {}
    for task in tasks[:1]:
        points = [{"label": r.model, "group": r.family, "color": colors[r.family],
                   "accuracy": F.score_named(r.scores[task], "accuracy"),
                   "kappa": F.score_named(r.scores[task], "kappa")}
                  for r in runs if F.score_named(r.scores.get(task, []), "kappa") is not None
                  and F.score_named(r.scores[task], "accuracy") is not None]
        if points:
            out["accuracy_vs_kappa.png"] = to_png(F.accuracy_kappa_figure(
                points, title=f"{task}: accuracy vs error consistency, {len(points)} models"))
    return out


def drawn_by(kind: str, tasks: list[str]) -> list[str]:
    """The tasks, in order, whose scoring family names ``kind`` among its report figures."""
    return [t for t in tasks if (family := family_of(t)) is not None and kind in family.report_figures]


def whole_experiment_summary(tracking_uri: str, experiment_id: str) -> Summary:
    """The summary run of the experiment ``experiment_id`` from all its batteries."""
    from mlflow import MlflowClient

    name = MlflowClient(tracking_uri).get_experiment(experiment_id).name
    summary = _summary_of(tracking_uri, name, answers(load_runs(tracking_uri, name)))
    assert summary is not None  # its batteries hold the narrowed report's, whose matrix is drawn
    return summary
