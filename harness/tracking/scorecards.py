"""``gestalt register``: a model's alignment scorecard in MLflow (docs/design.md, "Scorecards").

For one FINISHED battery run:

1. One *external* LoggedModel per model identity (model id + ``model_version``, the adapter's
   weights-inclusive version string) in the run's experiment, found again by the tag
   ``gestalt.identity`` (sha256 of the identity) so that every battery of the same weights
   accumulates on it, each metric carrying its ``run_id``.
2. The battery metrics (``<task>/...``) linked to it with ``mlflow.log_metrics(model_id=...,
   dataset=...)``, the dataset being the task's stimulus set (name = task id, digest = its
   sha256, truncated to the 36 characters MLflow's dataset digest column holds). They are
   re-logged with their original timestamps, so the run's own metric history gains no points
   (MLflow drops exact duplicates) while the LoggedModel gets them; the run records the model and
   the stimulus sets as its inputs.
3. ``mlflow.register_model("models:/<model_id>", name)``, an alias on that version, identity and
   provenance as version tags. Registered versions carry no metrics in the OSS store (docs/design.md,
   "MLflow notes"), so the headline scores are the version's description, a Markdown table MLflow renders
   (:func:`scorecard_markdown`). Registering the same run again
   reuses its version.

Known MLflow 3.17.2 bug (docs/design.md, "MLflow notes"): ``search_logged_models(datasets=[{"dataset_name":
...}])`` finds nothing through a tracking server unless ``dataset_digest`` is passed too;
:func:`find_scorecards` always passes both.

The fluent calls above read the global tracking URI; :func:`_tracking` sets it for the call and
restores the previous one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import GestaltError
from ..scores.bootstrap import interval_methods
from ..scores.ranking import number
from ..scores.record import Score
from ..scores.tasks import family_of
from .batteries import not_a_battery
from .metrics import HEADLINE_SUFFIXES
from .store import ui_base

DIGEST_CHARS = 36  # MLflow's dataset digest columns are String(36)
ALIAS = re.compile(r"^[\w-]+$")

class RegistryError(GestaltError):
    """A run that cannot be registered as a scorecard, or a bad alias / name."""


@dataclass
class Scorecard:
    name: str
    version: str
    alias: str
    model_id: str  # the LoggedModel
    run_id: str
    tags: dict[str, str]
    url: str  # the version's page in the MLflow UI


def identity_digest(model: str, model_version: str) -> str:
    return hashlib.sha256(f"{model}\n{model_version}".encode()).hexdigest()


def default_alias(recipe: str) -> str:
    """``latest-<recipe>``: MLflow reserves the bare alias ``latest``; aliases allow [A-Za-z0-9_-]."""
    return "latest-" + re.sub(r"[^\w-]", "-", recipe or "battery")


@contextlib.contextmanager
def _tracking(uri: str) -> Iterator[Any]:
    import mlflow

    # set_tracking_uri mirrors the URI into $MLFLOW_TRACKING_URI, so that variable is the state
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield mlflow
    finally:
        mlflow.set_tracking_uri(previous)  # type: ignore[arg-type]  # None: back to the default


@contextlib.contextmanager
def quiet_downloads() -> Iterator[None]:
    """No tqdm bar per downloaded artifact (a report reads a few per run)."""
    key = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    previous = os.environ.get(key)
    os.environ[key] = "false"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = previous


SCORE_FIELDS = {f.name for f in fields(Score)}
# MLflow renders a description's Markdown table with no cell padding: "120" and "0" in adjacent
# cells read "1200". An en space on each side of every cell (an entity: a cell's own spaces are
# trimmed) keeps the columns apart on the page and is plain to read in the raw text.
PAD = "&ensp;"


def markdown_cell(text: object) -> str:
    """``text`` as one Markdown table cell shows it verbatim: ``|`` escaped, ``<``/``>``/``&`` as
    entities (``<concept uniqueID>`` would be taken for an HTML tag and vanish), one line."""
    plain = " ".join(str(text).split())
    return plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _scores(entry: dict[str, Any]) -> list[Score]:
    """A task's Score records as intervals.json holds them."""
    return [Score(**{k: v for k, v in d.items() if k in SCORE_FIELDS}) for d in entry.get("scores", [])]


