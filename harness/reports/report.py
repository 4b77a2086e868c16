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
battery that ran that task for that model, whichever recipe ran it
(:func:`~harness.reports.answer.answers`), so a recipe over other tasks or other models adds to
the answer rather than replacing it; ``recipe`` (tag ``gestalt.recipe``) or ``run_ids`` narrow
the runs read first.

The runs are read back by :mod:`~harness.reports.runs`, the answer, its headlines, rank groups
and summary run are :mod:`~harness.reports.answer`'s, the score tables
:mod:`~harness.reports.tables`'; this module draws the cross-model figures and writes the files.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import unwritable_folder
from ..own_files import write_own
from ..scores.bootstrap import interval_methods
from ..scores.record import Score
from ..scores.tasks import family_of
from ..tracking.store import read_only_store, ui_base
from . import figures as F
from .answer import (Answers, Headlines, accuracy_vs_kappa, answer_figures, answers, drawn_by,
                     experiment_summary as experiment_summary, headline as headline, headlines,
                     log_summary_run, ordered_models, rank_groups, task_order, to_png,
                     whole_experiment_summary)
from .bars_figures import generalization_matrix_figure, level_curves
from .chart6_figures import chart6_report_figures
from .runs import BatteryRunData, ReportError, load_runs
from .shape_bias_figures import texture_vs_shape_report_figures
from .summary import Groups
from .tables import (BRACKET_HEADER, CEILING_HEAD, COLUMNS, any_nulls, bracket_cell, ceiling_rows, cell, ci_cell,
                     decimals, history_rows, human_rows, markdown_table, rank_correlations,
                     score_rows, task_rows, value_cell, write_csv)



# -- figures --------------------------------------------------------------------------------------

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



