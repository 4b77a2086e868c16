"""API trials per second against rate-limited vendors: the adaptive in-flight window, in one
process, in three cases of a vendor's limit.

A stub vendor on 127.0.0.1 (the tests' fake vendor server, OpenAI's wire format) answers each
request after the case's latency and limits it one of three ways:

- ``rate``: ``--rate`` requests per second (a token bucket of ``--burst``, by default a round
  trip's worth: rate x latency); a request over it gets OpenAI's 429 ``rate_limit_exceeded`` with
  ``retry-after-ms``. The adaptive window (4 growing to ``--max-concurrency``) runs beside a fixed 4.
- ``concurrent``: 5 requests at once, 0.3 s each, a 429 with ``Retry-After: 1`` beyond (120 trials).
- ``rpm-headers``: ``--rpm`` requests a minute (a bucket of ``--rpm-burst``), with OpenAI's
  ``x-ratelimit-limit-requests``, ``-remaining-requests`` and ``-reset-requests`` on every
  response, 429s included.

Each side sends its trials, one distinct prompt each, through ``APIModel.generate_many`` and
prints its trials/s beside its bound: min(rate, in-flight / latency), where in-flight is the most
requests the side may keep open (the vendor's 5 in ``concurrent``). The goal: 90% of the bound, no
failed trial, no call lost (a trial the vendor never answered) or repeated (answered twice).
``--csv`` appends the rows (date and machine in each).

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
from collections import Counter
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
RESULT_COLUMNS = ("date", "machine", "case", "side", "concurrency", "max_concurrency", "latency_s", "limit",
                  "trials", "seconds", "trials_per_s", "bound_per_s", "of_bound", "failed", "lost", "repeated",
                  "pushbacks", "final_window")
RATE_LIMITED = {"error": {"message": "Rate limit reached for requests", "type": "requests", "param": None,
                          "code": "rate_limit_exceeded"}}


class RateLimitedVendor(FakeVendorServer):
    """The fake vendor behind a token bucket: ``rate`` requests per second, ``burst`` at once; with
    ``headers``, every response says what is left as OpenAI's ``x-ratelimit-*-requests`` do."""

    def __init__(self, rate: float, burst: float, latency_s: float, headers: bool = False):
        super().__init__(delay_s=latency_s, answer=lambda p: (p or "").split()[-1])
        self.rate, self.burst, self.headers = rate, burst, headers
        self.tokens, self.filled = burst, time.monotonic()
        self.pushbacks = 0
        self._bucket = threading.Lock()

    def _admit(self) -> float:
        """0 if the request is admitted, else the seconds until the next one would be."""
        return self._admit_counted()[0]

    def _admit_counted(self) -> tuple[float, dict[str, str]]:
        """``_admit``'s answer, and the rate-limit headers of the bucket as it left it."""
        with self._bucket:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.filled) * self.rate)
            self.filled = now
            wait = 0.0
            if self.tokens >= 1:
                self.tokens -= 1
            else:
                self.pushbacks += 1
                wait = (1 - self.tokens) / self.rate
            headers = {"x-ratelimit-limit-requests": str(round(self.burst)),
                       "x-ratelimit-remaining-requests": str(int(self.tokens)),
                       "x-ratelimit-reset-requests":
                           f"{max(1, round((self.burst - self.tokens) / self.rate * 1000))}ms"}
            return wait, headers if self.headers else {}

    def _respond(self, h, action) -> None:
        wait, h.rate_headers = self._admit_counted()
        if not wait:
            return super()._respond(h, action)
        h.rfile.read(int(h.headers.get("content-length") or 0))
        self._send(h, 429, RATE_LIMITED, {"retry-after-ms": str(max(1, round(wait * 1000)))})

    def _send_raw(self, h, code: int, data: bytes, headers: dict | None = None) -> None:
        super()._send_raw(h, code, data, {**getattr(h, "rate_headers", {}), **(headers or {})})


class ConcurrencyLimitedVendor(FakeVendorServer):
    """The fake vendor serving ``limit`` requests at once; one more gets a 429 with ``Retry-After``."""

    def __init__(self, limit: int, latency_s: float, retry_after_s: float = 1.0):
        super().__init__(delay_s=latency_s, answer=lambda p: (p or "").split()[-1])
        self.limit, self.retry_after_s = limit, retry_after_s
        self.serving = self.pushbacks = 0
        self._serving_lock = threading.Lock()

    def _respond(self, h, action) -> None:
        with self._serving_lock:
            h.serving = self.serving < self.limit
            self.serving += h.serving
            self.pushbacks += not h.serving
        try:
            if h.serving:
                return super()._respond(h, action)
            h.rfile.read(int(h.headers.get("content-length") or 0))
            self._send(h, 429, RATE_LIMITED, {"retry-after": f"{self.retry_after_s:g}"})
        finally:
            self._leave(h)

    def _leave(self, h) -> None:
        """A served request frees its place once, before its answer is written (the client may send
        its next request the moment it reads the answer)."""
        with self._serving_lock:
            if getattr(h, "serving", False):
                h.serving = False
                self.serving -= 1

    def _send_raw(self, h, code: int, data: bytes, headers: dict | None = None) -> None:
        self._leave(h)
        super()._send_raw(h, code, data, headers)


@dataclass
class Side:
    name: str
    concurrency: int
    max_concurrency: int


@dataclass
class Case:
    name: str
    limit: str  # the vendor's limit, in words
    latency_s: float
    trials: int
    bound_per_s: float  # with the side's in-flight ceiling taken into account by run_side
    make: object  # () -> the stub vendor


