"""GRAPE charts per second per core: the batch renderer vs a plain PIL ImageDraw renderer.

Both draw the same charts (the same layout operations; tests/test_bars_stimuli.py checks that
their pixels are identical). One process, numpy/BLAS limited to one thread, timings of the
fastest of ``--reps`` runs after a warm-up (glyph caches filled), so the numbers are per core.

    .venv/bin/python benchmarks/bars_render.py [--n 2000] [--reps 3] [--types 1 2 3 4 5]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from harness.sources import Sources  # noqa: E402
from harness.stimuli.bars import colours, grape, pil_reference, render  # noqa: E402

TARGET = 1000  # charts / s / core


def _best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="charts per timed batch (fast renderer)")
    ap.add_argument("--n-pil", type=int, default=300, help="charts per timed run of the PIL renderer")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--types", type=int, nargs="+", default=list(grape.CHART_TYPES))
    default_mirror = Path(__file__).resolve().parents[2] / "shared" / "sources"
    ap.add_argument("--mirror", default=os.environ.get("GESTALT_MIRROR", default_mirror))
    args = ap.parse_args()
    pools = colours.load_pools(Sources(mirror=args.mirror))
    print(f"{'type':>4} {'fast charts/s/core':>19} {'PIL charts/s/core':>18} {'ratio':>6}")
    worst = float("inf")
    for t in sorted(args.types):
        charts = grape.sample_grape(t, args.n, np.random.default_rng(t), pools, "train")
        render.render(charts)  # warm-up: glyph and layer caches
        for i in range(20):
            pil_reference.draw_grape(charts, i)
        fast = args.n / _best(lambda charts=charts: render.render(charts), args.reps)
        pil = args.n_pil / _best(lambda charts=charts: [pil_reference.draw_grape(charts, i) for i in range(args.n_pil)],
                                 args.reps)
        worst = min(worst, fast)
        print(f"{t:>4} {fast:>19,.0f} {pil:>18,.0f} {fast / pil:>6.1f}")
    print(f"slowest type: {worst:,.0f} charts/s/core (target >= {TARGET:,}): "
          f"{'met' if worst >= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
