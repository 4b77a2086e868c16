"""The in-flight window of an API model: grows while the vendor answers, shrinks to what the vendor
served on its pushback, and is paced by its rate-limit headers. A fake clock; no timing is asserted."""

from __future__ import annotations

import pytest

from harness.models.api_concurrency import DECREASE, PLATEAU_ROUND_TRIPS, AdaptiveConcurrency, RateLimits, rate_limits


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fill(w: AdaptiveConcurrency) -> list[float]:
    """Start requests until the window is full (never blocks: checked first)."""
    started = []
    while w.wait_s() == 0.0:
        started.append(w.acquire())
    return started


def stream(w: AdaptiveConcurrency, clock: Clock, in_flight: list[float], answers: int,
           took: float = 1.0) -> list[float]:
    """A battery with more trials than the window: each answer (``took`` seconds after the
    previous one) frees a slot that the next trial takes."""
    for _ in range(answers):
        clock.now += took
        w.release(in_flight.pop(0))
        in_flight += fill(w)
    return in_flight


def test_the_window_doubles_per_round_trip_until_the_ceiling():
    clock = Clock()
    w = AdaptiveConcurrency(4, 16, clock=clock)
    in_flight = fill(w)
    for answers, expected in ((4, 8), (8, 16), (16, 16)):
        in_flight = stream(w, clock, in_flight, answers)
        assert w.limit == expected == len(in_flight)


def test_a_window_never_filled_does_not_grow():
    w = AdaptiveConcurrency(4, 16, clock=Clock())
    for _ in range(50):  # one request at a time
        w.release(w.acquire())
    assert w.limit == 4


def test_a_pushback_sets_the_window_to_the_requests_the_vendor_serves():
    clock = Clock()
    w = AdaptiveConcurrency(10, 64, clock=clock)
    in_flight = stream(w, clock, fill(w), 10, took=0.1)
    assert w.limit == 20
    for _ in range(7):  # answered: the vendor serves 13 now
        w.release(in_flight.pop(0))
    w.release(in_flight.pop(0), "pushback")
    assert w.limit == 12  # those still served, not a fraction of the window
    w.release(in_flight.pop(0), "pushback")  # within the round trip too: the slot is not sent again
    assert w.limit == 11


def test_a_pushback_with_none_served_cuts_once_per_round_trip():
    clock = Clock()
    w = AdaptiveConcurrency(10, 64, clock=clock)
    stream(w, clock, fill(w), 10, took=0.1)
    trip = w.round_trip_s
    assert w.limit == 20 and trip > 0
    w.in_flight = 1  # the rest answered long ago
    w.release(clock.now, "pushback")
    assert w.window == pytest.approx(20 * DECREASE) and w.limit == 16
    clock.now += trip / 2  # within a round trip of the cut: the rest were sent into the old window
    for _ in range(5):
        w.in_flight = 1
        w.release(clock.now, "pushback")
    assert w.limit == 16
    clock.now += trip  # more than a round trip after the cut, a pushback cuts again
    w.in_flight = 1
    w.release(clock.now, "pushback")
    assert w.window == pytest.approx(20 * DECREASE ** 2) and w.limit == 12


def test_a_pushback_resumes_at_the_window_the_vendor_served():
    """A vendor that serves 5 at once pushes back the 6th: the window becomes 5, not 1 and not 4."""
    clock = Clock()
    w = AdaptiveConcurrency(6, 32, clock=clock)
    started = fill(w)
    clock.now += 0.01
    w.release(started.pop(), "pushback", retry_after=1.0)
    assert w.limit == 5 and w.wait_s() is None  # the five served keep the window full
    clock.now += 0.3
    w.release(started.pop(0))
    assert w.wait_s() == 0.0  # an answer frees a slot at once: no retry-after stall, no 1 request a second
    assert w.limit == 5


def test_growth_past_the_window_that_worked_is_slow():
    clock = Clock()
    w = AdaptiveConcurrency(6, 32, clock=clock)
    in_flight = fill(w)
    w.release(in_flight.pop(), "pushback")
    assert w.limit == 5
    in_flight = stream(w, clock, in_flight, 5 * PLATEAU_ROUND_TRIPS - 5, took=0.06)
    assert w.limit == 5  # probed again only after about PLATEAU_ROUND_TRIPS windows of answers
    stream(w, clock, in_flight, 30, took=0.06)
    assert w.limit == 6


def test_failures_neither_grow_nor_cut_the_window():
    clock = Clock()
    w = AdaptiveConcurrency(4, 16, clock=clock)
    started = fill(w)
    clock.now += 600.0  # a timeout says nothing of the vendor's load or its round trip
    for s in started:
        w.release(s, "failed")
    assert w.limit == 4 and w.round_trip_s is None


