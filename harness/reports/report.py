"""``gestalt report``: the battery across models, read back from finished MLflow runs.

For each FINISHED run tagged ``gestalt.model`` it reads the metrics (``<task>/null_rate``), the
``intervals.json`` artifact (every Score record) and the logged ``figures/*.png``; into the store
it writes only the experiment's summary run (:mod:`~harness.reports.summary`: the matrix and the
dissociation figure, and each model run's colour). Into ``out_dir``:

- ``matrix.png`` (the report's first figure): the task x model matrix of each task's headline
  score (its family's :meth:`~harness.scores.tasks.Family.lead_score`: the terminal's, the runs
  table's and the scorecard's too) with 95% CIs and
  rank groups, models grouped by family, families in the paper's order;
- ``accuracy_vs_kappa.png``: silhouette accuracy vs error consistency for all models, with the
  human ceiling band and the panel's accuracy;
- ``a_k.png``: every model's a(k) curve against the 6-12 capacity band;
- ``rank_correlations.png`` / ``.csv``: Spearman rho between tasks over the models scored on
  both (n per pair);
- ``scores.csv`` / ``scores.md``: every headline score with CI, floor, ceiling, n, nulls, the
  task's null rate and, for proportions over parseable trials (B, accuracy), the bracket
  (1-v)x .. (1-v)x+v where x would land had the nulls been scored;
- ``scorecards/<model>.html``: one self-contained page per model (tables, null rates per task,
  figures embedded as base64; no external CSS, scripts or images) linking to its MLflow run, and
  ``index.html``: every task (unavailable ones with the reason), the human references, the
  figures (each captioned with what it shows, n and the interval method) and the scores;
- ``runs.json``: every battery run the report read, each with its recipe, the tasks it answers
  and, for a task a later run answers, that run (superseded).

The experiment is the answer, not one recipe: each (model, task) comes from the latest FINISHED
battery that ran that task for that model, whichever recipe ran it (:func:`answers`), so a recipe
over other tasks or other models adds to the answer rather than replacing it; ``recipe`` (tag
``gestalt.recipe``) or ``run_ids`` narrow the runs read first.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import logging
import math
import re
import tempfile
from dataclasses import dataclass, field, fields, replace
from fnmatch import fnmatchcase
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import stats

from ..errors import GestaltError, unwritable_folder
from ..own_files import own_file, write_own
from ..scores.agreement import null_bracket
from ..scores.bootstrap import interval_methods
from ..scores.record import Score
from ..scores.ranking import (
    CORRECTION,
    UNPAIRED_CORRECTION,
    ItemValues,
    censored,
    number,
    position,
    rank_task,
    value_interval,
)
from ..scores.tasks import Bootstrap, family_of
from ..tracking.batteries import (
    RECORDS_DIGEST,
    answer_fingerprint,
    finished_intervals,
    local_artifacts,
    not_a_battery,
)
from ..tracking.store import read_only_store, ui_base
from ..tracking.scorecards import quiet_downloads
from . import figures as F
from .style import DPI, family_colors
from .bars_figures import generalization_matrix_figure, level_curves
from .chart6_figures import chart6_report_figures
from .summary import Groups, ModelRun, Summary, answer_text, log_summary
from .shape_bias_figures import texture_vs_shape_report_figures

# The paper's family order (supervised, self-supervised, contrastive V-L, open VLM, closed), with
# the spellings recipes use; other families follow alphabetically, "unknown" last.
FAMILY_ORDER = ("supervised", "self-supervised", "ssl", "contrastive-vl", "cvl", "open-vlm", "vlm",
                "closed", "api", "cnn-from-scratch")
BRACKETED = re.compile(r"^(B|B_\w+|accuracy)$")  # proportions over parseable trials
_SCORE_FIELDS = {f.name for f in fields(Score)}


class ReportError(GestaltError):
    """Nothing to report on, or a run lacks what the report reads."""


@dataclass
class BatteryRunData:
    """What the report reads back from one battery run."""

    run_id: str
    model: str
    family: str
    recipe: str
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]
    scores: dict[str, list[Score]]  # task -> scores, from intervals.json
    unavailable: dict[str, str]
    figures: dict[str, bytes] = field(default_factory=dict)  # logged figures/*.png
    experiment_id: str = ""
    # task -> its primary score per stimulus as the battery logged it (the paired rank groups')
    items: dict[str, ItemValues] = field(default_factory=dict)
    start_time: int = 0  # ms; the later of two runs of a task answers it
    stimuli: dict[str, str] = field(default_factory=dict)  # task -> its stimulus set's sha256
    # task -> the run answering it, where the model's answer draws on several runs (:func:`answers`)
    task_runs: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)  # answering run id -> its records digest

    def run_of(self, task: str) -> str:
        """The run the model's cell of ``task`` comes from."""
        return self.task_runs.get(task, self.run_id)

    def sources(self) -> dict[str, str]:
        """Every run the model's answer draws on -> its records digest."""
        return self.digests or {self.run_id: self.tags.get(RECORDS_DIGEST, "")}

    def bootstrap(self) -> Bootstrap:
        """The bootstrap the battery's recipe ranked with (its logged parameters)."""
        p = self.params
        return Bootstrap(n_boot=int(p.get("n_boot", Bootstrap().n_boot)),
                         seed=int(p.get("bootstrap_seed", Bootstrap().seed)))

    def null_rate(self, task: str) -> float | None:
        """Trial-level null rate as logged; from the scores where the metric is absent."""
        if f"{task}/null_rate" in self.metrics:
            return self.metrics[f"{task}/null_rate"]
        first = next(iter(self.scores.get(task, [])), None)
        return None if first is None else first.null_rate


