"""Finished battery runs read back from MLflow: each run's tags, parameters and metrics, its
``intervals.json`` (every Score record, per-stimulus values and stimulus set) and, where asked,
its logged ``figures/*.png``; a local store's artifacts are read in place, any other store's
intervals downloaded once per store and run."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import GestaltError
from ..scores.ranking import ItemValues
from ..scores.record import Score
from ..scores.tasks import Bootstrap
from ..tracking.batteries import RECORDS_DIGEST, finished_intervals, local_artifacts, not_a_battery
from ..tracking.scorecards import quiet_downloads

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
    # task -> the run answering it, where the model's answer draws on several runs
    # (:func:`~harness.reports.answer.answers`)
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
