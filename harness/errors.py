"""The base classes of expected failures, each a one-line message: bad input (exit 2) and a
process of a multi-process run lost (exit 1).

Kept import-free so the CLI can catch them without loading any stage at start-up.
"""


class GestaltError(Exception):
    """Bad input (recipe, data file, model name, record); the message names the culprit."""


class ProcessLost(Exception):
    """Another process of this run stopped (crashed, killed) while this one needed it in a
    collective step; the message names this process, the step and the run. The records written
    so far are kept: a rerun resumes."""
