"""benchmarks/api_throughput.py's own arithmetic and behaviour: the stubs' limits and headers, the
latencies it draws, the bound a battery is read against, the interval and verdict over repeats,
and that a battery through ``gestalt recipe`` loses and repeats no call. Its timings are the
benchmark's business, never a test's."""

import math
import statistics
from datetime import datetime

import pytest

from benchmarks.api_throughput import (GOAL, KEY, KEY_ENV, TRIALS, Case, ConcurrencyLimitedVendor, RateLimitedVendor,
                                       bound_per_s, fixed, interval, lognormal, run_battery, summary)
from tests.conftest import MIRROR


def test_the_stub_admits_a_burst_then_says_when_the_next_request_is_admitted():
    with RateLimitedVendor(rate=10.0, burst=3, latency=fixed(0.0)) as vendor:
        assert [vendor._admit() for _ in range(3)] == [0.0, 0.0, 0.0]
        wait = vendor._admit()
        assert 0 < wait <= 0.1  # one token comes back every 1/rate s


def test_the_stub_says_what_is_left_and_when_it_is_full_again_in_each_vendors_headers():
    with RateLimitedVendor(rate=10.0, burst=3, latency=fixed(0.0), headers="openai") as vendor:
        wait, headers = vendor._admit_counted()
        assert wait == 0.0 and headers["x-ratelimit-remaining-requests"] == "2"
        assert headers["x-ratelimit-limit-requests"] == "3" and headers["x-ratelimit-reset-requests"].endswith("ms")
    with RateLimitedVendor(rate=10.0, burst=3, latency=fixed(0.0), headers="anthropic") as vendor:
        before = datetime.now().astimezone()
        _, headers = vendor._admit_counted()
        assert headers["anthropic-ratelimit-requests-remaining"] == "2"
        reset = datetime.fromisoformat(headers["anthropic-ratelimit-requests-reset"])
        assert 0 < (reset - before).total_seconds() <= 0.2  # the bucket refills one in 1/rate s


def test_lognormal_latencies_have_the_mean_asked_for_and_repeat_with_the_seed():
    assert lognormal(0.3, 0.5, seed=1)() == lognormal(0.3, 0.5, seed=1)()
    draw = lognormal(0.3, 0.5, seed=2)
    sample = [draw() for _ in range(20000)]
    assert statistics.fmean(sample) == pytest.approx(0.3, rel=0.02) and statistics.stdev(sample) > 0.1


def test_the_bound_is_what_the_vendor_could_answer_in_the_batterys_seconds():
    five = Case("concurrent", "openai", "5 at once", lambda _: None, at_once=5)
    assert bound_per_s(five, seconds=8.0, latency_s=0.25) == 5 / 0.25
    bucket = Case("rpm-headers", "openai", "20/s, burst 10", lambda _: None, rate=20.0, burst=10.0)
    assert bound_per_s(bucket, seconds=6.0, latency_s=0.2) == pytest.approx((10 + 20 * 5.8) / 6)
    assert bound_per_s(bucket, seconds=600.0, latency_s=0.2) == pytest.approx(20.0, rel=0.01)  # the rate, long run
    assert bound_per_s(bucket, seconds=60.0, latency_s=10.0) == 32 / 10.0  # the model's ceiling in flight


def test_the_interval_and_verdict_over_repeats():
    assert interval([0.95]) == (-math.inf, math.inf)  # one repeat says nothing of the noise
    lo, hi = interval([0.9, 1.0])
    assert lo == pytest.approx(0.95 - 12.706 * statistics.stdev([0.9, 1.0]) / math.sqrt(2))
    assert hi == pytest.approx(1.9 - lo)
    case = Case("c", "openai", "5 at once", lambda _: None)
    run = {"trials": TRIALS, "answers_per_s": 9.5, "bound_per_s": 10.0, "of_bound": 0.95, "failed": 0,
           "repeated": 0, "pushbacks": 0}
    assert summary(case, [run, {**run, "of_bound": 0.96}, {**run, "of_bound": 0.97}])["verdict"] == "meets"
    assert summary(case, [run])["verdict"] == "undecided"
    assert summary(case, [run, {**run, "of_bound": 0.5}])["verdict"] == "undecided"
    assert summary(case, [{**run, "of_bound": b} for b in (0.5, 0.51, 0.52)])["verdict"] == "misses"
    assert summary(case, [run, {**run, "trials": TRIALS - 1}])["verdict"] == "misses"  # a trial lost
    assert summary(case, [run, {**run, "repeated": 1}])["verdict"] == "misses"
    assert summary(case, [run, {**run, "failed": 1}])["verdict"] == "misses"
    assert GOAL == 0.9


def test_a_battery_at_five_at_once_loses_and_repeats_no_call_and_is_read_against_the_measured_latency(
        monkeypatch):
    """The case the goal names, fast: 5 at once with 429s and Retry-After beyond, through
    ``gestalt recipe``; every trial answered once, the bound 5 over the latencies the vendor served."""
    monkeypatch.setenv("GESTALT_OFFLINE", "0")
    monkeypatch.setenv(KEY_ENV, KEY)
    stubs = []

    def make(_):
        stubs.append(ConcurrencyLimitedVendor(5, lognormal(0.02, 0.5, seed=0), retry_after_s=0.2))
        return stubs[-1]

    row = run_battery(Case("lognormal", "openai", "5 at once", make, at_once=5), 0, MIRROR)
    (vendor,) = stubs
    assert row["trials"] == TRIALS and row["failed"] == row["repeated"] == 0
    assert row["bound_per_s"] == pytest.approx(5 / statistics.fmean(vendor.served))
    assert row["of_bound"] == pytest.approx(row["answers_per_s"] / row["bound_per_s"])
    assert vendor.max_in_flight <= 5 + vendor.pushbacks  # beyond 5: only the requests pushed back
