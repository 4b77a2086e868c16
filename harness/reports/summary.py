"""The experiment's answer in MLflow: one summary run a UI user finds in the runs table.

After a recipe and on ``gestalt report``, the experiment's summary run (tag ``gestalt.summary``,
one per experiment, reused) holds the paper's matrix (models x tasks, each task's headline with
its interval, colour = position between floor and ceiling, rank groups as letters) and its
dissociation figure (silhouette accuracy against error consistency) as artifacts, shown on the
run's own page through its description, with ``rank_groups.json`` and ``runs.json`` beside them.
It answers the whole experiment: each (model, task) from the latest finished battery that ran it,
whichever recipe that was; ``rank_groups.json`` names each cell's run, ``runs.json`` lists every
battery with its recipe, the tasks it answers and those a later battery answers (superseded).
Home -> experiment -> the summary run: two clicks.

Each model's run also carries the answer as one tag per task (key: the task id; value: headline,
95% interval and rank group, e.g. ``0.675 [0.575, 0.787] a``, censored values marked), which the
experiment's runs-table view shows beside the sortable headline metric (:func:`answer_columns`).

It also gives each model's run its own colour (MLflow's ``mlflow.runColor`` tag, which the UI's
tables and charts use): colour-blind-safe colours in the report's model order, where MLflow's
own colour from the run id drew two of three runs in nearly the same blue.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..tracking.batteries import SUMMARY_FINGERPRINT, SUMMARY_TAG, summary_url
from ..scores.ranking import value_interval, verdict_text
from ..scores.record import Score
from ..scores.tasks import family_of
from ..tracking.store import column_width, refuse_artifact_links, update_shared_view
from .style import OKABE_ITO

RUN_COLOR_TAG = "mlflow.runColor"  # read by MLflow's UI for a run's colour in tables and charts
NOTE_TAG = "mlflow.note.content"  # the run's description, Markdown on its page
MODEL_COLORS = tuple(c for c in OKABE_ITO if c != "#000000")  # black marks the summary run
FIGURES = {"matrix.png": "matrix.png", "accuracy_vs_kappa.png": "dissociation.png"}


@dataclass(frozen=True)
class ModelRun:
    """A model's battery run as the summary names and colours it."""

    model: str
    family: str
    run_id: str  # its newest battery
    tags: dict[str, str]  # its newest battery's tags now (its answers and colour among them)
    task_runs: dict[str, str]  # task -> the battery answering it


def answer_text(task: str, scores: list[Score], groups: str) -> str:
    """A model's answer on a task in one runs-table cell: its headline ``value [low, high]`` with
    the family's decimals, its rank-group letters, and every shown score that is censored
    (``0.040 [0.015, 0.065] a; capacity censored below``: fitted beyond the tested range). A task
    no order answers (:attr:`~harness.scores.tasks.Family.unranked`) shows its verdict scores,
    as the terminal does."""
    family = family_of(task)
    if family is not None and not family.ranked and (verdict := verdict_text(family, scores)):
        return verdict
    lead = None if family is None else family.lead_score(scores)
    if family is None or lead is None or lead.value is None:
        return "no headline score"
    text = f"{value_interval(lead, family.decimals_of(lead.name))} {groups}".rstrip()
    shown = [lead, *(s for s in scores if s.name in family.secondary)]
    return "; ".join([text, *(f"{s.name} censored {s.extra['censored']}" for s in shown
                              if s.extra.get("censored"))])


@dataclass(frozen=True)
class AnswerColumns:
    columns: list[str]  # selected, in order
    order: list[str]  # the table's column order: the run's name, then the columns
    widths: dict[str, int]  # px


def answer_columns(metrics: dict[str, str], answers: dict[tuple[str, str], str]) -> AnswerColumns:
    """The runs table's columns for ``metrics`` (task -> its headline's metric name): each task's
    answer tag, then the sortable headline metrics, first after the run's name; each as wide as
    its name and its longest answer (``answers``: (model, task) -> text) need."""
    tags = [f"tags.`{task}`" for task in metrics]
    columns = [*tags, *(f"metrics.`{m}`" for m in metrics.values())]
    widths = {c: column_width(task, *(text for (_, t), text in answers.items() if t == task))
              for c, task in zip(tags, metrics)}
    widths.update({f"metrics.`{m}`": column_width(m) for m in metrics.values()})
    return AnswerColumns(columns, ["attributes.`Run Name`", *columns], widths)


@dataclass(frozen=True)
class Summary:
    run_id: str
    url: str  # its page in the MLflow UI


@dataclass(frozen=True)
class Groups:
    """The rank groups as the summary run stores them (``rank_groups.json``): each (model, task)
    cell's letters and its ``value [95% CI]`` as the terminal prints it, how each task's groups
    were formed, and the fingerprint of the runs they were drawn from."""

    letters: dict[tuple[str, str], str]
    shown: dict[tuple[str, str], str]
    note: str
    methods: dict[str, str]  # task -> how its groups were formed
    fingerprint: str
    runs: dict[tuple[str, str], str]  # (model, task) -> the battery run its cell comes from

    def rows(self) -> list[list[str]]:
        """[task, letters, model, value [95% CI]] per ranked cell, each task's best first."""
        return [[t, g, m, self.shown[(m, t)]] for (m, t), g in self.letters.items()]


