"""How many requests an API model keeps in flight, and when the next may start: grown until the
vendor pushes back, shrunk to what it served when it does (TCP's congestion window, with the
vendor's 429/529 as the lost packet), and paced by the vendor's rate-limit headers where it sends
them.

The window starts at ``options.concurrency`` and grows by one per answered request (doubling per
round trip) until the first pushback, then by one per window of answered requests, never beyond
``options.max_concurrency``; it grows only while full, so a battery that never fills it does not
inflate it. A pushback (429 rate limit, Anthropic's 529 overloaded) sets the window to the
requests the vendor is still serving: the window that worked (a vendor that serves 5 at once
pushes back the 6th while serving 5; one that admits r a second serves r x latency). Where it
serves none of them, the window is cut to :data:`DECREASE` of itself, at most once per round trip
(the answered requests' mean time): the pushbacks that arrive within it were sent into the window
before the cut. The window that worked is a plateau: growth past it is
:data:`PLATEAU_ROUND_TRIPS` times slower, so a vendor that serves a fixed number at once is probed
rarely, not every round trip. A pushback's ``retry-after`` is the wait of the request pushed back
(its retry), not of the others: they hold only when none of the model's requests is being served
(the vendor takes none now). A window whose ceiling is its start
(``options.concurrency`` set without ``options.max_concurrency``) stays there until the vendor
pushes back.

Rate-limit headers (:func:`rate_limits`), read from every response, errors included: OpenAI's
``x-ratelimit-remaining-requests`` / ``-tokens`` with ``x-ratelimit-reset-requests`` / ``-tokens``
(durations such as ``1s``, ``6m0s``, ``20ms``), Anthropic's ``anthropic-ratelimit-requests-remaining``
/ ``-tokens-remaining`` with ``-reset`` (RFC 3339 times). They describe the vendor's count when it
admitted the request (at its start), so the model's starts since then are taken off; once nothing
is left, new requests wait for the reset (requests) or until a request's estimated tokens fit
(tokens). Gemini sends no such headers: there the window alone paces.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

DECREASE = 0.8  # a cut that clears an overload in a few round trips, not halving the throughput
SMOOTHING = 0.125  # TCP's weight of the newest round trip in the mean (RFC 6298)
PLATEAU_ROUND_TRIPS = 32  # growth past the window that worked: one per this many windows of answers
STARTS_KEPT_S = 900.0  # starts a response's headers may predate: longer than any request's timeout


@dataclass(frozen=True)
class RateLimits:
    """What a vendor's headers say is left, and in how many seconds each count resets (None: not sent)."""

    requests: int | None = None
    requests_reset_s: float | None = None
    tokens: int | None = None
    tokens_reset_s: float | None = None


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _reset_s(value: str | None, now: float) -> float | None:
    """Seconds until a reset given as OpenAI's duration (``6m0s``), plain seconds or an RFC 3339 time."""
    if not value:
        return None
    value = value.strip()
    parts = _DURATION.findall(value)
    if parts and "".join(n + u for n, u in parts) == value:
        return sum(float(n) * _UNIT_S[u] for n, u in parts)
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() - now)
    except ValueError:
        return None


