"""The one base class of expected failures: bad input that gets a one-line message and exit 2.

Kept import-free so the CLI can catch it without loading any stage at start-up.
"""


class GestaltError(Exception):
    """Bad input (recipe, data file, model name, record); the message names the culprit."""
