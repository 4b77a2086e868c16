"""Verified access to source files: from a local mirror or a pulled data root, never unchecked.

Layout of both a mirror and a data root: ``<dir>/<release>/<path>``, as in ``../shared/sources``.
``Sources.path`` hands out a file only after its release has been verified against the declared
sha256 of every file, so nothing downstream reads a changed or missing file.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import GestaltError
from .releases import RELEASES, Release

DEFAULT_DATA_ROOT = Path(os.environ.get("GESTALT_DATA", Path.home() / ".cache" / "gestalt" / "data"))
# Release URLs point here; $GESTALT_DOWNLOAD_BASE swaps it for a mirror with the same URL layout.
URL_HOST = "https://raw.githubusercontent.com"
# each command's own spelling of the mirror folder (a recipe's is the key data.mirror)
MIRROR_HINT = ("read it from a mirror folder: `gestalt recipe RECIPE --data.mirror=DIR`, "
               "`gestalt data pull --mirror DIR`, or GESTALT_MIRROR=DIR for any command")


def offline() -> bool:
    """$GESTALT_OFFLINE (set by ``--offline`` and in the image): never download a release."""
    return os.environ.get("GESTALT_OFFLINE", "") not in ("", "0")


class DataError(GestaltError):
    """A source file is missing, changed or undeclared. The message names the file."""


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def get_release(name: str) -> Release:
    try:
        return RELEASES[name]
    except KeyError:
        raise DataError(f"unknown release {name!r}; declared: {', '.join(sorted(RELEASES))}") from None


class Sources:
    """Resolves ``(release, path)`` to a verified file.

    ``mirror`` (or $GESTALT_MIRROR) wins over ``root`` (or $GESTALT_DATA); both hold the same layout.
    """

    def __init__(self, root: str | Path | None = None, mirror: str | Path | None = None):
        mirror = mirror or os.environ.get("GESTALT_MIRROR")
        self.mirror = Path(mirror).resolve() if mirror else None
        self.root = Path(root).resolve() if root else DEFAULT_DATA_ROOT
        self._verified: dict[str, int] = {}  # release -> files verified here

    @property
    def base(self) -> Path:
        return self.mirror if self.mirror is not None else self.root

    def release_dir(self, name: str) -> Path:
        self.verify(name)
        return self.base / name

    def path(self, release: str, relpath: str) -> Path:
        rel = get_release(release)
        if relpath not in rel.files:
            raise DataError(f"{release}/{relpath}: not a declared file of release {release!r}")
        path = self.release_dir(release) / relpath
        if not path.is_file() and rel.is_partial(relpath):
            raise DataError(f"{path}: not here (the mirror holds a subset, or downloads are off); "
                            f"`gestalt data pull {release}` without --mirror and --offline fetches it")
        if not path.is_file():  # else only a mirror-derived file can be absent after verify()
            raise DataError(f"{path}: derived by the mirror, not in the public release; "
                            f"use a copy of shared/sources as the mirror: {MIRROR_HINT.split(': ', 1)[1]}")
        return path

    def present(self, release: str, relpath: str) -> bool:
        """Whether a declared file is here (verified with its release): the files of a partial
        set that a mirror, or an offline data root, holds."""
        return relpath in get_release(release).files and (self.release_dir(release) / relpath).is_file()

    def sha256(self, release: str, relpath: str) -> str:
        return get_release(release).files[relpath]

    def problems(self, name: str) -> list[str]:
        """Every missing or changed declared file of a release, one line each."""
        rel = get_release(name)
        folder = self.base / name
        found = []
        for relpath, expected in rel.files.items():
            p = folder / relpath
            if not p.is_file() and self.mirror is None and rel.url(relpath) is None:
                continue  # mirror-derived file: checked when read (see path())
            if not p.is_file() and rel.is_partial(relpath):
                continue  # of a set that may be held in part: the task counts what is here
            if not p.is_file():
                found.append(f"{p}: missing")
            elif file_sha256(p) != expected:
                found.append(f"{p}: sha256 differs from the declared {expected[:12]}...")
        return found

    def verify(self, name: str) -> int:
        """Check every declared file of a release; raise DataError naming the first bad one. Returns
        how many are here (a partial set's absent files are not).

        Without a mirror, a release whose files are only missing (none changed) is pulled by URL
        first, unless offline()."""
        if name in self._verified:
            return self._verified[name]
        problems = self.problems(name)
        rel = get_release(name)
        partial_absent = self.mirror is None and self.absent_partial(name) > 0
        if (problems or partial_absent) and self.mirror is None and not offline() and all(
                p.endswith(": missing") for p in problems):
            self.pull(name)
            problems = self.problems(name)
        if problems:
            more = f" (and {len(problems) - 1} more; `gestalt data verify {name}` lists them)" \
                if len(problems) > 1 else ""
            hint = "" if self.mirror else f"; run `gestalt data pull {name}`" + (
                " (offline: nothing is downloaded)" if offline() else "")
            raise DataError(problems[0] + more + hint)
        self._verified[name] = len(rel.files) - self.absent_partial(name)
        return self._verified[name]

    def absent_partial(self, name: str) -> int:
        """How many declared files of a set a mirror may hold in part are not here."""
        rel = get_release(name)
        return sum(not (self.base / name / f).is_file() for f in rel.files if rel.is_partial(f))

    def pull(self, name: str, progress: bool = True) -> int:
        """Download a release into the data root, verifying each file; returns files fetched."""
        rel = get_release(name)
        folder = self.root / name
        fetched = 0
        items = sorted(rel.files.items())
        if progress:
            from tqdm import tqdm

            items = tqdm(items, desc=f"pull {name}", unit="file")
        for relpath, expected in items:
            dest = folder / relpath
            if dest.is_file() and file_sha256(dest) == expected:
                continue
            if self.mirror is None and rel.url(relpath) is None:
                continue  # derived by whoever mirrored the release: only a mirror has it
            tmp = _part_of(dest)
            if self.mirror is not None:
                src = self.mirror / name / relpath
                if not src.is_file() and rel.is_partial(relpath):
                    continue  # the mirror holds part of this set: copy what it has
                if not src.is_file():
                    raise DataError(f"{src}: missing in mirror")
                shutil.copyfile(src, tmp)
            else:
                _download(name, relpath, _download_url(rel.url(relpath) or ""), tmp, folder)
            got = file_sha256(tmp)
            if got != expected:
                tmp.unlink()
                raise DataError(f"{name}/{relpath}: sha256 {got[:12]}... != declared {expected[:12]}... "
                                f"(from {self.mirror or _download_url(rel.url(relpath) or '')})")
            tmp.replace(dest)
            fetched += 1
        return fetched


def _part_of(dest: Path) -> Path:
    """Where a file is written before its sha256 is checked: one fixed name per file, so a
    download cut short (even by SIGKILL) is restarted over, never left beside a second one."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    return dest.with_name(f".{dest.name}.part")


def _download_url(url: str) -> str:
    base = os.environ.get("GESTALT_DOWNLOAD_BASE")
    if base and url.startswith(URL_HOST):
        return base.rstrip("/") + url[len(URL_HOST):]
    return url


def _download(release: str, relpath: str, url: str, tmp: Path, folder: Path) -> None:
    """Fetch url into tmp, or raise DataError naming the release, the file, the URL and the mirror
    option; a partial tmp is removed whatever stops the transfer."""
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f:
            shutil.copyfileobj(r, f)
            # read(n) returns a body cut short as if it were whole: compare with the header
            length = r.headers.get("Content-Length")
            if length is not None and f.tell() != int(length):
                raise http.client.IncompleteRead(b"", int(length) - f.tell())
    except (OSError, http.client.HTTPException) as e:
        tmp.unlink(missing_ok=True)
        why = f"HTTP {e.code} {e.reason}" if isinstance(e, urllib.error.HTTPError) else \
            f"{type(e).__name__}: {e}".replace("\n", " ")
        raise DataError(f"release {release}: {relpath} not in {folder}, and {url} failed ({why}); "
                        f"{MIRROR_HINT}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
