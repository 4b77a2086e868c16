"""Where everything goes: the drawing operations of one chart, shared by both renderers.

A chart is a list of operations in painting order, in final-image pixel coordinates with
inclusive boxes:

- ``(BOX, x0, y0, x1, y1, colour)``: a filled box (lines and ticks are 1-px boxes);
  colours are uint8 arrays (RGB, or a scalar ink for Haehn's one-channel images);
- ``(BAR, x0, y0, x1, y1, fill, stroke, width)``: a filled box with a stroke of ``width`` px
  on its inside border (GRAPE's bars and stack segments);
- ``(TEXT, text, size, rotated, x, y)``: black text whose *visible* box has its top-left corner
  at (x, y); ``rotated`` text reads bottom to top.

The fast renderer (render.py) and the PIL ImageDraw reference (pil_reference.py) paint the same
operations, so the tests can demand identical pixels from both.

GRAPE geometry (reference/grape-generation.md 3.1-3.3). The 100 x 100 plot area sits at
(35, 20) in the 150 x 150 image; its baseline is plot row 99 (image row 119).
- Bars: bar k starts at plot x = 2 + k * (width + gap) (+ 4 after the fifth bar) and spans
  width + 1 px, from row 99 - height to 99; gap = ``fixBarGap`` or the generator's automatic
  floor((93 - 10 w - 20 t) / 9) + 2 t (9-px pitch at every tested width).
- Stacks: stack s spans x 10 + s (width + 20) ... + width; segment j spans its height + 1 rows
  above the previous segment's top (adjacent segments share a row, the later one on top).
- Dots: one black pixel; bars at (x + width // 2, 99 - dot_bottom), segments at
  (x + floor(width / 2 + offset), top + height // 2).
- Axes: y axis x = 34, rows 19-119; x axis row 119, x 35-134 (over the bar bottoms); x ticks
  rows 120-123 under each bar's centre int(x + width / 2 + 0.5); y ticks x 29-33 at rows 19,
  44, 69, 94, 119.
- Text is placed as GRAPE's generator places it (UtilIO.add_title_and_axis / add_label /
  add_title, github.com/Ideas-Laboratory/Graphical-Perception): by the *origin* PIL's
  ``ImageDraw.text`` draws from (top-left of the font's ascender box, not of the ink), at
  coordinates computed from the text's size W x H = (right, bottom) of its box from that
  origin, truncated to integers when drawn:
  x tick labels "1".. origin (x + width / 2 + 0.5 - W / 2, 123); y tick labels "100".."0"
  origin (30 - W, tick row - H / 2); x-axis title origin (85 - W / 2, 135); y-axis title drawn
  on the image turned 90 degrees clockwise at origin ((150 - W) / 2, 3), so it reads upwards
  along the left edge; chart title size ``title_size`` at origin ((150 - W) / 2, (20 - H) // 2),
  or x = ``title_left`` * 150 for a left-anchored title (``title_shift`` * 150 added to a centred
  title's x: the paper's title levels).
Fonts: GRAPE uses Arial (9 px axis text, 12 px title), which may not be redistributed; Arimo
(package fontpkg-arimo, SIL OFL) has Arial's metrics, so every text box has Arial's size and
place (docs/grape-generator-audit.md compares both with the authors' example charts). Arimo
carries no hinting, so the tick labels, the same on every chart, are drawn from Arial's hinted
9-px digits as the authors' charts show them (axis_digits.py): 7 rows from 2 below the origin,
5 px apart, which is also Arimo's advance.

Haehn geometry (reference 2.2-2.3), 100 x 100, ink only: bars are 1-px outlines (two sides and
the top, no bottom) at left edges 2 + 9k (+8 from the sixth bar), 7 px wide; stacks are the two
sides (x 10/40 and 60/90) and one line across the top of every segment; dots are single pixels
(bars: row 94, x left + 3; type 2: row 99 - d // 2 of the bottom segment; types 4, 5:
top + d // 2 of the marked segment; x 25 or 75).
"""

from __future__ import annotations

from functools import cache, lru_cache

import fontpkg_arimo
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from . import axis_digits
from .grape import BAR_TYPES, GrapeCharts
from .haehn import HaehnCharts
from .words import WORDS

