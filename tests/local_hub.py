"""A local model hub on 127.0.0.1: what huggingface_hub's ``snapshot_download``,
``hf_hub_download`` and ``model_info`` ask a hub (or a cluster's mirror, via ``HF_ENDPOINT``).

Repositories are folders ``ROOT/<org>/<name>/<commit>/`` (one folder per commit, any 40-hex name:
the stand-ins use the exact commits a recipe pins); ``ROOT/<org>/<name>/refs/main`` names the
commit ``main`` resolves to (else the only one). Endpoints:

- ``GET /api/models/<repo>[/revision/<rev>]``: id, sha and siblings (``model_info``, ``repo_info``)
- ``GET /api/models/<repo>/tree/<rev>[/<path>]?recursive=``: the tree listing, with git blob ids
  and, for weight files, LFS sha256 and size (what ``snapshot_download`` lists and caches)
- ``HEAD|GET /<repo>/resolve/<rev>/<path>``: the file, with ``X-Repo-Commit``, ``ETag`` (the blob
  id, or the sha256 for LFS files, as ``X-Linked-Etag`` too) and ``X-Linked-Size``; ``Range`` is
  honoured (a resumed download)
- errors as the hub sends them: 404 with ``X-Error-Code`` ``RepoNotFound``, ``RevisionNotFound``
  or ``EntryNotFound`` (the last with ``X-Repo-Commit``, which huggingface_hub caches as absent)

Every request is appended to ``--log`` as ``METHOD PATH`` (a test can check that an offline run
sent none). The real mirror servers (e.g. ``olah``) serve local *git* repositories, whose commit
ids are their own, so they cannot serve a pinned hub commit; hence this server.

``local_hub(root, log)`` runs it in its own process group and stops it by PID;
``python -m tests.local_hub ROOT [--port N] [--log FILE]`` serves ROOT and prints its URL once it
listens (.ci/run: the hub the image's build fetches from).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT_LENGTH = 40
LFS_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".ckpt", ".msgpack", ".h5")  # the hub's .gitattributes
LFS_POINTER_SIZE = 134


@cache
def _digests(path: Path, mtime_ns: int, size: int) -> tuple[str, str]:
    """(git blob id, sha256) of a file; keyed by mtime and size so a rewritten file is re-read."""
    blob, sha = hashlib.sha1(f"blob {size}\0".encode()), hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            blob.update(chunk)
            sha.update(chunk)
    return blob.hexdigest(), sha.hexdigest()


def file_entry(folder: Path, path: Path) -> dict:
    """A tree-listing entry, as the hub writes it."""
    st = path.stat()
    blob, sha = _digests(path, st.st_mtime_ns, st.st_size)
    entry = {"type": "file", "oid": blob, "size": st.st_size, "path": path.relative_to(folder).as_posix()}
    if path.name.endswith(LFS_SUFFIXES):
        entry["lfs"] = {"oid": sha, "size": st.st_size, "pointerSize": LFS_POINTER_SIZE}
    return entry


class Hub:
    def __init__(self, root: Path, log: Path | None):
        self.root, self.log = root, log

    def commit(self, repo: str, revision: str) -> tuple[str, Path] | None:
        """The commit a revision names and its folder; None where the repo has no such revision."""
        base = self.root / repo
        if revision == "main":
            ref = base / "refs" / "main"
            commits = [p.name for p in base.iterdir() if len(p.name) == COMMIT_LENGTH and p.is_dir()]
            revision = ref.read_text().strip() if ref.is_file() else commits[0] if len(commits) == 1 else ""
        folder = base / revision
        return (revision, folder) if len(revision) == COMMIT_LENGTH and folder.is_dir() else None

    def files(self, folder: Path, under: str = "") -> list[Path]:
        start = folder / under if under else folder
        return sorted(p for p in start.rglob("*") if p.is_file())


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as huggingface_hub's client expects

        def log_message(self, *args):  # the request log is --log's
            pass

        def do_HEAD(self):
            self._route(body=False)

        def do_GET(self):
            self._route(body=True)

        def _route(self, body: bool) -> None:
            if hub.log is not None:
                with open(hub.log, "a") as f:
                    f.write(f"{self.command} {self.path}\n")
            url = urllib.parse.urlsplit(self.path)
            parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
            query = urllib.parse.parse_qs(url.query)
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                repo, rest = "/".join(parts[2:4]), parts[4:]
                if not rest:
                    return self._info(repo, "main", body)
                if rest[0] == "revision" and len(rest) == 2:
                    return self._info(repo, rest[1], body)
                if rest[0] == "tree" and len(rest) >= 2:
                    recursive = query.get("recursive", ["false"])[0].lower() == "true"
                    return self._tree(repo, rest[1], "/".join(rest[2:]), recursive, body)
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), body)
            self._error(404, None, f"no route {url.path}", body)

        def _repo(self, repo: str, revision: str, body: bool) -> tuple[str, Path] | None:
            if not (hub.root / repo).is_dir():
                self._error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}.", body)
                return None
            found = hub.commit(repo, revision)
            if found is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", body)
            return found

        def _info(self, repo: str, revision: str, body: bool) -> None:
            if (found := self._repo(repo, revision, body)) is None:
                return
            sha, folder = found
            siblings = [{"rfilename": p.relative_to(folder).as_posix()} for p in hub.files(folder)]
            self._json({"id": repo, "modelId": repo, "sha": sha, "private": False, "gated": False,
                        "disabled": False, "siblings": siblings}, {"X-Repo-Commit": sha}, body)

        def _tree(self, repo: str, revision: str, under: str, recursive: bool, body: bool) -> None:
            if (found := self._repo(repo, revision, body)) is None:
                return
            sha, folder = found
            if under and not (folder / under).is_dir():
                return self._error(404, "EntryNotFound", f"{under} does not exist on {revision}", body,
                                   {"X-Repo-Commit": sha})
            if recursive:
                paths = hub.files(folder, under)
                dirs = sorted({p.parent for p in paths} - {folder / under if under else folder})
            else:
                children = sorted((folder / under).iterdir())
                paths, dirs = [p for p in children if p.is_file()], [p for p in children if p.is_dir()]
            entries = [{"type": "directory", "oid": hashlib.sha1(d.as_posix().encode()).hexdigest(), "size": 0,
                        "path": d.relative_to(folder).as_posix()} for d in dirs]
            self._json(entries + [file_entry(folder, p) for p in paths], {"X-Repo-Commit": sha}, body)

        def _resolve(self, repo: str, revision: str, name: str, body: bool) -> None:
            if (found := self._repo(repo, revision, body)) is None:
                return
            sha, folder = found
            path = folder / name
            if not path.is_file():
                return self._error(404, "EntryNotFound", f"{name} does not exist on {revision}", body,
                                   {"X-Repo-Commit": sha})
            entry = file_entry(folder, path)
            etag = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
            headers = {"X-Repo-Commit": sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}
            if "lfs" in entry:
                headers |= {"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(entry["size"])}
            size, start = entry["size"], 0
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes=") and ranged[6:].split("-")[0].isdigit():
                start = min(int(ranged[6:].split("-")[0]), size)
                headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
            self.send_response(206 if ranged else 200)
            for key, value in {**headers, "Content-Length": str(size - start)}.items():
                self.send_header(key, value)
            self.end_headers()
            if body:
                with open(path, "rb") as f:
                    f.seek(start)
                    while chunk := f.read(1 << 20):
                        self.wfile.write(chunk)

        def _json(self, payload, headers: dict, body: bool, code: int = 200) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            for key, value in {**headers, "Content-Type": "application/json",
                               "Content-Length": str(len(data))}.items():
                self.send_header(key, value)
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _error(self, code: int, error_code: str | None, message: str, body: bool,
                   headers: dict | None = None) -> None:
            extra = {**(headers or {}), "X-Error-Message": message}
            if error_code:
                extra["X-Error-Code"] = error_code
            self._json({"error": message}, extra, body, code)

    return Handler


def serve(root: Path, port: int, log: Path | None) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(Hub(root, log)))
    httpd.daemon_threads = True
    print(f"http://127.0.0.1:{httpd.server_address[1]}", flush=True)  # its URL, once it listens
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    httpd.serve_forever(poll_interval=0.05)


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/api/models/-/-", timeout=2)
    except urllib.error.HTTPError:
        return True  # a hub's 404: it is up
    except OSError:
        return False
    return True


@contextmanager
def local_hub(root: Path, log: Path, *, timeout: float = 60) -> Iterator[str]:
    """The hub serving ``root`` on a free loopback port, in its own process group; yields its URL
    (``HF_ENDPOINT``) and stops it by PID on exit."""
    from tests.servers import REPO, _stop, _wait_until, free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = log.with_suffix(".out")
    with open(out, "w") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "tests.local_hub", str(root), "--port", str(port),
                                 "--log", str(log)], cwd=REPO, stdout=stdout, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_until(lambda: _answers(url), proc, out, "local hub", timeout)
        yield url
    finally:
        _stop(proc, signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--port", type=int, default=0, help="0 (default): a free port; the URL is printed")
    parser.add_argument("--log", type=Path)
    args = parser.parse_args(argv)
    serve(args.root, args.port, args.log)


if __name__ == "__main__":
    main()
