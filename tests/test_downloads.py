"""Releases pulled by URL over real HTTP: a mirror served on 127.0.0.1 with the releases' URL
layout (GESTALT_DOWNLOAD_BASE swaps https://raw.githubusercontent.com for it), fetched on first use,
sha256-checked; corruption, 404, a cut-short body and no network each named in one line."""

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from harness.sources import RELEASES, DataError, Sources
from harness.sources.store import URL_HOST
from tests.conftest import MIRROR

RELEASE = "perceptual-kernels"  # 14 files, all but the mirror's own notes under public URLs
REL = RELEASES[RELEASE]
URL_FILES = sorted(p for p in REL.files if REL.url(p))
CORRUPT = "data/color/color-kernels.json" if "data/color/color-kernels.json" in URL_FILES else URL_FILES[0]


class Mirror(http.server.ThreadingHTTPServer):
    """Serves ``tree`` over HTTP; paths in ``cut`` send their full Content-Length but only half
    the body, then drop the connection."""

    def __init__(self, tree: Path):
        self.tree = tree
        self.cut: set[str] = set()
        self.requests: list[str] = []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=str(args[2].tree), **kwargs)

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        if self.path not in self.server.cut:
            return super().do_GET()
        body = (self.server.tree / self.path.lstrip("/")).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)


def url_path(relpath: str) -> str:
    return urlsplit(REL.url(relpath)).path


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    tree = tmp_path / "www"
    for relpath in URL_FILES:
        dest = tree / url_path(relpath).lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MIRROR / RELEASE / relpath, dest)
    server = Mirror(tree)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("GESTALT_DOWNLOAD_BASE", server.base)
    monkeypatch.delenv("GESTALT_OFFLINE", raising=False)
    monkeypatch.delenv("GESTALT_MIRROR", raising=False)
    yield server
    server.shutdown()
    server.server_close()


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*part*"))


def test_pull_by_url_shows_progress_and_verifies(mirror, tmp_path, capsys):
    root = tmp_path / "root"
    assert Sources(root=root).pull(RELEASE) == len(URL_FILES)
    assert f"pull {RELEASE}" in capsys.readouterr().err  # the progress bar
    assert sorted(mirror.requests) == sorted(url_path(p) for p in URL_FILES)
    assert Sources(root=root).verify(RELEASE) == len(REL.files)
    assert REL.url(URL_FILES[0]).startswith(URL_HOST)


def test_missing_release_is_fetched_on_first_use(mirror, tmp_path):
    root = tmp_path / "root"
    src = Sources(root=root)
    path = src.path(RELEASE, URL_FILES[0])
    assert path.read_bytes() == (MIRROR / RELEASE / URL_FILES[0]).read_bytes()
    assert len(mirror.requests) == len(URL_FILES)


def test_offline_forbids_the_fetch_and_keeps_the_one_line_error(mirror, tmp_path, monkeypatch):
    monkeypatch.setenv("GESTALT_OFFLINE", "1")
    with pytest.raises(DataError, match=rf"missing .*run `gestalt data pull {RELEASE}`") as e:
        Sources(root=tmp_path / "root").verify(RELEASE)
    assert "\n" not in str(e.value) and mirror.requests == []