def _number(v: float | None, decimals: int) -> str:
    """A cell by the one rounding rule of every surface; empty where there is no value."""
    return "" if v is None or not math.isfinite(v) else number(v, decimals)


def scorecard_markdown(model: str, run_id: str, intervals: dict[str, Any]) -> str:
    """A registered scorecard version's description (MLflow renders it on the version page): a
    Markdown table, per task its headline (:meth:`Family.lead_score`, in bold; the terminal's, the
    runs table's and the report matrix's number) then the rest of its family's verdict and its
    secondary scores, each score with the same
    decimals in every scorecard (:meth:`Family.decimals_of`) and its 95% interval, floor, ceiling,
    n and nulls; an unavailable task with the reason."""
    head = ["task", "score", "value", "95% interval", "floor", "ceiling", "n", "nulls", "note"]
    align = ["---", "---", "---:", "---", "---:", "---:", "---:", "---:", "---"]

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(f"{PAD}{c}{PAD}" if c else "" for c in cells) + " |"

    lines = ["", row(head), "| " + " | ".join(align) + " |"]
    drawn: list[Score] = []  # the shown scores, whose own methods say how their intervals were made
    for task, entry in intervals.items():
        if "unavailable" in entry:
            lines.append(row([markdown_cell(task), "unavailable", "", "", "", "", "", "",
                              markdown_cell(entry["unavailable"])]))
            continue
        family = family_of(task)
        if family is None:
            continue
        scores = _scores(entry)
        lead = family.lead_score(scores)
        # after the headline the rest of an unranked task's verdict, as the terminal shows it
        names = dict.fromkeys((*family.verdict, *family.secondary))
        shown = ([lead] if lead is not None else []) + [
            s for name in names for s in scores if s.name == name and s is not lead]
        for s in shown:
            d = family.decimals_of(s.name)
            ci = (f"[{_number(s.ci_low, d)}, {_number(s.ci_high, d)}]"
                  if s.ci_low is not None and s.ci_high is not None else "")
            name = f"**{markdown_cell(s.name)}**" if s is lead else markdown_cell(s.name)
            note = "censored " + str(s.extra["censored"]) if s.extra.get("censored") else ""
            lines.append(row([markdown_cell(task), name, _number(s.value, d), ci, _number(s.floor, d),
                              _number(s.ceiling, d), str(s.n), str(s.nulls), markdown_cell(note)]))
        drawn += shown
    methods = interval_methods(drawn)
    how = f"95% intervals: {'; '.join(methods)}." if methods else "No intervals."
    # a ceiling is people agreeing with each other on these trials for some tasks and a cited
    # figure from other data for others (the mark colours' B): each shown ceiling says which
    ceilings = list(dict.fromkeys(f"{s.name} {_number(s.ceiling, 3)}: {s.ceiling_source}"
                                  for s in drawn if s.ceiling is not None and s.ceiling_source))
    said = f" Ceilings: {'; '.join(ceilings)}." if ceilings else ""
    intro = (f"Alignment scorecard of **{markdown_cell(model)}**, battery run `{run_id}`. Floor: chance "
             f"or a trivial strategy; ceiling: a human reference.{markdown_cell(said)} "
             f"{markdown_cell(how)}")
    return "\n".join([intro, *lines])


def version_tags(run) -> dict[str, str]:
    """Identity and provenance of the battery, as version tags (the scores are the description)."""
    params, tags = run.data.params, run.data.tags
    out = {
        "gestalt.model": tags["gestalt.model"],
        "gestalt.model_version": params.get("model_version", ""),
        "gestalt.family": tags.get("gestalt.family", "unknown"),
        "gestalt.run_id": run.info.run_id,
        "gestalt.recipe": tags.get("gestalt.recipe", ""),
        "gestalt.recipe_sha256": tags.get("gestalt.recipe_sha256", ""),
        "gestalt.stimulus_sets_sha256": tags.get("gestalt.stimulus_sets_sha256", ""),
        "gestalt.harness_version": params.get("harness_version", ""),
    }
    return out


