"""Fast batch rendering of bar charts into uint8 arrays, and the lazy per-stimulus image.

The painting operations come from layout.py; here they become numpy slice assignments on a
(n, H, W, 3) batch. Costs per chart are a few dozen slice writes (bars, dots, three title
words); the axes, ticks and tick labels, identical for every chart of a layout, are composited
once per batch from two precomputed coverage rectangles. Anti-aliased text is blended with
Pillow's own integer rule (out = round(bg * (255 - a) / 255) for black ink, as ``BLEND`` in
libImaging), so the output equals Pillow's ImageDraw rendering of the same operations pixel for
pixel (tests/test_bars_stimuli.py checks it against pil_reference.py).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from functools import lru_cache
from collections.abc import Sequence

import numpy as np
from PIL import Image

from ..base import Stimulus
from .grape import GrapeCharts
from .haehn import INK_WITH_NOISE, NOISE_LEVELS, HaehnCharts
from .layout import (BAR, BOX, HAEHN_SIZE, PLOT_X, RENDER_VERSION, SIZE, TEXT, glyph_coverage, grape_plot_ops,
                     grape_title_ops, haehn_ops, haehn_target_boxes, static_key, static_ops,
                     target_boxes)

Charts = GrapeCharts | HaehnCharts


def _div255(v: np.ndarray) -> np.ndarray:
    """Pillow's rounding division by 255 of uint16 products, in place; returns ``v``."""
    v += 128
    v += v >> 8
    v >>= 8
    return v


@lru_cache(maxsize=8192)
def glyph(text: str, size: int, rotated: bool) -> np.ndarray:
    """Coverage (0-255) of ``text`` over its visible box; rotated reads bottom to top."""
    a = glyph_coverage(text, size)
    out = np.ascontiguousarray(np.rot90(a)) if rotated else a.copy()
    out.flags.writeable = False
    return out


@lru_cache(maxsize=8192)
def _keep(text: str, size: int, rotated: bool) -> np.ndarray:
    """(h, w, 1) uint16 255 - coverage: the weight black ink leaves to what is underneath."""
    out = (255 - glyph(text, size, rotated)).astype(np.uint16)[..., None]
    out.flags.writeable = False
    return out


def _blend_black(img: np.ndarray, keep: np.ndarray, x: int, y: int) -> None:
    h, w = keep.shape[:2]
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, img.shape[1]), min(y + h, img.shape[0])
    if x0 >= x1 or y0 >= y1:
        return
    region = img[y0:y1, x0:x1]
    v = region.astype(np.uint16)
    v *= keep[y0 - y:y1 - y, x0 - x:x1 - x]
    region[...] = _div255(v)


def paint(img: np.ndarray, op: tuple) -> None:
    """Paint one layout operation onto an (H, W, 3) image (boxes also (H, W)), in place."""
    kind = op[0]
    if kind == BOX:
        _, x0, y0, x1, y1, colour = op
        img[y0:y1 + 1, x0:x1 + 1] = colour
    elif kind == BAR:
        _, x0, y0, x1, y1, fill, stroke, t = op
        if t > 0:
            img[y0:y1 + 1, x0:x1 + 1] = stroke
            if x1 - x0 >= 2 * t and y1 - y0 >= 2 * t:
                img[y0 + t:y1 - t + 1, x0 + t:x1 - t + 1] = fill
        else:
            img[y0:y1 + 1, x0:x1 + 1] = fill
    elif kind == TEXT:
        _, text, size, rotated, x, y = op
        _blend_black(img, _keep(text, size, rotated), x, y)
    else:
        raise ValueError(f"unknown layout operation {op!r}")


@lru_cache(maxsize=256)
def _static_layer(key: tuple[int, int, int, int]) -> tuple[tuple[slice, slice, np.ndarray], ...]:
    """The black axes layer of a layout as (rows, cols, 255 - coverage) rectangles: one left of
    the plot (y axis, ticks, labels), one from the plot's left edge on (x axis, ticks, labels)."""
    cover = np.zeros((SIZE, SIZE), np.uint8)
    for op in static_ops(key):
        if op[0] == BOX:
            _, x0, y0, x1, y1, _colour = op
            cover[y0:y1 + 1, x0:x1 + 1] = 255
        else:
            _, text, size, rotated, x, y = op
            g = glyph(text, size, rotated)
            region = cover[y:y + g.shape[0], x:x + g.shape[1]]
            np.maximum(region, g[:region.shape[0], :region.shape[1]], out=region)
    rects = []
    for cols in (slice(0, PLOT_X), slice(PLOT_X, SIZE)):
        part = cover[:, cols]
        ys, xs = np.nonzero(part)
        rows = slice(ys.min(), ys.max() + 1)
        cols = slice(cols.start + xs.min(), cols.start + xs.max() + 1)
        keep = (255 - cover[rows, cols]).astype(np.uint16)[None, :, :, None]
        keep.flags.writeable = False
        rects.append((rows, cols, keep))
    return tuple(rects)


def _backgrounds(colours: np.ndarray, size: int) -> np.ndarray:
    """(n, size, size, 3) filled with one colour per image (a tiled row, copied down)."""
    row = np.tile(colours, (1, size))
    out = np.empty((len(colours), size, size * 3), np.uint8)
    out[:] = row[:, None, :]
    return out.reshape(len(colours), size, size, 3)


def _indices(n: int, idx: Sequence[int] | None) -> np.ndarray:
    """The chart indices ``idx`` as an array, all n charts by default."""
    return np.arange(n) if idx is None else np.asarray(idx, dtype=np.int64)


