"""Files gestalt keeps in a result folder, never written through a link.

Result folders travel as tar and zip files, which keep links: a link planted where gestalt writes
a file of its own (records, locks, ``.battery.id``, the report, MLflow's artifacts, the store)
would carry the write to a file outside the folder. Every such write goes through this module,
and a link where it goes is refused in one line naming the link and its target; the link, its
target and the folder are left as they are. Scratch files are made anew (``O_EXCL``), so a link
there is never opened. A link to a folder (``out`` on a larger disk) is followed: that is a
layout a user makes, and what gestalt writes in it still refuses links.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from .errors import GestaltError


class LinkInFolder(GestaltError):
    """A link where the harness keeps a file of its own in a result folder."""


def _refused(path: Path) -> LinkInFolder:
    return LinkInFolder(f"{path}: a link (to {os.readlink(path)}) where gestalt keeps a file of its own: it "
                        f"writes nothing through it (the write could land outside the folder); remove the link "
                        f"and run again")


def refuse_link(path: Path) -> None:
    """Raise :class:`LinkInFolder` where ``path`` is a link."""
    if path.is_symlink():
        raise _refused(path)


def refuse_links(root: Path, names: Iterable[str | Path]) -> None:
    """Raise :class:`LinkInFolder` where a file ``root/name`` about to be written by a copy that
    follows links (MLflow's into its artifact folder) is a link."""
    for name in names:
        refuse_link(root / name)


def open_own(path: Path, flags: int) -> int:
    """``os.open`` of a file the harness keeps in a result folder, never through a link there."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno != errno.ELOOP or not path.is_symlink():
            raise
    raise _refused(path) from None


@contextlib.contextmanager
def own_file(path: Path, mode: str = "w", **open_kw: Any) -> Iterator[IO[Any]]:
    """``path`` written whole (``mode`` ``"w"`` or ``"wb"``): into a scratch file made anew beside
    it, renamed over it once written, so that a reader (another process, a rerun after a kill)
    finds the old file or the new one, never half of one. A link at ``path`` is refused."""
    refuse_link(path)
    scratch = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
    fd = open_own(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    if "b" not in mode:
        open_kw = {"encoding": "utf-8", **open_kw}
    try:
        with os.fdopen(fd, mode, **open_kw) as f:
            yield f
        os.replace(scratch, path)
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise


def write_own(path: Path, data: str | bytes) -> None:
    """``data`` as the whole of ``path`` (:func:`own_file`)."""
    with own_file(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)

