"""The MLflow UI `gestalt ui` serves: MLflow's own server application, its page opening on the
model-training runs view with the headline columns in a fresh browser.

MLflow 3.17's UI takes the workflow it shows (GenAI overview or model-training runs) from the
page address (``?workflowType=``) or else from the browser's local storage
(``mlflow.workflowType_v1``), GenAI by default; it ignores the experiment's
``mlflow.experimentKind`` tag. So Home -> experiment, the Experiments list and a bare
``#/experiments/<id>`` land on traces and costs in a new browser profile. The runs table keeps
its columns per experiment in local storage too (``MLflowLocalStorage-1.1-ExperimentPage-
["<id>"]-ReactComponentState``), empty of metrics on a first visit.

This application wraps MLflow's (``mlflow.server.fastapi_app``) and adds one script and one
style to the page it serves at ``/``: where the browser holds no choice yet, it stores the
model-training workflow and :data:`QUIET` (no assistant panel, no registry promotion); for each
experiment with a "Headlines" view (the experiment tag
:data:`~harness.tracking.store.SHARED_VIEW_TAG`) its runs-table columns, order and widths, again
whenever the view changed; the bare root address goes to the served experiment's runs table;
and :data:`STYLE` shows a description holding gestalt's figures whole. Everything else is MLflow's.

Run by uvicorn in the process `gestalt ui` starts (:func:`serve_ui`, :func:`server_command`),
configured as ``mlflow server`` configures its own.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import GestaltError
from ..own_files import refuse_link, write_own
from .store import SHARED_VIEW_TAG, runs_table_url, shown_uri, sqlite_path, ui_address_file

WORKFLOW_KEY = "mlflow.workflowType_v1"  # the UI's useLocalStorage key "mlflow.workflowType", version 1
RUNS_STATE_KEY = "MLflowLocalStorage-1.1-ExperimentPage-{ids}-ReactComponentState"
APPLIED = "{key}#gestalt"  # beside a runs state: the updatedAt of the view it was set from
# first-visit choices of MLflow's own (useLocalStorage keys, version 1): no assistant panel
# taking a third of the page, no promotional modal over the Registered Models page
QUIET = {"mlflow.assistant.panelOpen_v1": "false", "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true",
         "_mlflow_model_registry_promo_modal_dismissed_v1": "true"}
STORE_ENV = "GESTALT_UI_STORE"  # the store this application serves (read by create_app)
EXPERIMENT_ENV = "GESTALT_UI_EXPERIMENT"  # the experiment its root address opens
# The description box of a run page shows 100 px until "Show more" and draws a wide image at its
# own width, cut off on the right: a description holding a figure gestalt logged (the summary
# run's matrix) is shown whole and its figures scaled to the page.
STYLE = b"""<style>
div:has(> [data-testid="truncation-gradient"]):has(img[src*="get-artifact"]){
max-height:none!important;overflow:visible!important}
div:has(img[src*="get-artifact"]) > [data-testid="truncation-gradient"],
div:has(img[src*="get-artifact"]) + [data-testid="show-comment-toggle"]{display:none!important}
img[src*="get-artifact"]{max-width:100%;height:auto}
</style>"""


def first_visit_defaults() -> dict[str, str]:
    """Local-storage key -> value the page sets where the browser has none: the model-training
    workflow and :data:`QUIET`."""
    return {WORKFLOW_KEY: json.dumps("machine_learning"), **QUIET}


def view_states(experiment_tags: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    """Local-storage key -> (stamp, value): per experiment ``experiment_tags`` (id -> tags) gives
    a headline view for, that view's columns, order and widths as the runs table's state, set
    where the browser holds none or one set from an older view (a recipe since added tasks)."""
    out = {}
    for experiment_id, tags in experiment_tags.items():
        view = tags.get(SHARED_VIEW_TAG)
        if not view:
            continue
        try:
            loaded = json.loads(view)
            state = json.loads(loaded["state"]) if "state" in loaded else loaded
        except (ValueError, TypeError, KeyError):
            continue
        runs_state = {k: state[k] for k in ("selectedColumns", "columnOrder", "columnWidths") if k in state}
        key = RUNS_STATE_KEY.format(ids=json.dumps([experiment_id]))
        out[key] = (str(loaded.get("updatedAt", "")), json.dumps(runs_state))
    return out


def first_visit_script(defaults: dict[str, str], views: dict[str, tuple[str, str]] | None = None,
                       home: str | None = None) -> bytes:
    """The page's first script: ``defaults`` stored where the browser has none, ``views``
    (:func:`view_states`) where it has none or an older one, and the bare root address sent to
    ``home`` (a hash route) instead of MLflow's generic Home."""
    # "</" never occurs inside the inline script: json.dumps escapes no "/", so it is escaped here
    data = json.dumps([defaults, views or {}, home]).replace("</", "<\\/")
    return ("<script>(function(a){var d=a[0],v=a[1],h=a[2];try{"
            "for(var k in d){if(localStorage.getItem(k)===null){localStorage.setItem(k,d[k]);}}"
            f"for(var k in v){{var m=k+{json.dumps(APPLIED.format(key=''))};"
            "if(localStorage.getItem(k)===null||localStorage.getItem(m)!==v[k][0])"
            "{localStorage.setItem(k,v[k][1]);localStorage.setItem(m,v[k][0]);}}"
            "}catch(e){}"
            "if(h&&location.pathname==='/'&&['','#','#/'].indexOf(location.hash)>=0)"
            "{history.replaceState(null,'','#'+h);}"
            f"}})({data});</script>").encode()


