"""How close gestalt's renderer draws the GRAPE authors' own example chart.

The top-left cell of sources/grape/examples/fig_example.png is an IID type-1 chart rendered by
the authors' generator. Its parameters are read off its pixels (bar heights, colours, marked
bars, its three words), the chart is re-drawn with this checkout's renderer and both images are
compared; it prints the row of docs/grape-generator-audit.md's table for this renderer:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bars_example_agreement.py [--mirror ../shared/sources]
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
from PIL import Image

from harness.sources import Sources
from harness.stimuli.bars import grape, layout
from harness.stimuli.bars.render import render_grape
from harness.stimuli.bars.words import WORDS


def example_type1_chart(sources: Sources) -> tuple[np.ndarray, grape.GrapeCharts]:
    """The authors' example type-1 chart (150 x 150 RGB) and gestalt's parameters for it."""
    path = sources.path("grape", "examples/fig_example.png")
    ex = np.asarray(Image.open(path).convert("RGB"))[:150, :150]
    bg = ex[5, 5]
    lefts = layout.element_lefts(1, 7, 1, -1)
    heights = [119 - next(y for y in range(20, 119) if (ex[y, 38 + x] != bg).any()) for x in lefts]
    dots = [k for k, x in enumerate(lefts) if (ex[114, 38 + x] == 0).all()]

    def one(v, dt=np.int16):
        return np.array([v], dt)

    fields = {"chart_type": 1, "values": one(heights), "heights": one(heights), "marked": one(dots, np.int8),
              "background": one(bg, np.uint8), "fills": one([ex[116, 38]] * 5, np.uint8),
              "stroke": one(ex[119 - heights[0], 38], np.uint8), "bar_width": one(7), "bar_gap": one(-1),
              "line_thickness": one(1), "dot_bottom": one(5), "dot_offset": one(0),
              "title_left": one(np.nan, np.float32), "title_shift": one(0, np.float32), "title_size": one(12),
              "words": one([WORDS.index(w) for w in ("tuesday", "angles", "validation")])}
    known = {f.name for f in dataclasses.fields(grape.GrapeCharts)}  # renderer 1 had no title_shift
    return ex, grape.GrapeCharts(**{k: v for k, v in fields.items() if k in known})


def agreement_row(sources: Sources) -> str:
    """The audit's table row for this checkout's renderer: pixels that differ, by more than 64,
    and the mean absolute difference over the whole image."""
    ex, charts = example_type1_chart(sources)
    diff = np.abs(render_grape(charts)[0].astype(int) - ex.astype(int))
    differ, far = int((diff.max(axis=2) > 0).sum()), int((diff.max(axis=2) > 64).sum())
    return f"| {layout.RENDER_VERSION} (current) | {differ:,} | {far:,} | {diff.mean():.2f} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default="../shared/sources")
    args = ap.parse_args()
    print(agreement_row(Sources(mirror=args.mirror)))


if __name__ == "__main__":
    main()