def render_grape(c: GrapeCharts, idx: Sequence[int] | None = None) -> np.ndarray:
    """(n, 150, 150, 3) uint8 RGB of the charts at ``idx`` (all by default)."""
    at = _indices(len(c), idx)
    out = _backgrounds(c.background[at], SIZE)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for j, i in enumerate(at.tolist()):
        img = out[j]
        for op in grape_plot_ops(c, i):
            paint(img, op)
        groups[static_key(c, i)].append(j)
    for key, js in groups.items():
        sel = slice(None) if len(groups) == 1 else np.asarray(js)
        for rows, cols, keep in _static_layer(key):
            v = out[sel, rows, cols].astype(np.uint16)
            v *= keep
            out[sel, rows, cols] = _div255(v)
    for j, i in enumerate(at.tolist()):
        img = out[j]
        for op in grape_title_ops(c, i):
            paint(img, op)
    return out


def render_haehn(c: HaehnCharts, idx: Sequence[int] | None = None) -> np.ndarray:
    """(n, 100, 100) uint8: ink 255 on 0, or with noise ink 242-254 on 0-12."""
    at = _indices(len(c), idx)
    out = np.zeros((len(at), HAEHN_SIZE, HAEHN_SIZE), np.uint8)
    for j, i in enumerate(at.tolist()):
        img = out[j]
        for op in haehn_ops(c, i):
            paint(img, op)
    if c.noise:
        for j, i in enumerate(at.tolist()):
            noise = np.random.default_rng(int(c.noise_seed[i])).integers(
                0, NOISE_LEVELS, (HAEHN_SIZE, HAEHN_SIZE), dtype=np.uint8)
            out[j] = np.where(out[j] > 0, INK_WITH_NOISE, 0).astype(np.uint8) + noise
    return out


def target_masks(c: Charts, idx: Sequence[int] | None = None) -> np.ndarray:
    """(n, H, W) bool: the filled boxes of the two marked bars or segments."""
    at = _indices(len(c), idx).tolist()
    if isinstance(c, GrapeCharts):
        size, boxes = SIZE, [target_boxes(c, i) for i in at]
    else:
        size, boxes = HAEHN_SIZE, [haehn_target_boxes(c, i) for i in at]
    out = np.zeros((len(at), size, size), np.bool_)
    for j, chart_boxes in enumerate(boxes):
        for x0, y0, x1, y1 in chart_boxes:
            out[j, y0:y1 + 1, x0:x1 + 1] = True
    return out


def render(c: Charts, idx: Sequence[int] | None = None, mask: bool = False) -> np.ndarray:
    """Uint8 images of a batch; ``mask`` appends the target mask (255 inside) as a last channel
    (GRAPE's segmentation-mask variant: RGBA with the mask as alpha)."""
    if isinstance(c, GrapeCharts):
        out = render_grape(c, idx)
    elif isinstance(c, HaehnCharts):
        out = render_haehn(c, idx)
    else:
        raise TypeError(f"not a chart batch: {type(c).__name__}")
    if not mask:
        return out
    alpha = target_masks(c, idx).astype(np.uint8) * 255
    if out.ndim == 3:
        out = out[..., None]
    return np.concatenate([out, alpha[..., None]], axis=-1)


class ChartImage:
    """A stimulus's lazy image: chart ``index`` of a batch, rendered when asked for."""

    __slots__ = ("charts", "index", "mask")

    def __init__(self, charts: Charts, index: int, mask: bool = False):
        self.charts, self.index, self.mask = charts, int(index), bool(mask)

    def __call__(self) -> Image.Image:
        # L, LA (Haehn with mask), RGB or RGBA (GRAPE with mask), from the array's shape
        return Image.fromarray(render(self.charts, [self.index], self.mask)[0])

    def content_hash(self) -> str:
        """sha256 naming this image's pixels without drawing them: the chart's parameters and the
        renderer's version (tests/test_bars_stimuli.py pins the pixels of each version)."""
        key = f"bars-render-{RENDER_VERSION}|{self.mask}|{self.charts.chart_hashes[self.index]}"
        return hashlib.sha256(key.encode()).hexdigest()


def render_stimuli(stimuli: Sequence[Stimulus]) -> np.ndarray:
    """Uint8 array (n, H, W[, C]) of the stimuli's images, batch-rendered where they are charts."""
    if not stimuli:
        raise ValueError("render_stimuli: no stimuli")
    # charts rendered together per (batch, mask); other images loaded one by one
    groups: dict[tuple[int, bool], list[tuple[int, ChartImage]]] = defaultdict(list)
    parts: dict[int, np.ndarray] = {}
    for j, s in enumerate(stimuli):
        src = s.image_source
        if isinstance(src, ChartImage):
            groups[(id(src.charts), src.mask)].append((j, src))
        else:
            parts[j] = np.asarray(s.image)
    for (_, mask), group in groups.items():
        images = render(group[0][1].charts, [src.index for _, src in group], mask)
        parts.update(zip([j for j, _ in group], images))
    shapes = {a.shape for a in parts.values()}
    if len(shapes) > 1:
        raise ValueError(f"render_stimuli: images of different shapes {sorted(shapes)}")
    return np.stack([parts[j] for j in range(len(stimuli))])


def content_key(stimuli: Sequence[Stimulus]) -> str:
    """sha256 naming exactly what ``stimuli`` show and their targets, without rendering charts
    (a chart's Stimulus.sha256 names it by its parameters, ChartImage.content_hash)."""
    h = hashlib.sha256()
    for s in stimuli:
        h.update(s.sha256.encode())
    return h.hexdigest()