def run_side(side: Side, args: argparse.Namespace, case: Case | None = None) -> dict:
    case = case or rate_case(args)
    with case.make() as vendor:  # type: ignore[operator]
        model = APIModel(ModelSpec(id=side.name, source="api", name="openai/gpt-4o", options={
            "base_url": vendor.url + "/v1", "concurrency": side.concurrency,
            "max_concurrency": side.max_concurrency}))
        image = Image.new("RGB", (64, 48), (200, 30, 30))
        prompts = [f"Which one is the odd one out? {i}" for i in range(case.trials)]
        t0 = time.perf_counter()
        gens = model.generate_many([image] * case.trials, prompts, {"max_new_tokens": 40, "temperature": 0.0})
        seconds = time.perf_counter() - t0
        served = Counter(r.prompt for r in vendor.requests)  # the requests the vendor answered
        pushbacks = vendor.pushbacks
        window = model._window.limit
    # Rounded before the ratio, so that a reader who divides the row's two rates gets its of_bound.
    bound = round(min(case.bound_per_s, side.max_concurrency / case.latency_s), 2)
    rate = round(case.trials / seconds, 2)
    return {"date": datetime.now().isoformat(timespec="minutes"), "machine": machine(), "case": case.name,
            "side": side.name, "concurrency": side.concurrency, "max_concurrency": side.max_concurrency,
            "latency_s": case.latency_s, "limit": case.limit, "trials": case.trials,
            "seconds": round(seconds, 2), "trials_per_s": rate, "bound_per_s": bound,
            "of_bound": round(rate / bound, 3),
            "failed": sum(g.error is not None or g.text != p.split()[-1] for g, p in zip(gens, prompts)),
            "lost": sum(p not in served for p in prompts), "repeated": sum(n - 1 for n in served.values()),
            "pushbacks": pushbacks, "final_window": window}


def rate_case(args: argparse.Namespace) -> Case:
    return Case("rate", f"{args.rate:g} requests/s, burst {args.burst:g}", args.latency, args.trials, args.rate,
                lambda: RateLimitedVendor(args.rate, args.burst, args.latency))


def concurrent_case(args: argparse.Namespace) -> Case:
    return Case("concurrent", "5 at once, Retry-After: 1", 0.3, args.concurrent_trials, 5 / 0.3,
                lambda: ConcurrencyLimitedVendor(5, 0.3, retry_after_s=1.0))


def rpm_case(args: argparse.Namespace) -> Case:
    rate = args.rpm / 60
    return Case("rpm-headers", f"{args.rpm:g} requests/min, burst {args.rpm_burst:g}, x-ratelimit headers",
                args.latency, args.rpm_trials, rate, lambda: RateLimitedVendor(rate, args.rpm_burst, args.latency,
                                                                               headers=True))


def table(rows: list[dict]) -> str:
    lines = [f"{'case':<12} {'side':<10} {'in flight':>9} {'trials/s':>9} {'bound':>7} {'of bound':>8} "
             f"{'failed':>6} {'lost':>4} {'twice':>5} {'429s':>5} {'window':>6}"]
    for r in rows:
        span = f"{r['concurrency']}-{r['max_concurrency']}" if r["concurrency"] != r["max_concurrency"] \
            else str(r["concurrency"])
        lines.append(f"{r['case']:<12} {r['side']:<10} {span:>9} {r['trials_per_s']:>9.1f} {r['bound_per_s']:>7.1f} "
                     f"{r['of_bound']:>8.0%} {r['failed']:>6} {r['lost']:>4} {r['repeated']:>5} {r['pushbacks']:>5} "
                     f"{r['final_window']:>6}")
    return "\n".join(lines)


def verdict(row: dict) -> str:
    ok = row["of_bound"] >= GOAL and row["failed"] == 0 and not row.get("lost") and not row.get("repeated")
    return (f"{row.get('case', 'rate')} {row['side']}: {'meets' if ok else 'misses'} the goal ({GOAL:.0%} of the "
            f"bound, no failed, lost or repeated trial)")


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
    ap.add_argument("--trials", type=int, default=600, help="trials of the rate case, per side")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds the stub takes per answer (rate cases)")
    ap.add_argument("--rate", type=float, default=50.0, help="requests per second the stub admits")
    ap.add_argument("--burst", type=float, default=None,
                    help="requests the stub admits at once (default: a round trip's worth, rate x latency)")
    ap.add_argument("--max-concurrency", type=int, default=32, help="the adaptive side's ceiling")
    ap.add_argument("--concurrent-trials", type=int, default=120, help="trials of the concurrent case")
    ap.add_argument("--rpm", type=float, default=1200.0, help="requests per minute of the rpm-headers case")
    ap.add_argument("--rpm-burst", type=float, default=10.0, help="requests it admits at once")
    ap.add_argument("--rpm-trials", type=int, default=300, help="trials of the rpm-headers case")
    ap.add_argument("--csv", type=Path, default=None, help="append the rows to this file")
    args = ap.parse_args(argv)
    args.burst = args.burst or args.rate * args.latency
    os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark-stub")  # the stub takes any key
    logging.getLogger("harness.models.api").setLevel(logging.ERROR)  # each 429's retry line: counted instead
    adaptive = Side("adaptive", 4, args.max_concurrency)
    rows = [run_side(adaptive, args, rate_case(args)), run_side(Side("fixed-4", 4, 4), args, rate_case(args)),
            run_side(adaptive, args, concurrent_case(args)), run_side(adaptive, args, rpm_case(args))]
    print(table(rows))
    for row in rows:
        if row["side"] == "adaptive":
            print(verdict(row))
    if args.csv:
        write_results(args.csv, rows)
        print(f"appended to {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
