"""Two parts of a run's fixed cost, side by side with what they replaced.

- Figures: saving the silhouettes' per-run figures to PNG (what the last task of a battery
  waits for), the confusion matrix as the harness lays it out (by hand, no layout engine)
  against the same figure under matplotlib's constrained layout, which lays the figure out again
  at every save; and the accuracy-kappa plot.
- The garbage collector: how many objects a process holds once torch, timm, transformers,
  MLflow and matplotlib are imported and a model is loaded, what one full cyclic collection over
  them costs, and what it costs with them frozen as a battery runs
  (``harness.models.device.long_lived_frozen``).

Each time is the fastest of ``--reps`` (timeit's rule: noise only adds time).

Usage: ``.venv/bin/python benchmarks/fixed_cost.py [--reps 5]`` (reads ``$GESTALT_MIRROR``, default
``../shared/sources``).
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def fastest(fn: Callable[[], object], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def figures(mirror: Path, reps: int) -> None:
    from harness.reports import figures as F
    from harness.scores.tasks import Bootstrap, get_family
    from harness.sources import Sources
    from harness.stimuli.registry import get_task

    task = get_task("closure.nat.silhouette")
    stimset = task.build(Sources(mirror=mirror))
    # a respondent giving the modal human answer: the figures' content as a good model's
    records = [{"parse_status": "ok", "ground_truth": s.ground_truth, "response": s.human_target,
                "stimulus_id": s.stimulus_id, "correct": s.human_target == s.ground_truth, "rep": 0}
               for s in stimset.test]
    scores = get_family(task.scoring).score(records, stimset, Bootstrap(n=200, n_kappa=200))
    figs = F.battery_figures(task.task_id, records, scores, stimset, "modal-human")

    def save(fig) -> Callable[[], object]:
        return lambda: fig.savefig(io.BytesIO())

    confusion = figs[f"{task.task_id}.confusion.png"]
    kappa = figs[f"{task.task_id}.accuracy_vs_kappa.png"]
    by_hand = fastest(save(confusion), reps)
    relaid = F.confusion_figure(records, stimset, "modal-human")
    relaid.set_layout_engine("constrained")
    engine = fastest(save(relaid), reps)
    plot = fastest(save(kappa), reps)
    print(f"confusion matrix, laid out by hand        {by_hand:6.3f} s")
    print(f"the same under constrained layout         {engine:6.3f} s  ({engine / by_hand:.2f}x)")
    print(f"accuracy vs kappa                         {plot:6.3f} s")
    print(f"the silhouettes' two per-run figures      {by_hand + plot:6.3f} s")
    F.close({**figs, "relaid": relaid})


def collector(reps: int) -> None:
    import matplotlib.pyplot  # noqa: F401
    import mlflow  # noqa: F401
    import timm
    import transformers  # noqa: F401

    from harness.models.device import long_lived_frozen

    model = timm.create_model("tf_efficientnet_lite2", pretrained=False)  # noqa: F841 - held
    gc.collect()
    print(f"objects the collector tracks              {len(gc.get_objects()):,}")
    full = fastest(gc.collect, reps)
    print(f"one full collection                       {full:6.3f} s")
    with long_lived_frozen(collect_after=False):
        frozen = fastest(gc.collect, reps)
    print(f"one full collection, long-lived frozen    {frozen * 1e6:6.0f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mirror", default=os.environ.get("GESTALT_MIRROR", str(REPO.parent / "shared/sources")))
    args = ap.parse_args()
    figures(Path(args.mirror), args.reps)
    collector(args.reps)


if __name__ == "__main__":
    main()
