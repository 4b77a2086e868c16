"""What a run is doing between its trial bars: a step that takes longer than ``SLOW_STEP_S``
(loading a model, scoring with bootstrap intervals, drawing figures, logging to MLflow) says so
on stderr once that time has passed, so a first run never sits silent; a step that ends sooner
says nothing, so a rerun's output stays the answer alone."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

SLOW_STEP_S = 2.0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def slow_step(what: str, shown: bool) -> Iterator[None]:
    """``<what> ...`` on stderr if the block is still running after ``SLOW_STEP_S`` (only where the
    run draws progress: ``runtime.progress`` on the main process)."""
    if not shown:
        yield
        return
    timer = threading.Timer(SLOW_STEP_S, _say, args=(f"{what} ...",))
    timer.daemon = True  # an interrupted step never keeps the process alive to print it
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
