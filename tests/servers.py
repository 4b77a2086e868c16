"""Throwaway tracking servers for tests, started on 127.0.0.1 and stopped by PID.

- `mlflow_server(workdir, backend_uri=None)` runs `mlflow/serve.sh` (the script a team uses) and
  yields its tracking URI; artifacts are proxied into `workdir / "artifacts"`.
- `postgres_server(workdir)` runs Debian's PostgreSQL binaries and yields a SQLAlchemy URI for
  `mlflow_server(..., backend_uri=...)`.
- `TcpProxy(port)` forwards a free loopback port to a server's; `down()` makes the server look
  gone (connections refused, open ones reset), `up()` brings it back on the same address.
- `log_through_server(uri, argv, cwd=...)` runs any client command (a python script, or
  `gestalt recipe ...` to log a real battery) with only `MLFLOW_TRACKING_URI` pointing at the
  server, and returns the runs it created, read back through the REST API as `RunSnapshot`s.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg2

REPO = Path(__file__).resolve().parents[1]
SERVE = REPO / "mlflow" / "serve.sh"
PG_USER = "mlflow"
PG_DATABASE = "mlflow"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TcpProxy:
    """A TCP forwarder from a free loopback port (`port`) to 127.0.0.1:`target`: a server that
    can be lost (`down()`: the port refuses, every open connection is reset) and come back on the
    same address (`up()`), as a restarted database or tracking server does."""

    def __init__(self, target: int):
        self.target, self.port = target, free_port()
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self.up()

    def up(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def down(self) -> None:
        assert self._listener is not None
        with suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        for conn in self._open:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group, read from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(stat.parent.name))
    return members


def _stop(proc: subprocess.Popen, first: signal.Signals, grace: float = 20.0) -> None:
    """Signal the process group, SIGKILL whatever outlives `grace`, and check all of it is gone.

    The servers run in their own session (start_new_session), so the group id is the leader's PID
    and covers the workers it forked.
    """
    pgid = proc.pid
    try:
        os.killpg(pgid, first)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace
    while _group_members(pgid) and time.monotonic() < deadline:
        proc.poll()  # reap the leader so it stops counting
        time.sleep(0.1)
    if _group_members(pgid):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _group_members(pgid)
    assert not left, f"processes {left} of group {pgid} survived SIGKILL"


def _log_tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_until(ready, proc: subprocess.Popen, log: Path, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}; {log}:\n{_log_tail(log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f} s; {log}:\n{_log_tail(log)}")
        time.sleep(0.1)


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as reply:
            return reply.read().strip() == b"OK"
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@contextmanager
def mlflow_server(workdir: Path, backend_uri: str | None = None, *, timeout: float = 120) -> Iterator[str]:
    """`mlflow/serve.sh` on a free loopback port; yields `http://127.0.0.1:PORT`.

    Without `backend_uri` the store is `workdir/mlflow.db` (serve.sh's sqlite default).
    """
    workdir = Path(workdir)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GESTALT_MLFLOW_", "MLFLOW_"))}
    env.update(
        GESTALT_MLFLOW_ENV_FILE="",  # a developer's mlflow/server.env must not leak in
        GESTALT_MLFLOW_DATA=str(workdir),
        GESTALT_MLFLOW_ARTIFACTS=str(workdir / "artifacts"),
        GESTALT_MLFLOW_HOST="127.0.0.1",
        GESTALT_MLFLOW_PORT=str(port),
        GESTALT_MLFLOW_WORKERS="1",
        GESTALT_MLFLOW_BIN=str(Path(sys.executable).with_name("mlflow")),
    )
    if backend_uri is not None:
        env["GESTALT_MLFLOW_BACKEND"] = backend_uri
    log = workdir / "mlflow-server.log"
    uri = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", str(SERVE)], env=env, cwd=workdir, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_until(lambda: _healthy(uri), proc, log, "mlflow server", timeout)
        yield uri
    finally:
        _stop(proc, signal.SIGTERM)


def postgres_bindir() -> Path | None:
    """Directory with `initdb` and `postgres`. Debian keeps them off PATH, under
    /usr/lib/postgresql/<major>/bin; a PATH entry wins when it has both."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                         key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else -1,
                         reverse=True)
    return next((d for d in candidates if (d / "initdb").exists() and (d / "postgres").exists()), None)


def _pg_ready(port: int) -> bool:
    try:
        psycopg2.connect(host="127.0.0.1", port=port, user=PG_USER, dbname="postgres",
                         connect_timeout=2).close()
        return True
    except psycopg2.OperationalError:
        return False