def test_offline_flag_on_the_command_line(mirror, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("GESTALT_OFFLINE", "GESTALT_MIRROR")}
    done = subprocess.run([sys.executable, "-m", "harness.cli", "--offline", "stimuli",
                           "similarity.chart.mark_color", "--out", str(tmp_path / "out"),
                           "--root", str(tmp_path / "root")],
                          capture_output=True, text=True, check=False, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("gestalt: error:") and done.stderr.count("\n") == 1, done.stderr
    assert "gestalt data pull perceptual-kernels" in done.stderr and mirror.requests == []


def test_corrupted_byte_is_named_and_nothing_is_kept(mirror, tmp_path):
    served = mirror.tree / url_path(CORRUPT).lstrip("/")
    data = bytearray(served.read_bytes())
    data[len(data) // 2] ^= 0x01
    served.write_bytes(bytes(data))
    root = tmp_path / "root"
    with pytest.raises(DataError) as e:
        Sources(root=root).pull(RELEASE, progress=False)
    msg = str(e.value)
    assert f"{RELEASE}/{CORRUPT}: sha256" in msg and mirror.base in msg and "\n" not in msg
    assert not (root / RELEASE / CORRUPT).exists() and leftovers(root) == []


def test_404_is_named_in_one_line(mirror, tmp_path):
    (mirror.tree / url_path(CORRUPT).lstrip("/")).unlink()
    root = tmp_path / "root"
    with pytest.raises(DataError) as e:
        Sources(root=root).pull(RELEASE, progress=False)
    msg = str(e.value)
    assert f"release {RELEASE}: {CORRUPT}" in msg and "HTTP 404" in msg and "\n" not in msg
    assert "--mirror" in msg and leftovers(root) == []


def test_interrupted_download_leaves_no_partial_and_restarts(mirror, tmp_path):
    mirror.cut.add(url_path(CORRUPT))
    root = tmp_path / "root"
    with pytest.raises(DataError) as e:
        Sources(root=root).pull(RELEASE, progress=False)
    msg = str(e.value)
    assert f"release {RELEASE}: {CORRUPT}" in msg and "IncompleteRead" in msg and "\n" not in msg
    assert not (root / RELEASE / CORRUPT).exists() and leftovers(root) == []
    done_before = {p for p in URL_FILES if (root / RELEASE / p).is_file()}
    mirror.cut.clear()  # the connection is back: the next pull restarts the file, skips the rest
    assert Sources(root=root).pull(RELEASE, progress=False) == len(URL_FILES) - len(done_before)
    assert Sources(root=root).verify(RELEASE) == len(REL.files) and leftovers(root) == []


def test_stale_partial_from_a_killed_pull_is_overwritten(mirror, tmp_path):
    root = tmp_path / "root"
    stale = root / RELEASE / Path(CORRUPT).parent / f".{Path(CORRUPT).name}.part"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a file from a SIGKILLed pull")
    Sources(root=root).pull(RELEASE, progress=False)
    assert Sources(root=root).verify(RELEASE) == len(REL.files) and leftovers(root) == []


def test_no_network_names_release_folder_and_mirror_option(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("GESTALT_DOWNLOAD_BASE", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("GESTALT_OFFLINE", raising=False)
    monkeypatch.delenv("GESTALT_MIRROR", raising=False)  # a mirror would answer in the network's place
    root = tmp_path / "root"
    with pytest.raises(DataError) as e:
        Sources(root=root).verify(RELEASE)
    msg = str(e.value)
    assert f"release {RELEASE}:" in msg and str(root / RELEASE) in msg and "--mirror DIR" in msg
    assert "\n" not in msg


def test_data_verify_names_every_bad_file(tmp_path):
    """Not the first bad file and "(and 2 more)": each missing or changed one on its own line."""
    mirror = tmp_path / "mirror"
    shutil.copytree(MIRROR / RELEASE, mirror / RELEASE)
    bad = URL_FILES[:3]
    (mirror / RELEASE / bad[0]).unlink()
    (mirror / RELEASE / bad[1]).unlink()
    with open(mirror / RELEASE / bad[2], "ab") as f:
        f.write(b" ")
    done = subprocess.run([sys.executable, "-m", "harness.cli", "data", "verify", RELEASE,
                           "--mirror", str(mirror)], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert f"{mirror / RELEASE / bad[0]}: missing" in lines
    assert f"{mirror / RELEASE / bad[1]}: missing" in lines
    assert any(line.startswith(f"{mirror / RELEASE / bad[2]}: sha256 differs") for line in lines)
    assert lines[-1].startswith("gestalt: error: 3 missing or changed files")