def score_from_dict(d: dict[str, Any], where: str) -> Score:
    missing = {"name", "value", "n", "nulls", "method", "version"} - set(d)
    if missing:
        raise ReportError(f"{where}: score record lacks {sorted(missing)}")
    return Score(**{k: v for k, v in d.items() if k in _SCORE_FIELDS})


def parse_intervals(intervals: dict[str, Any], where: str
                    ) -> tuple[dict[str, list[Score]], dict[str, str], dict[str, ItemValues], dict[str, str]]:
    """(scores, unavailable tasks, primary scores per stimulus, stimulus set sha256 per task) of a
    battery's intervals.json."""
    scores, unavailable, items, stimuli = {}, {}, {}, {}
    for task, entry in intervals.items():
        if "unavailable" in entry:
            unavailable[task] = entry["unavailable"]
        else:
            scores[task] = [score_from_dict(d, f"{where} {task}") for d in entry.get("scores", [])]
            if "primary_items" in entry:
                items[task] = ItemValues.from_dict(entry["primary_items"])
            stimuli[task] = entry.get("stimulus_set_sha256", "")
    return scores, unavailable, items, stimuli


# -- reading runs ---------------------------------------------------------------------------------

def load_runs(tracking_uri: str, experiment: str, run_ids: list[str] | None = None,
              recipe: str | None = None, figures: bool = False) -> list[BatteryRunData]:
    """Every FINISHED battery run of the experiment (of one recipe where ``recipe`` names it), or
    exactly the runs ``run_ids``; newest first. The runs come from one paged search; each run's
    intervals are read in place from a local artifact folder, or downloaded once per store and run
    (:func:`~harness.tracking.batteries.finished_intervals`); its logged figures only where
    ``figures`` asks (the report's scorecards show them, the summary run draws from scores)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri)
    if run_ids:
        runs = []
        for rid in run_ids:
            try:
                run = client.get_run(str(rid))
            except MlflowException as e:
                raise ReportError(f"run {rid}: not found at {tracking_uri} ({e.message})") from None
            if (why := not_a_battery(client, run, "report")) is not None:
                raise ReportError(why)
            runs.append(run)
    else:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            names = [e.name for e in client.search_experiments()]
            raise ReportError(f"no experiment {experiment!r} at {tracking_uri}; experiments: {names}")
        runs, token = [], None
        while True:
            page = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'",
                                      order_by=["attributes.start_time DESC"], max_results=1000,
                                      page_token=token)
            runs += page
            token = page.token
            if not token:
                break
        runs = [run for run in runs if "gestalt.model" in run.data.tags
                and (recipe is None or run.data.tags.get("gestalt.recipe") == recipe)]
    if not runs:
        raise ReportError(f"no FINISHED gestalt runs in experiment {experiment!r}"
                          + (f" for recipe {recipe!r}" if recipe else "") + f" at {tracking_uri}")
    return sorted((_read_run(client, run, tracking_uri, figures) for run in runs), key=lambda r: -r.start_time)


def _logged_figures(client, run) -> dict[str, bytes]:
    """The run's ``figures/*.png`` (name -> PNG), read in place from a local artifact folder."""
    rid = run.info.run_id
    if (folder := local_artifacts(run.info.artifact_uri or "")) is not None:
        return {p.name: p.read_bytes() for p in sorted((folder / "figures").glob("*.png")) if p.is_file()}
    with tempfile.TemporaryDirectory() as tmp:
        return {Path(art.path).name: Path(client.download_artifacts(rid, art.path, tmp)).read_bytes()
                for art in client.list_artifacts(rid, "figures") if art.path.endswith(".png")}


