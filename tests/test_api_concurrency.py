"""The in-flight window of an API model: grows while the vendor answers, shrinks on its pushback
and holds for its retry-after. A fake clock; no timing is asserted."""

from __future__ import annotations

import pytest

from harness.models.api_concurrency import DECREASE, AdaptiveConcurrency


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


def test_a_pushback_cuts_once_per_round_trip_then_growth_is_additive():
    clock = Clock()
    w = AdaptiveConcurrency(10, 64, clock=clock)
    in_flight = stream(w, clock, fill(w), 10, took=0.1)
    trip = w.round_trip_s
    assert w.limit == 20 and trip > 0
    w.release(in_flight.pop(0), "pushback")
    assert w.window == pytest.approx(20 * DECREASE) and w.limit == 16
    clock.now += trip / 2  # within a round trip of the cut: the rest were sent into the old window
    for _ in range(5):
        w.release(in_flight.pop(0), "pushback")
    assert w.limit == 16
    clock.now += trip  # more than a round trip after the cut, a pushback cuts again
    w.release(in_flight.pop(0), "pushback")
    assert w.window == pytest.approx(20 * DECREASE ** 2) and w.limit == 12
    # after a cut, a full window grows by about one per window of answers, no longer doubling
    before = w.window
    stream(w, clock, in_flight + fill(w), 12, took=1 / 12)
    assert before + 0.5 < w.window < before + 1


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


def test_retry_after_holds_every_new_request_of_the_model():
    clock = Clock()
    w = AdaptiveConcurrency(4, 8, clock=clock)
    first, second = w.acquire(), w.acquire()
    w.release(first, "pushback", retry_after=2.5)
    assert w.wait_s() == pytest.approx(2.5)  # room in the window, but the vendor asked to wait
    clock.now += 2.0
    assert w.wait_s() == pytest.approx(0.5)
    clock.now += 0.5
    assert w.wait_s() == 0.0
    w.release(second, "pushback", retry_after=1.0)
    assert w.wait_s() == pytest.approx(1.0)


def test_after_a_retry_after_starts_are_spaced_by_it_until_an_answer():
    clock = Clock()
    w = AdaptiveConcurrency(8, 8, clock=clock)
    earlier = w.acquire()
    clock.now += 0.1
    w.release(w.acquire(), "pushback", retry_after=0.5)
    clock.now += 0.5
    w.release(earlier)  # sent before the pushback: its answer says nothing of the vendor now
    assert w.wait_s() == 0.0 and w.spacing_s == 0.5
    held = [w.acquire()]  # the held requests start one per retry-after, not all at once
    assert w.wait_s() == pytest.approx(0.5)
    clock.now += 0.5
    held.append(w.acquire())
    assert w.wait_s() == pytest.approx(0.5)
    clock.now += 0.2
    w.release(held[0])  # answered: the vendor keeps up again
    assert w.wait_s() == pytest.approx(0.3)  # the start already spaced keeps its wait
    clock.now += 0.3
    w.acquire()
    assert w.wait_s() == 0.0


def test_a_full_window_waits_for_a_release():
    w = AdaptiveConcurrency(2, 2, clock=Clock())
    a, _ = w.acquire(), w.acquire()
    assert w.wait_s() is None
    w.release(a)
    assert w.wait_s() == 0.0


def test_start_must_lie_within_the_ceiling():
    with pytest.raises(ValueError, match="max_concurrency"):
        AdaptiveConcurrency(8, 4)
