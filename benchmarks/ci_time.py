"""How long the checks take: `.ci/run` from a fresh clone, as CI runs it, timed and profiled.

Clones the repository's committed HEAD into a new folder beside ``../shared`` (where the tests
find the source data), runs ``bash .ci/run`` there and appends one row to ``--csv``: the date,
the machine, the whole run's seconds, pytest's own seconds and the tests run, passed and failed
(from pytest's last line). pytest prints its slowest tests (``--durations`` in pyproject.toml);
they are written to ``--durations-csv`` (replaced each run: the profile of the latest run), the
list docs/design.md's "Checks" reads what takes the time from. The clone is removed afterwards
unless ``--keep``; the whole log is kept only with ``--log FILE``.

Usage: ``.venv/bin/python benchmarks/ci_time.py [--csv benchmarks/results/ci.csv]
[--durations-csv benchmarks/results/ci_durations.csv] [--log FILE] [--keep]`` on an otherwise
idle machine: the run takes as long as CI does.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.overhead import machine  # noqa: E402

COLUMNS = ("date", "machine", "ci_s", "pytest_s", "tests_run", "passed", "failed", "ci_status")
DURATION_COLUMNS = ("rank", "seconds", "phase", "test")
# pytest's last line, "1530 passed, 2 skipped, 3 failed in 2387.12s (0:39:47)" under -q and
# framed by "=" signs otherwise
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+(?:, \d+ \w+)*) in (?P<seconds>[\d.]+)s\b")
COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")
# a line of "slowest N durations": "226.51s setup    tests/test_rehearsal.py::test_full"
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>setup|call|teardown)\s+(?P<test>\S.*)$")


def pytest_summary(log: str) -> tuple[float, dict[str, int]]:
    """pytest's seconds and its counts by outcome, from the last summary line of the log."""
    for line in reversed(log.splitlines()):
        m = SUMMARY.match(line.strip())
        if m:
            counts: dict[str, int] = {}
            for n, what in COUNT.findall(m["counts"]):
                key = "errors" if what.startswith("error") else what
                counts[key] = counts.get(key, 0) + int(n)
            return float(m["seconds"]), counts
    raise ValueError("the log holds no pytest summary line (did pytest start?)")


def slowest(log: str) -> list[tuple[float, str, str]]:
    """The (seconds, phase, test) lines of pytest's durations report, slowest first."""
    rows = [(float(m["seconds"]), m["phase"], m["test"].strip())
            for m in (DURATION.match(line.strip()) for line in log.splitlines()) if m]
    return sorted(rows, key=lambda r: -r[0])


def row(log: str, ci_seconds: float, status: int, *, date: str, where: str) -> list[object]:
    seconds, counts = pytest_summary(log)
    failed = counts.get("failed", 0) + counts.get("errors", 0)
    run = counts.get("passed", 0) + failed + counts.get("xfailed", 0) + counts.get("xpassed", 0)
    return [date, where, f"{ci_seconds:.0f}", f"{seconds:.0f}", run, counts.get("passed", 0), failed, status]


def append_csv(path: Path, columns: tuple[str, ...], rows: list[list[object]], *, replace: bool = False) -> None:
    new = replace or not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w" if replace else "a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(columns)
        out.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=REPO / "benchmarks/results/ci.csv")
    ap.add_argument("--durations-csv", type=Path, default=REPO / "benchmarks/results/ci_durations.csv")
    ap.add_argument("--log", type=Path, help="keep the whole .ci/run log here")
    ap.add_argument("--keep", action="store_true", help="keep the fresh clone")
    args = ap.parse_args(argv)

    clone = REPO.parent / f"ci-fresh-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%S}"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    start = time.perf_counter()
    done = subprocess.run(["bash", ".ci/run"], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")
    ci_seconds = time.perf_counter() - start
    if args.log:
        args.log.write_text(done.stdout)
    if not args.keep:
        shutil.rmtree(clone, ignore_errors=True)
    append_csv(args.csv, COLUMNS, [row(done.stdout, ci_seconds, done.returncode, date=date, where=machine())])
    append_csv(args.durations_csv, DURATION_COLUMNS,
               [[i, f"{s:.1f}", phase, test] for i, (s, phase, test) in enumerate(slowest(done.stdout), 1)],
               replace=True)
    print(f".ci/run: {ci_seconds:.0f} s in all, exit {done.returncode}; rows in {args.csv} and {args.durations_csv}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
