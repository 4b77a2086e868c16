"""The base classes of expected failures, each a one-line message: bad input (exit 2), and a
process of a multi-process run, the tracking server or a writable disk lost (exit 1).

Kept import-free so the CLI can catch them without loading any stage at start-up.
"""


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
