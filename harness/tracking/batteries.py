"""One run per battery, found again by its key: a rerun continues it or finds it up to date, and
no run is left RUNNING by a process that is gone."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import socket
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from ..memo import Memo, cache_dir
from ..own_files import refuse_link, write_own
from .store import patiently, sqlite_path, ui_base

BATTERY_KEY = "gestalt.battery_key"  # hash of everything that decides the battery's trials and scores
BATTERY_FOLDER = "gestalt.battery_folder"  # the id of the folder whose records the run holds
RECORDS_DIGEST = "gestalt.records_sha256"  # the record files' digest when the battery finished
OUTCOME = "gestalt.outcome"  # why a run ended FAILED: interrupted, abandoned, all trials null
# "provisional" on a FAILED run whose scores wait for its failed calls (or the rest of its trials):
# the report and the summary run leave them out, the terminal does not rank them
SCORES = "gestalt.scores"
SUMMARY_TAG = "gestalt.summary"  # the experiment's summary run (one per experiment)
SUMMARY_FINGERPRINT = "gestalt.summary_fingerprint"  # answer_fingerprint of the runs it was drawn from


def owner_tags() -> dict[str, str]:
    return {"gestalt.host": socket.gethostname(), "gestalt.pid": str(os.getpid())}


FOLDER_ID = ".battery.id"


def battery_folder_id(folder: Path) -> str:
    """The battery folder's own id (random, made once, kept in ``.battery.id``), which the runs
    writing its records carry (:data:`BATTERY_FOLDER`). Call it holding the folder's lock: the
    holder knows that any RUNNING run carrying the id lost its process, wherever that ran."""
    path = folder / FOLDER_ID
    refuse_link(path)  # its id, read from a file outside, would be written over it when not one
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        found = ""
    if re.fullmatch(r"[0-9a-f]{32}", found):
        return found
    made = uuid.uuid4().hex
    path.parent.mkdir(parents=True, exist_ok=True)
    write_own(path, made + "\n")
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
    finished: bool = False  # the run to continue ended FINISHED: its records were scored as they were then
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
            prior = Prior(run_id=latest.info.run_id, finished=latest.info.status == "FINISHED")
    def close(run_id: str) -> None:
        client.set_tag(run_id, OUTCOME, "abandoned")
        client.set_terminated(run_id, status="FAILED")

    closed = []
    for r in runs:
        if r.info.run_id != prior.run_id and _abandoned(r, folder_id):
            patiently(functools.partial(close, r.info.run_id))
            closed.append(r.info.run_id)
    prior.closed = tuple(closed)
    return prior


def local_artifacts(artifact_uri: str) -> Path | None:
    """The folder of a run's artifacts where it is a local one (``file:``); None for a server or a bucket."""
    return Path(url2pathname(urlparse(artifact_uri).path)) if artifact_uri.startswith("file:") else None


def up_to_date_without_mlflow(uri: str, experiment: str, model_id: str, battery_key: str,
                              records_digest: str) -> tuple[str, dict[str, Any]] | None:
    """(run id, intervals) when a local sqlite store shows the battery up to date, read with
    sqlite3 alone (importing MLflow costs more than the rest of a no-op rerun); None whenever
    this cannot be decided so: another kind of store, an artifact store that is not a local
    folder, a RUNNING run of the model (it may be abandoned: ``find_battery`` closes it), or
    anything unexpected. The rule is ``find_battery``'s: the latest active run of the model
    with this battery key, FINISHED, with this record digest.

    SQL on MLflow's own tables, which a new MLflow schema may break (then this returns None and
    ``find_battery`` decides through the client): asking MLflow's client the same in a fresh
    process took 9.6x as long (32 s vs 3.3 s on 2 busy cores), most of it importing MLflow
    (``benchmarks/up_to_date.py``, ``benchmarks/results/up_to_date.csv``)."""
    import sqlite3

    db = sqlite_path(uri)
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
    folder = local_artifacts(artifact_uri or "")
    if status != "FINISHED" or digest != records_digest or folder is None:
        return None
    try:
        intervals = json.loads((folder / "intervals.json").read_text())
    except (OSError, ValueError):
        return None
    return run_id, intervals


RESCORED = "gestalt.rescored"  # records changed since the run finished, scored again on request (--rescore)


def logged_records(run_id: str, name: str) -> bytes | None:
    """The record file ``name`` as the run logged it when its task was scored (None if it has none)."""
    import mlflow

    uri = patiently(lambda: mlflow.MlflowClient().get_run(run_id).info.artifact_uri)
    try:
        if (folder := local_artifacts(uri)) is not None:
            return (folder / "records" / name).read_bytes()
        return patiently(lambda: mlflow.artifacts.load_text(f"{uri}/records/{name}")).encode()
    except (OSError, mlflow.exceptions.MlflowException):
        return None


def answer_fingerprint(batteries: list[tuple[str, str, str]]) -> str:
    """What a summary run is drawn from: each of the experiment's finished batteries' (model, run
    id, records digest) and the harness version that drew it. A finished run with the same records digest holds the same
    scores and per-stimulus values, so an equal fingerprint means an equal summary."""
    from ..version import __version__

    payload = json.dumps([__version__, sorted(batteries)])
    return hashlib.sha256(payload.encode()).hexdigest()


