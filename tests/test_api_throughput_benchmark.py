"""benchmarks/api_throughput.py's own arithmetic: the stub's rate limit, the bound a side is read
against and the goal's verdict. Its timings are the benchmark's business, never a test's."""

import argparse

from benchmarks.api_throughput import GOAL, RateLimitedVendor, Side, run_side, verdict


def test_the_stub_admits_a_burst_then_says_when_the_next_request_is_admitted():
    with RateLimitedVendor(rate=10.0, burst=3, latency_s=0.0) as vendor:
        assert [vendor._admit() for _ in range(3)] == [0.0, 0.0, 0.0]
        wait = vendor._admit()
        assert 0 < wait <= 0.1 and vendor.pushbacks == 1  # one token comes back every 1/rate s


def test_a_side_is_read_against_min_of_rate_and_in_flight_over_latency(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-benchmark-stub")
    args = argparse.Namespace(trials=12, latency=0.01, rate=1000.0, burst=10.0)
    row = run_side(Side("fixed-2", 2, 2), args)
    assert row["bound_per_s"] == min(1000.0, 2 / 0.01) and row["failed"] == 0 and row["trials"] == 12
    assert row["of_bound"] == round(row["trials_per_s"] / row["bound_per_s"], 3)
    assert "meets" in verdict({**row, "of_bound": GOAL}) and "misses" in verdict({**row, "of_bound": 0.5})
    assert "misses" in verdict({**row, "of_bound": 1.0, "failed": 1})
