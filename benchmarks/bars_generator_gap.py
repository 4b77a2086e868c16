"""Which feature of GRAPE's generator still moves a trained network: the gap, one feature at a time.

A trained colnet (``recipes/bars-quick.yaml``, the checkpoint of the first ``--seeds`` seed written
by ``benchmarks/bars_seeds.py``) is scored on a test set rendered by the authors' generator and on
charts that differ from it in one feature each:

- ``rerendered``: each authors' chart's parameters (bar heights, marked bars, background, fill
  and stroke colours) read off its pixels and drawn again by gestalt's renderer (its font and its
  word list): the same charts, gestalt's pixels. The paired gap authors - rerendered is what the
  rendering (glyphs, words, text placement, bar and gap geometry, anti-aliasing) still moves;
- ``rerendered + authors' <region>``: the rerendered chart with one region's pixels taken from
  the authors' chart (the title, the x tick labels, the x-axis title, the y tick labels, the
  y-axis title, the plot area): which region carries that gap;
- ``gestalt values`` / ``gestalt colours``: the rerendered chart with its bar heights and marks,
  or its colours, drawn by gestalt's sampler instead (paired with ``rerendered``): what the value
  distribution or the colour sampling moves;
- ``gestalt IID``: 1,000 IID test charts of gestalt's own sampler (unpaired): the whole gap, as
  ``rendered_by.grape-authors.mlae_gap`` reports it, measured on a draw of its own rather than the
  recipe's test split, so the two differ within their intervals.

The networks of the other seeds are scored on the two headline comparisons (authors against
rerendered, paired; authors against gestalt IID): one network's gap is not another's. It writes
one row per seed and comparison (MLAE difference with a 95% bootstrap interval, paired where the
charts are the same) to ``benchmarks/results/bars_generator_gap.csv``
(docs/grape-generator-audit.md shows them):

    HF_HUB_OFFLINE=1 GESTALT_MIRROR=../shared/sources PYTHONPATH=$PWD nice .venv/bin/python \\
        benchmarks/bars_generator_gap.py --authors-test ../shared/sources/grape/authors-test-type1-dev \\
        --checkpoints /tmp/bars-seeds-checkpoints --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image

from harness.scores.mlae import log_abs_error, paired_delta, unpaired_gap
from harness.sources import Sources
from harness.stimuli.bars import grape
from harness.stimuli.bars.authors import authors_test_stimuli, read_type1_charts
from harness.stimuli.bars.colours import load_pools
from harness.stimuli.bars.render import render_grape

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "bars_generator_gap.csv"
RECIPE = REPO / "recipes" / "bars-quick.yaml"
# regions of the 150 x 150 chart (rows, columns): text lives outside the plot area
REGIONS = {"title": (slice(0, 19), slice(31, 150)),
           "x tick labels": (slice(124, 134), slice(31, 150)),
           "x-axis title": (slice(134, 150), slice(31, 150)),
           "y tick labels": (slice(0, 150), slice(14, 31)),
           "y-axis title": (slice(0, 150), slice(0, 14)),
           "plot area": (slice(19, 124), slice(31, 150))}
WORD_REGIONS = ("title", "x-axis title", "y-axis title")


def load_network(checkpoints: Path, seed: int):
    from harness.models.registry import build_adapter
    from harness.recipes import load_recipe
    from harness.run import model_specs

    (spec,) = model_specs(load_recipe(RECIPE, {"models.0.options.seed": seed}))
    model = build_adapter(spec)
    for path in sorted(checkpoints.glob("*.pt")):
        try:
            return model.load(path)
        except Exception:  # another seed's checkpoint: its fingerprint differs
            continue
    raise SystemExit(f"{checkpoints}: no checkpoint of {RECIPE.name}'s network with seed {seed} "
                     f"(run benchmarks/bars_seeds.py --checkpoints {checkpoints} first)")


HEADLINE = (("authors", "rerendered", True), ("authors", "gestalt IID", False))


def comparisons() -> list[tuple[str, str, bool]]:
    """(charts scored, against, paired) of the feature breakdown, headline comparisons first."""
    return [*HEADLINE, *((f"rerendered + authors' {r}", "rerendered", True) for r in REGIONS),
            ("gestalt values", "rerendered", True), ("gestalt colours", "rerendered", True),
            ("rerendered", "gestalt IID", False)]


def _cell(r: dict) -> str:
    return f"{float(r['difference']):.3f} [{float(r['ci_low']):.3f}, {float(r['ci_high']):.3f}]"


def table(path: Path = RESULTS) -> str:
    """The first seed's comparisons of ``path`` as a markdown table, the pixel summary beside it,
    then the headline comparisons for every seed."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    summary = json.loads(path.with_suffix(".json").read_text())
    first = [r for r in rows if int(r["seed"]) == summary["seed"]]
    out = ["| charts scored | against | paired | MLAE | MLAE against | difference [95% CI] |",
           "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| {r['comparison']} | {r['against']} | {'yes' if r['paired'] == 'True' else 'no'} | "
            f"{float(r['mlae']):.3f} | {float(r['mlae_against']):.3f} | {_cell(r)} |" for r in first]
    px = summary["plot_area_pixels_differing_per_chart"]
    out += ["", f"Network: seed {summary['seed']}. Plot-area pixels (bars, strokes, dots, axes, ticks) that "
            f"differ between an authors' chart and its re-drawing: {px['mean']:g} per chart on average, "
            f"at most {px['max']}. The authors' text over gestalt's, in ink (darkness against the background "
            f"summed over the region): " + ", ".join(f"{k} {v:.2f}" for k, v in summary["text_ink_authors_over_gestalt"]
                                                      .items()) + ". "
            "Word lengths (ink extent along the word, px, mean and sd over the charts), the authors' against "
            "gestalt's: " + ", ".join(f"{r} {v['authors']['mean']:.1f} ({v['authors']['sd']:.1f}) against "
                                      f"{v['gestalt']['mean']:.1f} ({v['gestalt']['sd']:.1f})"
                                      for r, v in summary["word_length_px"].items()) + "."]
    seeds = sorted({int(r["seed"]) for r in rows})
    cell = {(int(r["seed"]), r["comparison"], r["against"]): r for r in rows}
    out += ["", "| seed | " + " | ".join(f"{a} - {b} ({'paired' if p else 'unpaired'})" for a, b, p in HEADLINE)
            + " |", "| --- |" + " --- |" * len(HEADLINE)]
    out += [f"| {seed} | " + " | ".join(_cell(cell[seed, a, b]) for a, b, _ in HEADLINE) + " |" for seed in seeds]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--authors-test")
    ap.add_argument("--checkpoints", type=Path)
    ap.add_argument("--table", action="store_true", help="print the markdown table of --out and stop")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0],
                    help="training seeds of the networks scored: the first on every comparison, the others on "
                         "the headline ones")
    ap.add_argument("--mirror", default="../shared/sources")
    ap.add_argument("--n-iid", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.table:
        sys.stdout.write(table(args.out))
        return
    if not args.authors_test or not args.checkpoints:
        ap.error("--authors-test and --checkpoints are needed to measure")

    stimuli = authors_test_stimuli(args.authors_test, "gap", 1)
    authors = np.stack([np.asarray(Image.open(s.image_source).convert("RGB")) for s in stimuli])
    truth = np.array([s.ground_truth for s in stimuli])
    charts = read_type1_charts(authors)
    misread = np.abs(charts.target - truth) > 1e-6
    if misread.any():
        raise SystemExit(f"{misread.sum()} charts' parameters do not give their target, e.g. "
                         f"{stimuli[int(np.argmax(misread))].meta['file']}")
    pools = load_pools(Sources(mirror=args.mirror))
    rng = np.random.default_rng(1)
    own = grape.sample_grape(1, len(charts), rng, pools, "test")
    iid = grape.sample_grape(1, args.n_iid, np.random.default_rng(2), pools, "test")
    rerendered = render_grape(charts)
    sets = {"authors": (authors, truth), "rerendered": (rerendered, charts.target)}
    for region, (ys, xs) in REGIONS.items():
        hybrid = rerendered.copy()
        hybrid[:, ys, xs] = authors[:, ys, xs]
        sets[f"rerendered + authors' {region}"] = (hybrid, truth)
    values = replace(charts, values=own.values, heights=own.heights, marked=own.marked)
    colours = replace(charts, background=own.background, fills=own.fills, stroke=own.stroke)
    sets["gestalt values"] = (render_grape(values), values.target)
    sets["gestalt colours"] = (render_grape(colours), colours.target)
    sets["gestalt IID"] = (render_grape(iid), iid.target)

    rows = []
    for k, seed in enumerate(args.seeds):
        model = load_network(args.checkpoints, seed)
        compared = comparisons() if k == 0 else list(HEADLINE)
        needed = {name for c in compared for name in c[:2]}
        lae = {name: log_abs_error(model.predict(x), t, scale="fraction") for name, (x, t) in sets.items()
               if name in needed}
        rows += [{"seed": seed, "comparison": name, "against": against, "paired": paired, "n": len(lae[name]),
                  "mlae": f"{lae[name].mean():.4f}", "mlae_against": f"{lae[against].mean():.4f}",
                  **dict(zip(("difference", "ci_low", "ci_high"),
                             (f"{v:.4f}" for v in (paired_delta(lae[name], lae[against]) if paired
                                                   else unpaired_gap(lae[name], lae[against])))))}
                 for name, against, paired in compared]
    plot_ys, plot_xs = REGIONS["plot area"]
    differ = (authors[:, plot_ys, plot_xs] != rerendered[:, plot_ys, plot_xs]).any(axis=3).sum(axis=(1, 2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    def ink(images: np.ndarray, region: str) -> float:  # darkness of the text against the background
        ys, xs = REGIONS[region]
        return float((images[:, 5:6, 5:6].astype(int) - images[:, ys, xs]).clip(0).sum())

    def word_lengths(images: np.ndarray, region: str) -> dict[str, float]:  # ink extent along the word, px
        ys, xs = REGIONS[region]
        inked = (images[:, ys, xs] != images[:, 5:6, 5:6]).any(axis=3)
        along = inked.any(axis=1 if region != "y-axis title" else 2)
        ends = [np.flatnonzero(a) for a in along]
        px = np.array([e[-1] - e[0] + 1 if len(e) else 0 for e in ends])
        return {"mean": round(float(px.mean()), 1), "sd": round(float(px.std()), 1)}

    summary = {"seed": args.seeds[0], "text_ink_authors_over_gestalt": {
        r: round(ink(authors, r) / ink(rerendered, r), 3) for r in REGIONS if r != "plot area"},
        "word_length_px": {r: {"authors": word_lengths(authors, r), "gestalt": word_lengths(rerendered, r)}
                           for r in WORD_REGIONS},
        "plot_area_pixels_differing_per_chart": {
        "mean": float(differ.mean()), "max": int(differ.max()), "charts_with_none": int((differ == 0).sum())},
        "authors_heights": {"min": int(charts.heights.min()), "max": int(charts.heights.max())}}
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    for r in rows:
        print(f"seed {r['seed']} {r['comparison']:40s} - {r['against']:12s} {r['difference']:>8s} "
              f"[{r['ci_low']}, {r['ci_high']}]", file=sys.stdout)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
