"""Where the tracking store is, whether it answers, and where a browser finds it.

The default store is ``sqlite:///mlflow.db`` in the working directory (the ./mlruns file store is
refused by current MLflow); ``MLFLOW_TRACKING_URI`` or the recipe's ``tracking.uri`` override it.
A store that stops answering is retried for the run's outage budget (:func:`outage_budget`,
:func:`patiently`); a new sqlite store is made whole or not at all (:func:`open_store`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

from ..errors import GestaltError, TrackingUnavailable
from ..own_files import refuse_link, refuse_links
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
    db = sqlite_path(uri)
    if must_exist and db is not None and not db.is_file():
        raise TrackingSettingError(f"{uri} ({where}): no MLflow store here (run a recipe first, or "
                                   f"point {setting} at a store)")
    if db is not None:
        refuse_link(db)  # sqlite writes through a link: the runs would land in the store it names
    if db is not None and db.is_file():
        with _lock_where_writable(db):
            own_artifacts(db)
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


# sqlite's words for a file that is not (or no longer) a database
_DAMAGED = ("malformed", "not a database", "corrupt")


@contextlib.contextmanager
def _lock_where_writable(db: Path) -> Iterator[None]:
    """The lock beside the store ``db``, or none where its folder cannot be written (a result
    folder mounted or unpacked read-only, to read its report): no process can write the store
    there, so there is nothing to wait for; one that must change it still stops in one line."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(db.with_name(db.name + ".lock")))
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
        yield


def read_only_store(uri: str) -> str | None:
    """Why a local sqlite store cannot take a new run (a result folder mounted or unpacked
    read-only), or None: the database or its folder (sqlite's journal, the artifacts) cannot be
    written. Another store's writes are its server's to refuse."""
    db = sqlite_path(uri)
    for path in (db, db.parent) if db is not None else ():
        if path.exists() and not os.access(path, os.W_OK):
            return f"{path} cannot be written"
    return None


def sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def open_store(uri: str, experiment: str) -> str:
    """Point MLflow at the store and experiment, creating them once; the experiment id.

    On a fresh sqlite store two processes would both run MLflow's schema migration and one dies
    in alembic ("expected to match one row"); both would also create the experiment. Creation
    therefore happens under a lock file beside the database."""
    import mlflow

    db = sqlite_path(uri)
    if db is not None:
        refuse_link(db)
    lock = file_lock(db.with_name(db.name + ".lock")) if db else contextlib.nullcontext()
    def open_experiment() -> str:
        mlflow.set_tracking_uri(uri)
        exp = mlflow.get_experiment_by_name(experiment)
        if exp is None and db is not None:
            # MLflow would put artifacts in ./mlruns of whatever directory the run starts from;
            # keep them beside the database instead, so a store is one self-contained folder
            mlflow.create_experiment(experiment, artifact_location=artifact_root(db))
        exp = mlflow.set_experiment(experiment)
        if exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
            mlflow.set_experiment_tag(*EXPERIMENT_KIND)
        return exp.experiment_id

    with lock:
        if db is None:
            return patiently(open_experiment)
        if not db.exists():
            _create_sqlite_store(db)
        else:
            own_artifacts(db)
        try:
            return open_experiment()
        except Exception as e:
            if not _sqlalchemy_error(e):
                raise
            why = str(e).strip().splitlines()[0]
            if _holds_runs(db):
                if any(words in why for words in _DAMAGED):  # no upgrade repairs a damaged file
                    raise GestaltError(
                        f"{uri}: MLflow cannot open this store ({why}): the file is damaged; restore it from a "
                        f"copy, or move it aside (`mv {db} {db}.damaged`) and run again: the trial records are "
                        f"kept outside it, so a rerun scores them into a new store without asking a model "
                        f"again") from None
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


def artifact_root(db: Path) -> str:
    """The artifact folder of the sqlite store ``db``: ``mlartifacts`` beside it, as a URI."""
    return (db.parent.resolve() / ARTIFACTS).as_uri()


ARTIFACTS = "mlartifacts"


def refuse_artifact_links(artifact_uri: str, staged: str | Path) -> None:
    """Before MLflow copies the files under ``staged`` into the local artifact folder
    ``artifact_uri`` (it writes through links): a link where one of them goes is refused
    (:func:`~harness.own_files.refuse_links`). A rerun continues a battery's run, and the summary
    run is drawn again into the same run, so a folder from elsewhere can hold links at the very
    paths they write. Other artifact stores (a server, a bucket) are theirs to guard."""
    if not artifact_uri.startswith("file:"):
        return
    from mlflow.utils.file_utils import local_file_uri_to_path

    staged = Path(staged)
    refuse_links(Path(local_file_uri_to_path(artifact_uri)),
                 (p.relative_to(staged) for p in staged.rglob("*") if p.is_file()))
# where MLflow records absolute artifact locations (it makes any path it is given absolute)
_LOCATIONS = (("experiments", "artifact_location"), ("runs", "artifact_uri"),
              ("logged_models", "artifact_location"))


