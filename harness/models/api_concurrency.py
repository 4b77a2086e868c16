"""How many requests an API model keeps in flight: grown until the vendor pushes back, shrunk when
it does (TCP's congestion window, with the vendor's 429/529 as the lost packet).

The window starts at ``options.concurrency`` and grows by one per answered request (doubling per
round trip) until the first pushback, then by one per window of answered requests, never beyond
``options.max_concurrency``; it grows only while full, so a battery that never fills it does not
inflate it. A pushback (429 rate limit, Anthropic's 529 overloaded) multiplies it by
:data:`DECREASE`, at most once per round trip (the answered requests' mean time): the pushbacks
that arrive within it were sent into the window before the cut, which the cut already answers. A
pushback's ``retry-after`` holds every new request of the model until then, not only the retried
one, and spaces the starts that follow by it until a request started since is answered: the
requests it held would otherwise all start at once and be pushed back together. A window whose
ceiling is its start (``options.concurrency`` set without ``options.max_concurrency``) stays there
until the vendor pushes back.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

DECREASE = 0.8  # a cut that clears an overload in a few round trips, not halving the throughput
SMOOTHING = 0.125  # TCP's weight of the newest round trip in the mean (RFC 6298)


class AdaptiveConcurrency:
    """The in-flight window of one API model; ``acquire`` before a request, ``release`` after."""

    def __init__(self, start: int, ceiling: int, clock: Callable[[], float] = time.monotonic):
        if not 1 <= start <= ceiling:
            raise ValueError(f"concurrency {start} must be between 1 and max_concurrency {ceiling}")
        self.ceiling = ceiling
        self.window = float(start)
        self.threshold = float(ceiling)  # below it the window doubles per round trip (slow start)
        self.in_flight = 0
        self.round_trip_s: float | None = None  # mean time of an answered request
        self.last_cut = -math.inf
        self.hold_until = -math.inf
        self.spacing_s = 0.0  # the last retry-after, between starts until one started since is answered
        self.pushed_at = -math.inf
        self._clock = clock
        self._cond = threading.Condition()

    @property
    def limit(self) -> int:
        """Requests that may be in flight now."""
        return max(1, int(self.window))

    def wait_s(self) -> float | None:
        """Seconds before a new request may start (0: now), or None while the window is full."""
        if self.in_flight >= self.limit:
            return None
        return max(0.0, self.hold_until - self._clock())

    def acquire(self) -> float:
        """Blocks until the window has room and no retry-after holds; returns the start time."""
        with self._cond:
            while (wait := self.wait_s()) != 0.0:
                self._cond.wait(wait)
            self.in_flight += 1
            now = self._clock()
            if self.spacing_s:
                self.hold_until = now + self.spacing_s
            return now

    def release(self, started: float, outcome: str = "answered", retry_after: float | None = None) -> None:
        """A request started at ``started`` is over: ``answered``, ``pushback`` (with the wait the
        vendor asked for) or ``failed`` (an error that says nothing of the vendor's load)."""
        with self._cond:
            now = self._clock()
            full = self.in_flight >= self.limit
            self.in_flight -= 1
            if outcome == "pushback":
                if retry_after:
                    self.hold_until = max(self.hold_until, now + retry_after)
                    self.spacing_s, self.pushed_at = retry_after, now
                if now - self.last_cut >= (self.round_trip_s or 0.0):
                    self.window = self.threshold = max(1.0, self.window * DECREASE)
                    self.last_cut = now
            elif outcome == "answered":
                if started >= self.pushed_at:
                    self.spacing_s = 0.0
                took = now - started
                self.round_trip_s = took if self.round_trip_s is None else (
                    (1 - SMOOTHING) * self.round_trip_s + SMOOTHING * took)
                if full:
                    step = 1.0 if self.window < self.threshold else 1.0 / self.window
                    self.window = min(float(self.ceiling), self.window + step)
            self._cond.notify_all()
