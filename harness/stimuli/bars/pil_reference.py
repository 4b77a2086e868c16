"""The plain way to draw the same charts: one PIL ImageDraw call per layout operation.

It is the oracle the fast renderer is tested against (identical pixels) and the baseline the
render benchmark (benchmarks/bars_render.py) measures it against. Nothing else uses it.
"""

from __future__ import annotations

from PIL import Image, ImageDraw

from . import axis_digits
from .grape import GrapeCharts
from .haehn import HaehnCharts
from .layout import BAR, BOX, HAEHN_SIZE, SIZE, font, grape_ops, haehn_ops, text_bbox


def _colour(c) -> tuple[int, ...]:
    return tuple(c.tolist())


def _draw(im: Image.Image, draw: ImageDraw.ImageDraw, op: tuple) -> None:
    kind = op[0]
    if kind == BOX:
        _, x0, y0, x1, y1, colour = op
        draw.rectangle((x0, y0, x1, y1), fill=_colour(colour))
    elif kind == BAR:
        _, x0, y0, x1, y1, fill, stroke, t = op
        draw.rectangle((x0, y0, x1, y1), fill=_colour(fill),
                       outline=_colour(stroke) if t > 0 else None, width=t)
    else:
        _, text, size, rotated, x, y = op
        if axis_digits.is_label(text, size):  # Arial's measured cells, blended as PIL blends ink
            im.paste((0, 0, 0), (x, y), Image.fromarray(axis_digits.coverage(text)))
            return
        l, t, r, b = text_bbox(text, size)
        if not rotated:
            draw.text((x - l, y - t), text, font=font(size), fill=(0, 0, 0))
            return
        label = Image.new("L", (r - l, b - t), 0)
        ImageDraw.Draw(label).text((-l, -t), text, font=font(size), fill=255)
        im.paste((0, 0, 0), (x, y), label.rotate(90, expand=True))


def draw_grape(c: GrapeCharts, i: int) -> Image.Image:
    im = Image.new("RGB", (SIZE, SIZE), tuple(c.background[i].tolist()))
    draw = ImageDraw.Draw(im)
    for op in grape_ops(c, i):
        _draw(im, draw, op)
    return im


def draw_haehn(c: HaehnCharts, i: int) -> Image.Image:
    """Noise-free Haehn chart as an 'L' image (ink 255)."""
    im = Image.new("L", (HAEHN_SIZE, HAEHN_SIZE), 0)
    draw = ImageDraw.Draw(im)
    for _, x0, y0, x1, y1, ink in haehn_ops(c, i):
        draw.line((x0, y0, x1, y1), fill=int(ink))
    return im
