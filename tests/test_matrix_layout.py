"""The report's matrix (matrix.png, the summary run's first figure) stays readable from 3 to 100
models: every text it draws lies within the saved image, the subtitle explaining the method is
wrapped to the figure rather than cut off, and every label is legible when the image is shown
whole on a 1600 px wide screen."""

import pytest

from harness.reports import figures as F
from harness.reports.style import DPI
from harness.scores.tasks import family_of
from tests import test_answer_surfaces as A
from tests import test_reports as T

SCREEN_PX = 1600  # the screen the matrix is read on (the MLflow UI checks run at 1600x1000)
MIN_CAP_PX = 8  # the least cap height (height of "H") of any text, in pixels of the saved image
FAMILIES = ("supervised", "self-supervised", "contrastive-vl", "open-vlm", "api")
# the rank-group note as the report writes it with series counting unranked: longer than any figure is wide
NOTE = ("letters: rank groups (models sharing a letter are not told apart), familywise 5% (step-down bootstrap "
        "max-|t|) over each task's pairs of models: paired bootstrap over stimuli (1000 draws, seed 0); not ranked: "
        f"{T.SERIES} ({family_of(T.SERIES).unranked})")


def matrix(n_models: int):
    """The matrix of ``n_models`` models over the three gestalt tasks, each cell its task's headline
    (every third model's capacity censored below), long and short model names in five families."""
    models = [(f"{FAMILIES[i * 5 // n_models]}-model-{i:03d}-vit-b16" if i % 7 else f"m{i}",
               FAMILIES[i * 5 // n_models]) for i in range(n_models)]
    tasks = (T.SIL, T.MARK, T.SERIES)
    cells = {}
    for i, (model, _) in enumerate(models):
        scores = A.censored_below(0.2 if i % 3 == 0 else (i % 10) / 10)
        cells.update({(model, t): family_of(t).lead_score(scores[t]) for t in tasks})
    groups = {(m, t): "abc"[i % 3] for i, (m, _) in enumerate(models) for t in (T.SIL, T.MARK)}
    return F.agreement_matrix_figure(models, [(t, cells[(models[0][0], t)].name) for t in tasks], cells,
                                     groups=groups, groups_note=NOTE)


def drawn_texts(fig):
    """Every text the saved image shows (matplotlib keeps labels of ticks it does not draw)."""
    undrawn = set()
    for ax in fig.axes:
        for axis, labels, limits in ((0, ax.get_xticklabels(), ax.get_xlim()),
                                     (1, ax.get_yticklabels(), ax.get_ylim())):
            lo, hi = sorted(limits)
            shown = (ax.xaxis, ax.yaxis)[axis].get_visible()
            undrawn |= {t for t in labels if not shown or not lo - 1e-9 <= t.get_position()[axis] <= hi + 1e-9}
    return [t for t in fig.findobj(F.plt.Text) if t.get_visible() and t.get_text() and t not in undrawn]


@pytest.mark.parametrize("n_models", [3, 100])
def test_every_matrix_text_lies_within_the_image_and_reads_at_1600_px(n_models):
    """Drawn at the saved resolution: each text's extent (the renderer's, line breaks included)
    lies within the image's pixels; the image is at most 1600 px wide, so a 1600 px screen shows
    it unscaled; and every text's cap height is at least 8 px there. 8 px is the cap height of an
    11 px sans-serif (DejaVu Sans: cap height 0.73 em), about the smallest print a screen shows
    with its digits told apart (3/8, 5/6); the cells' 7 pt text at 150 dpi is 10.6 px."""
    fig = matrix(n_models)
    fig.set_dpi(DPI)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    assert width <= SCREEN_PX, width
    texts = drawn_texts(fig)
    assert len(fig.axes[0].texts) == 3 * n_models
    for t in texts:
        box = t.get_window_extent(renderer)
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, (t.get_text(), box, width, height)
        cap = renderer.get_text_width_height_descent("H", t.get_fontproperties(), ismath=False)[1]
        assert cap >= MIN_CAP_PX, (t.get_text(), cap)
    F.plt.close(fig)


@pytest.mark.parametrize("n_models", [3, 100])
def test_the_matrix_subtitle_is_whole_and_its_lines_fit_the_figure(n_models):
    """The note under the title, as the report writes it, is wrapped into lines within the
    figure's width, every word of it kept in order (it was one line, cut off on both sides)."""
    fig = matrix(n_models)
    fig.set_dpi(DPI)
    fig.canvas.draw()
    title = fig._suptitle
    assert title.get_text().split() == ("Headline score per task and model (95% bootstrap CI); models grouped by "
                                        f"family {NOTE}").split()
    assert len(title.get_text().splitlines()) > 2
    box = title.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
    grid = fig.axes[0].get_window_extent(fig.canvas.get_renderer())
    assert box.y0 > grid.y1  # above the cells and their headers, not over them
    F.plt.close(fig)


def test_a_task_without_an_order_is_left_uncoloured_and_named_with_its_band():
    """Series counting's capacity has no order (people's band): its cells carry no colour of a
    floor-to-ceiling position, and its header names the band instead of a floor."""
    import numpy as np

    fig = matrix(3)
    colour = np.ma.getdata(fig.axes[0].images[0].get_array())
    header = fig.axes[0].get_xticklabels()[2].get_text()
    F.plt.close(fig)
    assert np.isnan(colour[:, 2]).all() and np.isfinite(colour[:, :2]).all()
    assert "capacity" in header and "6-12" in header and "floor" not in header
