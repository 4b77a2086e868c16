"""Where a CPU run should save its figures: the Gestalt battery run by gestalt with each task's
figures saved to PNG in a background thread beside the model (at the lowest CPU priority) against
saved in the main thread, alternating in one process, pair by pair.

On a CPU whose cores torch's threads hold, a thread beside them does not save for free: it takes
a core from the model's OpenMP team, and while it holds the interpreter's lock at nice 19 the
main thread can wait for it to be scheduled. ``harness.tracking.mlflow_run.BatteryRun._save_figure``
uses the background thread only where that runs beside the model (``prepares_beside``: a GPU,
or torch with a core free); this measures the choice. Each pair's two runs are next to each
other in time and their order swaps each rep; the ratios are main thread over background, for
the run's wall time and for the seconds inside the model's calls.

Usage: ``.venv/bin/python benchmarks/figures_beside.py [--reps 6] [--model efficientnet-lite2]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead  # noqa: E402 - the overhead benchmark's runs, recipe and model-call timing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--model", default="efficientnet-lite2", choices=sorted(overhead.ENCODERS))
    ap.add_argument("--mirror", default=os.environ.get("GESTALT_MIRROR", str(overhead.REPO.parent / "shared/sources")))
    args = ap.parse_args()
    os.environ.setdefault("GESTALT_CACHE", tempfile.mkdtemp(prefix="gestalt-figures-cache-"))
    from harness.models.device import keep_cpu_heap

    import harness.tracking.mlflow_run

    keep_cpu_heap()
    overhead.MODEL_CALLS.install()
    scratch = Path(tempfile.mkdtemp(prefix="gestalt-figures-"))
    battery = argparse.Namespace(model=args.model, batch_size=40, things_triplets=120, runs=["gestalt"],
                                 mirror=args.mirror, cnn_scale=1.0, bare_cnn_deterministic=True)
    [run] = overhead.runs(battery, scratch)
    store, mirror = scratch / "store", Path(args.mirror)
    store.mkdir()

    def gestalt(where: str) -> tuple[float, float]:
        harness.tracking.mlflow_run.prepares_beside = lambda device: where == "background"
        (wall, _), calls, _ = overhead.MODEL_CALLS.measured(overhead.gestalt, run, mirror, store)
        return wall, sum(calls.values())

    sides = ("background", "main thread")
    for where in sides:  # warm-up
        gestalt(where)
    runs: dict[str, list[tuple[float, float]]] = {where: [] for where in sides}
    for rep in range(args.reps):
        for where in sides if rep % 2 == 0 else sides[::-1]:
            runs[where].append(gestalt(where))
            wall, model = runs[where][-1]
            print(f"rep {rep} {where:<12} wall {wall:6.2f} s, model calls {model:6.2f} s", flush=True)
    for k, what in ((0, "wall"), (1, "model calls")):
        pairs = [m[k] / b[k] for b, m in zip(runs["background"], runs["main thread"])]
        lo, hi, coverage = overhead.median_interval(pairs)
        print(f"{what}: main thread / background, pair by pair {', '.join(f'{p:.3f}' for p in pairs)}; "
              f"median {statistics.median(pairs):.3f}, {coverage:.1%} interval [{lo:.3f}, {hi:.3f}]")


if __name__ == "__main__":
    main()
