"""One flat MLflow run per model battery; tasks are metric prefixes.

Params: model identity, weights revision, readouts, seeds, harness version, and each headline's
``_floor`` and ``_ceiling``. Metrics: at most 40 per run whatever the battery, named and rounded
as each task's scoring family declares them (:mod:`harness.tracking.metrics`): the task's
headline under its short name (``Silhouette.B``: the UI charts it in its "Model metrics"
section, the runs table's "Headlines" view shows it as a column) with ``_ci_lower``/``_ci_upper``,
``<task>/n``, ``<task>/null_rate`` and the family's few secondary scores as ``<task>/<score>``
where room remains, and the run's totals (``model_calls``; tokens and cost of an API model);
every other score stays in ``intervals.json``. Artifacts (staged as the tasks finish, logged in
one call when the run ends): ``records/<task>.jsonl`` (keys in the record schema's order:
identity, response, correctness first) and the same records as an MLflow table
``tables/<task>.json`` (a paged grid in the UI), ``intervals.json`` (unrounded), the resolved
recipe and its hash, the stimulus-set hashes and ``figures/*.png``. Only the main process logs.

The store and its outages: :mod:`harness.tracking.store`; which run a battery continues:
:mod:`harness.tracking.batteries`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import GestaltError, disk_fault
from ..models.device import prepares_beside
from ..scores.tasks import family_of
from .batteries import OUTCOME, RECORDS_DIGEST, SCORES, owner_tags
from .metrics import (
    MAX_RUN_METRICS,
    RUN_TOTALS,
    anchor_params,
    ordered_record,
    plan_metrics,
    record_key_order,
    records_table,
    rounded,
    score_metrics,
)
from .store import column_width, open_store, patiently, refuse_artifact_links, tracking_lost, update_shared_view


def _lowest_priority() -> None:
    """The figure thread's CPU priority: the lowest (nice 19; Linux sets it per thread). At normal
    priority it preempts one of torch's intra-op threads on a CPU, and the whole OpenMP team waits
    at its next barrier, so the next task's forward passes lose more than the rendering takes;
    at the lowest it runs in the gaps the model leaves (single-threaded image preparation, Python
    between batches). Nothing waits for it until the battery ends. (Preparing the next batch is
    different: the model waits for it, so it never runs at a lower priority than the model.)"""
    if hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):  # a sandbox that forbids it: normal priority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


PNG_COMPRESSION = 1  # zlib level of the figures' PNGs (matplotlib's default: 6)


def _savefig(fig: Any, path: Path) -> Path:
    # as mlflow.log_figure saves it (the rcParams' dpi), with zlib's fastest compression: PNGs a
    # little larger, saved faster (benchmarks/fixed_cost.py)
    fig.savefig(path, pil_kwargs={"compress_level": PNG_COMPRESSION})
    return path


def finish_saving(figures: list[tuple[Any, Path, Future[Path]]], save: bool = True) -> None:
    """Wait for the ``(figure, path, future)`` of figures handed to the background thread
    (``_savefig``); the ones it has not started are saved by the calling thread, which would
    otherwise only wait (or, without ``save``, dropped), so that one may compress a PNG, which
    releases the interpreter's lock, while the other draws. Measured on 2 cores
    (``benchmarks/fixed_cost.py``) it has not clearly paid: 1.10x once, 0.95x and 0.94x since."""
    for fig, path, saved in figures:
        if saved.cancel() and save:  # not started
            _savefig(fig, path)
    for _, _, saved in figures:
        if not saved.cancelled():
            saved.result()


class BatteryRun:
    """Context manager around ``mlflow.start_run``: an exception ends the run FAILED, never FINISHED.

    ``resume`` continues an existing run of the same battery (MLflow sets it RUNNING again);
    ``fail(outcome)`` ends it FAILED without an exception (every trial null); ``experiment_id``:
    the store already opened for this battery (:func:`open_store`), not looked up again.

    The tags a run gets as it ends (the stimulus sets' digest, the tables it lists, the record
    digest, the outcome) reach the store in one write, after its artifacts and just before it
    is ended: each store call is a round trip, over the network for a tracking server."""

    def __init__(self, *, uri: str, experiment: str, run_name: str, tags: dict[str, str],
                 tasks: Sequence[str], totals: Sequence[str] = RUN_TOTALS, resume: str | None = None,
                 experiment_id: str | None = None, device: Callable[[], str | None] | None = None):
        import mlflow

        self.mlflow = mlflow
        self.plan = plan_metrics(tasks, totals)  # the battery's ``tasks``; ``totals``: its run-level metrics
        self._curves: set[str] = set()  # training-curve metrics logged, in the room the plan leaves
        self.experiment_id = experiment_id or open_store(uri, experiment)
        self.run_name = run_name
        self.tags = {**tags, **owner_tags()}
        self.resume = resume
        self.outcome: str | None = None
        self.run: Any = None  # mlflow.ActiveRun once entered
        # where the battery's model runs, asked when a figure is saved (it answers None before
        # the model's first call); no getter: no model in this process to leave the cores to
        self._device = device
        # figures being saved to PNG, in the background or done: (figure, path, future)
        self._figures: list[tuple[Any, Path, Future[Path]]] = []
        self._saver: ThreadPoolExecutor | None = None
        # the run's artifacts, written here as tasks finish and logged in one call at its end
        self._staging: tempfile.TemporaryDirectory[str] | None = None
        self._tables: list[str] = []
        self._headline: dict[str, None] = {}  # the headline metrics logged, in order: the runs table's view at the end
        self._closing_tags: dict[str, str] = {}  # written in one call as the run ends (__exit__)

    def __enter__(self) -> BatteryRun:
        if self.resume:
            self.run = patiently(lambda: self.mlflow.start_run(run_id=self.resume))
            patiently(lambda: self.mlflow.set_tags(self.tags))
        else:
            self.run = patiently(lambda: self.mlflow.start_run(experiment_id=self.experiment_id,
                                                               run_name=self.run_name, tags=self.tags))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and tracking_lost(exc):  # nothing more reaches the store; a rerun logs it all
            self._discard_staged()
            self._leave()
            return
        if exc is not None and disk_fault(exc):  # its artifacts would not fit either
            self._discard_staged()
            self._end_failed(exc)
            return
        try:
            self._close(exc_type, exc)
        except Exception as e:
            if tracking_lost(e):
                self._leave()
            elif disk_fault(e):
                self._discard_staged()
                self._end_failed(e)
            raise

    def _end_failed(self, fault: BaseException) -> None:
        """End the run FAILED, its outcome the full or read-only disk, where the store can still
        take that; where it cannot (the store is on that disk) the run stays RUNNING, and the
        rerun that continues it finds it abandoned."""
        from mlflow.entities import RunTag

        found = disk_fault(fault)
        outcome = "read-only" if found and found[0] == "EROFS" else "no space left"
        with contextlib.suppress(Exception):
            self.mlflow.MlflowClient().log_batch(self.run_id, tags=[RunTag(OUTCOME, outcome)])
        with contextlib.suppress(Exception):
            if self.mlflow.active_run() is not None:
                self.mlflow.end_run(status="FAILED")
            else:
                self.mlflow.MlflowClient().set_terminated(self.run_id, "FAILED")

    def _leave(self) -> None:
        """Leave MLflow's active run once the store is given up, so no request is left to wait
        for it (MLflow ends an active run when the process exits). The store keeps the run as it
        had it (RUNNING: the rerun that continues it finds it abandoned)."""
        with contextlib.suppress(Exception):  # MLflow forgets the run before it asks the store
            self.mlflow.end_run(status="FAILED")

    def _close(self, exc_type, exc) -> None:
        self._log_staged(figures=exc_type is None)
        if exc_type is not None:
            self.outcome = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else f"error: {exc_type.__name__}"
        if self.outcome:
            self._closing_tags[OUTCOME] = self.outcome
        else:
            # a continued run that now finishes (its failed calls sent again): the earlier
            # failure no longer describes it, nor its scores
            for tag in (OUTCOME, SCORES):
                if self.resume and tag in self.run.data.tags:
                    self.mlflow.MlflowClient().delete_tag(self.run_id, tag)
        if self._closing_tags:
            from mlflow.entities import RunTag

            tags = [RunTag(k, v) for k, v in self._closing_tags.items()]
            patiently(lambda: self.mlflow.MlflowClient().log_batch(self.run_id, tags=tags))
        status = "FAILED" if self.outcome else "FINISHED"

        def end() -> None:  # MLflow forgets the active run before it asks the store to end it
            if self.mlflow.active_run() is not None:
                self.mlflow.end_run(status=status)
            else:
                self.mlflow.MlflowClient().set_terminated(self.run_id, status)

        patiently(end)

    def fail(self, outcome: str, provisional: bool = False) -> None:
        """End the run FAILED with ``outcome``; ``provisional``: its scores wait for calls a rerun sends."""
        self.outcome = outcome
        if provisional:
            self._closing_tags[SCORES] = "provisional"

    def finish(self, records_digest: str) -> None:
        """The digest an unchanged rerun compares against (logged as the run ends, with its last
        tags: a run killed before that is never taken for up to date)."""
        self._closing_tags[RECORDS_DIGEST] = records_digest

    @property
    def run_id(self) -> str:
        return self.run.info.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        clean = {k: ("" if v is None else str(v)[:6000]) for k, v in params.items()}
        if self.resume:  # params are immutable in MLflow: a continued run keeps its first values
            logged = patiently(lambda: self.mlflow.get_run(self.run_id).data.params)
            clean = {k: v for k, v in clean.items() if k not in logged}
        patiently(lambda: self.mlflow.log_params(clean))

    def log_task(self, task_id: str, scores, records: list[dict], figures: dict[str, Any],
                 records_path: Path) -> None:
        """A task's metrics (as the run's :class:`~harness.tracking.metrics.MetricPlan` has them)
        and its headline's floor and ceiling (params) now; its records (JSONL and table) and
        figures are staged and logged with the battery's other artifacts when it ends (or, but for
        the figures, when it fails)."""
        from mlflow.entities import Metric, Param

        if task_id not in self.plan.tasks:
            raise GestaltError(f"task {task_id}: not one of the battery run's tasks ({', '.join(self.plan.tasks)})")
        for name, fig in figures.items():  # first: they render while the work below goes on
            self._save_figure(name, fig)
        scores, family = list(scores), family_of(task_id)
        metrics = (score_metrics(task_id, scores, family, self.plan.kinds)
                   if self.plan.task_names(task_id) else {})
        if "counts" in self.plan.kinds:
            n = len(records)
            nulls = sum(r["parse_status"] != "ok" for r in records)
            metrics[f"{task_id}/n"] = float(n - nulls)
            metrics[f"{task_id}/null_rate"] = rounded(nulls / n, None) if n else 0.0
        now = int(time.time() * 1000)
        batch = [Metric(k, v, now, 0) for k, v in metrics.items()]
        params = [Param(k, str(v)) for k, v in anchor_params(task_id, scores, family).items()]
        patiently(lambda: self.mlflow.MlflowClient().log_batch(self.run_id, metrics=batch, params=params))
        # the runs table's columns: each headline and its interval
        self._headline.update(dict.fromkeys(k for k in metrics if "/" not in k))
        order = record_key_order()
        # the artifact viewer shows a line's start: identity, response and correctness first
        rows = [ordered_record(r, order) for r in records]
        self._staged(f"records/{records_path.name}").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if rows:
            # as mlflow.log_table names and lists a table; it refuses ':' (a task variant
            # BASE:NAME) in file names
            table = f"tables/{records_path.stem.replace(':', '--')}.json"
            self._staged(table).write_text(json.dumps(records_table(rows)))
            self._tables.append(table)

    def _staged(self, artifact: str) -> Path:
        """Where to write ``artifact`` (a path under the run's artifact root) until the run logs
        every staged file in one call (:meth:`_log_staged`): one store round trip per battery
        rather than one per file, which with a local store cost more than writing them."""
        if self._staging is None:
            self._staging = tempfile.TemporaryDirectory(prefix="gestalt-artifacts-")
        path = Path(self._staging.name) / artifact
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _stage_dict(self, data: dict[str, Any], artifact: str) -> None:
        """``data`` as ``mlflow.log_dict`` writes it: YAML for .yaml, else indented JSON."""
        with open(self._staged(artifact), "w") as f:
            if artifact.endswith(".yaml"):
                import yaml

                yaml.dump(data, f, indent=2, default_flow_style=False)
            else:
                json.dump(data, f, indent=2, default=str)

    def _save_figure(self, name: str, fig: Any) -> None:
        """Render ``fig`` to PNG, in a background thread where that runs beside the model
        (``prepares_beside``: on a GPU, or where torch leaves a core free): rendering is most of
        what logging a task costs, and it then overlaps what runs next (the next task's trials,
        the next log calls). Where torch's threads hold every core, this thread saves it now: a
        thread beside them takes a core from the model, so it saves nothing there, and the task
        pays for its own figures (``benchmarks/figures_beside.py``). The run logs the files as
        ``figures/<name>`` before it ends (:meth:`_log_staged`) and closes the figures; until
        then the caller must leave them alone.

        One thread while trials may still run: a second one competes with the model's own thread
        for the interpreter's lock, whatever its CPU priority (docs/performance.md, "Figures beside
        the model").
        When the battery ends, the waiting main thread saves what this one has not started."""
        path = self._staged(f"figures/{name}")
        if self._device is not None and not prepares_beside(self._device()):
            saved: Future[Path] = Future()
            saved.set_result(_savefig(fig, path))
            self._figures.append((fig, path, saved))
            return
        if self._saver is None:
            self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gestalt-figures",
                                             initializer=_lowest_priority)
        self._figures.append((fig, path, self._saver.submit(_savefig, fig, path)))

    def _log_staged(self, figures: bool = True) -> None:
        """Finish saving the figures and close them, then log every staged artifact in one call,
        the figures only when ``figures`` (a run that fails logs its finished tasks' records, not
        their figures), and list the tables as ``mlflow.log_table`` does; the headline metrics
        logged join the runs table's view.

        The figures the background thread has not started are saved here (:func:`finish_saving`)."""
        import matplotlib.pyplot as plt
        from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

        try:
            headline = list(self._headline)
            patiently(lambda: self._add_headline_columns(headline))
            finish_saving(self._figures, save=figures)
            for fig, path, _ in self._figures:
                if not figures:
                    path.unlink(missing_ok=True)
                plt.close(fig)
            if self._staging is not None:
                staging = self._staging.name
                refuse_artifact_links(self.run.info.artifact_uri, staging)
                patiently(lambda: self.mlflow.log_artifacts(staging))
            if self._tables:
                # a continued run keeps the tables it listed before
                before = patiently(lambda: self.mlflow.get_run(self.run_id).data.tags) if self.resume else {}
                listed = json.loads(before.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
                listed += [t for t in ({"path": p, "type": "table"} for p in self._tables) if t not in listed]
                self._closing_tags[MLFLOW_LOGGED_ARTIFACTS] = json.dumps(listed)
        finally:
            self._reset_staging()

    def _discard_staged(self) -> None:
        """Drop the staged artifacts and figures, unlogged."""
        try:
            finish_saving(self._figures, save=False)
            if self._figures:
                import matplotlib.pyplot as plt

                for fig, _, _ in self._figures:
                    plt.close(fig)
        finally:
            self._reset_staging()

    def _reset_staging(self) -> None:
        if self._saver is not None:
            self._saver.shutdown(wait=True)
        if self._staging is not None:
            self._staging.cleanup()
        self._figures, self._saver, self._staging, self._tables = [], None, None, []
        self._headline = {}

    def _add_headline_columns(self, names: list[str]) -> None:
        """Keep the experiment's shared runs-table view listing every headline metric logged so far
        (once per battery: reading the experiment back costs a store round trip)."""
        if not names:
            return
        columns = [f"metrics.`{n}`" for n in names]

        def add(state: dict) -> bool:
            if all(c in state["selectedColumns"] for c in columns):
                return False
            state["selectedColumns"] = list(dict.fromkeys([*state["selectedColumns"], *columns]))
            # wide enough for the whole name (the default width cuts "Series_count.acc_ci_upper")
            state["columnWidths"] = {**state.get("columnWidths", {}),
                                     **{c: column_width(n) for c, n in zip(columns, names)}}
            return True

        update_shared_view(self.mlflow.MlflowClient(), self.experiment_id, add)

    def log_metrics(self, metrics: dict[str, float]) -> None:
        """Run-level metrics of the battery, its plan's totals (model calls; an API model's tokens
        and cost)."""
        if unplanned := set(metrics) - set(self.plan.totals):
            raise GestaltError(f"run metrics {', '.join(sorted(unplanned))}: not among the battery's "
                               f"totals ({', '.join(self.plan.totals)})")
        if metrics:
            patiently(lambda: self.mlflow.log_metrics(metrics))

    def log_battery(self, *, intervals: dict[str, Any], recipe: dict, recipe_sha256: str,
                    stimulus_sets: dict[str, str]) -> None:
        self._stage_dict(intervals, "intervals.json")
        self._stage_dict(recipe, "recipe.resolved.yaml")
        self._staged("recipe.sha256").write_text(recipe_sha256 + "\n")
        self._stage_dict(stimulus_sets, "stimulus_sets.json")
        digest = hashlib.sha256(json.dumps(stimulus_sets, sort_keys=True).encode()).hexdigest()
        self._closing_tags["gestalt.stimulus_sets_sha256"] = digest
        self._log_staged()  # last: the figures still rendering overlap the calls above

    def log_training(self, task_id: str, history: list[list[dict[str, float]]],
                     artifacts: dict[str, Path]) -> None:
        """Training curves (per fold, per epoch) and the checkpoint of a model trained for a task.

        The curves are always a table (``tables/<task>.training.json``), and metric histories
        (charts on the run's page) where the run's
        :class:`~harness.tracking.metrics.MetricPlan` leaves room for all of them; those go in
        batches of MLflow's most metrics per call, not a store write per epoch (a store round
        trip each). The checkpoint is staged with the run's artifacts."""
        from mlflow.entities import Metric
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH

        rows = [{"fold": fold, **row} for fold, epochs in enumerate(history) for row in epochs]
        if rows:
            table = f"tables/{task_id.replace(':', '--')}.training.json"
            self._staged(table).write_text(json.dumps(records_table(rows)))
            self._tables.append(table)
        now = int(time.time() * 1000)
        curves = [Metric(f"{task_id}/train" + (f"/fold{fold}" if len(history) > 1 else "") + f"/{k}",
                         float(v), now, int(row.get("epoch", 0)))
                  for fold, epochs in enumerate(history) for row in epochs for k, v in row.items()
                  if k != "epoch" and v is not None and v == v]
        keys = {m.key for m in curves} - self._curves
        if len(self.plan.names()) + len(self._curves) + len(keys) > MAX_RUN_METRICS:
            curves = [m for m in curves if m.key in self._curves]
        self._curves |= {m.key for m in curves}
        client = self.mlflow.MlflowClient()
        for start in range(0, len(curves), MAX_METRICS_PER_BATCH):
            patiently(functools.partial(client.log_batch, self.run_id,
                                        metrics=curves[start:start + MAX_METRICS_PER_BATCH]))
        for path in artifacts.values():
            staged = self._staged(f"models/{task_id}/{path.name}")
            try:  # a link costs nothing where a checkpoint is hundreds of megabytes
                os.link(path, staged)
            except OSError:  # another file system
                shutil.copyfile(path, staged)
