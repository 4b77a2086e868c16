"""What a run is doing between its trial bars: once a run has shown nothing for ``SLOW_STEP_S``
(loading a model, scoring with bootstrap intervals, drawing figures, logging to MLflow), the step
under way says so on stderr, so a first run never sits silent; a run whose steps end sooner says
nothing, so a rerun's output stays the answer alone. The silence is the run's, not one step's: two
quick steps back to back are one silence, and the second says its line when that reaches the limit."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

SLOW_STEP_S = 2.0
_clock = time.monotonic
_quiet_since = _clock()  # when the run last showed anything


def heard() -> None:
    """Something was just shown (a line, a trial bar that closed): the silence starts again."""
    global _quiet_since
    _quiet_since = _clock()


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _speak(line: str) -> None:
    _say(line)
    heard()


@contextlib.contextmanager
def slow_step(what: str, shown: bool) -> Iterator[None]:
    """``<what> ...`` on stderr if the block is still running once the run has been silent for
    ``SLOW_STEP_S`` (only where the run draws progress: ``runtime.progress`` on the main process)."""
    if not shown:
        yield
        return
    timer = threading.Timer(max(0.0, SLOW_STEP_S - (_clock() - _quiet_since)), _speak, args=(f"{what} ...",))
    timer.daemon = True  # an interrupted step never keeps the process alive to print it
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
