"""GRAPE charts rendered by the authors' own generator, as test stimuli beside gestalt's.

A trained network's MLAE on the authors' charts against its MLAE on gestalt's IID charts of the
same type measures what is left of the generator difference (docs/grape-generator-audit.md).
The folder is one "valid" set as GRAPE's generator writes it (its dataset configs:
``inputFolder`` "input", ``outputFolder`` "target"): ``input/<name>_<i>.png`` (150 x 150 RGB)
and ``target/<name>_<i>.json`` holding ``[ratio]``, the smaller marked bar over the larger
(``mark.ratio.ratio2MarkOnly``). Other files the generator writes beside it (``_r``, ``_l``,
``_ll``, ``_h`` JSONs) are ignored.

Such stimuli carry ``manipulated_value`` = {"parameter": RENDERED_BY, "level": AUTHORS}, so the
MLAE scorer reports them as their own group beside the IID charts, with the gap between both
(scores/mlae.py, ``rendered_by.grape-authors.*``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from PIL import Image

from ...sources import DataError
from ...sources.store import file_sha256
from ..base import Stimulus
from . import grape, layout
from .words import WORDS

RENDERED_BY = "rendered_by"
AUTHORS = "grape-authors"
IMAGE_SIZE = (150, 150)
_NAME = re.compile(r"(?P<stem>[a-z]+_type\d+)_(?P<index>\d+)\.png")


def authors_test_stimuli(folder: str | Path, tag: str, chart_type: int,
                         limit: int | None = None) -> list[Stimulus]:
    """Test stimuli from one rendered GRAPE set, ordered by image index; at most ``limit``.

    A missing folder, an image without its target, an unreadable target, a ratio outside
    (0, 1] or an image that is not 150 x 150 RGB is a DataError naming the file.
    """
    folder = Path(folder)
    inputs, targets = folder / "input", folder / "target"
    if not inputs.is_dir() or not targets.is_dir():
        raise DataError(f"{folder}: not a GRAPE test set (needs input/ and target/ folders)")
    found = sorted(((int(m["index"]), p) for p in inputs.iterdir() if (m := _NAME.fullmatch(p.name))),
                   key=lambda t: t[0])
    if not found:
        raise DataError(f"{inputs}: no <name>_<i>.png images")
    out = []
    for index, image in found[:limit]:
        target = targets / f"{image.stem}.json"
        try:
            value = json.loads(target.read_text())
            ratio = float(value[0] if isinstance(value, list) else value)
        except (OSError, ValueError, TypeError, IndexError) as e:
            raise DataError(f"{target}: no readable [ratio] for {image.name} ({e})") from e
        if not 0 < ratio <= 1 or not np.isfinite(ratio):
            raise DataError(f"{target}: ratio {ratio} is not in (0, 1]")
        with Image.open(image) as im:
            if im.size != IMAGE_SIZE or im.mode not in ("RGB", "RGBA"):
                raise DataError(f"{image}: {im.mode} {im.size[0]} x {im.size[1]}, expected RGB 150 x 150")
        out.append(Stimulus(
            stimulus_id=f"{tag}-{AUTHORS}-{index:06d}", split="test", ground_truth=ratio,
            image_source=image, file_sha256=file_sha256(image),
            manipulated_value={"parameter": RENDERED_BY, "level": AUTHORS},
            meta={"generator": AUTHORS, "chart_type": chart_type, "subset": AUTHORS, "file": image.name}))
    return out


def read_type1_charts(images: np.ndarray, seed: int = 0) -> grape.GrapeCharts:
    """The parameters of IID type-1 charts (7-px bars, 1-px stroke) read off their (n, 150, 150, 3)
    pixels: bar heights, the two marked bars, background, fill and stroke colours. The words
    cannot be read back: they are drawn from gestalt's list with ``seed``."""
    lefts = layout.element_lefts(1, grape.BAR_WIDTH, grape.LINE_THICKNESS, -1)
    cols = [layout.PLOT_X + x + 3 for x in lefts]  # each bar's middle column
    n = len(images)
    bg = images[:, 5, 5]
    rows = np.arange(layout.PLOT_Y, layout.PLOT_Y + layout.BASELINE)
    heights = np.zeros((n, 10), np.int16)
    for k, c in enumerate(cols):
        ink = (images[:, rows, c] != bg[:, None]).any(axis=2)  # (n, rows)
        heights[:, k] = layout.PLOT_Y + layout.BASELINE - rows[ink.argmax(axis=1)]
    dot_row = layout.PLOT_Y + layout.BASELINE - grape.DOT_BOTTOM
    dots = np.stack([(images[:, dot_row, c] == 0).all(axis=1) for c in cols], axis=1)
    if not (dots.sum(axis=1) == 2).all():
        raise DataError(f"charts {np.flatnonzero(dots.sum(axis=1) != 2)[:5]}: not two marked bars")
    marked = np.sort(np.argsort(~dots, axis=1, kind="stable")[:, :2], axis=1).astype(np.int8)
    fill = images[:, dot_row + 2, cols[0]]
    stroke = images[np.arange(n), layout.PLOT_Y + layout.BASELINE - heights[:, 0], cols[0]]
    rng = np.random.default_rng(seed)

    def full(v, dtype=np.int16):
        return np.full(n, v, dtype=dtype)

    return grape.GrapeCharts(
        chart_type=1, values=heights.copy(), heights=heights, marked=marked, background=bg,
        fills=np.repeat(fill[:, None], grape.STACK_SEGMENTS, axis=1), stroke=stroke,
        bar_width=full(grape.BAR_WIDTH), bar_gap=full(-1), line_thickness=full(grape.LINE_THICKNESS),
        dot_bottom=full(grape.DOT_BOTTOM), dot_offset=full(grape.DOT_OFFSET),
        title_left=full(np.nan, np.float32), title_shift=full(0, np.float32), title_size=full(grape.TITLE_SIZE),
        words=rng.integers(0, len(WORDS), (n, 3)).astype(np.int16))