@contextmanager
def postgres_server(workdir: Path, *, timeout: float = 60) -> Iterator[str]:
    """A fresh PostgreSQL cluster on a free loopback port (trust auth, no unix socket); yields
    `postgresql+psycopg2://mlflow@127.0.0.1:PORT/mlflow`."""
    bindir = postgres_bindir()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL server binaries (initdb, postgres) not found; "
                                "on Debian: apt-get install -y postgresql")
    workdir = Path(workdir)
    run_as: dict = {}
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root; the Debian package's `postgres` user runs it, and
        # since it cannot enter pytest's 0700 temp dirs its cluster lives in a fresh /tmp dir.
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("running as root needs the `postgres` OS user "
                               "(created by Debian's postgresql package)") from None
        run_as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        data = Path(tempfile.mkdtemp(prefix="gestalt-pg-"))
        os.chown(data, user.pw_uid, user.pw_gid)
    else:
        data = workdir / "pgdata"
        data.mkdir(mode=0o700)
    port = free_port()
    log = workdir / "postgres.log"
    proc = None
    try:
        init = subprocess.run([bindir / "initdb", "-D", data, "-U", PG_USER, "--auth=trust",
                               "-E", "UTF8", "--locale=C", "--no-sync"],
                              capture_output=True, text=True, cwd=data, **run_as)
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed ({init.returncode}):\n{init.stdout}{init.stderr}")
        with (data / "postgresql.conf").open("a") as conf:
            # A throwaway cluster: loopback only, no socket dir to own, durability off for speed.
            conf.write(f"listen_addresses = '127.0.0.1'\nport = {port}\n"
                       "unix_socket_directories = ''\nfsync = off\nsynchronous_commit = off\n"
                       "full_page_writes = off\n")
        with log.open("wb") as out:
            proc = subprocess.Popen([bindir / "postgres", "-D", data], cwd=data, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, **run_as)
        _wait_until(lambda: _pg_ready(port), proc, log, "postgres", timeout)
        conn = psycopg2.connect(host="127.0.0.1", port=port, user=PG_USER, dbname="postgres")
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run inside a transaction
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE {PG_DATABASE}")
        finally:
            conn.close()
        yield f"postgresql+psycopg2://{PG_USER}@127.0.0.1:{port}/{PG_DATABASE}"
    finally:
        if proc is not None:
            _stop(proc, signal.SIGINT)  # SIGINT = PostgreSQL's "fast" shutdown
        if run_as:
            shutil.rmtree(data, ignore_errors=True)


# --- reading back through the REST API (independent of the client that wrote) ---


@dataclass(frozen=True)
class RunSnapshot:
    run_id: str
    experiment_id: str
    run_name: str
    status: str
    artifact_uri: str
    params: dict[str, str]
    metrics: dict[str, float]  # latest value per key
    tags: dict[str, str]
    artifacts: tuple[str, ...]  # file paths relative to the run's artifact root


def rest(uri: str, endpoint: str, body: dict | None = None, **query) -> dict:
    """GET (or POST `body`) `{uri}/api/2.0/mlflow/{endpoint}`; errors name the endpoint."""
    url = f"{uri}/api/2.0/mlflow/{endpoint}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{url}: HTTP {err.code}: {err.read().decode(errors='replace')}") from None


def fetch_artifact(uri: str, run_id: str, path: str) -> bytes:
    query = urllib.parse.urlencode({"run_uuid": run_id, "path": path})
    with urllib.request.urlopen(f"{uri}/get-artifact?{query}", timeout=30) as reply:
        return reply.read()


def _artifact_files(uri: str, run_id: str, path: str = "") -> list[str]:
    listing = rest(uri, "artifacts/list", run_id=run_id, **({"path": path} if path else {}))
    files = []
    for entry in listing.get("files", []):
        if entry.get("is_dir"):
            files += _artifact_files(uri, run_id, entry["path"])
        else:
            files.append(entry["path"])
    return files


def fetch_run(uri: str, run_id: str) -> RunSnapshot:
    run = rest(uri, "runs/get", run_id=run_id)["run"]
    info, data = run["info"], run.get("data", {})
    return RunSnapshot(
        run_id=info["run_id"], experiment_id=info["experiment_id"],
        run_name=info.get("run_name", ""), status=info["status"],
        artifact_uri=info["artifact_uri"],
        params={p["key"]: p["value"] for p in data.get("params", [])},
        metrics={m["key"]: m["value"] for m in data.get("metrics", [])},
        tags={t["key"]: t["value"] for t in data.get("tags", [])},
        artifacts=tuple(sorted(_artifact_files(uri, run_id))),
    )


def _all_run_ids(uri: str) -> set[str]:
    experiments = rest(uri, "experiments/search", {"max_results": 1000}).get("experiments", [])
    ids: set[str] = set()
    if not experiments:
        return ids
    body = {"experiment_ids": [e["experiment_id"] for e in experiments], "max_results": 1000}
    while True:
        page = rest(uri, "runs/search", body)
        ids |= {r["info"]["run_id"] for r in page.get("runs", [])}
        if not page.get("next_page_token"):
            return ids
        body["page_token"] = page["next_page_token"]


def client_env(uri: str) -> dict[str, str]:
    """This environment with the server as the only tracking setting a client sees."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_TRACKING_URI"] = uri
    return env


def log_through_server(uri: str, argv: Sequence[str | os.PathLike], *, cwd: Path,
                       timeout: float = 600) -> list[RunSnapshot]:
    """Run a client command against the server and return the runs it created, as the server
    reports them. E.g. a real battery: `log_through_server(uri, [".venv/bin/gestalt", "recipe",
    "recipes/smoke.yaml"], cwd=tmp_path)`. A failing command raises with its output."""
    before = _all_run_ids(uri)
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=client_env(uri), timeout=timeout,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return [fetch_run(uri, run_id) for run_id in sorted(_all_run_ids(uri) - before)]