RENDER_VERSION = "3"  # bump when any pixel of any chart changes (2: Arimo, GRAPE's text origins;
# 3: tick labels in Arial's hinted 9-px digits, words from GRAPE's own word list)

BOX, BAR, TEXT = 0, 1, 2
BLACK = np.zeros(3, np.uint8)

SIZE = 150
PLOT = 100
PLOT_X, PLOT_Y = 35, 20
BASELINE = 99
AXIS_FONT = 9
BAR_PAD_LEFT, BAR_USABLE, MID_GAP = 2, 93, 4
STACK_PAD_LEFT, STACK_GAP = 10, 20
Y_TICKS = (("100", 19), ("75", 44), ("50", 69), ("25", 94), ("0", 119))
X_TICK = 4  # px below the axis: GRAPE draws the 3-px tick line with PIL, which includes both ends
X_LABEL_TOP = 123
Y_LABEL_RIGHT = 30
X_TITLE_CENTRE, X_TITLE_TOP = 85, 135
Y_TITLE_TOP = 3  # distance of the upright y-axis title's origin from the left edge
TITLE_BAND = 20  # the chart title is centred vertically in the top 20 rows
FONT_FILE = fontpkg_arimo.ROOT / "files" / "Arimo[wght].ttf"

HAEHN_SIZE = 100
HAEHN_INK = np.uint8(255)
HAEHN_BAR_LEFT = tuple(2 + 9 * k + (8 if k >= 5 else 0) for k in range(10))
HAEHN_BAR_WIDTH = 7
HAEHN_DOT_ROW = 94
HAEHN_STACKS = ((10, 40), (60, 90))


@cache
def font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(FONT_FILE), size)


@cache
def text_bbox(text: str, size: int) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of the ink of ``text`` drawn with its origin at (0, 0); tick
    labels have the box of Arial's digit cells (axis_digits.py)."""
    if axis_digits.is_label(text, size):
        return 0, axis_digits.TOP, axis_digits.ADVANCE * len(text), axis_digits.TOP + axis_digits.ROWS
    left, top, right, bottom = font(size).getbbox(text)
    return int(left), int(top), int(right), int(bottom)


def glyph_coverage(text: str, size: int) -> np.ndarray:
    """Coverage (0-255) of ``text`` over its box ``text_bbox``: Arial's cells for tick labels,
    Arimo rasterised by PIL for words."""
    if axis_digits.is_label(text, size):
        return axis_digits.coverage(text)
    l, t, r, b = text_bbox(text, size)
    im = Image.new("L", (r - l, b - t), 0)
    ImageDraw.Draw(im).text((-l, -t), text, font=font(size), fill=255)
    return np.asarray(im)


def text_extent(text: str, size: int) -> tuple[int, int]:
    """W x H from the origin to the right and bottom of the text's box (what GRAPE's code
    measures with ``getsize``)."""
    _, _, r, b = text_bbox(text, size)
    return r, b


def text_at(text: str, size: int, x: float, y: float) -> tuple:
    """TEXT operation for ``text`` drawn with its origin at (x, y), truncated as PIL does."""
    l, t, _, _ = text_bbox(text, size)
    return (TEXT, text, size, False, int(x) + l, int(y) + t)


def upright_text_at(text: str, size: int, x: float, y: float) -> tuple:
    """TEXT operation for ``text`` drawn at origin (x, y) on the image turned 90 degrees
    clockwise and turned back: it reads bottom to top; (x, y) are in the turned image."""
    _, t, r, _ = text_bbox(text, size)
    return (TEXT, text, size, True, int(y) + t, SIZE - int(x) - r)


def bar_gap(width: int, thickness: int, gap: int) -> int:
    if gap >= 0:
        return gap
    return (BAR_USABLE - 10 * width - 20 * thickness) // 9 + 2 * thickness


def element_lefts(chart_type: int, width: int, thickness: int, gap: int) -> list[int]:
    """Plot-area x of the left edge of every bar (10) or stack (2)."""
    if chart_type in BAR_TYPES:
        pitch = width + bar_gap(width, thickness, gap)
        return [BAR_PAD_LEFT + k * pitch + (MID_GAP if k >= 5 else 0) for k in range(10)]
    return [STACK_PAD_LEFT + s * (width + STACK_GAP) for s in range(2)]


