"""Is there CPU to spare beside the model? The silhouettes' forward passes (EfficientNet-Lite2, as
in ``overhead.py``) alone, then followed by their run's two figures saved to PNG in line (what a
CPU run does), and with the same PNGs saved at the same time by a second process at the lowest
priority instead: ``SCHED_IDLE`` (Linux: the scheduler runs it only on a core nothing else
wants, and preempts it the moment torch's threads wake) and nice 19.

A thread beside the model competes with it for the interpreter's lock (``figures_beside.py``); a
process does not, so this asks the machine alone: does torch leave a core idle long enough for
the figures, or does anything run beside its OpenMP team slow the team down by more than it
takes? Each rep times the forward passes plus whatever the condition adds until the figures are
on disk (pickling them for the process included); the conditions' order is reversed each rep, and
each process condition is compared to saving in line rep by rep (its pair's ratio). It also
prints how much of the cores the forward passes use alone (CPU seconds over threads x wall).

Usage: ``.venv/bin/python benchmarks/spare_cpu.py [--reps 8]`` (reads ``$GESTALT_MIRROR``, default
``../shared/sources``).
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fixed_cost  # noqa: E402 - the silhouettes' figures as a run makes them
import overhead  # noqa: E402 - the encoder, its images and the order-statistic interval

POLICIES = ("SCHED_IDLE", "nice 19")


def saver(conn: Any, policy: str) -> None:
    """The second process: at ``policy``'s priority, save each batch of pickled figures it is sent
    and answer when they are on disk."""
    if policy == "SCHED_IDLE":
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.nice(19)
    import harness.reports.figures  # noqa: F401 - as in a run's process: Agg, and the figures' dpi
    from harness.tracking.mlflow_run import _savefig

    conn.send("ready")
    while (batch := conn.recv()) is not None:
        for blob, path in batch:
            _savefig(pickle.loads(blob), Path(path))
        conn.send("saved")


def main() -> None:
    import multiprocessing

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--mirror", default=os.environ.get("GESTALT_MIRROR", str(overhead.REPO.parent / "shared/sources")))
    args = ap.parse_args()

    import torch

    from harness.models.device import keep_cpu_heap
    from harness.tracking.mlflow_run import _savefig

    keep_cpu_heap()  # as both sides of overhead.py run
    _, stimset, _, _, figs = fixed_cost.silhouette_figures(Path(args.mirror))
    arch, weights = overhead.ENCODERS["efficientnet-lite2"]
    model, transform = overhead._timm_model({"name": arch, "weights": weights})
    batches = [torch.stack([transform(get().convert("RGB")) for get in batch])
               for batch in overhead.whole_images(stimset, 40)]
    folder = Path(tempfile.mkdtemp(prefix="gestalt-spare-cpu-"))

    policies = [p for p in POLICIES if p != "SCHED_IDLE" or hasattr(os, "SCHED_IDLE")]
    context = multiprocessing.get_context("spawn")  # a fresh interpreter, not a fork of torch's
    savers = {}
    for policy in policies:
        ours, theirs = context.Pipe()
        context.Process(target=saver, args=(theirs, policy), daemon=True).start()
        if ours.recv() != "ready":
            raise RuntimeError(f"the {policy} process did not start")
        savers[policy] = ours

    use: list[float] = []  # the forward passes' share of the threads' time, rep by rep alone

    def forward() -> float:
        cpu = time.process_time()
        with torch.inference_mode():
            for x in batches:
                model.forward_head(model.forward_features(x), pre_logits=True)
        return time.process_time() - cpu

    def rep(condition: str) -> float:
        t0 = time.perf_counter()
        if condition in savers:
            savers[condition].send([(pickle.dumps(fig), str(folder / f"{i}.png"))
                                    for i, fig in enumerate(figs.values())])
        cpu = forward()
        if condition == "in line":
            for i, fig in enumerate(figs.values()):
                _savefig(fig, folder / f"{i}.png")
        elif condition in savers and savers[condition].recv() != "saved":
            raise RuntimeError(f"the {condition} process did not save")
        wall = time.perf_counter() - t0
        if condition == "alone":
            use.append(cpu / (torch.get_num_threads() * wall))
        return wall

    conditions = ("alone", "in line", *policies)
    for condition in conditions:  # warm-up: the first forward passes and each process's first figures
        rep(condition)
    use.clear()
    walls: dict[str, list[float]] = {c: [] for c in conditions}
    for r in range(args.reps):
        for condition in conditions if r % 2 == 0 else conditions[::-1]:
            walls[condition].append(rep(condition))
        print(f"rep {r}: " + ", ".join(f"{c} {w[-1]:.2f} s" for c, w in walls.items()), flush=True)
    for ours in savers.values():
        ours.send(None)

    print(f"\nforward passes alone use {statistics.median(use):.1%} of {torch.get_num_threads()} "
          f"threads' time (median rep)")
    for condition, w in walls.items():
        print(f"{condition:<28}fastest {min(w):6.2f} s  median {statistics.median(w):6.2f} s")
    for condition in ("alone", *policies):
        pairs = [c / line for c, line in zip(walls[condition], walls["in line"])]
        lo, hi, coverage = overhead.median_interval(pairs)
        print(f"{condition} / in line, median pair {statistics.median(pairs):.3f}, "
              f"{coverage:.1%} interval [{lo:.3f}, {hi:.3f}]")


if __name__ == "__main__":
    main()
