"""The bar-chart recipe's headline scores over several training seeds, with the machine they came from.

A CPU training is bit-reproducible only on one machine's float kernels: another CPU (another
vector unit, another BLAS path) rounds differently and training amplifies the difference, so a
reader's rerun of ``recipes/bars-quick.yaml`` lands somewhere in the spread over seeds rather than
on the value of one run. This trains the recipe's network once per seed (``models.0.options.seed``;
the charts stay the recipe's), scores it as the recipe does, and writes one row per seed and
score to ``benchmarks/results/bars_seeds.csv`` with the machine, date and versions; docs/methods.md
shows what ``python benchmarks/bars_seeds.py --table`` prints from that file (the spread, then
seed 0's headline scores)
(tests/test_bars_seeds.py checks it). With ``--authors-test DIR`` the network is also scored on a
test set rendered by GRAPE's own generator (``rendered_by.grape-authors.*``).

    HF_HUB_OFFLINE=1 GESTALT_MIRROR=../shared/sources PYTHONPATH=$PWD nice .venv/bin/python \\
        benchmarks/bars_seeds.py --seeds 0 1 2 --authors-test ../shared/sources/grape/authors-test-type1-dev
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "bars_seeds.csv"
RECIPE = "recipes/bars-quick.yaml"
TASK = "ratio.chart.grape_type1"
SCORES = ("mlae", "mlae_midmean", "rendered_by.grape-authors.mlae", "rendered_by.grape-authors.mlae_gap")
COLUMNS = ("recipe", "seed", "score", "value", "ci_low", "ci_high", "floor", "ceiling", "n", "nulls", "train_s",
           "machine", "cpu_flags", "date", "python", "torch", "numpy", "render_version")


def machine() -> tuple[str, str]:
    """The CPU's model name and the vector extensions that decide which float kernels run."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx512f", "avx512_bf16", "avx2", "fma", "avx", "sse4_2")
    return f"{model}, {os.cpu_count()} cores", " ".join(f for f in wanted if f in flags)


def one_seed(seed: int, authors_test: str | None, checkpoints: str) -> tuple[list[dict], float]:
    from harness.recipes import load_recipe
    from harness.run import run_recipe

    overrides = {"models.0.options.seed": seed, "tracking.enabled": False, "runtime.progress": False,
                 "output_dir": tempfile.mkdtemp(prefix="bars-seeds-"),
                 f"task_options.{TASK}.readout.checkpoint_dir": checkpoints}
    if authors_test:
        overrides[f"task_options.{TASK}.authors_test"] = str(Path(authors_test).resolve())
    recipe = load_recipe(REPO / RECIPE, overrides)
    start = time.perf_counter()
    (result,) = run_recipe(recipe, echo=lambda line: None)
    took = time.perf_counter() - start
    return [s.to_dict() for s in result.scores[TASK]], took


def rows_for(seed: int, scores: list[dict], took: float) -> list[dict]:
    import numpy
    import torch

    from harness.stimuli.bars.layout import RENDER_VERSION

    model, flags = machine()
    meta = {"recipe": RECIPE, "seed": seed, "train_s": round(took), "machine": model, "cpu_flags": flags,
            "date": datetime.date.today().isoformat(), "python": platform.python_version(),
            "torch": torch.__version__, "numpy": numpy.__version__, "render_version": RENDER_VERSION}
    def cell(x):
        return "" if x is None or x != x else f"{x:.4f}"

    return [{**meta, "score": s["name"], "value": cell(s["value"]), "ci_low": cell(s["ci_low"]),
             "ci_high": cell(s["ci_high"]), "floor": cell(s["floor"]), "ceiling": cell(s["ceiling"]),
             "n": s["n"], "nulls": s["nulls"]} for s in scores]


def read(path: Path = RESULTS) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def table(rows: list[dict]) -> str:
    """Markdown: one line per score, each seed's value and the range over seeds, then the machine."""
    import statistics

    seeds = sorted({int(r["seed"]) for r in rows})
    head = ["| score | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | min-max |",
            "| --- |" + " --- |" * (len(seeds) + 2)]
    lines = []
    for score in SCORES:
        got = {int(r["seed"]): r for r in rows if r["score"] == score}
        if not got:
            continue
        if set(got) != set(seeds):
            raise ValueError(f"{RESULTS.name}: {score} lacks seeds {sorted(set(seeds) - set(got))}")
        values = [float(got[s]["value"]) for s in seeds]
        cells = [f"{float(got[s]['value']):.3f} [{float(got[s]['ci_low']):.3f}, {float(got[s]['ci_high']):.3f}]"
                 for s in seeds]
        lines.append(f"| `{score}` | " + " | ".join(cells)
                     + f" | {statistics.fmean(values):.3f} | {min(values):.3f} to {max(values):.3f} |")
    where = sorted({(r["machine"], r["cpu_flags"], r["torch"], r["date"]) for r in rows})
    notes = [f"Measured on {m} ({f}), torch {t}, {d}." for m, f, t, d in where]
    return "\n".join(head + lines) + "\n\n" + " ".join(notes) + "\n"


HEADLINE = ("mlae", "mlae_minus_human", "mlae_midmean", "mlae_haehn", "gradcam_iou")
OOD = ("bar_width.5", "dot_position.2", "stroke_width.0", "stroke_lightness.25.0", "bar_length.1-10",
       "background_lightness.-25.0", "title_position.0.05", "title_font_size.14")


def headline(rows: list[dict], seed: int = 0) -> str:
    """One seed's headline scores as ``gestalt recipe`` prints them, then a few OOD deltas."""
    got = {r["score"]: r for r in rows if int(r["seed"]) == seed}

    def cell(x: str) -> str:
        return f"{float(x):.3f}" if x else "-"

    out = [f"{'model':<13}{'task':<25}{'score':<26}{'value [95% CI]':<25}{'floor':<7}{'ceiling':<9}nulls"]
    for name in HEADLINE:
        r = got[name]
        value = f"{cell(r['value'])} [{cell(r['ci_low'])}, {cell(r['ci_high'])}]"
        out.append(f"{'colnet-bars':<13}{TASK:<25}{name:<26}{value:<25}{cell(r['floor']):<7}{cell(r['ceiling']):<9}"
                   f"{r['nulls']}/{int(r['n']) + int(r['nulls'])}")
    out.append("")
    deltas = []
    for level in OOD:
        r = got[f"ood.{level}.delta_mlae"]
        value, lo, hi = (float(r[k]) for k in ("value", "ci_low", "ci_high"))
        deltas.append(f"{'ood.' + level:<33}{value:.2f} [{lo:.2f}, {hi:.2f}]")
    out += [f"{a:<54}{b}".rstrip() for a, b in zip(deltas[::2], deltas[1::2])]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--authors-test", help="a GRAPE test set rendered by the authors' generator")
    ap.add_argument("--checkpoints", default=str(Path(tempfile.gettempdir()) / "bars-seeds-checkpoints"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--table", action="store_true", help="print the markdown table of --out and stop")
    args = ap.parse_args(argv)
    if args.table:
        sys.stdout.write(table(read(args.out)) + "\n```\n" + headline(read(args.out)) + "```\n")
        return
    kept = [r for r in read(args.out) if int(r["seed"]) not in args.seeds] if args.out.exists() else []
    for seed in args.seeds:
        scores, took = one_seed(seed, args.authors_test, args.checkpoints)
        kept += rows_for(seed, scores, took)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as f:  # after every seed: a stopped run keeps what it measured
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(sorted(kept, key=lambda r: (int(r["seed"]), r["score"])))
        print(f"seed {seed}: {took:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