def test_the_window_never_goes_below_one():
    clock = Clock()
    w = AdaptiveConcurrency(1, 4, clock=clock)
    for _ in range(5):
        clock.now += 1.0
        w.release(w.acquire(), "pushback")
    assert w.limit == 1 and w.window == 1.0


def test_retry_after_holds_new_requests_only_when_none_is_served():
    clock = Clock()
    w = AdaptiveConcurrency(4, 8, clock=clock)
    started = fill(w)
    w.release(started.pop(), "pushback", retry_after=2.5)
    assert w.limit == 3 and w.wait_s() is None  # full of the requests the vendor serves
    w.release(started.pop())
    assert w.wait_s() == 0.0  # it still serves ours: only the pushed request waits (its retry)
    w.release(started.pop(), "pushback", retry_after=2.5)
    w.release(started.pop(), "pushback", retry_after=2.5)
    assert w.wait_s() == pytest.approx(2.5)  # it serves none: every new request waits
    clock.now += 2.5
    assert w.wait_s() == 0.0


def test_rate_limit_headers_of_each_vendor_are_read():
    openai = {"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59",
              "x-ratelimit-reset-requests": "1s", "x-ratelimit-remaining-tokens": "149984",
              "x-ratelimit-reset-tokens": "6m0s"}
    assert rate_limits(openai) == RateLimits(59, 1.0, 149984, 360.0)
    assert rate_limits({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20ms"}) == \
        RateLimits(0, 0.02, None, None)
    anthropic = {"anthropic-ratelimit-requests-remaining": "3",
                 "anthropic-ratelimit-requests-reset": "2027-01-15T08:00:02Z",
                 "anthropic-ratelimit-tokens-remaining": "1000",
                 "anthropic-ratelimit-tokens-reset": "2027-01-15T08:01:00Z"}
    from datetime import datetime

    now = datetime.fromisoformat("2027-01-15T08:00:00+00:00").timestamp()
    assert rate_limits(anthropic, now=now) == RateLimits(3, 2.0, 1000, 60.0)
    assert rate_limits({"content-type": "application/json"}) is None  # Gemini sends none


def test_no_requests_left_waits_for_the_reset_less_the_starts_since():
    clock = Clock()
    w = AdaptiveConcurrency(8, 8, clock=clock)
    first = w.acquire()
    clock.now += 0.01
    later = [w.acquire(), w.acquire()]  # started after the first: the vendor's count predates them
    clock.now += 0.19
    w.observe(first, RateLimits(requests=3, requests_reset_s=1.0))
    w.release(first)
    assert w.requests_left == 1 and w.wait_s() == 0.0
    w.acquire()
    assert w.wait_s() == pytest.approx(0.8)  # none left until the reset, 1 s after the first's start
    clock.now += 0.8
    assert w.wait_s() == 0.0 and w.requests_left is None  # reset: unknown until the next response
    assert later


def test_a_request_larger_than_the_tokens_left_waits_for_their_reset():
    clock = Clock()
    w = AdaptiveConcurrency(8, 8, clock=clock)
    first = w.acquire(tokens=1000)
    w.observe(first, RateLimits(tokens=1500, tokens_reset_s=2.0))
    assert w.wait_s(tokens=1000) == 0.0
    w.acquire(tokens=1000)
    assert w.wait_s(tokens=1000) == pytest.approx(2.0) and w.wait_s(tokens=400) == 0.0


def test_a_full_window_waits_for_a_release():
    w = AdaptiveConcurrency(2, 2, clock=Clock())
    a, _ = w.acquire(), w.acquire()
    assert w.wait_s() is None
    w.release(a)
    assert w.wait_s() == 0.0


def test_start_must_lie_within_the_ceiling():
    with pytest.raises(ValueError, match="max_concurrency"):
        AdaptiveConcurrency(8, 4)


def test_the_adapter_reads_each_responses_rate_limit_headers(monkeypatch):
    from PIL import Image

    from harness.models.api import APIModel
    from harness.models.base import ModelSpec
    from tests.fake_vendor_server import FakeVendorServer, Status

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeVendorServer() as server:
        adapter = APIModel(ModelSpec(id="m", source="api", name="openai/gpt-4o", options={
            "base_url": server.url + "/v1", "backoff_base_s": 0.001}))
        seen: list = []
        observe = adapter._window.observe
        monkeypatch.setattr(adapter._window, "observe", lambda started, limits: (seen.append(limits),
                                                                                   observe(started, limits)))
        server.script(Status(429, retry_after=0.05, headers={"x-ratelimit-remaining-requests": "0",
                                                             "x-ratelimit-reset-requests": "50ms"}))
        assert adapter.generate(Image.new("RGB", (64, 48)), "q", {"max_new_tokens": 40}).text == "2"
    assert seen == [RateLimits(0, 0.05, None, None), None]  # the 429's headers, then the answer's (none)
