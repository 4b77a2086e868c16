"""The figures' shared style, below every family's figure module: resolution, colour-blind-safe
colours, error bars and the hand layout that sizes a figure's margins to the texts it holds."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

from ..scores.record import Score  # noqa: E402

DPI = 150  # every saved figure, in the report and as logged to MLflow
matplotlib.rcParams["savefig.dpi"] = DPI
# Okabe & Ito's palette: distinguishable with the common colour-vision deficiencies
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MATRIX_CMAP = "cividis"  # perceptually uniform and colour-blind safe


def text_color(rgba: Any) -> str:
    """Black or white, whichever reads on a cell of this colour (WCAG relative luminance)."""
    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(float(c)) for c in rgba[:3])
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.179 else "white"


def palette(labels: list[str]) -> dict[str, Any]:
    """One colour-blind-safe colour per label, in order (cycles past eight)."""
    return {x: OKABE_ITO[i % len(OKABE_ITO)] for i, x in enumerate(dict.fromkeys(labels))}


def error_bars(s: Score) -> list[list[float]]:
    """Error-bar half-widths; a score without a value or an interval draws none."""
    if s.value is None or s.ci_low is None or s.ci_high is None:
        return [[0.0], [0.0]]
    return [[s.value - s.ci_low], [s.ci_high - s.value]]


def family_colors(families: list[str]) -> dict[str, Any]:
    """One tab10 colour per family, in the order given (the report orders families)."""
    return palette(families)


def text_inches(fig, texts: list[Any]) -> tuple[float, float]:
    """The widest and the tallest of ``texts`` (Text artists: tick labels, axis labels, titles) as
    they will be drawn, rotation and line breaks included, in inches: from the font's metrics,
    nothing drawn."""
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts if t.get_text()]
    return (max((b.width for b in boxes), default=0.0) / fig.dpi,
            max((b.height for b in boxes), default=0.0) / fig.dpi)


def wrap_to(fig, text: str, width: float, **font: Any) -> str:
    """``text`` broken at spaces into lines at most ``width`` inches wide as drawn in ``font``
    (its line breaks kept; a word wider than that stands alone on its line), measured by the
    figure's renderer: a title longer than its figure was cut off on both sides."""
    renderer = fig.canvas.get_renderer()
    probe = fig.text(0, 0, "", **font)
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            probe.set_text(f"{line} {word}" if line else word)
            if line and probe.get_window_extent(renderer).width / fig.dpi > width:
                lines.append(line)
                line = word
            else:
                line = probe.get_text()
        lines.append(line)
    probe.remove()
    return "\n".join(lines)


def set_margins(fig, *, left: float, bottom: float, right: float, top: float, **space: float) -> None:
    """The subplot grid ``left``, ``bottom``, ... inches from the figure's edges.

    The per-run figures are laid out by hand with it, their margins sized to the texts they hold
    (:func:`text_inches`): a layout engine draws the figure once more and measures every text
    again each time it is saved (``benchmarks/fixed_cost.py``: the silhouettes' figures took 1.6
    to 1.9 times as long to save under constrained layout)."""
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=left / width, bottom=bottom / height, right=1 - right / width,
                        top=1 - top / height, **space)


TICKS = 0.15  # inches between an axis and its tick labels' far side: tick length and pads
AXIS_LABEL = 0.12  # inches between tick labels and the axis label, and beyond the outermost text


def label_margins(fig, ax) -> tuple[float, float]:
    """The left and bottom margins, in inches, that ``ax``'s tick labels and axis labels need."""
    left = (text_inches(fig, ax.get_yticklabels())[0] + TICKS
            + text_inches(fig, [ax.yaxis.label])[0] + AXIS_LABEL)
    bottom = (text_inches(fig, ax.get_xticklabels())[1] + TICKS
              + text_inches(fig, [ax.xaxis.label])[1] + AXIS_LABEL)
    return left, bottom


def fit_margins(fig, ax, right: float = AXIS_LABEL) -> None:
    """Lay out a one-axes figure by hand: margins for its tick labels, axis labels and title
    (as drawn now: call it last), the figure widened where the title is wider than the axes, the
    side margins where a tick label reaches past an end of the axes (centred on the last tick,
    or rotated)."""
    width, height = fig.get_size_inches()
    left, bottom = label_margins(fig, ax)
    title_width, title_height = text_inches(fig, [ax.title])
    top = title_height + 2 * AXIS_LABEL
    if title_width + 2 * AXIS_LABEL > width - left - right:
        width = title_width + 2 * AXIS_LABEL + left + right
        fig.set_size_inches(width, height)
    renderer = fig.canvas.get_renderer()
    lo, hi = sorted(ax.get_xlim())
    labels = [t for t in ax.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
    for _ in range(3):  # widening a margin moves the ticks, a little: measure again
        set_margins(fig, left=left, bottom=bottom, right=right, top=top)
        boxes = [t.get_window_extent(renderer) for t in labels]
        edge = AXIS_LABEL * fig.dpi  # kept clear at the page's edges
        past_left = max([0.0] + [edge - b.x0 for b in boxes]) / fig.dpi
        past_right = max([0.0] + [b.x1 - fig.bbox.x1 + edge for b in boxes]) / fig.dpi
        if not (past_left or past_right):
            return
        left, right = left + past_left, right + past_right
