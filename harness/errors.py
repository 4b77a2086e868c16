"""The base classes of expected failures, each a one-line message: bad input (exit 2), and a
process of a multi-process run, the tracking server or a writable disk lost (exit 1); every exit
status is in harness/exit_status.py.

Kept free of the stages' imports so the CLI can catch them without loading any stage at start-up.
"""

import contextlib
from collections.abc import Iterator

class GestaltError(Exception):
    """Bad input (recipe, data file, model name, record); the message names the culprit."""


class ProcessLost(Exception):
    """Another process of this run stopped (crashed, killed) while this one needed it in a
    collective step; the message names this process, the step and the run. The records written
    so far are kept: a rerun resumes."""


class TrackingUnavailable(Exception):
    """The tracking server does not answer (before the run) or stopped answering (during it); the
    message names the server, where its address came from, and the run. The records written so
    far are kept: a rerun against the server back up resumes the same run."""


class DiskUnavailable(Exception):
    """The output folder (or the store's) is full or read-only; the message names the folder and
    the cause. The records written so far are kept: a rerun once it is writable resumes."""


# what a database says of the disk under it (sqlite's SQLITE_FULL and SQLITE_READONLY) when MLflow
# or SQLAlchemy wrap it: no OSError then, only these words
_DISK_WORDS = {"database or disk is full": "ENOSPC", "attempt to write a readonly database": "EROFS"}


def disk_fault(e: BaseException) -> tuple[str, str | None] | None:
    """(``ENOSPC`` | ``EDQUOT`` | ``EROFS``, the file it names or None) when ``e``, or an error it
    wraps or was raised while handling, is a full or read-only disk; None otherwise."""
    import errno

    codes = {errno.ENOSPC: "ENOSPC", errno.EDQUOT: "EDQUOT", errno.EROFS: "EROFS"}
    seen: set[int] = set()
    stack: list[BaseException | None] = [e]
    while stack:
        err = stack.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in codes:
            return codes[err.errno], err.filename2 or err.filename  # a copy's destination is what filled
        text = str(err)
        for words, code in _DISK_WORDS.items():
            if words in text:
                return code, None
        stack += [err.__cause__, err.__context__]
    return None


@contextlib.contextmanager
def naming_file(path: object) -> Iterator[None]:
    """An OSError met in the block names ``path`` where it names no file: a write, flush or fsync
    that fills the disk raises without one, and the one line must name the full folder."""
    try:
        yield
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e


def disk_unavailable(e: BaseException, folder: str) -> DiskUnavailable | None:
    """``e`` as the one line a full or read-only disk gets, naming the folder of the file it
    names (made absolute: a relative ``mlflow.db`` is not in "."), else ``folder``; None when
    ``e`` is something else."""
    import os

    fault = disk_fault(e)
    if fault is None:
        return None
    code, filename = fault
    where = os.path.dirname(os.path.abspath(filename)) if filename else folder
    if code == "EROFS":
        return DiskUnavailable(f"{where} is read-only: records so far are kept; make it writable and run again")
    return DiskUnavailable(f"no space left on {where}: records so far are kept; free space and run again")


def unwritable_folder(path: object, e: OSError) -> str:
    """Why folder ``path`` cannot be made or written, in words: the ancestor that is a file, or
    the system's reason (a read-only or virtual file system such as /proc, no permission)."""
    from pathlib import Path

    for parent in [Path(str(path)), *Path(str(path)).parents]:
        if parent.exists():
            if not parent.is_dir():
                return f"{path}: cannot be a folder: {parent} is a file"
            break
    return f"{path}: cannot be made or written ({e.strerror or e})"


def plain(message: str) -> str:
    """A pydantic error message without its type's prefix ("Value error, ..."), which names
    Python's exception rather than what is wrong."""
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message