def summary_markdown(run_id: str, experiment: str, runs: list[ModelRun], figures: list[str],
                     groups_note: str, ceilings: list[str]) -> str:
    """The summary run's description: what it shows and the figures themselves, drawn from its
    artifacts by the UI's own artifact route (relative to the UI's page)."""
    # the figures first: the page shows a description's first lines until "Show more"
    lines = [f"![{name}](get-artifact?path={name}&run_uuid={run_id})" for name in figures[:1]]
    lines += ["", f"**Answer of experiment `{experiment}`**: per task, each model's headline score with its "
              f"95% interval, coloured by its position between the task's floor and human ceiling; "
              f"{groups_note}. Each (model, task) comes from the latest finished battery that ran it, "
              f"whichever recipe that was: `rank_groups.json` names each cell's run, `runs.json` every "
              f"battery of the experiment, those a later one replaced marked superseded.", "",
              f"{len(runs)} models: " + ", ".join(f"`{r.model}` ({r.family})" for r in runs), ""]
    if ceilings:
        lines += ["Each task's ceiling, what it is and its source:", "", *(f"- {c}" for c in ceilings), ""]
    lines += [f"![{name}](get-artifact?path={name}&run_uuid={run_id})" for name in figures[1:]]
    return "\n".join(lines)


def log_summary(tracking_uri: str, experiment: str, experiment_id: str, runs: list[ModelRun],
                headline: dict[str, str], figures: dict[str, bytes], groups: Groups,
                answers: dict[tuple[str, str], str], metrics: dict[str, str],
                ceilings: list[str], history: list[dict]) -> Summary:
    """Write the experiment's summary run (made on first use, updated after), colour the model
    runs (in the order given) and tag each with its answer per task (``answers``: (model, task)
    -> :func:`answer_text`) shown in the runs table beside the headline metric (``metrics``: task
    -> its metric's name); ``headline``: task -> its headline score's name; ``figures`` are the
    report's (name -> PNG), of which the matrix and the dissociation figure are logged;
    ``ceilings``: a line per task on its headline's ceiling, for the description; ``history``:
    every battery read, as ``runs.json`` lists it."""
    from mlflow import MlflowClient
    from mlflow.entities import RunTag

    client = MlflowClient(tracking_uri)
    found = client.search_runs([experiment_id], f"tags.`{SUMMARY_TAG}` = 'true'", max_results=1,
                               order_by=["attributes.start_time DESC"])
    run = found[0] if found else client.create_run(experiment_id, run_name="summary: rank groups per task",
                                                   tags={SUMMARY_TAG: "true", RUN_COLOR_TAG: "#000000"})
    run_id = run.info.run_id
    logged = [FIGURES[name] for name in FIGURES if name in figures]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, as_name in FIGURES.items():
                if name in figures:
                    (Path(tmp) / as_name).write_bytes(figures[name])
            (Path(tmp) / "rank_groups.json").write_text(json.dumps(
                {"method": groups.note, "methods": groups.methods,
                 "groups": [{"model": m, "task": t, "groups": g, "shown": groups.shown[(m, t)],
                             "run_id": groups.runs[(m, t)]} for (m, t), g in groups.letters.items()],
                 "headline": headline, "fingerprint": groups.fingerprint}, indent=1) + "\n")
            (Path(tmp) / "runs.json").write_text(json.dumps(history, indent=1) + "\n")
            refuse_artifact_links(run.info.artifact_uri, tmp)
            client.log_artifacts(run_id, tmp)
        note = summary_markdown(run_id, experiment, runs, logged, groups.note, ceilings)
        client.log_batch(run_id, tags=[RunTag(NOTE_TAG, note),
                                       RunTag(SUMMARY_FINGERPRINT, groups.fingerprint)])
    except Exception:
        with contextlib.suppress(Exception):  # not left RUNNING where the store can still say so
            client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")
    for i, r in enumerate(runs):
        color = MODEL_COLORS[i % len(MODEL_COLORS)]
        # each answer on the battery it comes from; every battery of the model in its colour
        for rid in dict.fromkeys([r.run_id, *r.task_runs.values()]):
            tags = {task: text for (model, task), text in answers.items()
                    if model == r.model and r.task_runs.get(task, r.run_id) == rid}
            tags[RUN_COLOR_TAG] = color
            # only what changed: a client call per battery of an experiment of 1,000 is minutes
            now = r.tags if rid == r.run_id else {}
            if changed := [RunTag(k, v) for k, v in tags.items() if now.get(k) != v]:
                client.log_batch(rid, tags=changed)
    view = answer_columns(metrics, answers)

    def lead_with_answers(state: dict) -> bool:
        before = json.dumps(state, sort_keys=True)
        rest = [c for c in state.get("selectedColumns", []) if c not in view.columns]
        state["selectedColumns"] = [*view.columns, *rest]
        state["columnOrder"] = [*view.order, *rest]
        state["columnWidths"] = {**state.get("columnWidths", {}), **view.widths}
        return json.dumps(state, sort_keys=True) != before

    update_shared_view(client, experiment_id, lead_with_answers)
    return Summary(run_id, summary_url(tracking_uri, experiment_id, run_id))