def _stimulus_set(task: str, sha256: str, run_id: str):
    """The task's stimulus set as an MLflow dataset: metadata only (name, digest, provenance)."""
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    source = CodeDatasetSource({"gestalt.task": task, "gestalt.stimulus_set_sha256": sha256,
                                "gestalt.run_id": run_id})
    return MetaDataset(source=source, name=task, digest=sha256[:DIGEST_CHARS])  # type: ignore[abstract]


def logged_model_for(mlflow, run, experiment_id: str):
    """The external LoggedModel of this run's model identity, created on first use."""
    model = run.data.tags["gestalt.model"]
    version = run.data.params.get("model_version", "")
    digest = identity_digest(model, version)
    found = mlflow.search_logged_models(
        experiment_ids=[experiment_id], filter_string=f"tags.`gestalt.identity` = '{digest}'",
        order_by=[{"field_name": "creation_time", "ascending": True}], output_format="list")
    if found:
        return found[0]
    p = run.data.params
    return mlflow.create_external_model(
        name=model, source_run_id=run.info.run_id, experiment_id=experiment_id,
        model_type=run.data.tags.get("gestalt.family", "unknown"),
        params={k: p.get(k, "") for k in ("model_version", "model_ref", "weights", "weights_revision",
                                           "dtype")},
        tags={"gestalt.identity": digest, "gestalt.model": model, "gestalt.model_version": version,
              "gestalt.family": run.data.tags.get("gestalt.family", "unknown")})


def link_metrics(mlflow, client, run, model_id: str, intervals: dict[str, Any]) -> None:
    """Link each scored task's run metrics to the LoggedModel with the task's stimulus set."""
    for task, entry in intervals.items():
        if "unavailable" in entry:
            continue
        sha = entry.get("stimulus_set_sha256")
        if not sha:
            raise RegistryError(f"run {run.info.run_id}: intervals.json {task} has no stimulus_set_sha256")
        dataset = _stimulus_set(task, sha, run.info.run_id)
        family = family_of(task)
        lead = None if family is None else family.lead_score(_scores(entry))
        short = "" if family is None or lead is None else family.short_name(task, lead.name)
        keys = [k for k in run.data.metrics if k.startswith(f"{task}/")
                or short and k in {short + suffix for suffix in HEADLINE_SUFFIXES}]
        by_time: dict[int, dict[str, float]] = {}
        for key in keys:  # original timestamps: the run's history gains no duplicate points
            last = client.get_metric_history(run.info.run_id, key)[-1]
            by_time.setdefault(last.timestamp, {})[key] = last.value
        for ts, metrics in by_time.items():
            mlflow.log_metrics(metrics, run_id=run.info.run_id, timestamp=ts, model_id=model_id,
                               dataset=dataset, synchronous=True)


