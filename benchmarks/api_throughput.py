"""API answers per second in a real battery: ``gestalt recipe`` runs the mark-colour odd-one-out
task (120 trials, an API model at its defaults: 4 requests in flight growing to 32, batch_size 32)
against a stub vendor on 127.0.0.1 (the tests' fake vendor server) that limits it one way per case:

- ``concurrent``: 5 requests at once, 0.3 s each, a 429 with ``Retry-After: 1`` beyond, in
  OpenAI's, Anthropic's and Gemini's wire formats;
- ``concurrent-no-retry-after``: the same, its 429 without ``Retry-After`` (the client's own backoff);
- ``lognormal``: 5 at once, latencies drawn from a lognormal (mean ``--latency`` 0.3 s, sigma 0.5),
  ``Retry-After: 1``;
- ``rpm-headers``: ``--rpm`` requests a minute (a bucket of ``--rpm-burst``), 0.2 s each, with the
  vendor's rate-limit headers on every response, 429s included: OpenAI's
  ``x-ratelimit-{limit,remaining,reset}-requests``, Anthropic's
  ``anthropic-ratelimit-requests-{limit,remaining,reset}`` (an RFC 3339 time);
- ``rate``: ``--rate`` requests a second (a bucket of a round trip's worth), 0.2 s each, a 429 with
  ``retry-after-ms`` beyond.

The vendor measures: answers/s is the answers it gave over the seconds from the battery's first
request to its last answer; each answer's latency is its time from admission to reply, and the
bound is what the vendor could have answered in those seconds: in flight / the latencies' mean,
in flight being the vendor's 5 at once or else the model's ceiling (32), and where it limits a
rate, no more than its bucket admits (its burst, then its rate until a latency before the end).
Each case runs ``--repeats`` batteries; a row gives the mean ratio to the bound with its 95% t
interval over the repeats and the verdict against the goal (90% of the bound, no failed trial,
none lost or bought twice): ``meets`` where the interval lies wholly at or over the goal,
``misses`` wholly under it (or a trial failed, lost or bought twice), ``undecided`` across it.
``--csv`` appends the rows (date and machine in each).

    .venv/bin/python benchmarks/api_throughput.py [--repeats 5] [--csv benchmarks/results/api_throughput.csv]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import logging
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from harness.cli import main as gestalt  # noqa: E402
from overhead import machine  # noqa: E402 - the CPU, cores and OS a row was measured on
from tests.fake_vendor_server import FakeVendorServer  # noqa: E402

GOAL = 0.9
TASK = "similarity.chart.mark_color"
TRIALS = 120  # the task's
KEY_ENV = "GESTALT_BENCHMARK_KEY"
KEY = "sk-benchmark-stub"
MAX_CONCURRENCY = 32  # the model's ceiling at its defaults (harness.models.api_transport.MAX_CONCURRENCY)
# the recipe's model per wire format: name, and the base URL's path under the stub's address
MODELS = {"openai": ("openai/gpt-4o-2024-08-06", "/v1"), "anthropic": ("anthropic/claude-sonnet-4-5", ""),
          "google": ("google/gemini-2.0-flash", "")}
RESULT_COLUMNS = ("date", "machine", "case", "vendor", "limit", "trials", "repeats", "answers_per_s",
                  "bound_per_s", "of_bound", "of_bound_lo", "of_bound_hi", "verdict", "failed", "lost",
                  "repeated", "pushbacks")
RATE_LIMITED = {"error": {"message": "Rate limit reached for requests", "type": "requests", "param": None,
                          "code": "rate_limit_exceeded"}}
# Student's t at 97.5% by degrees of freedom: a 95% interval for the mean of a few repeats
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


class StubVendor(FakeVendorServer):
    """The fake vendor answering each request it admits after ``latency()`` seconds, and timing
    what it serves: ``served`` (each answer's seconds from admission to reply), ``first`` (the
    first request's arrival) and ``last`` (the last reply). ``refuse`` decides admission."""

    def __init__(self, latency: Callable[[], float]):
        super().__init__(key=KEY, answer=lambda p: "2")
        self.latency = latency
        self.served: list[float] = []
        self.first: float | None = None
        self.last: float | None = None
        self.pushbacks = 0

    def refuse(self, h) -> dict[str, str] | None:
        """None where the request is admitted, else the headers of its 429."""
        return None

    def _respond(self, h, action) -> None:
        arrived = time.monotonic()
        with self._lock:
            self.first = arrived if self.first is None else self.first
        refused = self.refuse(h)
        if refused is not None:
            with self._lock:
                self.pushbacks += 1
            h.rfile.read(int(h.headers.get("content-length") or 0))
            return self._send(h, 429, RATE_LIMITED, refused)
        time.sleep(self.latency())
        super()._respond(h, action)
        with self._lock:
            self.last = time.monotonic()
            self.served.append(self.last - arrived)


class RateLimitedVendor(StubVendor):
    """A token bucket: ``rate`` requests per second, ``burst`` at once; with ``headers``
    (``openai`` or ``anthropic``) every response says what is left in that vendor's headers."""

    def __init__(self, rate: float, burst: float, latency: Callable[[], float], headers: str | None = None):
        super().__init__(latency)
        self.rate, self.burst, self.headers = rate, burst, headers
        self.tokens, self.filled = burst, time.monotonic()
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
                wait = (1 - self.tokens) / self.rate
            full_in = max(0.001, (self.burst - self.tokens) / self.rate)
            if self.headers == "anthropic":
                reset = datetime.now(UTC) + timedelta(seconds=full_in)
                headers = {"anthropic-ratelimit-requests-limit": str(round(self.burst)),
                           "anthropic-ratelimit-requests-remaining": str(int(self.tokens)),
                           "anthropic-ratelimit-requests-reset": reset.isoformat(timespec="milliseconds")}
            else:
                headers = {"x-ratelimit-limit-requests": str(round(self.burst)),
                           "x-ratelimit-remaining-requests": str(int(self.tokens)),
                           "x-ratelimit-reset-requests": f"{max(1, round(full_in * 1000))}ms"}
            return wait, headers if self.headers else {}

    def refuse(self, h) -> dict[str, str] | None:
        wait, h.rate_headers = self._admit_counted()
        return {"retry-after-ms": str(max(1, round(wait * 1000)))} if wait else None

    def _send_raw(self, h, code: int, data: bytes, headers: dict | None = None) -> None:
        super()._send_raw(h, code, data, {**getattr(h, "rate_headers", {}), **(headers or {})})


class ConcurrencyLimitedVendor(StubVendor):
    """Serves ``limit`` requests at once; one more gets a 429, with ``Retry-After`` where one is given."""

    def __init__(self, limit: int, latency: Callable[[], float], retry_after_s: float | None = 1.0):
        super().__init__(latency)
        self.limit, self.retry_after_s = limit, retry_after_s
        self.serving = 0
        self._serving_lock = threading.Lock()

    def refuse(self, h) -> dict[str, str] | None:
        with self._serving_lock:
            h.serving = self.serving < self.limit
            self.serving += h.serving
        if h.serving:
            return None
        return {} if self.retry_after_s is None else {"retry-after": f"{self.retry_after_s:g}"}

    def _respond(self, h, action) -> None:
        try:
            super()._respond(h, action)
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


def fixed(seconds: float) -> Callable[[], float]:
    return lambda: seconds


def lognormal(mean_s: float, sigma: float, seed: int) -> Callable[[], float]:
    """Latencies whose mean is ``mean_s``: exp(N(mu, sigma)) with mu = ln(mean) - sigma^2 / 2."""
    rng, lock = random.Random(seed), threading.Lock()
    mu = math.log(mean_s) - sigma ** 2 / 2

    def draw() -> float:
        with lock:
            return rng.lognormvariate(mu, sigma)
    return draw


@dataclass
class Case:
    name: str
    vendor: str  # the wire format: a key of MODELS
    limit: str  # the vendor's limit, in words
    make: Callable[[int], StubVendor]  # repeat -> the stub vendor
    rate: float = math.inf  # the vendor's requests per second
    burst: float = 0.0  # the requests it admits at once on top (a full bucket at the start)
    at_once: int = MAX_CONCURRENCY  # the most requests in flight: the vendor's, else the model's


def cases(args: argparse.Namespace) -> list[Case]:
    lat = args.latency
    five = [Case("concurrent", vendor, f"5 at once, {lat:g} s, Retry-After: 1",
                 lambda _: ConcurrencyLimitedVendor(5, fixed(lat)), at_once=5)
            for vendor in MODELS]
    rpm = args.rpm / 60
    return [*five,
            Case("concurrent-no-retry-after", "openai", f"5 at once, {lat:g} s, 429 without Retry-After",
                 lambda _: ConcurrencyLimitedVendor(5, fixed(lat), retry_after_s=None), at_once=5),
            Case("lognormal", "openai", f"5 at once, lognormal mean {lat:g} s sigma 0.5, Retry-After: 1",
                 lambda rep: ConcurrencyLimitedVendor(5, lognormal(lat, 0.5, seed=rep)), at_once=5),
            *(Case("rpm-headers", vendor, f"{args.rpm:g} requests/min, burst {args.rpm_burst:g}, 0.2 s, "
                   f"{vendor}'s rate-limit headers",
                   lambda _, v=vendor: RateLimitedVendor(rpm, args.rpm_burst, fixed(0.2), headers=v),
                   rate=rpm, burst=args.rpm_burst)
              for vendor in ("openai", "anthropic")),
            Case("rate", "openai", f"{args.rate:g} requests/s, burst {args.rate * 0.2:g}, 0.2 s, retry-after-ms",
                 lambda _: RateLimitedVendor(args.rate, args.rate * 0.2, fixed(0.2)), rate=args.rate,
                 burst=args.rate * 0.2)]


def recipe(folder: Path, case: Case, url: str, mirror: Path) -> Path:
    """The battery: the task answered by one API model at its defaults, nothing tracked."""
    name, base = MODELS[case.vendor]
    path = folder / "api-throughput.yaml"
    path.write_text(yaml.safe_dump({
        "name": "api-throughput", "tasks": [TASK],
        "models": [{"id": "stub", "source": "api", "name": name, "family": "api",
                    "options": {"base_url": url + base, "api_key_env": KEY_ENV}}],
        "bootstrap": {"n_boot": 200, "n_boot_kappa": 200}, "runtime": {"progress": False, "device": "cpu"},
        "data": {"mirror": str(mirror)}, "tracking": {"enabled": False}, "output_dir": str(folder / "out")},
        sort_keys=False))
    return path


def run_battery(case: Case, repeat: int, mirror: Path) -> dict:
    """One battery of ``case`` through ``gestalt recipe`` (in this process): what the vendor
    measured and what the records hold."""
    with tempfile.TemporaryDirectory(prefix="gestalt-api-throughput-") as tmp, case.make(repeat) as vendor:
        folder = Path(tmp)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                gestalt(["recipe", str(recipe(folder, case, vendor.url, mirror))])
            except SystemExit as e:
                if e.code:
                    raise RuntimeError(f"{case.name} {case.vendor}: gestalt recipe exited {e.code}: "
                                       f"{err.getvalue()[-2000:]}") from None
        lines = (folder / "out" / "stub" / "records" / f"{TASK}.jsonl").read_text().splitlines()
        statuses = [json.loads(line)["parse_status"] for line in lines]
        trials = len(statuses)
        seconds = (vendor.last or 0.0) - (vendor.first or 0.0)
        answers, served, pushbacks = len(vendor.served), list(vendor.served), vendor.pushbacks
    rate = answers / seconds
    bound = bound_per_s(case, seconds, statistics.fmean(served))
    return {"trials": trials, "answers_per_s": rate, "bound_per_s": bound, "of_bound": rate / bound,
            "failed": sum(s != "ok" for s in statuses), "repeated": answers - trials, "pushbacks": pushbacks}


def bound_per_s(case: Case, seconds: float, latency_s: float) -> float:
    """The answers a second the vendor could have given over ``seconds`` at a mean latency of
    ``latency_s``: as many in flight as it serves, and where it limits a rate, what its bucket
    admits (its burst, then its rate) until a latency before the end."""
    bucket = (case.burst + case.rate * (seconds - latency_s)) / seconds if math.isfinite(case.rate) else math.inf
    return min(case.at_once / latency_s, bucket)


def interval(ratios: list[float]) -> tuple[float, float]:
    """The 95% t interval of the ratios' mean (unbounded where one repeat says nothing of the noise)."""
    if len(ratios) < 2:
        return -math.inf, math.inf
    mean = statistics.fmean(ratios)
    half = T975.get(len(ratios) - 1, 1.96) * statistics.stdev(ratios) / math.sqrt(len(ratios))
    return mean - half, mean + half


def verdict(row: dict) -> str:
    if row["failed"] or row["lost"] or row["repeated"] or row["of_bound_hi"] < GOAL:
        return "misses"
    return "meets" if row["of_bound_lo"] >= GOAL else "undecided"


def summary(case: Case, runs: list[dict]) -> dict:
    """The case's row over its repeats: means, the ratio's interval, the verdict."""
    ratios = [r["of_bound"] for r in runs]
    lo, hi = interval(ratios)
    row = {"date": datetime.now().isoformat(timespec="minutes"), "machine": machine(), "case": case.name,
           "vendor": case.vendor, "limit": case.limit, "trials": TRIALS, "repeats": len(runs),
           "answers_per_s": round(statistics.fmean(r["answers_per_s"] for r in runs), 2),
           "bound_per_s": round(statistics.fmean(r["bound_per_s"] for r in runs), 2),
           "of_bound": round(statistics.fmean(ratios), 3), "of_bound_lo": round(lo, 3), "of_bound_hi": round(hi, 3),
           "failed": sum(r["failed"] for r in runs), "lost": sum(TRIALS - r["trials"] for r in runs),
           "repeated": sum(r["repeated"] for r in runs), "pushbacks": sum(r["pushbacks"] for r in runs)}
    return {**row, "verdict": verdict(row)}


def table(rows: list[dict]) -> str:
    lines = [f"{'case':<26} {'vendor':<9} {'answers/s':>9} {'bound':>6} {'of bound [95%]':>20} {'verdict':<9} "
             f"{'failed':>6} {'lost':>4} {'twice':>5} {'429s':>5}"]
    for r in rows:
        span = f"{r['of_bound']:.0%} [{r['of_bound_lo']:.0%}, {r['of_bound_hi']:.0%}]"
        lines.append(f"{r['case']:<26} {r['vendor']:<9} {r['answers_per_s']:>9.2f} {r['bound_per_s']:>6.2f} "
                     f"{span:>20} {r['verdict']:<9} {r['failed']:>6} {r['lost']:>4} {r['repeated']:>5} "
                     f"{r['pushbacks']:>5}")
    return "\n".join(lines)


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
    ap.add_argument("--repeats", type=int, default=5, help="batteries per case")
    ap.add_argument("--latency", type=float, default=0.3, help="mean seconds per answer at 5 at once")
    ap.add_argument("--rpm", type=float, default=1200.0, help="requests per minute of the rpm-headers cases")
    ap.add_argument("--rpm-burst", type=float, default=10.0, help="requests they admit at once")
    ap.add_argument("--rate", type=float, default=50.0, help="requests per second of the rate case")
    ap.add_argument("--cases", default=None, help="comma-separated case names to run (default: all)")
    ap.add_argument("--mirror", type=Path,
                    default=Path(os.environ.get("GESTALT_MIRROR", REPO.parent / "shared" / "sources")))
    ap.add_argument("--csv", type=Path, default=None, help="append the rows to this file")
    args = ap.parse_args(argv)
    os.environ[KEY_ENV] = KEY  # the stub takes this key
    logging.getLogger("harness.models.api").setLevel(logging.ERROR)  # each 429's retry line: counted instead
    wanted = set(args.cases.split(",")) if args.cases else None
    rows = []
    for case in cases(args):
        if wanted is None or case.name in wanted:
            runs = [run_battery(case, rep, args.mirror) for rep in range(args.repeats)]
            rows.append(summary(case, runs))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    if args.csv:
        write_results(args.csv, rows)
        print(f"appended to {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