def inject(page: bytes, script: bytes) -> bytes:
    """``page`` with ``script`` first in its head (before MLflow's own script reads the storage)."""
    head = page.find(b"<head>")
    return page if head < 0 else page[:head + 6] + script + page[head + 6:]


def create_app() -> Any:
    """MLflow's server application, its page at ``/`` carrying :func:`first_visit_script`."""
    # MLflow's module imports starlette's deprecated WSGI middleware: a warning in a terminal the
    # user did not ask for
    warnings.filterwarnings("ignore", module="mlflow")
    warnings.filterwarnings("ignore", message=".*starlette.middleware.wsgi.*")
    from mlflow import MlflowClient
    from mlflow.server.fastapi_app import app as mlflow_app

    client = MlflowClient(os.environ[STORE_ENV])

    def script() -> bytes:
        tags = {e.experiment_id: e.tags for e in client.search_experiments()}
        home = client.get_experiment_by_name(os.environ.get(EXPERIMENT_ENV, ""))
        return first_visit_script(first_visit_defaults(), view_states(tags),
                                  None if home is None else f"/experiments/{home.experiment_id}/runs") + STYLE

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] != "/":
            await mlflow_app(scope, receive, send)
            return
        # the page uncompressed and never from a cache: the script carries the store's views now
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"]
                                      if k.lower() not in (b"accept-encoding", b"if-none-match",
                                                           b"if-modified-since")]}
        start: dict[str, Any] = {}
        body: list[bytes] = []

        async def rewrite(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            page = b"".join(body)
            if start.get("status") == 200:
                page = inject(page, script())
            drop = (b"content-length", b"etag", b"last-modified", b"cache-control")
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in drop]
            headers += [(b"content-length", str(len(page)).encode()), (b"cache-control", b"no-store")]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": page})

        await mlflow_app(scope, receive, rewrite)

    return app


def server_command(uri: str, port: int, verbose: bool = False,
                   experiment: str = "gestalt") -> tuple[list[str], dict[str, str]]:
    """(command, environment) of a one-worker UI server for store ``uri`` on 127.0.0.1:``port``,
    set up as ``mlflow server --workers 1 --no-serve-artifacts`` sets up its own (no job runner:
    ``mlflow ui`` starts about 15 processes). Quiet but for errors unless ``verbose``: no
    request log, no library warnings."""
    from mlflow.environment_variables import _MLFLOW_SGI_NAME
    from mlflow.server.constants import ARTIFACT_ROOT_ENV_VAR, BACKEND_STORE_URI_ENV_VAR, REGISTRY_STORE_URI_ENV_VAR

    env = {STORE_ENV: uri, EXPERIMENT_ENV: experiment, BACKEND_STORE_URI_ENV_VAR: uri, REGISTRY_STORE_URI_ENV_VAR: uri,
           _MLFLOW_SGI_NAME.name: "uvicorn", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    if uri.startswith("sqlite:///"):  # experiments made in the UI keep artifacts beside the db
        db = Path(uri.removeprefix("sqlite:///")).resolve()
        env[ARTIFACT_ROOT_ENV_VAR] = (db.parent / "mlartifacts").as_uri()
    if not verbose:
        env["PYTHONWARNINGS"] = "ignore"
    cmd = [sys.executable, "-m", "uvicorn", "--factory", f"{__name__}:create_app", "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]
    cmd += [] if verbose else ["--no-access-log", "--log-level", "warning"]
    return cmd, env


def serve_ui(uri: str, *, port: int, experiment: str, echo: Callable[[str], None] = print,
             verbose: bool = False) -> int:
    """Start the UI server for ``uri`` (a store :func:`check_tracking_server` found; the server:
    :func:`server_command`), print the runs table's URL, serve until interrupted.
    Requests and library warnings reach the terminal only when ``verbose``."""
    import signal
    import subprocess
    import urllib.request

    from mlflow import MlflowClient

    exp = MlflowClient(uri).get_experiment_by_name(experiment)
    if exp is None:
        raise GestaltError(f"{uri}: no experiment {experiment!r} (--experiment names another)")
    base = f"http://127.0.0.1:{port}"
    db = sqlite_path(uri)
    address = ui_address_file(db) if db is not None else None
    if address is not None:
        refuse_link(address)  # before a server starts
    # the server runs in its own process group (it forks uvicorn), stopped as a whole below; a
    # SIGTERM or SIGINT to this process must reach that cleanup too, not leave the server behind.
    # SIGINT is set even where it was ignored: a shell starts a background job so, and Python
    # keeps that, yet a supervisor stops `gestalt ui` with SIGINT as with SIGTERM
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cmd, env = server_command(uri, port, verbose, experiment)
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, start_new_session=True)
    noted = False
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
        if address is not None:  # the report's and register's links follow it
            noted = _note_address(address, base)
        echo(f"MLflow UI for {shown_uri(uri)}: {runs_table_url(base, exp.experiment_id)}  (Ctrl-C stops it)")
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
        if noted and address is not None:
            address.unlink(missing_ok=True)


def _note_address(address: Path, base: str) -> bool:
    """Whether ``base`` could be written to ``address``: not in a folder mounted or unpacked
    read-only, which is served all the same (the links of a report made meanwhile name the
    default port)."""
    try:
        write_own(address, base + "\n")
    except OSError:
        return False
    return True
