"""One flat MLflow run per model battery; tasks are metric prefixes.

Params: model identity, weights revision, readouts, seeds, harness version. Metrics, as each task's
scoring family declares them (:func:`score_metrics`): the task's headline under its short name
(``Silhouette.B``: the UI charts it in its "Model metrics" section, the runs table's "Headlines"
view shows it as a column) with ``_ci_low``/``_ci_high``/``_floor``/``_ceiling``, then
``<task>/n``, ``<task>/null_rate`` and the family's few secondary scores as ``<task>/<score>``;
every other score stays in ``intervals.json``. Values are rounded at logging to the precision
their interval justifies. Artifacts (staged as the tasks finish,
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
import logging
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
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse
from urllib.request import url2pathname

from ..errors import GestaltError, TrackingUnavailable
from ..models.device import prepares_beside
from ..scores.record import Score
from ..scores.tasks import Family, family_of
from ..trials.distributed import file_lock

DEFAULT_URI = "sqlite:///mlflow.db"
T = TypeVar("T")

# the experiment's kind as MLflow records it (its API and older UIs read it; 3.17's UI takes the
# workflow from the browser, which `gestalt ui` sets: harness/tracking/ui_server.py)
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
SHARED_VIEW_KEY = "gestalt-headlines"  # ?viewStateShareKey= this: the runs table with headline columns
SHARED_VIEW_TAG = "mlflow.sharedViewState." + SHARED_VIEW_KEY
# the tag holds a saved view (name, times, state): the runs page lists it under "Views"
SHARED_VIEW_NAME = "Headlines with 95% intervals"
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


HEADLINE_SUFFIXES = ("", "_ci_low", "_ci_high", "_floor", "_ceiling")  # a headline's metrics


def score_metrics(task_id: str, scores: Iterable[Score], family: Family | None) -> dict[str, float]:
    """A task's run metrics, as its scoring family declares them: the task's headline
    (:meth:`Family.lead_score`) under its short name with ``_ci_low``, ``_ci_high``, ``_floor`` and
    ``_ceiling``, and the family's few secondary scores as ``<task>/<score>``. Values are rounded
    to their interval (floor and ceiling, references rather than this estimate, to four
    significant digits). Every other score and interval is in intervals.json."""
    if family is None:  # a task this harness no longer declares
        return {}
    scores = list(scores)
    out: dict[str, float] = {}
    lead = family.lead_score(scores)
    if lead is not None and lead.value is not None and math.isfinite(lead.value):
        short = family.short_name(task_id, lead.name)
        digits = decimals_for(lead.ci_low, lead.ci_high)
        for suffix, v, d in zip(HEADLINE_SUFFIXES, (lead.value, lead.ci_low, lead.ci_high, lead.floor, lead.ceiling),
                                (digits, digits, digits, None, None)):
            if v is not None and math.isfinite(v):
                out[short + suffix] = rounded(float(v), d)
    for s in scores:
        if s.name in family.secondary and s.value is not None and math.isfinite(s.value):
            out[f"{task_id}/{s.name}"] = rounded(float(s.value), decimals_for(s.ci_low, s.ci_high))
    return out


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
    if not isinstance(e, MlflowException):
        return None
    if isinstance(cause, requests.exceptions.RequestException):
        errno = re.search(r"\[Errno -?\d+\] [^'\")]+", str(cause))
        return errno.group(0) if errno else type(cause).__name__
    import sqlalchemy.exc

    # a database MLflow reaches itself (PostgreSQL, MySQL) that went away; a sqlite file does
    # not stop answering, and its operational errors (a locked or damaged file) are not outages
    if isinstance(cause, sqlalchemy.exc.OperationalError) and type(cause.orig).__module__.split(".")[0] != "sqlite3":
        return str(cause.orig).strip().splitlines()[0]
    return None


_outage = {"budget_s": 0.0}  # outside outage_budget: no retry beyond MLflow's own
_RETRY_SETTINGS = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")


@contextlib.contextmanager
def outage_budget(seconds: float) -> Iterator[None]:
    """For the calls in the block, the tracking store is retried for up to ``seconds`` after it
    stops answering (:func:`patiently`), then given up. MLflow's own retries of each request
    (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``: 7 by default, about 4 minutes) are turned off meanwhile,
    so the budget alone decides and a process that gave up has no request left backing off; one
    attempt waits at most ``MLFLOW_HTTP_REQUEST_TIMEOUT`` and never longer than the budget."""
    before = {k: os.environ.get(k) for k in _RETRY_SETTINGS}
    timeout = min(int(before["MLFLOW_HTTP_REQUEST_TIMEOUT"] or 120), max(1, int(seconds)))
    os.environ.update({"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout)})
    # MLflow logs a lost database's traceback before raising; the one line is this harness's
    quiet = logging.getLogger("mlflow.store.db.utils")
    level, kept = quiet.level, _outage["budget_s"]
    quiet.setLevel(logging.CRITICAL)
    _outage["budget_s"] = float(seconds)
    try:
        yield
    finally:
        _outage["budget_s"] = kept
        quiet.setLevel(level)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def patiently(call: Callable[[], T]) -> T:
    """``call()`` (one or more tracking-store requests that may be repeated), retried while the
    store does not answer (:func:`tracking_lost`), for up to the outage budget from the first
    failed attempt (:func:`outage_budget`), saying so once; then its last error is raised."""
    give_up, pause = None, 0.5
    while True:
        attempt = time.monotonic()
        try:
            return call()
        except Exception as e:
            why = tracking_lost(e)
            if why is None:
                raise
            now = time.monotonic()
            if give_up is None:
                import mlflow

                budget = _outage["budget_s"]
                if budget <= 0:
                    raise
                give_up = attempt + budget
                logging.getLogger("harness").warning(
                    f"tracking server {shown_uri(mlflow.get_tracking_uri())} not answering ({why}), "
                    f"retrying for up to {budget:.0f} s")
            if now >= give_up:
                raise
            time.sleep(min(pause, give_up - now))
            pause = min(2 * pause, 15.0)


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
    def open_experiment() -> str:
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

    with lock:
        if db is None:
            return patiently(open_experiment)
        if not db.exists():
            _create_sqlite_store(db)
        try:
            return open_experiment()
        except Exception as e:
            if not _sqlalchemy_error(e):
                raise
            why = str(e).strip().splitlines()[0]
            if _holds_runs(db):
                raise GestaltError(f"{uri}: MLflow cannot open this store ({why}); it holds runs: restore "
                                   f"it from a copy, or upgrade it (`mlflow db upgrade {uri}`)") from None
        # a store whose creation a killed process or a full disk left unfinished: nothing in it
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        aside = db.with_name(db.name + ".incomplete")
        os.replace(db, aside)
        # MLflow keeps one engine per address, its pooled connections on the file moved aside
        if (engine := SqlAlchemyStore._engine_map.pop(uri, None)) is not None:
            engine.dispose()
        logging.getLogger("harness").warning(
            f"{db}: an MLflow store whose creation was interrupted, holding no run ({why}): "
            f"moved aside to {aside} and made again")
        _create_sqlite_store(db)
        return open_experiment()


def _create_sqlite_store(db: Path) -> None:
    """A new sqlite store, whole or not at all: MLflow's schema migrations (tens of steps, a
    second or more) run on ``<name>.creating``, renamed to ``db`` once done; a process killed
    meanwhile leaves only that file, which the next run starts over."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    part = db.with_name(db.name + ".creating")
    for left in ("", "-journal", "-wal", "-shm"):  # a killed creation's journal must not roll back onto the new file
        part.with_name(part.name + left).unlink(missing_ok=True)
    store = SqlAlchemyStore(f"sqlite:///{part}", (db.parent.resolve() / "mlartifacts").as_uri())
    store.engine.dispose()
    os.replace(part, db)


