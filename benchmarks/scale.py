"""A lab's roster in one experiment: what gestalt's bookkeeping costs as the batteries grow.

N cheap batteries (a `source: python` model that embeds each chart as its mean colour, under N
option values, on the mark-colour task) run into one experiment and one sqlite store, each step a
fresh ``gestalt`` process as a user runs it; a recipe holds at most 256 models, so the roster is
recipes of up to ``PER_RECIPE`` models, as a lab adds its models over many recipes, and a step
over the roster runs each of them in turn (its seconds are their sum):

- ``first``: the recipe's first run (N batteries: MLflow runs, records, intervals, figures, the
  summary run); ``per_battery`` is its wall time over N, all of it outside the model but the
  mean colours (timed in the model, ``model_s``);
- ``noop``: the same recipe again (every trial cached, nothing drawn);
- ``dry``: ``--dry-run`` of it;
- ``add_one``: a recipe of one new model into the experiment of N (its battery, and the summary
  brought up to date with the N before it);
- ``report``: ``gestalt report`` of the experiment;
- ``store``: the store's size on disk (mlflow.db and the artifacts), in MB;
- ``ui``: the MLflow UI's runs table in headless Chromium (``gestalt ui`` on the store), from
  opening the root address until the task's headline column shows (skipped without chromium).

Usage: ``.venv/bin/python benchmarks/scale.py [--n 10,100,1000] [--steps first,noop,...]
[--csv benchmarks/results/scale.csv]``, from the repository root beside ``../shared`` (or with
``GESTALT_MIRROR``) on an otherwise idle machine; each row names the machine, the date and the
1-minute load average at the step's start, since a busy machine makes every step slower.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.overhead import machine  # noqa: E402

STEPS = ("first", "noop", "dry", "add_one", "report", "store", "ui")
COLUMNS = ("date", "machine", "n", "step", "value", "unit", "per_battery", "load_1min", "exit", "goal", "meets")
# the goals at N = 1,000 on a 2-core machine, idle (docs/performance.md): (what is compared, limit)
GOALS = {"first": ("per_battery", 0.3), "noop": ("value", 2.0), "dry": ("value", 2.0), "report": ("value", 60.0),
         "ui": ("value", 10.0)}
GOAL_N = 1000
PER_RECIPE = 250  # a recipe holds at most 256 models
TASK = "similarity.chart.mark_color"
HEADLINE = "Mark_color.B"  # the task's headline column in the runs table
MIRROR = Path(os.environ.get("GESTALT_MIRROR", REPO.parent / "shared" / "sources"))
MODEL = '''\
"""A model that costs nothing: each image's mean colour, timed so the benchmark can subtract it."""
import time

import numpy as np

SPENT = __file__ + ".seconds"


class MeanColour:
    def __init__(self, k: int):
        self.k = k

    def embed(self, images):
        start = time.perf_counter()
        out = np.stack([np.asarray(im.convert("RGB"), np.float32).mean(axis=(0, 1)) for im in images])
        with open(SPENT, "a") as f:
            f.write(f"{time.perf_counter() - start}\\n")
        return out


def build(k: int = 0) -> MeanColour:
    return MeanColour(k)