def _read_run(client, run, tracking_uri: str, figures: bool) -> BatteryRunData:
    rid = run.info.run_id
    tags = run.data.tags
    where = f"run {rid} ({tags['gestalt.model']})"
    with quiet_downloads():
        try:
            intervals = finished_intervals(client, run, tracking_uri)
        except Exception as e:  # the store's own error type differs by backend
            raise ReportError(f"{where}: no intervals.json artifact ({e})") from None
        figs = _logged_figures(client, run) if figures else {}
    scores, unavailable, items, stimuli = parse_intervals(intervals, where)
    return BatteryRunData(run_id=rid, model=tags["gestalt.model"],
                          family=tags.get("gestalt.family", "unknown"),
                          recipe=tags.get("gestalt.recipe", ""), params=dict(run.data.params),
                          tags=dict(tags), metrics=dict(run.data.metrics), scores=scores,
                          unavailable=unavailable, figures=figs, experiment_id=run.info.experiment_id,
                          items=items, start_time=run.info.start_time or 0, stimuli=stimuli)


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


# -- tables ---------------------------------------------------------------------------------------

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


def score_rows(runs: list[BatteryRunData], tasks: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for r in runs:
        for task in tasks:
            v = r.null_rate(task)
            if task in r.unavailable:
                rows.append({"model": r.model, "family": r.family, "task": task, "score": "",
                             "note": f"unavailable: {r.unavailable[task]}", "run_id": r.run_of(task)})
                continue
            family = family_of(task)
            for s in r.scores.get(task, []):
                if family is None or not family.is_headline(s.name):
                    continue
                low = high = None
                if BRACKETED.match(s.name) and (s.value is not None or s.null_rate == 1):
                    # every answer null: B is undefined and the bracket 0 .. 1
                    low, high = null_bracket(s.value if s.value is not None else math.nan, s.null_rate)
                rows.append({
                    "model": r.model, "family": r.family, "task": task, "score": s.name,
                    "value": s.value, "ci_low": s.ci_low, "ci_high": s.ci_high, "floor": s.floor,
                    "ceiling": s.ceiling, "n": s.n, "nulls": s.nulls, "task_null_rate": v,
                    "full_low": low, "full_high": high, "version": s.version, "note": "",
                    "censored": censored(s) if s.value is not None else None,
                    "ceiling_source": s.ceiling_source, "run_id": r.run_of(task)})
    return rows


COLUMNS = ("model", "family", "task", "score", "value", "ci_low", "ci_high", "floor", "ceiling",
           "n", "nulls", "task_null_rate", "full_low", "full_high", "version", "note", "censored",
           "ceiling_source", "run_id")


def human_rows(runs: list[BatteryRunData], tasks: list[str]) -> list[dict[str, Any]]:
    """The human reference scores (identical across models of one stimulus set), once per task."""
    rows = []
    for task in tasks:
        src = next((r for r in runs if any(s.name.startswith("human_") for s in r.scores.get(task, []))),
                   None)
        for s in [] if src is None else src.scores[task]:
            if s.name.startswith("human_"):
                rows.append({"task": task, "score": s.name, "value": s.value, "ci_low": s.ci_low,
                             "ci_high": s.ci_high, "n": s.n, "method": s.method})
    return rows


def rank_correlations(values: dict[str, dict[str, float]], tasks: list[str]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Spearman rho between each pair of tasks over the models scored on both.

    ``values``: task -> {model: headline value}. Returns (rho, n) as (T, T) arrays; rho is NaN
    where fewer than 3 models are shared or one side has no spread (a rank correlation of two
    points, or of constants, says nothing). Ties get average ranks (scipy's convention).
    """
    t = len(tasks)
    rho, n = np.full((t, t), np.nan), np.zeros((t, t), dtype=int)
    for i, a in enumerate(tasks):
        for j, b in enumerate(tasks):
            shared = sorted(set(values.get(a, {})) & set(values.get(b, {})))
            n[i, j] = len(shared)
            x = np.array([values[a][m] for m in shared])
            y = np.array([values[b][m] for m in shared])
            if len(shared) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
                rho[i, j] = float(stats.spearmanr(x, y).statistic)
    return rho, n


def _fmt(v: Any, digits: int = 3) -> str:
    """A table cell: numbers by the one rounding rule (:func:`~harness.scores.ranking.number`),
    nothing where there is no value."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return number(v, digits)
    return str(v)


def _ci(row: dict[str, Any]) -> str:
    d = _decimals(row)
    return "" if row.get("ci_low") is None else f"[{_fmt(row['ci_low'], d)}, {_fmt(row['ci_high'], d)}]"


def _decimals(row: dict[str, Any]) -> int:
    """The decimals of a row's score, its family's (:meth:`~harness.scores.tasks.Family.decimals_of`)."""
    family = family_of(row["task"]) if row.get("task") else None
    return 3 if family is None else family.decimals_of(row.get("score", ""))


def _value(row: dict[str, Any]) -> str:
    """A row's value as every table shows it: a censored one says so beside the number."""
    return _fmt(row["value"], _decimals(row)) + (f" ({row['censored']})" if row.get("censored") else "")


def ceiling_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Per task and score shown with a ceiling: the ceiling, what it is and its source."""
    seen = {(r["task"], r["score"]): [r["task"], r["score"], _fmt(r["ceiling"]), r["ceiling_source"] or "not stated"]
            for r in rows if not r["note"] and r.get("ceiling") is not None}
    return list(seen.values())


CEILING_HEAD = ["task", "score", "ceiling", "what the ceiling is, and its source"]


def _bracket(row: dict[str, Any]) -> str:
    return "" if row.get("full_low") is None else f"{_fmt(row['full_low'])} .. {_fmt(row['full_high'])}"


def write_csv(rows: list[dict[str, Any]], path: Path, columns=COLUMNS) -> None:
    with own_file(path, newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({c: ("" if row.get(c) is None else row.get(c)) for c in columns})


# Shown only when some trial was null: otherwise (1-v)x .. (1-v)x+v is x .. x and says nothing.
BRACKET_HEADER = "if nulls were scored: (1-v)x .. (1-v)x+v, v = null rate"


def any_nulls(rows: list[dict[str, Any]]) -> bool:
    return any(r.get("nulls") for r in rows if not r.get("note"))


def markdown_table(rows: list[dict[str, Any]]) -> str:
    bracket = any_nulls(rows)
    head = ["model", "family", "task", "score", "value [95% CI]", "floor", "ceiling", "n", "nulls",
            "null rate", *([BRACKET_HEADER] if bracket else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r["note"]:
            cells = [r["model"], r["family"], r["task"], "", r["note"].replace("|", "/"),
                     "", "", "", "", ""]
        else:
            cells = [r["model"], r["family"], r["task"], r["score"], f"{_value(r)} {_ci(r)}",
                     _fmt(r["floor"], _decimals(r)), _fmt(r["ceiling"], _decimals(r)), _fmt(r["n"]), _fmt(r["nulls"]),
                     _fmt(r["task_null_rate"])]
        cells += [_bracket(r) if not r["note"] else ""] if bracket else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- figures --------------------------------------------------------------------------------------

def _png(fig) -> bytes:
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
# methods (bootstrap.interval_methods).
FIGURE_SCORES = {"confusion": (), "accuracy_vs_kappa": ("accuracy", "kappa"), "a_k": ("a_k*", "capacity"),
                 "agreement": ("B", "B_*", "individual_agreement"), "generalization_matrix": ("mlae",)}


def intervals_caption(scores: list[Score]) -> str:
    """The interval clause of a caption, from the drawn scores' own methods."""
    methods = interval_methods(scores)
    return f"95% intervals: {'; '.join(methods)}" if methods else "no intervals"


def _drawn(kind: str, task: str, scores: list[Score]) -> list[Score]:
    patterns = FIGURE_SCORES.get(kind)
    if patterns is None:
        family = family_of(task)
        return family.headline_scores(scores) if family is not None else []
    return [s for s in scores if any(fnmatchcase(s.name, p) for p in patterns)]


def report_captions(runs: list[BatteryRunData], heads: Headlines) -> dict[str, str]:
    """What each cross-model figure shows, its n and how its intervals were computed."""
    def n_of(task: str) -> str:
        ns = sorted({s.n for (_, t), s in heads.cells.items() if t == task} or
                    {s.n for r in runs for s in r.scores.get(task, [])[:1]})
        return "-".join(map(str, ns[:1] + ns[-1:] if len(ns) > 1 else ns)) or "?"

    def drawn(kind: str) -> str:
        return intervals_caption([s for r in runs for t, sc in r.scores.items()
                                  if t in drawing(kind) for s in _drawn(kind, t, sc)])

    def drawing(kind: str) -> list[str]:
        return drawn_by(kind, task_order(runs))

    models = len(runs)
    kappa = next(iter(drawing("accuracy_vs_kappa")), "")
    count = next(iter(drawing("a_k")), "")
    return {
        "matrix.png": f"Each task's headline score (its scoring family's, as on every surface) of {models} "
                      f"models on {len(heads.names)} tasks; colour: position between the task's floor and "
                      f"human ceiling, none where the headline gives no order (a capacity). n per cell = "
                      f"scored stimuli ({', '.join(f'{t}: {n_of(t)}' for t in heads.names)}); "
                      f"{intervals_caption(list(heads.cells.values()))}.",
        "accuracy_vs_kappa.png": f"{kappa}: accuracy against error consistency (Cohen's kappa with "
                                 f"human observers) per model, with the human-human ceiling band; "
                                 f"n = {n_of(kappa)} test stimuli per model; "
                                 f"{drawn('accuracy_vs_kappa')}.",
        "a_k.png": f"{count}: accuracy a(k) by number of colour series k per model against the "
                   f"human capacity band; n = {n_of(count)} charts per model; "
                   f"{drawn('a_k')}.",
        "rank_correlations.png": f"Spearman rank correlation between tasks of the {models} models' "
                                 "headline scores; n per cell = models scored on both tasks; no interval "
                                 f"(n/a below {MIN_RANK_MODELS} models, where no rho can be told from "
                                 "chance, or without spread).",
        "generalization_matrix.png": "Trained networks (rows) against test conditions (columns): MLAE "
                                     f"per cell; {drawn('generalization_matrix')}.",
    }


def figure_caption(name: str, run: BatteryRunData | None = None) -> str:
    """A caption for a per-task figure ``<task>.<kind>.png`` (logged or redrawn): with the run's
    scores, how the drawn scores' intervals were computed; without them, no claim about it."""
    task, _, kind = name.removesuffix(".png").rpartition(".")
    scores = run.scores.get(task, []) if run is not None else []
    if not task:
        return f"{name}."
    n = ""
    if scores:
        n = f"; n = {scores[0].n} scored trials ({scores[0].nulls} null)"
    what = {"confusion": "model vs human confusion on the test split (share of responses per true class)",
            "accuracy_vs_kappa": "accuracy against error consistency with the human ceiling band",
            "a_k": "accuracy a(k) by number of series k against the human capacity band",
            "agreement": "odd-one-out agreement B with floor, human ceiling and null bracket"}.get(
        kind, kind.replace("_", " "))
    how = (f"; {intervals_caption(_drawn(kind, task, scores))}" if scores
           else "; intervals as each score's method in intervals.json states")
    return f"{task}: {what}{n}{how}."


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
    return (_log_summary(tracking_uri, experiment, runs, heads, figures, groups, found.history_in(runs))
            if figures else None)


def _log_summary(tracking_uri: str, experiment: str, runs: list[BatteryRunData], heads: Headlines,
                 figures: dict[str, bytes], groups: Groups, history: list[dict[str, Any]]) -> Summary:
    texts = {(r.model, t): answer_text(t, r.scores[t], groups.letters.get((r.model, t), ""))
             for r in runs for t in heads.names if (r.model, t) in heads.cells}
    metrics = {t: f.short_name(t, name) for t, name in heads.names.items() if (f := family_of(t)) is not None}
    ceilings = {t: f"`{t}` {s.name}: ceiling {_fmt(s.ceiling)}, {s.ceiling_source or 'source not stated'}"
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
        out["matrix.png"] = _png(F.agreement_matrix_figure(
            [(r.model, r.family) for r in runs], list(heads.names.items()), heads.cells,
            heads.unavailable, groups=groups.letters, groups_note=groups.note))
    out.update(_accuracy_vs_kappa(runs, drawn_by("accuracy_vs_kappa", list(heads.names))))
    return out


def _accuracy_vs_kappa(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
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
            out["accuracy_vs_kappa.png"] = _png(F.accuracy_kappa_figure(
                points, title=f"{task}: accuracy vs error consistency, {len(points)} models"))
    return out


def drawn_by(kind: str, tasks: list[str]) -> list[str]:
    """The tasks, in order, whose scoring family names ``kind`` among its report figures."""
    return [t for t in tasks if (family := family_of(t)) is not None and kind in family.report_figures]


def _a_k(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for task in tasks[:1]:
        curves = [{"label": r.model, "scores": r.scores[task]}
                  for r in runs if F.score_named(r.scores.get(task, []), "capacity") is not None]
        if curves:
            out["a_k.png"] = _png(F.capacity_figure(
                curves, title=f"{task}: a(k) of {len(curves)} models against the capacity band"))
    return out


def _chart6(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
    by_model = {r.model: {t: sc for t, sc in r.scores.items() if t in tasks} for r in runs}
    if not any(by_model.values()):
        return {}
    return {name: _png(fig) for name, fig in chart6_report_figures(by_model).items()}


def _texture_vs_shape(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
    by_model = {r.model: {t: sc for t, sc in r.scores.items() if t in tasks} for r in runs}
    return {name: _png(fig) for name, fig in texture_vs_shape_report_figures(
        by_model, {r.model: r.family for r in runs}).items()}


def _generalization_matrix(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
    networks = [(f"{r.model}\n{t}", sc) for r in runs for t, sc in r.scores.items()
                if t in tasks and level_curves(sc)]
    return {"generalization_matrix.png": _png(generalization_matrix_figure(networks))} if len(networks) >= 2 else {}


# A scoring family's ``report_figures`` names -> their drawing over the runs and that family's tasks.
# The answer's accuracy_vs_kappa is drawn with the matrix (:func:`answer_figures`).
REPORT_FIGURES: dict[str, Callable[[list[BatteryRunData], list[str]], dict[str, bytes]]] = {
    "accuracy_vs_kappa": _accuracy_vs_kappa, "a_k": _a_k, "chart6": _chart6,
    "texture_vs_shape": _texture_vs_shape, "generalization_matrix": _generalization_matrix}


def report_figures(runs: list[BatteryRunData], heads: Headlines,
                   groups: Groups | None = None) -> dict[str, bytes]:
    """name -> PNG bytes of the cross-model figures (only those the runs have data for), the
    answer's first (:func:`answer_figures`), then those the tasks' scoring families name."""
    out = answer_figures(runs, heads, groups or rank_groups(heads, runs))
    tasks = task_order(runs)
    kinds = dict.fromkeys(k for t in tasks if (f := family_of(t)) is not None for k in f.report_figures)
    for kind in kinds:
        if kind != "accuracy_vs_kappa":  # the answer's, above
            out.update(REPORT_FIGURES[kind](runs, drawn_by(kind, tasks)))
    if len(values := heads.values()) >= 2:
        tasks = list(values)
        rho, n = rank_correlations(values, tasks)
        if n[~np.eye(len(tasks), dtype=bool)].max() >= MIN_RANK_MODELS:
            out["rank_correlations.png"] = _png(F.rank_correlation_figure(tasks, rho, n, MIN_RANK_MODELS))
    return out


# Below 5 models no rank correlation can be told from chance: at 4 the likeliest-looking one,
# rho = +-1, has two-sided p = 2/4! = 0.083 (at 3, rho takes only +-1 and +-0.5). The heatmap
# is drawn where some pair of tasks has this many models, its smaller pairs shown n/a.
MIN_RANK_MODELS = 5


def rank_correlations_note(models: int) -> str:
    return (f"Cross-task rank correlations: not drawn: with {models} models no Spearman rho between "
            f"tasks can be told from chance (it needs {MIN_RANK_MODELS}); rank_correlations.csv "
            f"lists them with their n.")


# -- HTML -----------------------------------------------------------------------------------------

_CSS = """body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #bbb;padding:3px 7px;
font-size:13px;text-align:left}th{background:#eee}td.num{text-align:right;font-variant-numeric:
tabular-nums}img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}code{font-size:12px}
.unavail{color:#a40}"""


def _img(name: str, png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption><b>{html.escape(name)}</b>: {html.escape(caption)}</figcaption></figure>")


def mlflow_link(tracking_uri: str, experiment_id: str, run_id: str, text: str) -> str:
    """``text`` linking to the run's page on a tracking server; for a local store, which a
    browser reaches only while `gestalt ui` serves it on a port of that moment, no link: the
    text and how to open it."""
    if not tracking_uri.startswith(("http://", "https://")):
        return (f"{html.escape(text)} (run <code>{html.escape(run_id)}</code> of experiment "
                f"{html.escape(experiment_id)}: <code>gestalt ui</code> serves the store and lists it)")
    url = f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}/runs/{run_id}"
    return f'<a href="{html.escape(url)}">{html.escape(text)}</a>'


def _run_link(tracking_uri: str, run: BatteryRunData) -> str:
    return f"<p>MLflow run: {mlflow_link(tracking_uri, run.experiment_id, run.run_id, run.run_id)}</p>"


def _table(head: list[str], rows: list[list[str]], num_from: int = 0) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f'<td{" class=num" if i >= num_from and num_from else ""}>{html.escape(c)}</td>'
                         for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}'
            f"</title><style>{_CSS}</style></head><body>{body}</body></html>\n")


def scorecard_html(run: BatteryRunData, rows: list[dict[str, Any]], humans: list[dict[str, Any]],
                   tasks: list[str], figures: dict[str, bytes], tracking_uri: str = "") -> str:
    """One model's scorecard: identity, null rates, headline scores, human references, figures."""
    p = run.params
    ident = [["model", run.model], ["family", run.family], ["model version", p.get("model_version", "")],
             ["weights", p.get("weights", "")], ["readouts", p.get("readouts", "")],
             ["recipe", f"{run.recipe} (sha256 {run.tags.get('gestalt.recipe_sha256', '')[:12]})"],
             ["harness version", p.get("harness_version", "")], ["seed", p.get("seed", "")],
             ["MLflow run", run.run_id]]
    nulls = []
    for t in tasks:
        if t in run.unavailable:
            nulls.append([t, "unavailable", "", run.unavailable[t]])
        elif t in run.scores:
            v = run.null_rate(t)
            n = run.metrics.get(f"{t}/n")
            nulls.append([t, _fmt(v), _fmt(int(n)) if n is not None else "", ""])
    mine = [r for r in rows if r["model"] == run.model and not r["note"]]
    bracket = any_nulls(mine)
    score_table = [[r["task"], r["score"], _value(r), _ci(r), _fmt(r["floor"], _decimals(r)),
                    _fmt(r["ceiling"], _decimals(r)),
                    _fmt(r["n"]), _fmt(r["nulls"]), *([_bracket(r)] if bracket else [])] for r in mine]
    human_table = [[h["task"], h["score"], _fmt(h["value"]),
                    "" if h["ci_low"] is None else f"[{_fmt(h['ci_low'])}, {_fmt(h['ci_high'])}]",
                    _fmt(h["n"]), h["method"]] for h in humans if h["task"] in run.scores]
    body = [f"<h1>gestalt scorecard: {html.escape(run.model)}</h1>",
            "<p>Behavioural alignment with published human data. Intervals are 95% percentile "
            "bootstrap CIs over stimuli; nulls (unparseable answers) are excluded and counted, and "
            "for proportions the bracket (1-v)x .. (1-v)x+v shows where the score would land had "
            "they been scored.</p>",
            _table(["", ""], ident),
            _run_link(tracking_uri, run) if tracking_uri else "",
            "<h2>Trials and null rates per task</h2>",
            _table(["task", "null rate", "parseable trials", "note"], nulls),
            "<h2>Scores</h2>",
            _table(["task", "score", "value", "95% CI", "floor", "ceiling", "n", "nulls",
                    *([BRACKET_HEADER] if bracket else [])], score_table, num_from=2)]
    if ceilings := ceiling_rows(mine):
        body += ["<h2>Ceilings</h2>", _table(CEILING_HEAD, ceilings)]
    if human_table:
        body += ["<h2>Human references (same stimuli)</h2>",
                 _table(["task", "score", "value", "95% CI", "n", "method"], human_table)]
    if figures:
        body.append("<h2>Figures</h2>")
        body += [_img(name, png, figure_caption(name, run)) for name, png in sorted(figures.items())]
    return _page(f"gestalt scorecard: {run.model}", "\n".join(body))


def model_figures(run: BatteryRunData) -> dict[str, bytes]:
    """The run's logged figures, plus those its scores can redraw where a run logged none."""
    figs = dict(run.figures)
    for task, scores in run.scores.items():
        drawn = F.score_figures(task, scores, run.model)
        for name, fig in drawn.items():
            if name in figs:
                F.plt.close(fig)
            else:
                figs[name] = _png(fig)
    return figs


def task_rows(runs: list[BatteryRunData], tasks: list[str]) -> list[list[str]]:
    """Every task of the runs: which models it was scored for and, where not, why."""
    out = []
    for t in tasks:
        scored = [r.model for r in runs if t in r.scores]
        missing = sorted({f"{why}" for r in runs if (why := r.unavailable.get(t))})
        out.append([t, ", ".join(scored) or "-", "; ".join(missing)])
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def build_report(tracking_uri: str, experiment: str, out_dir: str | Path,
                 run_ids: list[str] | None = None, recipe: str | None = None) -> dict[str, Path]:
    """Write the cross-model report into ``out_dir`` and, where the store can take it (not a
    folder mounted read-only), the experiment's summary run
    (:mod:`~harness.reports.summary`; rank groups from the logged intervals: the per-stimulus
    values of a paired bootstrap are a recipe's, :func:`experiment_summary`); returns name ->
    path of what it wrote. The report shows the answer of the runs read (:func:`answers`); the
    summary run, the experiment's answer, is drawn from all its batteries however they are narrowed."""
    found = answers(load_runs(tracking_uri, experiment, run_ids, recipe, figures=True))
    runs = found.models
    tasks = task_order(runs)
    runs = ordered_models(runs, tasks)
    out = Path(out_dir)
    try:
        (out / "scorecards").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportError(f"--out {unwritable_folder(out, e)}; choose another with --out DIR") from None
    written: dict[str, Path] = {}

    def put(name: str, data: bytes | str) -> None:
        path = out / name
        write_own(path, data)
        written[name] = path

    heads = headlines(runs, tasks)
    groups = rank_groups(heads, runs)
    figs = report_figures(runs, heads, groups)
    for name, png in figs.items():
        put(name, png)
    rows = score_rows(runs, tasks)
    write_csv(rows, out / "scores.csv")
    written["scores.csv"] = out / "scores.csv"
    humans = human_rows(runs, tasks)
    md = [f"# gestalt report: {experiment}", "",
          f"{len(runs)} models, tasks: {', '.join(tasks)}.", "", markdown_table(rows)]
    if humans:
        md += ["", "## Human references", "", "| task | score | value [95% CI] | n |", "|---|---|---|---|"]
        md += [f"| {h['task']} | {h['score']} | {_fmt(h['value'])} {_ci(h)} | {h['n']} |" for h in humans]
    put("scores.md", "\n".join(md) + "\n")

    values = heads.values()
    rank_tasks = list(values)
    rho, n = rank_correlations(values, rank_tasks)
    corr = [{"task_a": a, "task_b": b, "score_a": heads.names[a], "score_b": heads.names[b],
             "spearman_rho": None if np.isnan(rho[i, j]) else float(rho[i, j]), "n": int(n[i, j])}
            for i, a in enumerate(rank_tasks) for j, b in enumerate(rank_tasks) if i < j]
    write_csv(corr, out / "rank_correlations.csv",
              ("task_a", "task_b", "score_a", "score_b", "spearman_rho", "n"))
    written["rank_correlations.csv"] = out / "rank_correlations.csv"

    links = []
    for r in runs:
        page = f"scorecards/{_safe(r.model)}.html"
        put(page, scorecard_html(r, rows, humans, tasks, model_figures(r), tracking_uri))
        links.append(f'<li><a href="{html.escape(page)}">{html.escape(r.model)}</a> '
                     f"({html.escape(r.family)}; MLflow run "
                     f"{mlflow_link(tracking_uri, r.experiment_id, r.run_id, r.run_id[:8])})</li>")
    captions = report_captions(runs, heads)
    index = [f"<h1>gestalt report: {html.escape(experiment)}</h1>"]
    if "matrix.png" in figs:  # the answer first, and in MLflow where the store can take a run
        if read_only := read_only_store(tracking_uri):
            logging.getLogger("harness").warning("report: no summary run logged in MLflow (%s); the report "
                                                 "is written to %s", read_only, out)
            summary_line = f"<p>No summary run in MLflow: {html.escape(read_only)}.</p>"
        else:
            summary = (_log_summary(tracking_uri, experiment, runs, heads, figs, groups, found.history_in(runs))
                       if not run_ids and not recipe else _whole_experiment(tracking_uri, runs[0].experiment_id))
            summary_line = (f"<p>In MLflow: the experiment's "
                            f"{mlflow_link(tracking_uri, runs[0].experiment_id, summary.run_id, 'summary run')} "
                            f"(this matrix and the dissociation figure).</p>")
        index += [_img("matrix.png", figs["matrix.png"], captions["matrix.png"]), summary_line,
                  "<h2>Rank groups per task</h2>", f"<p>{html.escape(groups.note)}.</p>",
                  _table(["task", "groups", "model", "value [95% CI]", "run"],
                         [[*row, groups.runs[(row[2], row[0])][:8]] for row in groups.rows()])]
    index += [f"<p>{len(runs)} models; one scorecard per model:</p>", "<ul>" + "".join(links) + "</ul>",
              "<h2>Tasks</h2>", _table(["task", "scored for", "unavailable"], task_rows(runs, tasks)),
              "<h2>Runs</h2>", "<p>Each (model, task) comes from the latest finished battery that ran it, "
              "whichever recipe that was; a battery a later one replaced is listed, superseded.</p>",
              _table(["model", "run", "recipe", "answers", "superseded"], history_rows(found.history_in(runs)))]
    if ceilings := ceiling_rows(rows):
        index += ["<h2>Ceilings</h2>", _table(CEILING_HEAD, ceilings)]
    if humans:
        index += ["<h2>Human references (same stimuli)</h2>",
                  _table(["task", "score", "value", "95% CI", "n", "method"],
                         [[h["task"], h["score"], _fmt(h["value"]), _ci(h), _fmt(h["n"]), h["method"]]
                          for h in humans], num_from=2)]
    index.append("<h2>Figures</h2>")
    if len(heads.names) >= 2 and "rank_correlations.png" not in figs:
        index.append(f"<p>{html.escape(rank_correlations_note(len(runs)))}</p>")
    index += [_img(name, png, captions.get(name) or figure_caption(name)) for name, png in figs.items()
              if name != "matrix.png"]
    bracket = any_nulls(rows)
    index += ["<h2>Scores</h2>", _table(
        ["model", "task", "score", "value", "95% CI", "floor", "ceiling", "null rate",
         *([BRACKET_HEADER] if bracket else [])],
        [[r["model"], r["task"], r["score"], _value(r), _ci(r), _fmt(r["floor"], _decimals(r)),
          _fmt(r["ceiling"], _decimals(r)), _fmt(r["task_null_rate"]), *([_bracket(r)] if bracket else [])]
         for r in rows if not r["note"]], num_from=3)]
    put("index.html", _page(f"gestalt report: {experiment}", "\n".join(index)))
    put("runs.json", json.dumps(found.history_in(runs), indent=1) + "\n")
    return written


def _whole_experiment(tracking_uri: str, experiment_id: str) -> Summary:
    """The summary run of the experiment ``experiment_id`` from all its batteries."""
    from mlflow import MlflowClient

    name = MlflowClient(tracking_uri).get_experiment(experiment_id).name
    summary = _summary_of(tracking_uri, name, answers(load_runs(tracking_uri, name)))
    assert summary is not None  # its batteries hold the narrowed report's, whose matrix is drawn
    return summary


def history_rows(history: list[dict[str, Any]]) -> list[list[str]]:
    """[model, run, recipe, tasks it answers, tasks a later run answers (by which)] per battery."""
    return [[h["model"], h["run_id"], h["recipe"], ", ".join(h["answers"]) or "-",
             "; ".join(f"{t} (by {rid[:8]})" for t, rid in h["superseded"].items())] for h in history]