def _clip(v: int, hi: int = PLOT - 1) -> int:
    return min(max(v, 0), hi)


def element_boxes(c: GrapeCharts, i: int) -> list[tuple[int, int, int, int]]:
    """Plot-area boxes (x0, y0, x1, y1) of the 10 bars or segments of chart i, clipped."""
    w, t, gap = int(c.bar_width[i]), int(c.line_thickness[i]), int(c.bar_gap[i])
    h = c.heights[i].tolist()
    lefts = element_lefts(c.chart_type, w, t, gap)
    if c.chart_type in BAR_TYPES:
        return [(_clip(x), _clip(BASELINE - hk), _clip(x + w), BASELINE) for x, hk in zip(lefts, h)]
    boxes = []
    for s, x in enumerate(lefts):
        bottom = BASELINE
        for hk in h[5 * s:5 * s + 5]:
            top = bottom - hk
            boxes.append((_clip(x), _clip(top), _clip(x + w), _clip(bottom)))
            bottom = top
    return boxes


def dot_points(c: GrapeCharts, i: int) -> list[tuple[int, int]]:
    """Plot-area (x, y) of the two dots of chart i."""
    w, t, gap = int(c.bar_width[i]), int(c.line_thickness[i]), int(c.bar_gap[i])
    lefts = element_lefts(c.chart_type, w, t, gap)
    out = []
    for k in c.marked[i].tolist():
        if c.chart_type in BAR_TYPES:
            out.append((lefts[k] + w // 2, BASELINE - int(c.dot_bottom[i])))
        else:
            bottom = BASELINE - int(c.heights[i, 5 * (k // 5):k].sum())
            hk = int(c.heights[i, k])
            x = lefts[k // 5] + int(np.floor(w / 2 + int(c.dot_offset[i])))
            out.append((x, bottom - hk + hk // 2))
    return [(_clip(x), _clip(y)) for x, y in out]


def grape_plot_ops(c: GrapeCharts, i: int) -> list[tuple]:
    """Bars or segments, then the two dots (image coordinates)."""
    t = int(c.line_thickness[i])
    stroke, fills = c.stroke[i], c.fills[i]
    ops: list[tuple] = []
    for k, (x0, y0, x1, y1) in enumerate(element_boxes(c, i)):
        fill = fills[0] if c.chart_type in BAR_TYPES else fills[k % 5]
        ops.append((BAR, x0 + PLOT_X, y0 + PLOT_Y, x1 + PLOT_X, y1 + PLOT_Y, fill, stroke, t))
    for x, y in dot_points(c, i):
        ops.append((BOX, x + PLOT_X, y + PLOT_Y, x + PLOT_X, y + PLOT_Y, BLACK))
    return ops


def static_key(c: GrapeCharts, i: int) -> tuple[int, int, int, int]:
    """What the axes, ticks and tick labels depend on."""
    return (c.chart_type, int(c.bar_width[i]), int(c.line_thickness[i]), int(c.bar_gap[i]))


@lru_cache(maxsize=256)
def static_ops(key: tuple[int, int, int, int]) -> tuple[tuple, ...]:
    """Axis lines, ticks and tick labels for a layout ``key`` (see :func:`static_key`)."""
    chart_type, w, t, gap = key
    ax_left, ax_bottom = PLOT_X - 1, PLOT_Y + BASELINE
    ops = [(BOX, ax_left, PLOT_Y - 1, ax_left, ax_bottom, BLACK),
           (BOX, PLOT_X, ax_bottom, PLOT_X + PLOT - 1, ax_bottom, BLACK)]
    for k, x in enumerate(element_lefts(chart_type, w, t, gap)):
        centre = x + w / 2 + 0.5 + PLOT_X
        xt = int(centre)
        ops.append((BOX, xt, ax_bottom + 1, xt, ax_bottom + X_TICK, BLACK))
        label = str(k + 1)
        ops.append(text_at(label, AXIS_FONT, centre - text_extent(label, AXIS_FONT)[0] / 2, X_LABEL_TOP))
    for label, y in Y_TICKS:
        ops.append((BOX, ax_left - 5, y, ax_left - 1, y, BLACK))
        lw, lh = text_extent(label, AXIS_FONT)
        ops.append(text_at(label, AXIS_FONT, Y_LABEL_RIGHT - lw, y - lh / 2))
    return tuple(ops)


def grape_title_ops(c: GrapeCharts, i: int) -> list[tuple]:
    title, xtitle, ytitle = (WORDS[k] for k in c.words[i].tolist())
    size = int(c.title_size[i])
    tw, th = text_extent(title, size)
    left = float(c.title_left[i])
    tx = (SIZE - tw) / 2 + float(c.title_shift[i]) * SIZE if np.isnan(left) else left * SIZE
    xw, _ = text_extent(xtitle, AXIS_FONT)
    yw, _ = text_extent(ytitle, AXIS_FONT)
    return [text_at(xtitle, AXIS_FONT, X_TITLE_CENTRE - xw / 2, X_TITLE_TOP),
            upright_text_at(ytitle, AXIS_FONT, (SIZE - yw) / 2, Y_TITLE_TOP),
            text_at(title, size, tx, (TITLE_BAND - th) // 2)]


def grape_ops(c: GrapeCharts, i: int) -> list[tuple]:
    """All operations of chart i, in painting order (after the background fill)."""
    return [*grape_plot_ops(c, i), *static_ops(static_key(c, i)), *grape_title_ops(c, i)]


def target_boxes(c: GrapeCharts, i: int) -> list[tuple[int, int, int, int]]:
    """Image-coordinate boxes of the two marked bars or segments (the segmentation mask)."""
    boxes = element_boxes(c, i)
    return [(x0 + PLOT_X, y0 + PLOT_Y, x1 + PLOT_X, y1 + PLOT_Y)
            for x0, y0, x1, y1 in (boxes[k] for k in c.marked[i].tolist())]


# -- Haehn -------------------------------------------------------------------------------------

def _stack_tops(values: list[int]) -> list[int]:
    tops, total = [], 0
    for d in values:
        total += d
        tops.append(BASELINE - total)
    return tops


def haehn_ops(c: HaehnCharts, i: int) -> list[tuple]:
    v = c.values[i].tolist()
    ink = HAEHN_INK
    ops: list[tuple] = []
    marked = c.marked[i].tolist()
    if c.chart_type in BAR_TYPES:
        for left, d in zip(HAEHN_BAR_LEFT, v):
            right, top = left + HAEHN_BAR_WIDTH, BASELINE - d
            ops += [(BOX, left, top, left, BASELINE, ink), (BOX, right, top, right, BASELINE, ink),
                    (BOX, left, top, right, top, ink)]
        for k in marked:
            x = HAEHN_BAR_LEFT[k] + HAEHN_BAR_WIDTH // 2
            ops.append((BOX, x, HAEHN_DOT_ROW, x, HAEHN_DOT_ROW, ink))
        return ops
    for s, (x0, x1) in enumerate(HAEHN_STACKS):
        seg = v[5 * s:5 * s + 5]
        tops = _stack_tops(seg)
        # stack totals stay below 93 px by construction, so nothing needs clipping
        ops += [(BOX, x0, tops[-1], x0, BASELINE, ink), (BOX, x1, tops[-1], x1, BASELINE, ink)]
        ops += [(BOX, x0, top, x1, top, ink) for top in tops]
    for k in marked:
        s, j = divmod(k, 5)
        d = v[k]
        top = _stack_tops(v[5 * s:5 * s + 5])[j]
        y = (top + d) - d // 2 if c.chart_type == 2 else top + d // 2
        x = (HAEHN_STACKS[s][0] + HAEHN_STACKS[s][1]) // 2
        ops.append((BOX, x, y, x, y, ink))
    return ops


def haehn_target_boxes(c: HaehnCharts, i: int) -> list[tuple[int, int, int, int]]:
    v = c.values[i].tolist()
    out = []
    for k in c.marked[i].tolist():
        if c.chart_type in BAR_TYPES:
            left = HAEHN_BAR_LEFT[k]
            out.append((left, BASELINE - v[k], left + HAEHN_BAR_WIDTH, BASELINE))
        else:
            s, j = divmod(k, 5)
            top = _stack_tops(v[5 * s:5 * s + 5])[j]
            x0, x1 = HAEHN_STACKS[s]
            out.append((x0, top, x1, top + v[k]))
    return out