def _sqlalchemy_error(e: BaseException) -> bool:
    """``e`` (or what MLflow wrapped) is the database's error: a schema MLflow cannot use."""
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    return isinstance(e, sqlalchemy.exc.SQLAlchemyError) or (
        isinstance(e, MlflowException) and ("schema" in str(e) or isinstance(
            e.__cause__ or e.__context__, sqlalchemy.exc.SQLAlchemyError)))


def _holds_runs(db: Path) -> bool:
    """Whether the sqlite file has a run in it (or cannot be read as one that has none)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return "runs" in tables and con.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return True


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
    runs = patiently(lambda: client.search_runs([experiment_id], filter_string=f"tags.`gestalt.model` = '{model_id}'",
                                                order_by=["attributes.start_time DESC"]))
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
            patiently(lambda r=r: (client.set_tag(r.info.run_id, OUTCOME, "abandoned"),
                                   client.set_terminated(r.info.run_id, status="FAILED")))
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

    uri = patiently(lambda: mlflow.MlflowClient().get_run(run_id).info.artifact_uri)
    if uri.startswith("file:"):
        return json.loads((Path(url2pathname(urlparse(uri).path)) / "intervals.json").read_text())
    return patiently(lambda: mlflow.artifacts.load_dict(f"{uri}/intervals.json"))


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
        try:
            self._close(exc_type, exc)
        except Exception as e:
            if tracking_lost(e):
                self._leave()
            raise

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
        elif self.resume and OUTCOME in self.run.data.tags:
            # a continued run that now finishes (its failed calls sent again): the earlier
            # failure no longer describes it
            self.mlflow.MlflowClient().delete_tag(self.run_id, OUTCOME)
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
            logged = patiently(lambda: self.mlflow.get_run(self.run_id).data.params)
            clean = {k: v for k, v in clean.items() if k not in logged}
        patiently(lambda: self.mlflow.log_params(clean))

    def log_task(self, task_id: str, scores, records: list[dict], extra_metrics: dict[str, float],
                 figures: dict[str, Any], records_path: Path) -> None:
        """A task's metrics now; its records (JSONL and table) and figures are staged and logged
        with the battery's other artifacts when it ends (or, but for the figures, when it fails)."""
        for name, fig in figures.items():  # first: they render while the work below goes on
            self._save_figure(name, fig)
        metrics = score_metrics(task_id, scores, family_of(task_id))
        n = len(records)
        nulls = sum(r["parse_status"] != "ok" for r in records)
        metrics[f"{task_id}/n"] = float(n - nulls)
        metrics[f"{task_id}/null_rate"] = rounded(nulls / n, None) if n else 0.0
        metrics.update(extra_metrics)
        patiently(lambda: self.mlflow.log_metrics(metrics))
        # the runs table's columns: each headline and its interval (floor and ceiling on the run's page)
        self._headline.update(dict.fromkeys(k for k in metrics if "/" not in k
                                            and not k.endswith(("_floor", "_ceiling"))))
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
        client = self.mlflow.MlflowClient()
        current = client.get_experiment(self.experiment_id).tags.get(SHARED_VIEW_TAG)
        view = json.loads(current) if current else {}
        state = json.loads(view["state"]) if "state" in view else {"selectedColumns": []}
        columns = [f"metrics.`{n}`" for n in names]
        if all(c in state["selectedColumns"] for c in columns):
            return
        state["selectedColumns"] = list(dict.fromkeys([*state["selectedColumns"], *columns]))
        # wide enough for the whole name (the default width cuts "Series_count.acc_ci_high")
        widths = {c: 40 + 8 * len(n) for c, n in zip(columns, names)}
        state["columnWidths"] = {**state.get("columnWidths", {}), **widths}
        now = int(time.time() * 1000)
        client.set_experiment_tag(self.experiment_id, SHARED_VIEW_TAG, json.dumps(
            {"name": SHARED_VIEW_NAME, "createdAt": view.get("createdAt", now), "updatedAt": now,
             "state": json.dumps(state)}))

    def log_metrics(self, metrics: dict[str, float]) -> None:
        """Run-level metrics of the battery (an API model's tokens and cost)."""
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
            patiently(lambda batch=curves[start:start + MAX_METRICS_PER_BATCH]:
                      client.log_batch(self.run_id, metrics=batch))
        for path in artifacts.values():
            staged = self._staged(f"models/{task_id}/{path.name}")
            try:  # a link costs nothing where a checkpoint is hundreds of megabytes
                os.link(path, staged)
            except OSError:  # another file system
                shutil.copyfile(path, staged)


DEFAULT_UI = "http://127.0.0.1:5000"  # `gestalt ui`'s address unless --port says otherwise


def ui_address_file(db: Path) -> Path:
    """Beside a sqlite store, while `gestalt ui` serves it: the address it serves it on."""
    return db.with_name(db.name + ".ui")


def ui_base(uri: str) -> str:
    """Where a browser finds the MLflow UI of store ``uri``: a tracking server itself (without
    credentials), or for a local store the address `gestalt ui` serves it on now, else that
    command's default address."""
    parts = urlparse(uri)
    if parts.scheme in ("http", "https"):
        return parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl().rstrip("/")
    db = _sqlite_path(uri)
    if db is not None:
        with contextlib.suppress(OSError):
            return ui_address_file(db).read_text().strip() or DEFAULT_UI
    return DEFAULT_UI


def runs_table_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table (not the GenAI overview) with the headline metric columns."""
    return (f"{base}/#/experiments/{experiment_id}/runs"
            f"?viewStateShareKey={SHARED_VIEW_KEY}&workflowType=machine_learning")