def _a_k(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for task in tasks[:1]:
        curves = [{"label": r.model, "scores": r.scores[task]}
                  for r in runs if F.score_named(r.scores.get(task, []), "capacity") is not None]
        if curves:
            out["a_k.png"] = to_png(F.capacity_figure(
                curves, title=f"{task}: a(k) of {len(curves)} models against the capacity band"))
    return out


def _chart6(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
    by_model = {r.model: {t: sc for t, sc in r.scores.items() if t in tasks} for r in runs}
    if not any(by_model.values()):
        return {}
    return {name: to_png(fig) for name, fig in chart6_report_figures(by_model).items()}


def _texture_vs_shape(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
    by_model = {r.model: {t: sc for t, sc in r.scores.items() if t in tasks} for r in runs}
    return {name: to_png(fig) for name, fig in texture_vs_shape_report_figures(
        by_model, {r.model: r.family for r in runs}).items()}


def _generalization_matrix(runs: list[BatteryRunData], tasks: list[str]) -> dict[str, bytes]:
    networks = [(f"{r.model}\n{t}", sc) for r in runs for t, sc in r.scores.items()
                if t in tasks and level_curves(sc)]
    return {"generalization_matrix.png": to_png(generalization_matrix_figure(networks))} if len(networks) >= 2 else {}


# A scoring family's ``report_figures`` names -> their drawing over the runs and that family's tasks.
# The answer's accuracy_vs_kappa is drawn with the matrix (:func:`~harness.reports.answer.answer_figures`).
REPORT_FIGURES: dict[str, Callable[[list[BatteryRunData], list[str]], dict[str, bytes]]] = {
    "accuracy_vs_kappa": accuracy_vs_kappa, "a_k": _a_k, "chart6": _chart6,
    "texture_vs_shape": _texture_vs_shape, "generalization_matrix": _generalization_matrix}


def report_figures(runs: list[BatteryRunData], heads: Headlines,
                   groups: Groups | None = None) -> dict[str, bytes]:
    """name -> PNG bytes of the cross-model figures (only those the runs have data for), the
    answer's first (:func:`~harness.reports.answer.answer_figures`), then those the tasks' scoring families name."""
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
            out["rank_correlations.png"] = to_png(F.rank_correlation_figure(tasks, rho, n, MIN_RANK_MODELS))
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
            nulls.append([t, cell(v), cell(int(n)) if n is not None else "", ""])
    mine = [r for r in rows if r["model"] == run.model and not r["note"]]
    bracket = any_nulls(mine)
    score_table = [[r["task"], r["score"], value_cell(r), ci_cell(r), cell(r["floor"], decimals(r)),
                    cell(r["ceiling"], decimals(r)),
                    cell(r["n"]), cell(r["nulls"]), *([bracket_cell(r)] if bracket else [])] for r in mine]
    human_table = [[h["task"], h["score"], cell(h["value"]),
                    "" if h["ci_low"] is None else f"[{cell(h['ci_low'])}, {cell(h['ci_high'])}]",
                    cell(h["n"]), h["method"]] for h in humans if h["task"] in run.scores]
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
                figs[name] = to_png(fig)
    return figs


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


@dataclass
class _Folder:
    """The report's folder and what has been written into it (name -> path)."""

    out: Path
    written: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def make(cls, out_dir: str | Path) -> _Folder:
        out = Path(out_dir)
        try:
            (out / "scorecards").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ReportError(f"--out {unwritable_folder(out, e)}; choose another with --out DIR") from None
        return cls(out)

    def put(self, name: str, data: bytes | str) -> None:
        write_own(self.out / name, data)
        self.written[name] = self.out / name

    def put_csv(self, name: str, rows: list[dict[str, Any]], columns: tuple[str, ...] = COLUMNS) -> None:
        write_csv(rows, self.out / name, columns)
        self.written[name] = self.out / name


@dataclass(frozen=True)
class _Shown:
    """What the report's files show: the answer's models in the matrix's order, their headlines,
    rank groups, figures, score rows, human references and the history of the runs read."""

    tracking_uri: str
    experiment: str
    runs: list[BatteryRunData]
    tasks: list[str]
    heads: Headlines
    groups: Groups
    figures: dict[str, bytes]
    rows: list[dict[str, Any]]
    humans: list[dict[str, Any]]
    history: list[dict[str, Any]]


def _shown(tracking_uri: str, experiment: str, found: Answers, runs: list[BatteryRunData],
           tasks: list[str]) -> _Shown:
    heads = headlines(runs, tasks)
    groups = rank_groups(heads, runs)
    return _Shown(tracking_uri, experiment, runs, tasks, heads, groups, report_figures(runs, heads, groups),
                  score_rows(runs, tasks), human_rows(runs, tasks), found.history_in(runs))


def scores_markdown(shown: _Shown) -> str:
    """``scores.md``: every headline score, then the human references."""
    md = [f"# gestalt report: {shown.experiment}", "",
          f"{len(shown.runs)} models, tasks: {', '.join(shown.tasks)}.", "", markdown_table(shown.rows)]
    if shown.humans:
        md += ["", "## Human references", "", "| task | score | value [95% CI] | n |", "|---|---|---|---|"]
        md += [f"| {h['task']} | {h['score']} | {cell(h['value'])} {ci_cell(h)} | {h['n']} |"
               for h in shown.humans]
    return "\n".join(md) + "\n"


RANK_CORRELATION_COLUMNS = ("task_a", "task_b", "score_a", "score_b", "spearman_rho", "n")


def rank_correlation_rows(heads: Headlines) -> list[dict[str, Any]]:
    """``rank_correlations.csv``: Spearman rho and n for each pair of ordering tasks."""
    values = heads.values()
    tasks = list(values)
    rho, n = rank_correlations(values, tasks)
    return [{"task_a": a, "task_b": b, "score_a": heads.names[a], "score_b": heads.names[b],
             "spearman_rho": None if np.isnan(rho[i, j]) else float(rho[i, j]), "n": int(n[i, j])}
            for i, a in enumerate(tasks) for j, b in enumerate(tasks) if i < j]


def _write_tables(folder: _Folder, shown: _Shown) -> None:
    """The cross-model figures, ``scores.csv``, ``scores.md`` and ``rank_correlations.csv``."""
    for name, png in shown.figures.items():
        folder.put(name, png)
    folder.put_csv("scores.csv", shown.rows)
    folder.put("scores.md", scores_markdown(shown))
    folder.put_csv("rank_correlations.csv", rank_correlation_rows(shown.heads), RANK_CORRELATION_COLUMNS)


def _write_scorecards(folder: _Folder, shown: _Shown) -> list[str]:
    """One scorecard page per model; returns the index's list item linking to each."""
    links = []
    for r in shown.runs:
        page = f"scorecards/{_safe(r.model)}.html"
        folder.put(page, scorecard_html(r, shown.rows, shown.humans, shown.tasks, model_figures(r),
                                        shown.tracking_uri))
        links.append(f'<li><a href="{html.escape(page)}">{html.escape(r.model)}</a> '
                     f"({html.escape(r.family)}; MLflow run "
                     f"{mlflow_link(shown.tracking_uri, r.experiment_id, r.run_id, r.run_id[:8])})</li>")
    return links


def _summary_line(shown: _Shown, narrowed: bool, out: Path) -> str:
    """The experiment's summary run, logged where the store can take a run (drawn from all its
    batteries where ``narrowed`` read only some), and the index's line saying where it is."""
    if read_only := read_only_store(shown.tracking_uri):
        logging.getLogger("harness").warning("report: no summary run logged in MLflow (%s); the report "
                                             "is written to %s", read_only, out)
        return f"<p>No summary run in MLflow: {html.escape(read_only)}.</p>"
    experiment_id = shown.runs[0].experiment_id
    summary = (whole_experiment_summary(shown.tracking_uri, experiment_id) if narrowed else
               log_summary_run(shown.tracking_uri, shown.experiment, shown.runs, shown.heads, shown.figures,
                               shown.groups, shown.history))
    return (f"<p>In MLflow: the experiment's "
            f"{mlflow_link(shown.tracking_uri, experiment_id, summary.run_id, 'summary run')} "
            f"(this matrix and the dissociation figure).</p>")


def _answer_section(shown: _Shown, caption: str, summary_line: str) -> list[str]:
    """The index's first section: the matrix, the summary run and the rank groups per task."""
    groups = shown.groups
    return [_img("matrix.png", shown.figures["matrix.png"], caption), summary_line,
            "<h2>Rank groups per task</h2>", f"<p>{html.escape(groups.note)}.</p>",
            _table(["task", "groups", "model", "value [95% CI]", "run"],
                   [[*row, groups.runs[(row[2], row[0])][:8]] for row in groups.rows()])]


def _index_html(shown: _Shown, answer: list[str], links: list[str], captions: dict[str, str]) -> str:
    """``index.html``: the answer, the scorecards, the tasks, the runs read, ceilings, human
    references, the figures and every score."""
    runs, figs, rows, humans = shown.runs, shown.figures, shown.rows, shown.humans
    index = [f"<h1>gestalt report: {html.escape(shown.experiment)}</h1>", *answer]
    index += [f"<p>{len(runs)} models; one scorecard per model:</p>", "<ul>" + "".join(links) + "</ul>",
              "<h2>Tasks</h2>", _table(["task", "scored for", "unavailable"], task_rows(runs, shown.tasks)),
              "<h2>Runs</h2>", "<p>Each (model, task) comes from the latest finished battery that ran it, "
              "whichever recipe that was; a battery a later one replaced is listed, superseded.</p>",
              _table(["model", "run", "recipe", "answers", "superseded"], history_rows(shown.history))]
    if ceilings := ceiling_rows(rows):
        index += ["<h2>Ceilings</h2>", _table(CEILING_HEAD, ceilings)]
    if humans:
        index += ["<h2>Human references (same stimuli)</h2>",
                  _table(["task", "score", "value", "95% CI", "n", "method"],
                         [[h["task"], h["score"], cell(h["value"]), ci_cell(h), cell(h["n"]), h["method"]]
                          for h in humans], num_from=2)]
    index.append("<h2>Figures</h2>")
    if len(shown.heads.names) >= 2 and "rank_correlations.png" not in figs:
        index.append(f"<p>{html.escape(rank_correlations_note(len(runs)))}</p>")
    index += [_img(name, png, captions.get(name) or figure_caption(name)) for name, png in figs.items()
              if name != "matrix.png"]
    bracket = any_nulls(rows)
    index += ["<h2>Scores</h2>", _table(
        ["model", "task", "score", "value", "95% CI", "floor", "ceiling", "null rate",
         *([BRACKET_HEADER] if bracket else [])],
        [[r["model"], r["task"], r["score"], value_cell(r), ci_cell(r), cell(r["floor"], decimals(r)),
          cell(r["ceiling"], decimals(r)), cell(r["task_null_rate"]), *([bracket_cell(r)] if bracket else [])]
         for r in rows if not r["note"]], num_from=3)]
    return _page(f"gestalt report: {shown.experiment}", "\n".join(index))


def build_report(tracking_uri: str, experiment: str, out_dir: str | Path,
                 run_ids: list[str] | None = None, recipe: str | None = None) -> dict[str, Path]:
    """Write the cross-model report into ``out_dir`` and, where the store can take it (not a
    folder mounted read-only), the experiment's summary run
    (:mod:`~harness.reports.summary`; rank groups from the logged intervals: the per-stimulus
    values of a paired bootstrap are a recipe's, :func:`~harness.reports.answer.experiment_summary`);
    returns name -> path of what it wrote. The report shows the answer of the runs read
    (:func:`~harness.reports.answer.answers`); the summary run, the experiment's answer, is drawn
    from all its batteries however they are narrowed."""
    found = answers(load_runs(tracking_uri, experiment, run_ids, recipe, figures=True))
    tasks = task_order(found.models)
    runs = ordered_models(found.models, tasks)
    folder = _Folder.make(out_dir)
    shown = _shown(tracking_uri, experiment, found, runs, tasks)
    _write_tables(folder, shown)
    links = _write_scorecards(folder, shown)
    captions = report_captions(runs, shown.heads)
    answer = []
    if "matrix.png" in shown.figures:  # the answer first, and in MLflow where the store can take a run
        summary_line = _summary_line(shown, bool(run_ids or recipe), folder.out)
        answer = _answer_section(shown, captions["matrix.png"], summary_line)
    folder.put("index.html", _index_html(shown, answer, links, captions))
    folder.put("runs.json", json.dumps(shown.history, indent=1) + "\n")
    return folder.written
