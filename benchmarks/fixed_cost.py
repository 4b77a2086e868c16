"""Two parts of a run's fixed cost, side by side with what they replaced.

- Figures: saving the silhouettes' per-run figures to PNG as a run saves them (what the last
  task of a battery waits for): the confusion matrix and the accuracy-kappa plot as the harness
  lays them out (by hand, ``reports.style.set_margins``) against the same figures under
  matplotlib's constrained layout, which draws a figure once more at every save; and both
  figures saved by the background thread alone against a run's end, where the waiting thread
  saves what the background one has not started (one compresses a PNG, which releases the
  interpreter's lock, while the other draws); the PNG at the run's zlib level against
  matplotlib's default; and where the time goes before the PNG: making both figures (a run's
  "figures" phase) and drawing the confusion matrix with and without its texts.
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
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def silhouette_figures(mirror: Path) -> tuple[Any, Any, list[dict], list, dict[str, Any]]:
    """(task, stimulus set, records, scores, figures) of a silhouettes run whose respondent gives
    the modal human answer: the figures' content as a good model's."""
    from harness.reports.battery import battery_figures
    from harness.scores.tasks import Bootstrap, get_family
    from harness.sources import Sources
    from harness.stimuli.registry import get_task

    task = get_task("closure.nat.silhouette")
    stimset = task.build(Sources(mirror=mirror))
    records = [{"parse_status": "ok", "ground_truth": s.ground_truth, "response": s.human_target,
                "stimulus_id": s.stimulus_id, "correct": s.human_target == s.ground_truth, "rep": 0}
               for s in stimset.test]
    scores = get_family(task.scoring).score(records, stimset, Bootstrap(n_boot=200, n_boot_kappa=200))
    return task, stimset, records, scores, battery_figures(task.task_id, records, scores, stimset, "modal-human")


def figures(mirror: Path, reps: int) -> None:
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    import matplotlib.text

    from harness.reports import figures as F
    from harness.reports.battery import battery_figures
    from harness.tracking.mlflow_run import PNG_COMPRESSION, _savefig, finish_saving

    task, stimset, records, scores, figs = silhouette_figures(mirror)
    confusion = figs[f"{task.task_id}.confusion.png"]
    kappa = figs[f"{task.task_id}.accuracy_vs_kappa.png"]
    folder = Path(tempfile.mkdtemp(prefix="gestalt-fixed-cost-"))

    def save(fig, name: str = "a.png") -> Callable[[], object]:
        return lambda: _savefig(fig, folder / name)  # as a run saves its figures

    def relaid(fig):  # the same figure under a layout engine, as these figures were drawn before
        fig.set_layout_engine("constrained")
        return fig

    rows = [("confusion matrix", confusion, relaid(F.confusion_figure(records, stimset, "modal-human"))),
            ("accuracy vs kappa", kappa, relaid(F.score_figures(task.task_id, scores, "modal-human", stimset)[
                f"{task.task_id}.accuracy_vs_kappa.png"]))]
    for name, by_hand, engine in rows:
        t_hand, t_engine = fastest(save(by_hand), reps), fastest(save(engine, "c.png"), reps)
        kib = (folder / "a.png").stat().st_size / 1024
        print(f"{name + ', as a run saves it':<42}{t_hand:6.3f} s  {kib:.0f} KiB (by hand, zlib level "
              f"{PNG_COMPRESSION})")
        print(f"{'  under constrained layout':<42}{t_engine:6.3f} s  ({t_engine / t_hand:.2f}x)")
        t_default = fastest(lambda fig=by_hand: fig.savefig(folder / "b.png"), reps)
        kib = (folder / "b.png").stat().st_size / 1024
        print(f"{'  at the default zlib level 6':<42}{t_default:6.3f} s  {kib:.0f} KiB")

    # what a figure costs before its PNG: making it (the run's "figures" phase) and drawing it,
    # most of which is matplotlib laying out and rendering its texts (tick labels, titles)
    made = fastest(lambda: F.close(battery_figures(task.task_id, records, scores, stimset, "modal-human")), reps)
    print(f"{'both figures made (the figures phase)':<42}{made:6.3f} s")
    textless = F.confusion_figure(records, stimset, "modal-human")
    for text in textless.findobj(matplotlib.text.Text):
        text.set_visible(False)
    drawn, plain = fastest(confusion.canvas.draw, reps), fastest(textless.canvas.draw, reps)
    print(f"{'confusion matrix drawn, no PNG':<42}{drawn:6.3f} s")
    print(f"{'  with its texts hidden':<42}{plain:6.3f} s  (texts: {1 - plain / drawn:.0%} of the draw)")

    def both(finish: bool) -> Callable[[], object]:
        def run() -> None:  # what the last task of a run waits for
            with ThreadPoolExecutor(max_workers=1) as pool:
                pending = [(fig, folder / f"{i}.png", pool.submit(save(fig, f"{i}.png")))
                           for i, fig in enumerate((confusion, kappa))]
                if finish:  # as a run ends: this thread saves what the background one has not started
                    finish_saving(pending)
                else:
                    for _, _, job in pending:
                        job.result()
        return run

    one, two = fastest(both(False), reps), fastest(both(True), reps)
    print(f"{'both saved by the background thread':<42}{one:6.3f} s")
    print(f"{'  and by the waiting thread (a run)':<42}{two:6.3f} s  ({one / two:.2f}x faster)")
    F.close({**figs, "textless": textless, **{f"relaid{i}": engine for i, (_, _, engine) in enumerate(rows)}})
    shutil.rmtree(folder, ignore_errors=True)


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
