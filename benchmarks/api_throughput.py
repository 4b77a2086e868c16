"""API trials per second against a rate-limited vendor: the adaptive in-flight window beside a
fixed 4, in one process.

A stub vendor on 127.0.0.1 (the tests' fake vendor server, OpenAI's wire format) answers each
request after ``--latency`` seconds and admits ``--rate`` requests per second (a token bucket of
``--burst``, by default a round trip's worth: rate x latency); a request over the rate gets
OpenAI's 429 ``rate_limit_exceeded`` with ``retry-after-ms`` saying when the next one is
admitted. Each side sends ``--trials`` trials through
``APIModel.generate_many`` and prints its trials/s beside its bound, min(rate, in-flight /
latency), where in-flight is the most requests the side may keep open (``max_concurrency``). The
goal: 90% of the bound, no failed trial. ``--csv`` appends the rows (date and machine in each).

    .venv/bin/python benchmarks/api_throughput.py [--trials 600] [--csv benchmarks/results/api_throughput.csv]
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from PIL import Image  # noqa: E402

from harness.models.api import APIModel  # noqa: E402
from harness.models.base import ModelSpec  # noqa: E402
from overhead import machine  # noqa: E402 - the CPU, cores and OS a row was measured on
from tests.fake_vendor_server import FakeVendorServer  # noqa: E402

GOAL = 0.9
RESULT_COLUMNS = ("date", "machine", "side", "concurrency", "max_concurrency", "latency_s", "rate_per_s",
                  "burst", "trials", "seconds", "trials_per_s", "bound_per_s", "of_bound", "failed",
                  "pushbacks")


class RateLimitedVendor(FakeVendorServer):
    """The fake vendor behind a token bucket: ``rate`` requests per second, ``burst`` at once."""

    def __init__(self, rate: float, burst: float, latency_s: float):
        super().__init__(delay_s=latency_s)
        self.rate, self.burst = rate, burst
        self.tokens, self.filled = burst, time.monotonic()
        self.pushbacks = 0
        self._bucket = threading.Lock()

    def _admit(self) -> float:
        """0 if the request is admitted, else the seconds until the next one would be."""
        with self._bucket:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.filled) * self.rate)
            self.filled = now
            if self.tokens >= 1:
                self.tokens -= 1
                return 0.0
            self.pushbacks += 1
            return (1 - self.tokens) / self.rate

    def _respond(self, h, action) -> None:
        wait = self._admit()
        if not wait:
            return super()._respond(h, action)
        h.rfile.read(int(h.headers.get("content-length") or 0))
        self._send(h, 429, {"error": {"message": "Rate limit reached for requests", "type": "requests",
                                      "param": None, "code": "rate_limit_exceeded"}},
                   {"retry-after-ms": str(max(1, round(wait * 1000)))})


@dataclass
class Side:
    name: str
    concurrency: int
    max_concurrency: int


def run_side(side: Side, args: argparse.Namespace) -> dict:
    with RateLimitedVendor(args.rate, args.burst, args.latency) as vendor:
        model = APIModel(ModelSpec(id=side.name, source="api", name="openai/gpt-4o", options={
            "base_url": vendor.url + "/v1", "concurrency": side.concurrency,
            "max_concurrency": side.max_concurrency}))
        image = Image.new("RGB", (64, 48), (200, 30, 30))
        t0 = time.perf_counter()
        gens = model.generate_many([image] * args.trials, ["Which one is the odd one out?"] * args.trials,
                                   {"max_new_tokens": 40, "temperature": 0.0})
        seconds = time.perf_counter() - t0
        pushbacks = vendor.pushbacks
    bound = min(args.rate, side.max_concurrency / args.latency)
    rate = args.trials / seconds
    return {"date": datetime.now().isoformat(timespec="minutes"), "machine": machine(), "side": side.name,
            "concurrency": side.concurrency, "max_concurrency": side.max_concurrency,
            "latency_s": args.latency, "rate_per_s": args.rate, "burst": args.burst, "trials": args.trials,
            "seconds": round(seconds, 2), "trials_per_s": round(rate, 2), "bound_per_s": round(bound, 2),
            "of_bound": round(rate / bound, 3), "failed": sum(g.error is not None for g in gens),
            "pushbacks": pushbacks}


def table(rows: list[dict]) -> str:
    lines = [f"{'side':<10} {'in flight':>9} {'trials/s':>9} {'bound':>7} {'of bound':>8} {'failed':>6} "
             f"{'429s':>5}"]
    for r in rows:
        span = f"{r['concurrency']}-{r['max_concurrency']}" if r["concurrency"] != r["max_concurrency"] \
            else str(r["concurrency"])
        lines.append(f"{r['side']:<10} {span:>9} {r['trials_per_s']:>9.1f} {r['bound_per_s']:>7.1f} "
                     f"{r['of_bound']:>8.0%} {r['failed']:>6} {r['pushbacks']:>5}")
    return "\n".join(lines)


def verdict(row: dict) -> str:
    ok = row["of_bound"] >= GOAL and row["failed"] == 0
    return f"{row['side']}: {'meets' if ok else 'misses'} the goal ({GOAL:.0%} of the bound, no failed trial)"


def write_results(path: Path, rows: list[dict]) -> None:
    """Append the rows (``RESULT_COLUMNS``), the header if the file is new."""
    new = not path.exists() or path.stat().st_size == 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(RESULT_COLUMNS)
        for r in rows:
            out.writerow([r[c] for c in RESULT_COLUMNS])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=600)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds the stub takes per answer")
    ap.add_argument("--rate", type=float, default=50.0, help="requests per second the stub admits")
    ap.add_argument("--burst", type=float, default=None,
                    help="requests the stub admits at once (default: a round trip's worth, rate x latency)")
    ap.add_argument("--max-concurrency", type=int, default=32, help="the adaptive side's ceiling")
    ap.add_argument("--csv", type=Path, default=None, help="append the rows to this file")
    args = ap.parse_args(argv)
    args.burst = args.burst or args.rate * args.latency
    os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark-stub")  # the stub takes any key
    logging.getLogger("harness.models.api").setLevel(logging.ERROR)  # each 429's retry line: counted instead
    rows = [run_side(s, args) for s in (Side("adaptive", 4, args.max_concurrency), Side("fixed-4", 4, 4))]
    print(f"stub vendor: {args.latency:g} s per answer, {args.rate:g} requests/s (burst {args.burst:g}); "
          f"{args.trials} trials per side")
    print(table(rows))
    print(verdict(rows[0]))
    if args.csv:
        write_results(args.csv, rows)
        print(f"appended to {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