def _store_rows(uri: str, sql: str, params: tuple) -> list[tuple] | None:
    """``sql``'s rows from a local sqlite store opened read-only with sqlite3 alone (no MLflow);
    None where the store is not a local sqlite file or cannot be read so."""
    import sqlite3

    db = sqlite_path(uri)
    if db is None or not db.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            return con.execute(sql, params).fetchall()
    except sqlite3.Error:
        return None


def experiment_fingerprint(uri: str, experiment: str) -> str | None:
    """:func:`answer_fingerprint` of every FINISHED battery of the experiment (what its summary run
    is drawn from), read with sqlite3 alone as :func:`up_to_date_without_mlflow` reads batteries;
    None where a local sqlite store cannot say (then the summary is drawn again)."""
    runs = _store_rows(
        uri, "SELECT m.value, r.run_uuid, "
        "(SELECT value FROM tags WHERE run_uuid = r.run_uuid AND key = ?) "
        "FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
        "JOIN tags m ON m.run_uuid = r.run_uuid AND m.key = 'gestalt.model' "
        "WHERE e.name = ? AND e.lifecycle_stage = 'active' AND r.lifecycle_stage = 'active' "
        "AND r.status = 'FINISHED'", (RECORDS_DIGEST, experiment))
    return None if runs is None else answer_fingerprint([(m, rid, digest or "") for m, rid, digest in runs])


def summary_url(uri: str, experiment_id: str, run_id: str) -> str:
    """The summary run's page in the MLflow UI."""
    return f"{ui_base(uri)}/#/experiments/{experiment_id}/runs/{run_id}"


def drawn_summary(uri: str, experiment: str, fingerprint: str) -> str | None:
    """The page (:func:`summary_url`) of the experiment's summary run where a local sqlite store shows
    it FINISHED and drawn from ``fingerprint``'s runs, read with sqlite3 alone as
    :func:`up_to_date_without_mlflow` reads batteries; None where it is not, or this cannot be
    decided so (then the summary is drawn again)."""
    rows = _store_rows(
        uri, "SELECT r.experiment_id, r.run_uuid, r.status, "
        "(SELECT value FROM tags WHERE run_uuid = r.run_uuid AND key = ?) "
        "FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
        "JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = ? AND s.value = 'true' "
        "WHERE e.name = ? AND e.lifecycle_stage = 'active' AND r.lifecycle_stage = 'active' "
        "ORDER BY r.start_time DESC LIMIT 1", (SUMMARY_FINGERPRINT, SUMMARY_TAG, experiment))
    found = rows[0] if rows else None
    if found is None or found[2] != "FINISHED" or found[3] != fingerprint:
        return None
    return summary_url(uri, str(found[0]), found[1])


def not_a_battery(client: Any, run: Any, command: str) -> str | None:
    """Why ``run`` is not a FINISHED model battery run (for ``gestalt <command>``), naming the run
    to pass instead; None where it is one."""
    rid, tags, status = run.info.run_id, run.data.tags, run.info.status
    if "gestalt.model" in tags:
        return None if status == "FINISHED" else (
            f"run {rid} of {tags['gestalt.model']} is {status}, not FINISHED: rerun its recipe to finish it")
    what = "the experiment's summary run" if tags.get(SUMMARY_TAG) == "true" else "not a gestalt battery run"
    found = client.search_runs([run.info.experiment_id], "attributes.status = 'FINISHED'", max_results=50,
                               order_by=["attributes.start_time DESC"])
    models = {r.data.tags["gestalt.model"]: r.info.run_id for r in reversed(found) if "gestalt.model" in r.data.tags}
    hint = (f": pass a model's battery run, e.g. `gestalt {command} {next(iter(models.values()))}` "
            f"({', '.join(f'{m} {r}' for m, r in models.items())})") if models else ""
    return f"run {rid} is {what}, not a model's battery run{hint}"


def logged_intervals(run_id: str) -> dict[str, Any]:
    """intervals.json of a finished run (the scores an up-to-date rerun reports), read in place
    from a local store (MLflow's download would draw a progress bar)."""
    import mlflow

    uri = patiently(lambda: mlflow.MlflowClient().get_run(run_id).info.artifact_uri)
    if (folder := local_artifacts(uri)) is not None:
        return json.loads((folder / "intervals.json").read_text())
    return patiently(lambda: mlflow.artifacts.load_dict(f"{uri}/intervals.json"))


def finished_intervals(client: Any, run: Any, uri: str) -> dict[str, Any]:
    """intervals.json of the FINISHED battery run ``run`` (as a search of the store ``uri`` found
    it): read in place where its artifacts are a local folder, otherwise downloaded through
    ``client`` once and kept (:class:`~harness.memo.Memo`, a table per store and run), so the
    summary after one battery more downloads that battery's alone. A finished run's intervals
    change only when a rerun continues it, which ends it again: the entry's key is the run's end
    and records digest."""
    folder = local_artifacts(run.info.artifact_uri or "")
    if folder is not None:
        return json.loads((folder / "intervals.json").read_text())
    rid = run.info.run_id
    memo = Memo(hashlib.sha256(f"{uri}\n{rid}".encode()).hexdigest()[:32], cache_dir() / "intervals")
    key = f"{run.info.end_time} {run.data.tags.get(RECORDS_DIGEST, '')}"
    if (intervals := memo.get(key)) is None:
        with tempfile.TemporaryDirectory() as tmp:
            intervals = json.loads(Path(client.download_artifacts(rid, "intervals.json", tmp)).read_text())
        memo.set(key, intervals)
        memo.save()
    return intervals