def _count(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def rate_limits(headers: Mapping[str, str], now: float | None = None) -> RateLimits | None:
    """The rate-limit state in a response's headers (OpenAI's or Anthropic's), None if it has none."""
    now = time.time() if now is None else now
    for prefix, remaining, reset in (("x-ratelimit-", "remaining-{}", "reset-{}"),
                                     ("anthropic-ratelimit-", "{}-remaining", "{}-reset")):
        got = {kind: (_count(headers.get(prefix + remaining.format(kind))),
                      _reset_s(headers.get(prefix + reset.format(kind)), now)) for kind in ("requests", "tokens")}
        if any(n is not None for n, _ in got.values()):
            return RateLimits(got["requests"][0], got["requests"][1], got["tokens"][0], got["tokens"][1])
    return None


class AdaptiveConcurrency:
    """The in-flight window of one API model; ``acquire`` before a request, ``release`` after."""

    def __init__(self, start: int, ceiling: int, clock: Callable[[], float] = time.monotonic):
        if not 1 <= start <= ceiling:
            raise ValueError(f"concurrency {start} must be between 1 and max_concurrency {ceiling}")
        self.ceiling = ceiling
        self.window = float(start)
        self.threshold = float(ceiling)  # below it the window doubles per round trip (slow start)
        self.plateau = math.inf  # the window that worked at the last pushback
        self.in_flight = 0
        self.round_trip_s: float | None = None  # mean time of an answered request
        self.last_cut = -math.inf
        self.hold_until = -math.inf
        # the vendor's counts as of a request's start, less the model's starts since (None: unknown)
        self.requests_left: float | None = None
        self.requests_reset = -math.inf
        self.tokens_left: float | None = None
        self.tokens_reset = -math.inf
        self._starts: deque[tuple[float, int]] = deque()  # (start, estimated tokens) within a reset
        self._clock = clock
        self._cond = threading.Condition()

    @property
    def limit(self) -> int:
        """Requests that may be in flight now."""
        return max(1, int(self.window))

    def wait_s(self, tokens: int = 0) -> float | None:
        """Seconds before a new request (of ``tokens`` estimated tokens) may start (0: now), or None
        while the window is full."""
        if self.in_flight >= self.limit:
            return None
        now = self._clock()
        wait = self.hold_until
        if self.requests_left is not None and self.requests_left < 1:
            wait = max(wait, self.requests_reset)
        if self.tokens_left is not None and self.tokens_left < max(1, tokens):
            wait = max(wait, self.tokens_reset)  # a request larger than what is left waits for the reset
        if wait <= now:
            self._forget_reset(now)
            return 0.0
        return wait - now

    def _forget_reset(self, now: float) -> None:
        """Counts past their reset say nothing any more: unknown until the next response."""
        if self.requests_reset <= now:
            self.requests_left = None
        if self.tokens_reset <= now:
            self.tokens_left = None
        while self._starts and self._starts[0][0] < now - STARTS_KEPT_S:
            self._starts.popleft()

    def acquire(self, tokens: int = 0) -> float:
        """Blocks until the window has room and the vendor's counts allow a request of ``tokens``
        estimated tokens; returns the start time."""
        with self._cond:
            while (wait := self.wait_s(tokens)) != 0.0:
                self._cond.wait(wait)
            self.in_flight += 1
            now = self._clock()
            self._starts.append((now, tokens))
            if self.requests_left is not None:
                self.requests_left -= 1
            if self.tokens_left is not None:
                self.tokens_left -= tokens
            return now

    def observe(self, started: float, limits: RateLimits | None) -> None:
        """The rate-limit headers of the response to a request started at ``started``."""
        if limits is None:
            return
        with self._cond:
            since = [t for s, t in self._starts if s > started]
            if limits.requests is not None and limits.requests_reset_s is not None:
                self.requests_left = limits.requests - len(since)
                self.requests_reset = started + limits.requests_reset_s
            if limits.tokens is not None and limits.tokens_reset_s is not None:
                self.tokens_left = limits.tokens - sum(since)
                self.tokens_reset = started + limits.tokens_reset_s
            self._cond.notify_all()

    def release(self, started: float, outcome: str = "answered", retry_after: float | None = None) -> None:
        """A request started at ``started`` is over: ``answered``, ``pushback`` (with the wait the
        vendor asked for) or ``failed`` (an error that says nothing of the vendor's load)."""
        with self._cond:
            now = self._clock()
            full = self.in_flight >= self.limit
            self.in_flight -= 1
            if outcome == "pushback":
                if retry_after and not self.in_flight:  # the vendor serves none of ours: all wait
                    self.hold_until = max(self.hold_until, now + retry_after)
                if self.in_flight:  # the window that worked: what the vendor serves now
                    self.window = min(self.window, float(self.in_flight))
                elif now - self.last_cut >= (self.round_trip_s or 0.0):
                    self.window = max(1.0, self.window * DECREASE)
                    self.last_cut = now
                self.threshold = self.plateau = self.window
            elif outcome == "answered":
                took = now - started
                self.round_trip_s = took if self.round_trip_s is None else (
                    (1 - SMOOTHING) * self.round_trip_s + SMOOTHING * took)
                if full:
                    step = 1.0 if self.window < self.threshold else 1.0 / self.window
                    if self.window >= self.plateau:
                        step /= PLATEAU_ROUND_TRIPS
                    self.window = min(float(self.ceiling), self.window + step)
            self._cond.notify_all()
