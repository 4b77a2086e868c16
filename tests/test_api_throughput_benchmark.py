"""benchmarks/api_throughput.py's own arithmetic and behaviour: the stubs' limits, the bound a side
is read against, the goal's verdict, and that no case loses or repeats a call. Its timings are the
benchmark's business, never a test's."""

import argparse

from benchmarks.api_throughput import (GOAL, Case, ConcurrencyLimitedVendor, RateLimitedVendor, Side, run_side,
                                       verdict)

ARGS = argparse.Namespace(trials=12, latency=0.01, rate=1000.0, burst=10.0)


def test_the_stub_admits_a_burst_then_says_when_the_next_request_is_admitted():
    with RateLimitedVendor(rate=10.0, burst=3, latency_s=0.0) as vendor:
        assert [vendor._admit() for _ in range(3)] == [0.0, 0.0, 0.0]
        wait = vendor._admit()
        assert 0 < wait <= 0.1 and vendor.pushbacks == 1  # one token comes back every 1/rate s


def test_the_stub_with_headers_says_what_is_left_and_when_it_is_full_again():
    with RateLimitedVendor(rate=10.0, burst=3, latency_s=0.0, headers=True) as vendor:
        wait, headers = vendor._admit_counted()
        assert wait == 0.0 and headers["x-ratelimit-remaining-requests"] == "2"
        assert headers["x-ratelimit-limit-requests"] == "3" and headers["x-ratelimit-reset-requests"].endswith("ms")


def test_a_side_is_read_against_min_of_rate_and_in_flight_over_latency(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-benchmark-stub")
    row = run_side(Side("fixed-2", 2, 2), ARGS)
    assert row["bound_per_s"] == min(1000.0, 2 / 0.01) and row["failed"] == 0 and row["trials"] == 12
    assert row["of_bound"] == round(row["trials_per_s"] / row["bound_per_s"], 3)
    assert "meets" in verdict({**row, "of_bound": GOAL}) and "misses" in verdict({**row, "of_bound": 0.5})
    assert "misses" in verdict({**row, "of_bound": 1.0, "failed": 1})
    assert "misses" in verdict({**row, "of_bound": 1.0, "lost": 1})
    assert "misses" in verdict({**row, "of_bound": 1.0, "repeated": 1})


def test_a_vendor_serving_five_at_once_loses_no_call_and_keeps_the_window_at_five(monkeypatch):
    """The audit's case, shortened: 429 with Retry-After beyond 5 in flight. Every trial answered
    once, and after the pushbacks the window resumes at the 5 that worked, not at 1."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-benchmark-stub")
    case = Case("concurrent", "5 at once", 0.05, 60, 5 / 0.05,
                lambda: ConcurrencyLimitedVendor(5, 0.05, retry_after_s=0.2))
    row = run_side(Side("adaptive", 4, 32), ARGS, case)
    assert row["failed"] == row["lost"] == row["repeated"] == 0 and row["pushbacks"] > 0
    assert row["final_window"] >= 5


def test_a_requests_per_minute_limit_with_headers_loses_no_call(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-benchmark-stub")
    case = Case("rpm-headers", "6000/min", 0.02, 60, 100.0,
                lambda: RateLimitedVendor(100.0, 5.0, 0.02, headers=True))
    row = run_side(Side("adaptive", 4, 32), ARGS, case)
    assert row["failed"] == row["lost"] == row["repeated"] == 0
