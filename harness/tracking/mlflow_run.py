"""One flat MLflow run per model battery; tasks are metric prefixes.

Params: model identity, weights revision, readouts, seeds, harness version. Metrics: a handful of
headline scores under short names without a prefix (``sil.kappa``, ``color.B``: the UI charts them
first, in its "Model metrics" section, and a shared view of the runs table shows them as columns),
then everything under ``<task>/<metric>`` with ``_ci_low``/``_ci_high``/``_ceiling``/``_floor``,
``<task>/n`` and ``<task>/null_rate`` (the UI groups these into one section per task). Values are
rounded at logging to the precision their interval justifies. Artifacts (staged as the tasks finish,
logged in one call when the run ends): ``records/<task>.jsonl``
(keys in the record schema's order: identity, response, correctness first) and the same
records as an MLflow table ``tables/<task>.json`` (a paged grid in the UI), ``intervals.json``
(unrounded), the resolved recipe and its hash, the stimulus-set hashes and ``figures/*.png``.
Only the main process logs.
The default store is ``sqlite:///mlflow.db`` in the working directory (the ./mlruns file store is
refused by current MLflow); ``MLFLOW_TRACKING_URI`` or the recipe's ``tracking.uri`` override it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from ..errors import GestaltError, TrackingUnavailable
from ..models.device import prepares_beside
from ..trials.distributed import file_lock

DEFAULT_URI = "sqlite:///mlflow.db"

# Headline scores and their short metric names: distinct within their first dozen characters, so
# the runs table's truncated column headers stay apart. (task, score name) -> metric name; a task
# variant BASE:NAME logs under "<short>:NAME".
_CHART6 = {"ggr": "ggr", "vlat": "vlat", "calvi": "calvi", "holf": "holf", "holf_multi": "holfm",
           "chartqa_human": "chartqa"}
HEADLINE_METRICS: dict[tuple[str, str], str] = {
    ("closure.nat.silhouette", "kappa"): "sil.kappa",
    ("closure.nat.silhouette", "B"): "sil.B",
    ("similarity.chart.mark_color", "B"): "color.B",
    ("similarity.chart.series_count", "capacity"): "count.capacity",
    ("similarity.nat.things", "B"): "things.B",
    **{(f"literacy.chart.{task}", "accuracy_all"): f"{short}.acc" for task, short in _CHART6.items()},
    **{(f"ratio.chart.{paper}_type{i}", "mlae"): f"{paper}{i}.mlae"
       for paper in ("grape", "haehn") for i in range(1, 6)},
}
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # the UI opens on the runs table
SHARED_VIEW_KEY = "gestalt-headlines"  # ?viewStateShareKey= this: the runs table with headline columns
SHARED_VIEW_TAG = "mlflow.sharedViewState." + SHARED_VIEW_KEY
PLAIN_DIGITS = 4  # significant digits of a number that has no interval


def headline_name(task_id: str, score_name: str) -> str | None:
    base, _, variant = task_id.partition(":")
    short = HEADLINE_METRICS.get((base, score_name))
    return None if short is None else f"{short}:{variant}" if variant else short


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


def score_metrics(task_id: str, scores: Iterable[Any]) -> dict[str, float]:
    """Every score's flat metrics, rounded to its interval (ceiling and floor to four significant
    digits), plus the headline short names."""
    out: dict[str, float] = {}
    for s in scores:
        digits = decimals_for(s.ci_low, s.ci_high)
        # the ceiling and floor are references (people, chance), not this estimate: their own digits
        out.update({k: rounded(v, None if k.endswith(("_ceiling", "_floor")) else digits)
                    for k, v in s.metrics(task_id).items()})
        short = headline_name(task_id, s.name)
        if short is not None and s.value is not None and math.isfinite(s.value):
            out[short] = rounded(s.value, digits)
    return out


def _cell(v: float | None, decimals: int | None) -> str:
    if v is None or not math.isfinite(v):
        return ""
    return f"{v:.{decimals}f}" if decimals is not None else f"{v:.{PLAIN_DIGITS}g}"


def scorecard_markdown(model: str, run_id: str, intervals: dict[str, Any],
                       headline: Callable[[str, str], bool]) -> str:
    """A registered scorecard version's description: one Markdown table row per headline score
    (MLflow renders it on the version page), values to the precision their interval justifies."""
    lines = [(f"Alignment scorecard of **{model}**, battery run `{run_id}`. Floor: chance or a trivial "
              "strategy; ceiling: agreement among people. Intervals: 95% bootstrap."), "",
             "| task | score | value | 95% interval | floor | ceiling | n | nulls |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    for task, entry in intervals.items():
        if "unavailable" in entry:
            reason = str(entry["unavailable"]).replace("|", "/").replace("\n", " ")
            lines.append(f"| {task} | unavailable | | {reason} | | | | |")
            continue
        for s in entry.get("scores", []):
            if not headline(task, s["name"]) or s.get("value") is None:
                continue
            d = decimals_for(s.get("ci_low"), s.get("ci_high"))
            ci = f"[{_cell(s['ci_low'], d)}, {_cell(s['ci_high'], d)}]" if d is not None else ""
            lines.append(f"| {task} | {headline_name(task, s['name']) or s['name']} | {_cell(s['value'], d)} "
                         f"| {ci} | {_cell(s.get('floor'), d)} | {_cell(s.get('ceiling'), d)} "
                         f"| {s.get('n', '')} | {s.get('nulls', '')} |")
    return "\n".join(lines)


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


def tracking_uri(configured: str | None) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


def shown_uri(uri: str) -> str:
    """``uri`` as a message prints it: a user name and password in it become ``***``."""
    parts = urlparse(uri)
    if "@" not in parts.netloc:
        return uri
    return parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]).geturl()


DATABASE_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}  # stores MLflow reaches itself


class TrackingSettingError(GestaltError):
    """A tracking address the harness cannot use as written."""


def check_tracking_server(configured: str | None, setting: str = "tracking.uri", timeout_s: float = 10.0,
                          must_exist: bool = False) -> None:
    """Before a run (or a command reading the store): a tracking server, or a database MLflow
    reaches itself, that does not answer at all (refused, no route, timed out) stops it with one
    line, before any model is loaded, instead of MLflow's minutes of retries and a traceback.
    ``configured`` is the address given by ``setting``, None for ``$MLFLOW_TRACKING_URI`` or the
    default. A server that answers anything, even an error (an auth wall, a proxy's 404), is
    left to MLflow's own calls. ``must_exist``: a command that only reads the store refuses a
    sqlite file that is not there (MLflow would make an empty one)."""
    import urllib.error
    import urllib.request

    uri = tracking_uri(configured)
    parts = urlparse(uri)
    where = (setting if configured else
             "$MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "the default store")
    db = _sqlite_path(uri)
    if must_exist and db is not None and not db.is_file():
        raise TrackingSettingError(f"{uri} ({where}): no MLflow store here (run a recipe first, or "
                                   f"point {setting} at a store)")
    dialect = parts.scheme.split("+")[0]
    if parts.scheme == "postgresql":  # SQLAlchemy 2.1 reads it as psycopg 3 (mlflow/serve.sh says the same)
        raise TrackingSettingError(f"{where}: {shown_uri(uri)}: write postgresql+psycopg2://... (a bare "
                                   f"postgresql:// asks for the psycopg 3 driver, which is not installed)")
    if dialect in DATABASE_PORTS and parts.hostname:
        try:
            socket.create_connection((parts.hostname, parts.port or DATABASE_PORTS[dialect]), timeout=timeout_s).close()
        except OSError as e:
            raise TrackingUnavailable(_not_answering(uri, where, e)) from None
        return
    if parts.scheme not in ("http", "https"):
        return
    health = parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1], path=parts.path.rstrip("/") + "/health")
    try:  # no credentials needed (nor sent) to reach /health
        urllib.request.urlopen(health.geturl(), timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return
    except OSError as e:  # URLError, a timeout, a reset
        raise TrackingUnavailable(_not_answering(uri, where, getattr(e, "reason", None) or e)) from None


def _not_answering(uri: str, where: str, why: object) -> str:
    return (f"tracking server {shown_uri(uri)} ({where}) does not answer ({why}): start it (`gestalt ui`, "
            f"mlflow/serve.sh), point {where} at one that runs, or run with --tracking.enabled=false")


def tracking_lost(e: BaseException) -> str | None:
    """Why the tracking server stopped answering, when ``e`` is MLflow giving up on a request
    after its own retries (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``: refused, timed out, 5xx); None
    for any other error."""
    if "mlflow" not in sys.modules:  # nothing else raises what this looks for
        return None
    import requests
    from mlflow.exceptions import MlflowException

    cause = e.__cause__ or e.__context__
    if not (isinstance(e, MlflowException) and isinstance(cause, requests.exceptions.RequestException)):
        return None
    errno = re.search(r"\[Errno -?\d+\] [^'\")]+", str(cause))
    return errno.group(0) if errno else type(cause).__name__


# -- run lifecycle: one run per battery, never one left RUNNING by a dead process ------------

BATTERY_KEY = "gestalt.battery_key"  # hash of everything that decides the battery's trials and scores
BATTERY_FOLDER = "gestalt.battery_folder"  # the id of the folder whose records the run holds
RECORDS_DIGEST = "gestalt.records_sha256"  # the record files' digest when the battery finished
OUTCOME = "gestalt.outcome"  # why a run ended FAILED: interrupted, abandoned, all trials null


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def open_store(uri: str, experiment: str) -> str:
    """Point MLflow at the store and experiment, creating them once; the experiment id.

    On a fresh sqlite store two processes would both run MLflow's schema migration and one dies
    in alembic ("expected to match one row"); both would also create the experiment. Creation
    therefore happens under a lock file beside the database."""
    import mlflow

    db = _sqlite_path(uri)
    lock = file_lock(db.with_name(db.name + ".lock")) if db else contextlib.nullcontext()
    with lock:
        mlflow.set_tracking_uri(uri)
        exp = mlflow.get_experiment_by_name(experiment)
        if exp is None and db is not None:
            # MLflow would put artifacts in ./mlruns of whatever directory the run starts from;
            # keep them beside the database instead, so a store is one self-contained folder
            mlflow.create_experiment(experiment, artifact_location=(db.parent.resolve() / "mlartifacts").as_uri())
        exp = mlflow.set_experiment(experiment)
        if exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
            mlflow.set_experiment_tag(*EXPERIMENT_KIND)
        return exp.experiment_id


def _owner_tags() -> dict[str, str]:
    return {"gestalt.host": socket.gethostname(), "gestalt.pid": str(os.getpid())}


FOLDER_ID = ".battery.id"


def battery_folder_id(folder: Path) -> str:
    """The battery folder's own id (random, made once, kept in ``.battery.id``), which the runs
    writing its records carry (:data:`BATTERY_FOLDER`). Call it holding the folder's lock: the
    holder knows that any RUNNING run carrying the id lost its process, wherever that ran."""
    path = folder / FOLDER_ID
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        found = ""
    if re.fullmatch(r"[0-9a-f]{32}", found):
        return found
    made = uuid.uuid4().hex
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f"{FOLDER_ID}.{os.getpid()}.part")
    part.write_text(made + "\n")
    os.replace(part, path)
    return made


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _abandoned(run, folder_id: str) -> bool:
    """RUNNING, but the process that ran it is gone (SIGKILL, power, OOM, a dead node). Either it
    wrote the battery folder whose lock the caller holds, wherever it ran (another node for a
    requeued cluster job, another container on the same mounted folder: there its host and pid
    say nothing), or it ran on this machine and its pid is gone."""
    if run.info.status != "RUNNING":
        return False
    tags = run.data.tags
    if tags.get(BATTERY_FOLDER) == folder_id:
        return True
    pid = tags.get("gestalt.pid", "")
    return tags.get("gestalt.host") == socket.gethostname() and pid.isdigit() and not _alive(int(pid))


@dataclass
class Prior:
    """What the store already holds for a battery: the run to continue, if any."""

    run_id: str | None = None
    up_to_date: bool = False
    closed: tuple[str, ...] = ()  # abandoned runs of the model marked FAILED


def find_battery(experiment_id: str, model_id: str, battery_key: str, records_digest: str,
                 folder_id: str, new_run: bool = False) -> Prior:
    """The run of this battery to continue, or None for a new one; marks abandoned runs FAILED.

    The latest run with the same battery key is the battery's run: FINISHED with the same record
    digest means up to date; otherwise (killed, interrupted, trials missing or repaired) the
    rerun continues in it, so the experiment keeps one run per battery. A RUNNING run whose
    process is gone and that will not be continued is closed FAILED with outcome "abandoned".
    Callers hold the lock of the battery folder ``folder_id`` names, so no live process is inside it."""
    from mlflow import MlflowClient

    client = MlflowClient()
    runs = client.search_runs([experiment_id], filter_string=f"tags.`gestalt.model` = '{model_id}'",
                              order_by=["attributes.start_time DESC"])
    mine = [r for r in runs if r.data.tags.get(BATTERY_KEY) == battery_key]
    prior = Prior()
    if mine and not new_run:
        latest = mine[0]
        if latest.info.status == "FINISHED" and latest.data.tags.get(RECORDS_DIGEST) == records_digest:
            prior = Prior(run_id=latest.info.run_id, up_to_date=True)
        elif latest.info.status != "RUNNING" or _abandoned(latest, folder_id):
            prior = Prior(run_id=latest.info.run_id)
    closed = []
    for r in runs:
        if r.info.run_id != prior.run_id and _abandoned(r, folder_id):
            client.set_tag(r.info.run_id, OUTCOME, "abandoned")
            client.set_terminated(r.info.run_id, status="FAILED")
            closed.append(r.info.run_id)
    prior.closed = tuple(closed)
    return prior


def up_to_date_without_mlflow(uri: str, experiment: str, model_id: str, battery_key: str,
                              records_digest: str) -> tuple[str, dict[str, Any]] | None:
    """(run id, intervals) when a local sqlite store shows the battery up to date, read with
    sqlite3 alone (importing MLflow costs more than the rest of a no-op rerun); None whenever
    this cannot be decided so: another kind of store, an artifact store that is not a local
    folder, a RUNNING run of the model (it may be abandoned: ``find_battery`` closes it), or
    anything unexpected. The rule is ``find_battery``'s: the latest active run of the model
    with this battery key, FINISHED, with this record digest."""
    import sqlite3

    db = _sqlite_path(uri)
    if db is None or not db.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            exp = con.execute("SELECT experiment_id FROM experiments WHERE name = ? AND lifecycle_stage = "
                              "'active'", (experiment,)).fetchone()
            if exp is None:
                return None
            runs = con.execute(
                "SELECT r.run_uuid, r.status, r.artifact_uri, "
                "(SELECT value FROM tags WHERE run_uuid = r.run_uuid AND key = ?), "
                "(SELECT value FROM tags WHERE run_uuid = r.run_uuid AND key = ?) "
                "FROM runs r JOIN tags m ON m.run_uuid = r.run_uuid AND m.key = 'gestalt.model' AND m.value = ? "
                "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active' "
                "ORDER BY r.start_time DESC, r.run_uuid ASC",
                (BATTERY_KEY, RECORDS_DIGEST, model_id, exp[0])).fetchall()
    except sqlite3.Error:
        return None
    if any(status == "RUNNING" for _, status, *_ in runs):
        return None
    mine = [r for r in runs if r[3] == battery_key]
    if not mine:
        return None
    run_id, status, artifact_uri, _, digest = mine[0]
    if status != "FINISHED" or digest != records_digest or not (artifact_uri or "").startswith("file:"):
        return None
    try:
        intervals = json.loads((Path(url2pathname(urlparse(artifact_uri).path)) / "intervals.json").read_text())
    except (OSError, ValueError):
        return None
    return run_id, intervals


def logged_intervals(run_id: str) -> dict[str, Any]:
    """intervals.json of a finished run (the scores an up-to-date rerun reports), read in place
    from a local store (MLflow's download would draw a progress bar)."""
    import mlflow

    uri = mlflow.MlflowClient().get_run(run_id).info.artifact_uri
    if uri.startswith("file:"):
        return json.loads((Path(url2pathname(urlparse(uri).path)) / "intervals.json").read_text())
    return mlflow.artifacts.load_dict(f"{uri}/intervals.json")


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
                 resume: str | None = None, experiment_id: str | None = None,
                 device: Callable[[], str | None] | None = None):
        import mlflow

        self.mlflow = mlflow
        self.experiment_id = experiment_id or open_store(uri, experiment)
        self.run_name = run_name
        self.tags = {**tags, **_owner_tags()}
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
        self._headline: set[str] = set()  # the headline metrics logged, listed in the runs table's view at the end
        self._closing_tags: dict[str, str] = {}  # written in one call as the run ends (__exit__)

    def __enter__(self) -> BatteryRun:
        if self.resume:
            self.run = self.mlflow.start_run(run_id=self.resume)
            self.mlflow.set_tags(self.tags)
        else:
            self.run = self.mlflow.start_run(experiment_id=self.experiment_id, run_name=self.run_name, tags=self.tags)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and tracking_lost(exc):  # nothing more reaches the store; a rerun logs it all
            self._discard_staged()
            return
        self._log_staged(figures=exc_type is None)
        if exc_type is not None:
            self.outcome = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else f"error: {exc_type.__name__}"
        if self.outcome:
            self._closing_tags[OUTCOME] = self.outcome
        if self._closing_tags:
            from mlflow.entities import RunTag

            self.mlflow.MlflowClient().log_batch(
                self.run_id, tags=[RunTag(k, v) for k, v in self._closing_tags.items()])
        self.mlflow.end_run(status="FAILED" if self.outcome else "FINISHED")

    def fail(self, outcome: str) -> None:
        self.outcome = outcome

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
            logged = self.mlflow.get_run(self.run_id).data.params
            clean = {k: v for k, v in clean.items() if k not in logged}
        self.mlflow.log_params(clean)

    def log_task(self, task_id: str, scores, records: list[dict], extra_metrics: dict[str, float],
                 figures: dict[str, Any], records_path: Path) -> None:
        """A task's metrics now; its records (JSONL and table) and figures are staged and logged
        with the battery's other artifacts when it ends (or, but for the figures, when it fails)."""
        for name, fig in figures.items():  # first: they render while the work below goes on
            self._save_figure(name, fig)
        metrics = score_metrics(task_id, scores)
        n = len(records)
        nulls = sum(r["parse_status"] != "ok" for r in records)
        metrics[f"{task_id}/n"] = float(n - nulls)
        metrics[f"{task_id}/null_rate"] = rounded(nulls / n, None) if n else 0.0
        metrics.update(extra_metrics)
        self.mlflow.log_metrics(metrics)
        self._headline.update(k for k in metrics if "/" not in k)
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
        for the interpreter's lock, whatever its CPU priority (README, "Speed": the Gestalt
        battery's ratio of medians with two such threads and with one).
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
            self._add_headline_columns(sorted(self._headline))
            finish_saving(self._figures, save=figures)
            for fig, path, _ in self._figures:
                if not figures:
                    path.unlink(missing_ok=True)
                plt.close(fig)
            if self._staging is not None:
                self.mlflow.log_artifacts(self._staging.name)
            if self._tables:
                # a continued run keeps the tables it listed before
                before = self.mlflow.get_run(self.run_id).data.tags if self.resume else {}
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
        self._headline = set()

    def _add_headline_columns(self, names: list[str]) -> None:
        """Keep the experiment's shared runs-table view listing every headline metric logged so far
        (once per battery: reading the experiment back costs a store round trip)."""
        if not names:
            return
        client = self.mlflow.MlflowClient()
        current = client.get_experiment(self.experiment_id).tags.get(SHARED_VIEW_TAG)
        state = json.loads(current) if current else {"selectedColumns": []}
        columns = [f"metrics.`{n}`" for n in names]
        if all(c in state["selectedColumns"] for c in columns):
            return
        state["selectedColumns"] = list(dict.fromkeys([*state["selectedColumns"], *columns]))
        # wide enough for the whole name (the default width cuts "count.capacity")
        widths = {c: 40 + 8 * len(n) for c, n in zip(columns, names)}
        state["columnWidths"] = {**state.get("columnWidths", {}), **widths}
        client.set_experiment_tag(self.experiment_id, SHARED_VIEW_TAG, json.dumps(state))

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

        The curves go in batches of MLflow's most metrics per call, not a store write per epoch
        (a store round trip each); the checkpoint is staged with the run's artifacts."""
        from mlflow.entities import Metric
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH

        now = int(time.time() * 1000)
        curves = [Metric(f"{task_id}/train" + (f"/fold{fold}" if len(history) > 1 else "") + f"/{k}",
                         float(v), now, int(row.get("epoch", 0)))
                  for fold, epochs in enumerate(history) for row in epochs for k, v in row.items()
                  if k != "epoch" and v is not None and v == v]
        client = self.mlflow.MlflowClient()
        for start in range(0, len(curves), MAX_METRICS_PER_BATCH):
            client.log_batch(self.run_id, metrics=curves[start:start + MAX_METRICS_PER_BATCH])
        for path in artifacts.values():
            staged = self._staged(f"models/{task_id}/{path.name}")
            try:  # a link costs nothing where a checkpoint is hundreds of megabytes
                os.link(path, staged)
            except OSError:  # another file system
                shutil.copyfile(path, staged)


def runs_table_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table (not the GenAI overview) with the headline metric columns."""
    return (f"{base}/#/experiments/{experiment_id}/runs"
            f"?viewStateShareKey={SHARED_VIEW_KEY}&workflowType=machine_learning")


def ui_server_command(uri: str, port: int) -> list[str]:
    """A light ``mlflow server`` on 127.0.0.1 for a store: one worker and no job runners
    (``mlflow ui`` starts about 15 processes)."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    if uri.startswith("sqlite:///"):  # experiments made in the UI keep artifacts beside the db
        db = Path(uri.removeprefix("sqlite:///")).resolve()
        cmd += ["--default-artifact-root", (db.parent / "mlartifacts").as_uri(), "--no-serve-artifacts"]
    return cmd


UI_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def serve_ui(uri: str, *, port: int, experiment: str, echo: Callable[[str], None] = print) -> int:
    """Start the UI server for ``uri`` (a store :func:`check_tracking_server` found), print the
    runs table's URL, serve until interrupted."""
    import signal
    import subprocess
    import urllib.request

    from mlflow import MlflowClient

    exp = MlflowClient(uri).get_experiment_by_name(experiment)
    if exp is None:
        raise GestaltError(f"{uri}: no experiment {experiment!r} (--experiment names another)")
    base = f"http://127.0.0.1:{port}"
    # the server runs in its own process group (it forks uvicorn), stopped as a whole below; a
    # SIGTERM to this process must reach that cleanup too, not leave the server behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    proc = subprocess.Popen(ui_server_command(uri, port), env={**os.environ, **UI_ENV},
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise GestaltError(f"mlflow server exited with {proc.returncode} (is port {port} free? --port)")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as reply:
                    if reply.read().strip() == b"OK":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise GestaltError(f"mlflow server on port {port}: not up after 120 s")
            time.sleep(0.25)
        echo(f"MLflow UI for {uri}: {runs_table_url(base, exp.experiment_id)}  (Ctrl-C stops it)")
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