'''


def recipe(folder: Path, name: str, ks: range) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "tasks": [TASK],
        "models": [{"id": f"mean-colour-{k}", "source": "python", "name": "mean_colour.py:build",
                    "options": {"k": k}} for k in ks],
        "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
        "tracking": {"experiment": "roster"}, "output_dir": str(folder / "out")}, sort_keys=False))
    return path


def gestalt(folder: Path, *args: str) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=folder, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"))
    seconds = time.perf_counter() - start
    if done.returncode:
        print(f"gestalt {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
    return seconds, done.returncode


def model_seconds(folder: Path) -> float:
    spent = folder / "mean_colour.py.seconds"
    return sum(float(s) for s in spent.read_text().split()) if spent.exists() else 0.0


def size_mb(folder: Path) -> float:
    files = [folder / "mlflow.db", *(p for p in (folder / "mlartifacts").rglob("*") if p.is_file())]
    return sum(p.stat().st_size for p in files if p.exists()) / 1e6


def ui_seconds(folder: Path) -> float | None:
    from tests.browser import Browser, chromium, ui

    if not chromium():
        return None
    with ui(folder, "--experiment", "roster") as url, Browser(width=1600, height=1000) as page:
        start = time.perf_counter()
        page.goto(url)
        page.wait_for(f"document.body.innerText.includes({HEADLINE!r})", "the headline column", timeout=600)
        return time.perf_counter() - start


def goal(step: str, n: int, measured: dict[str, float | None], rc: int) -> tuple[str, str]:
    """The step's goal in words and whether this row meets it: yes / no, or blank where the goal
    is not for this N (it is set at N = 1,000) or the step has none."""
    if step not in GOALS:
        return "", ""
    what, limit = GOALS[step]
    text = f"{what} <= {limit:g} s at N = {GOAL_N}"
    value = measured[what]
    if n != GOAL_N or value is None:
        return text, ""
    return text, "yes" if rc == 0 and value <= limit else "no"


def measure(n: int, steps: tuple[str, ...], write) -> None:
    with tempfile.TemporaryDirectory(prefix=f"gestalt-scale-{n}-") as tmp:
        folder = Path(tmp)
        (folder / "mean_colour.py").write_text(MODEL)
        roster = [recipe(folder, f"roster-{i // PER_RECIPE}", range(i, min(i + PER_RECIPE, n)))
                  for i in range(0, n, PER_RECIPE)]

        def over(recipes: list[Path], *flags: str) -> tuple[float, int]:
            """Each recipe in turn: the seconds of all, the worst exit status."""
            done = [gestalt(folder, "recipe", r.name, *flags) for r in recipes]
            return sum(s for s, _ in done), max(rc for _, rc in done)

        def row(step: str, value: float | None, unit: str, rc: int = 0, per: float | None = None) -> None:
            write([n, step, "" if value is None else f"{value:.3f}", unit, "" if per is None else f"{per:.4f}",
                   f"{os.getloadavg()[0]:.2f}", rc, *goal(step, n, {"value": value, "per_battery": per}, rc)])

        first, rc = over(roster)
        model = model_seconds(folder)
        row("first", first, "s", rc, (first - model) / n)
        row("model", model, "s")
        for step, recipes, flags in (("noop", roster, ()), ("dry", roster, ("--dry-run",)),
                                     ("add_one", [recipe(folder, "one-more", range(n, n + 1))], ())):
            if step in steps:
                seconds, rc = over(recipes, *flags)
                row(step, seconds, "s", rc)
        if "report" in steps:
            seconds, rc = gestalt(folder, "report", "--experiment", "roster")
            row("report", seconds, "s", rc, seconds / n)
        if "store" in steps:
            row("store", size_mb(folder), "MB", per=size_mb(folder) / n)
        if "ui" in steps:
            row("ui", ui_seconds(folder), "s")


def table(rows: list[dict[str, str]]) -> str:
    """The markdown table docs/performance.md shows: a line per N from that N's latest
    measurement, each step's value (per battery for the first run), the load it met and the
    machine and date."""
    latest: dict[str, dict[str, dict[str, str]]] = {}
    for r in rows:  # appended in time order, each measurement of an N starting with its first run
        if r["step"] == "first":
            latest[r["n"]] = {}
        latest.setdefault(r["n"], {})[r["step"]] = r

    def cell(steps: dict[str, dict[str, str]], step: str, field: str = "value") -> str:
        r = steps.get(step)
        if r is None or not r[field]:
            return "not measured"
        mark = {"yes": " (goal met)", "no": " (goal missed)"}.get(r["meets"], "")
        return f"{float(r[field]):.3g} {r['unit']}{mark}" + ("" if r["exit"] == "0" else f", exit {r['exit']}")

    head = ["N", "first run, per battery", "no-op rerun", "dry run", "one battery added", "report", "store",
            "runs table in the UI", "load (1 min)", "measured"]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    latest.setdefault(str(GOAL_N), {})  # the size the goals are set for shows, measured or not
    for n, steps in sorted(latest.items(), key=lambda kv: int(kv[0])):
        first = steps.get("first")
        lines.append("| " + " | ".join([
            n, cell(steps, "first", "per_battery"), cell(steps, "noop"), cell(steps, "dry"), cell(steps, "add_one"),
            cell(steps, "report"), cell(steps, "store"), cell(steps, "ui"), first["load_1min"] if first else "",
            f"{first['machine']}, {first['date'][:10]}" if first else ""]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="10,100,1000", help="comma-separated roster sizes")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"which of {','.join(STEPS)} (first always runs)")
    ap.add_argument("--csv", type=Path, default=REPO / "benchmarks/results/scale.csv")
    ap.add_argument("--table", action="store_true", help="print the markdown table of --csv and stop")
    args = ap.parse_args(argv)
    if args.table:
        with args.csv.open(newline="") as f:
            print(table(list(csv.DictReader(f))))
        return
    steps = tuple(s for s in args.steps.split(",") if s)
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        ap.error(f"--steps: unknown {', '.join(unknown)}; known: {', '.join(STEPS)}")
    new = not args.csv.exists()
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(COLUMNS)
        where, date = machine(), datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        def write(fields: list) -> None:
            out.writerow([date, where, *fields])
            f.flush()
            print(dict(zip(COLUMNS[2:], fields)), flush=True)

        for n in (int(x) for x in args.n.split(",")):
            measure(n, steps, write)


if __name__ == "__main__":
    main()
