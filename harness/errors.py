"""The base classes of expected failures, each a one-line message: bad input (exit 2), and a
process of a multi-process run, the tracking server or a writable disk lost (exit 1). A run that
left out models which cannot run here yet (no API key, weights not fetched) exits INCOMPLETE.

Kept import-free so the CLI can catch them without loading any stage at start-up.
"""

# `gestalt recipe`'s exit status when it left models out (named with their fixes): the rest ran;
# a scheduler must not requeue it as is, the fix is the user's (docs/clusters.md)
INCOMPLETE = 3


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