def register_scorecard(tracking_uri: str, run_id: str, name: str | None = None,
                       alias: str | None = None) -> Scorecard:
    """Register the battery run's scorecard; ``name`` defaults to ``gestalt-scorecard-<model>``,
    ``alias`` to ``latest-<recipe>``."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        run = client.get_run(str(run_id))
    except MlflowException as e:
        raise RegistryError(f"run {run_id}: not found at {tracking_uri} ({e.message})") from None
    tags = run.data.tags
    if (why := not_a_battery(client, run, "register")) is not None:
        raise RegistryError(why)
    alias = alias or default_alias(tags.get("gestalt.recipe", ""))
    if alias.lower() == "latest" or not ALIAS.match(alias) or re.fullmatch(r"[vV]\d+", alias):
        raise RegistryError(f"alias {alias!r}: MLflow reserves 'latest' and v<number>, and aliases "
                            f"may only use letters, digits, '_' and '-'")
    name = name or f"gestalt-scorecard-{tags['gestalt.model']}"
    if "'" in name or not name.strip():
        raise RegistryError(f"registered model name {name!r}: must be non-empty, without quotes")
    with tempfile.TemporaryDirectory() as tmp, quiet_downloads():
        try:
            intervals = json.loads(Path(client.download_artifacts(run.info.run_id, "intervals.json",
                                                                  tmp)).read_text())
        except Exception as e:  # the store's own error type differs by backend
            raise RegistryError(f"run {run_id}: no intervals.json artifact ({e})") from None
    vtags = version_tags(run)
    with _tracking(tracking_uri) as mlflow:
        lm = logged_model_for(mlflow, run, run.info.experiment_id)
        link_metrics(mlflow, client, run, lm.model_id, intervals)
        existing = [v for v in client.search_model_versions(f"name = '{name}'")
                    if v.tags.get("gestalt.run_id") == run.info.run_id]
        if existing:
            mv = existing[0]
        else:
            mv = mlflow.register_model(f"models:/{lm.model_id}", name, tags=vtags)
            client.update_model_version(name, mv.version, description=scorecard_markdown(
                tags["gestalt.model"], run.info.run_id, intervals))
    client.set_registered_model_alias(name, alias, mv.version)
    return Scorecard(name=name, version=str(mv.version), alias=alias, model_id=lm.model_id,
                     run_id=run.info.run_id, tags=vtags,
                     url=f"{ui_base(tracking_uri)}/#/models/{quote(name, safe='')}/versions/{mv.version}")


def find_scorecards(tracking_uri: str, experiment_id: str, task: str, stimulus_set_sha256: str,
                    order_by: str | None = None) -> list:
    """LoggedModels with metrics on a task's stimulus set, best first by ``order_by`` metric.

    Passes ``dataset_digest`` with ``dataset_name``: without it MLflow 3.17.2 finds nothing
    through a tracking server (docs/design.md, "MLflow notes").
    """
    with _tracking(tracking_uri) as mlflow:
        return mlflow.search_logged_models(
            experiment_ids=[experiment_id],
            datasets=[{"dataset_name": task, "dataset_digest": stimulus_set_sha256[:DIGEST_CHARS]}],
            order_by=[{"field_name": f"metrics.{order_by}", "ascending": False}] if order_by else None,
            output_format="list")


def register_trained_model(tracking_uri: str, run_id: str, task_id: str, name: str | None = None,
                           alias: str = "trained") -> tuple[str, str]:
    """Register the regressor a battery run trained for ``task_id`` (its ``models/<task>``
    checkpoint artifact) as a Model Registry version; returns (name, version).

    A raw artifact cannot go through ``mlflow.register_model`` in MLflow 3 ("Unable to find a
    logged_model"), so this uses the verified client path: ``create_registered_model`` then
    ``create_model_version`` with the artifact URI as source (docs/design.md, "MLflow notes").
    The checkpoint loads with ``torch.load(weights_only=True)``.
    """
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        run = client.get_run(str(run_id))
    except MlflowException as e:
        raise RegistryError(f"run {run_id}: not found at {tracking_uri} ({e.message})") from None
    if not client.list_artifacts(run.info.run_id, f"models/{task_id}"):
        raise RegistryError(f"run {run_id}: no trained model for {task_id} (artifact models/{task_id})")
    # Model Registry names refuse ':', which task variants (BASE:VARIANT) contain
    name = name or f"gestalt-regressor-{run.data.tags.get('gestalt.model', 'model')}-{task_id.replace(':', '-')}"
    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name)
    mv = client.create_model_version(name, source=f"{run.info.artifact_uri}/models/{task_id}",
                                     run_id=run.info.run_id,
                                     tags={"gestalt.task": task_id, "gestalt.run_id": run.info.run_id})
    client.set_registered_model_alias(name, alias, mv.version)
    return name, str(mv.version)