def own_artifacts(db: Path) -> None:
    """Point the artifact locations the store ``db`` records at its own ``mlartifacts`` folder.

    MLflow records them as absolute paths, so a store copied (``cp -a A B``, a restored backup),
    moved, or mounted at another path would read and write the artifacts of the folder it was
    made in, or make that path again. Locations inside some other ``.../mlartifacts`` folder are
    rewritten to this one (its runs' artifacts travelled with it); others (an artifact server, a
    bucket) are left as they are. A store that needs this and cannot be written stops in one
    line. Callers hold the store's lock."""
    import sqlite3

    own, roots = artifact_root(db), set()
    try:
        with contextlib.closing(sqlite3.connect(db)) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            found = {loc for table, column in _LOCATIONS if table in tables
                     for (loc,) in con.execute(f"SELECT DISTINCT {column} FROM {table}")}  # noqa: S608
            roots = {m.group(1) for loc in found if loc
                     if (m := re.match(rf"(file://.*/{ARTIFACTS})(/|$)", loc)) and m.group(1) != own}
            if not roots:
                return
            with con:
                for root in roots:
                    for table, column in _LOCATIONS:
                        if table in tables:
                            con.execute(f"UPDATE {table} SET {column} = ? || substr({column}, ?) "  # noqa: S608
                                        f"WHERE substr({column}, 1, ?) = ? AND substr({column}, ?, 1) IN ('', '/')",
                                        (own, len(root) + 1, len(root), root, len(root) + 1))
    except sqlite3.Error as e:
        if not roots:  # not a store sqlite3 can read: MLflow's own open says what is wrong
            return
        raise GestaltError(f"{db}: its artifact locations name {', '.join(sorted(roots))} (a copied or moved "
                           f"store) and cannot be pointed at {own} ({e}): make {db.parent} writable and "
                           f"run again") from None
    logging.getLogger("harness").info("%s: artifact locations pointed at %s (they named %s)", db, own,
                                      ", ".join(sorted(roots)))


def _create_sqlite_store(db: Path) -> None:
    """A new sqlite store, whole or not at all: MLflow's schema migrations (tens of steps, a
    second or more) run on ``<name>.creating``, renamed to ``db`` once done; a process killed
    meanwhile leaves only that file, which the next run starts over."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    # absolute: MLflow keeps one engine per URI for the process, and a relative one would reach the
    # file of whichever folder was current when an earlier store was made there
    part = db.absolute().with_name(db.name + ".creating")
    for left in ("", "-journal", "-wal", "-shm"):  # a killed creation's journal must not roll back onto the new file
        part.with_name(part.name + left).unlink(missing_ok=True)
    uri = f"sqlite:///{part}"
    store = SqlAlchemyStore(uri, artifact_root(db))
    store.engine.dispose()
    # and forgotten once the file is renamed: a later creation at this path (after a kill) must
    # open its new file, not a pooled connection to this one
    SqlAlchemyStore._engine_map.pop(uri, None)
    os.replace(part, db)


def _sqlalchemy_error(e: BaseException) -> bool:
    """``e`` (or what MLflow wrapped) is the database's error: a schema MLflow cannot use."""
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    return isinstance(e, sqlalchemy.exc.SQLAlchemyError) or (
        isinstance(e, MlflowException) and ("schema" in str(e) or isinstance(
            e.__cause__ or e.__context__, sqlalchemy.exc.SQLAlchemyError)))


def _holds_runs(db: Path) -> bool:
    """Whether the sqlite file has a run in it (or cannot be read as one that has none). Read
    with sqlite3: MLflow's client cannot open this store (that is why it is asked)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return "runs" in tables and con.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return True


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
    db = sqlite_path(uri)
    if db is not None:
        with contextlib.suppress(OSError):
            return ui_address_file(db).read_text().strip() or DEFAULT_UI
    return DEFAULT_UI


def runs_table_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table (not the GenAI overview). Its columns come from the browser's
    storage, which `gestalt ui`'s page fills from the experiment's view: the view's own
    ``?viewStateShareKey=`` would show it under a "You're viewing a shared view" banner."""
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def update_shared_view(client, experiment_id: str, update: Callable[[dict], bool]) -> None:
    """Change the runs-table state of the experiment's *Headlines* view (:data:`SHARED_VIEW_TAG`)
    in place with ``update`` (it returns whether it changed anything); written back only then."""
    import json

    current = client.get_experiment(experiment_id).tags.get(SHARED_VIEW_TAG)
    view = json.loads(current) if current else {}
    state = json.loads(view["state"]) if "state" in view else {"selectedColumns": []}
    if not update(state):
        return
    now = int(time.time() * 1000)
    client.set_experiment_tag(experiment_id, SHARED_VIEW_TAG, json.dumps(
        {"name": SHARED_VIEW_NAME, "createdAt": view.get("createdAt", now), "updatedAt": now,
         "state": json.dumps(state)}))


def column_width(*texts: str) -> int:
    """Pixels a runs-table column needs to show the longest of ``texts`` whole (13 px sans: about
    7 px a character; the rest for the cell's padding and the header's sort mark)."""
    return 36 + 7 * max(len(t) for t in texts)
