"""Nothing to do costs nothing: a recipe's first run vs its rerun vs its dry run, side by side.

Each is a fresh ``gestalt recipe`` process (imports included, as a user runs it) on one output
folder, MLflow store and memo (``$GESTALT_CACHE``) under a temporary folder: first run (every
trial computed, MLflow runs, figures, the experiment's summary run), no-op rerun (every trial
cached: ``up to date``, the summary run's fingerprint unchanged: nothing drawn), dry run (the
plan with cached / pending trials per model and task). Prints the three wall times side by side
with the no-op rerun's and dry run's ratio to the first run, each with the range of its --reruns
runs as its interval, and whether the no-op rerun answers within a second: yes or no where that
range lies wholly on one side, undecided where it straddles it. With ``--csv FILE`` it appends
them, with the date and the machine, to FILE.

Usage: ``GESTALT_MIRROR=../shared/sources .venv/bin/python benchmarks/rerun.py [recipes/quick.yaml]
[--keep DIR] [--reruns 5] [--csv benchmarks/results/rerun.csv]`` (the rerun and dry-run times are
the medians of --reruns runs).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.overhead import machine  # noqa: E402

COLUMNS = ("date", "machine", "recipe", "reruns", "first_s", "noop_rerun_s", "noop_rerun_low_s",
           "noop_rerun_high_s", "noop_over_first", "noop_over_first_low", "noop_over_first_high", "noop_under_1s",
           "dry_run_s", "dry_run_low_s", "dry_run_high_s", "dry_over_first")
TARGET_S = 1.0  # a rerun with nothing to do answers within a second


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    elapsed = time.perf_counter() - t0
    if res.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return elapsed, res.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "quick.yaml"))
    ap.add_argument("--keep", help="work folder to use and keep (default: a temporary one)")
    ap.add_argument("--reruns", type=int, default=5)
    ap.add_argument("--csv", type=Path, help="append the result to this CSV file")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="gestalt-rerun-"))
    work.mkdir(parents=True, exist_ok=True)
    recipe = yaml.safe_load(Path(args.recipe).read_text())
    recipe["output_dir"] = str(work / "out")
    recipe.setdefault("runtime", {})["progress"] = False
    path = work / Path(args.recipe).name
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO), GESTALT_CACHE=str(work / "memo"),
               MLFLOW_TRACKING_URI=f"sqlite:///{work}/mlflow.db")
    cmd = [sys.executable, "-m", "harness.cli", "recipe", str(path)]

    first, _ = timed(cmd, env)
    reruns, dries, out, plan = [], [], "", ""
    for _ in range(max(1, args.reruns)):
        t, out = timed(cmd, env)
        reruns.append(t)
        t, plan = timed([*cmd, "--dry-run"], env)
        dries.append(t)
    rerun, dry = statistics.median(reruns), statistics.median(dries)
    assert "0 new trials, 0 model calls" in out, out[-2000:]
    print("\n".join(line for line in plan.splitlines() if "trials cached" in line))
    print(f"recipe {Path(args.recipe).name} (work folder {work})")
    print(f"{'':12}{'seconds':>8}  {'/ first run':>11}  runs")
    print(f"{'first run':12}{first:8.2f}  {1:11.3f}")
    print(f"{'no-op rerun':12}{rerun:8.2f}  {rerun / first:11.3f}  {reruns_fmt(reruns)}")
    print(f"{'dry run':12}{dry:8.2f}  {dry / first:11.3f}  {reruns_fmt(dries)}")
    under = within(reruns, TARGET_S)
    print(f"no-op rerun within {TARGET_S:g} s: {under} (range {min(reruns):.2f}-{max(reruns):.2f} s)")
    if args.csv:
        new = not args.csv.exists()
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("a", newline="") as f:
            out = csv.writer(f)
            if new:
                out.writerow(COLUMNS)
            out.writerow([datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), machine(),
                          Path(args.recipe).name, len(reruns), f"{first:.2f}", f"{rerun:.3f}",
                          f"{min(reruns):.3f}", f"{max(reruns):.3f}", f"{rerun / first:.4f}",
                          f"{min(reruns) / first:.4f}", f"{max(reruns) / first:.4f}", under,
                          f"{dry:.3f}", f"{min(dries):.3f}", f"{max(dries):.3f}", f"{dry / first:.4f}"])


def within(times: list[float], limit: float) -> str:
    """'yes' / 'no' where every run lies below / above ``limit``, else 'undecided'."""
    return "yes" if max(times) < limit else "no" if min(times) > limit else "undecided"


def reruns_fmt(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


if __name__ == "__main__":
    main()
