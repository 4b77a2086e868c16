"""The bar-chart battery's Grad-CAM overlay figure (GRAPE Fig. 8): which charts it shows, and that
each panel's IoU is the one scores/mlae.py computes for that record."""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.reports.bars_figures import bars_battery_figures, gradcam_examples
from harness.reports.battery import battery_figures
from harness.reports.figures import close
from harness.scores import mlae as M
from harness.stimuli.bars.render import target_masks
from harness.stimuli.bars.tasks import build_grape, build_haehn

TASK = "ratio.chart.grape_type1"
NAME = f"{TASK}.gradcam_overlays.png"


@pytest.fixture(scope="module")
def grape_set(sources):
    return build_grape(sources, 0, chart_type=1, n_train=2, n_val=1, n_test=6, n_ood=6,
                       ood={"bar_width": [5], "title_position": [0.05]})


def _mask(s):
    return target_masks(s.image_source.charts, [s.image_source.index])[0]


def _cam(mask, cell):
    """A CAM at 1/cell of the image's resolution: the mask's share of each cell."""
    h, w = mask.shape
    return mask.reshape(h // cell, cell, w // cell, cell).mean(axis=(1, 3))


def _record(s, cam=None):
    r = {"stimulus_id": s.stimulus_id, "response": s.ground_truth, "ground_truth": s.ground_truth,
         "parse_status": "ok", "manipulated_value": s.manipulated_value, "prompt_id": None}
    if cam is not None:
        r["extras"] = {"gradcam": {"shape": list(cam.shape), "values": cam.ravel().tolist()}}
    return r


def _records(stimset, skip=()):
    """IID charts get a CAM hot exactly on their marked bars, perturbed ones a CAM hot everywhere
    else; the OOD records come first and title_position before bar_width, so the figure has to
    find the IID charts and prefer bar_width on its own."""
    iid, ood = [], []
    for s in stimset.test:
        mask = _mask(s)
        if s.manipulated_value:
            ood.append(_record(s, _cam(~mask, 5)))
        else:
            iid.append(_record(s, None if s.stimulus_id in skip else _cam(mask, 5)))
    ood.sort(key=lambda r: r["manipulated_value"]["parameter"] != "title_position")
    return ood + iid


def _panels(fig):
    """(row label, title, x label) of every image panel, row by row."""
    out, label = [], None
    for ax in fig.axes:
        if not ax.images:
            continue
        label = ax.get_ylabel() or label
        out.append((label, ax.get_title(), ax.get_xlabel()))
    return out


def _iou(title):
    return float(re.fullmatch(r"IoU (\d\.\d{3})", title)[1])


def test_overlay_pairs_iid_charts_with_their_bar_width_twins(grape_set):
    skip = {"grape_type1-test-000001"}  # no map: the next IID chart takes its place
    records = _records(grape_set, skip)
    figs = battery_figures(TASK, records, [], grape_set, "tiny-cnn")
    assert NAME in figs
    fig = figs[NAME]
    panels = _panels(fig)
    assert len(panels) == 8 and len(fig.axes) == 8 + 1  # 2 rows x 4 charts, and the colour bar
    assert all(len(ax.images) == 2 for ax in fig.axes[:8])  # chart + heatmap
    ids = [x for _, _, x in panels]
    assert ids[:4] == [f"grape_type1-test-00000{i}" for i in (0, 2, 3, 4)]
    stimuli = {s.stimulus_id: s for s in grape_set.stimuli}
    assert [stimuli[i].meta["base_id"] for i in ids[4:]] == ids[:4]  # twins column by column
    assert all(stimuli[i].manipulated_value == {"parameter": "bar_width", "level": 5} for i in ids[4:])
    assert {lab for lab, _, _ in panels[:4]} == {"IID"}
    assert {lab for lab, _, _ in panels[4:]} == {"bar_width = 5"}
    by_id = {r["stimulus_id"]: r for r in records}
    for _, title, sid in panels:
        cam = by_id[sid]["extras"]["gradcam"]
        expected = M.gradcam_iou(np.reshape(cam["values"], cam["shape"]), _mask(stimuli[sid]))
        assert _iou(title) == pytest.approx(expected, abs=5e-4)
    ious = [_iou(t) for _, t, _ in panels]
    assert min(ious[:4]) > 0.4 and max(ious[4:]) < 0.05  # on the bars vs everywhere else
    close(figs)


def test_overlay_falls_back_to_the_first_parameter_and_to_iid_only(grape_set):
    records = [r for r in _records(grape_set)
               if (r["manipulated_value"] or {}).get("parameter") != "bar_width"]
    rows = gradcam_examples(records, grape_set, k=2)
    assert [label for label, _ in rows] == ["IID", "title_position = 0.05"]
    assert [s.meta["base_id"] for _, s in rows[1][1]] == [s.stimulus_id for _, s in rows[0][1]]
    iid_only = [r for r in records if not r["manipulated_value"]]
    rows = gradcam_examples(iid_only, grape_set)
    assert [label for label, _ in rows] == ["IID"] and len(rows[0][1]) == 4


def test_no_overlay_without_gradcam(grape_set):
    records = [_record(s) for s in grape_set.test]
    figs = bars_battery_figures(TASK, records, [], grape_set, "m")
    assert NAME not in figs and f"{TASK}.mlae_vs_humans.png" in figs
    assert gradcam_examples(records, grape_set) == []
    close(figs)


def test_overlay_of_grayscale_haehn_charts(sources):
    ss = build_haehn(sources, 0, chart_type=1, n_train=2, n_val=1, n_test=3)
    records = [_record(s, _cam(_mask(s), 4)) for s in ss.test]  # Haehn's charts are 100 x 100
    figs = bars_battery_figures(ss.task_id, records, [], ss, "m")
    fig = figs[f"{ss.task_id}.gradcam_overlays.png"]
    panels = _panels(fig)
    assert len(panels) == 3 and {lab for lab, _, _ in panels} == {"IID"}  # no OOD twins: one row
    assert fig.axes[0].images[0].get_array().shape == (100, 100)
    for (_, title, sid), r in zip(panels, records):
        cam = r["extras"]["gradcam"]
        s = next(x for x in ss.test if x.stimulus_id == sid)
        assert _iou(title) == pytest.approx(M.gradcam_iou(np.reshape(cam["values"], cam["shape"]),
                                                          _mask(s)), abs=5e-4)
    close(figs)


def test_gradcam_scaled_is_what_the_iou_thresholds():
    heat = np.random.default_rng(0).random((6, 6))
    scaled = M.gradcam_scaled(heat, (30, 30))
    assert scaled.shape == (30, 30) and scaled.min() == 0.0 and scaled.max() == pytest.approx(255.0)
    mask = scaled >= 100
    assert M.gradcam_iou(heat, mask, threshold=100) == 1.0
    assert not M.gradcam_scaled(np.ones((3, 3)), (9, 9)).any()  # a constant map has no hot region


def test_generalization_matrix_of_networks_and_test_conditions():
    import math

    from harness.reports.bars_figures import generalization_matrix, generalization_matrix_figure
    from harness.reports.report import BatteryRunData, report_figures
    from harness.scores.record import Score

    def sc(name, value):
        return Score(name=name, value=value, ci_low=None, ci_high=None, n=10, nulls=0, method="m", version="1")

    standard = [sc("mlae", -1.0), sc("ood.bar_width.5.mlae", 3.0), sc("ood.bar_width.9.mlae", 4.0),
                sc("ood.dot_position.2.mlae", 5.0), sc("ood.bar_width.5.delta_mlae", 9.9)]
    mask = [sc("mlae", -0.5), sc("ood.bar_width.5.mlae", 1.0), sc("ood.bar_width.9.mlae", 2.0)]
    rows, cells = generalization_matrix([("standard", standard), ("mask", mask)])
    assert rows == ["IID", "bar_width", "dot_position"]
    assert cells[:, 0].tolist() == [-1.0, 3.5, 5.0]  # a parameter's cell: the mean over its levels
    assert cells[:2, 1].tolist() == [-0.5, 1.5] and math.isnan(cells[2, 1])  # not tested there
    fig = generalization_matrix_figure([("standard", standard), ("mask", mask)])
    assert [t.get_text() for t in fig.axes[0].texts] == ["-1.00", "-0.50", "3.50", "1.50", "5.00"]
    # a network that answered nothing readable (its MLAEs None, as intervals.json logs them): blank cells
    silent = [sc("mlae", None), sc("ood.bar_width.5.mlae", None), sc("ood.bar_width.9.mlae", 2.0)]
    rows, cells = generalization_matrix([("standard", standard), ("silent", silent)])
    assert np.isnan(cells[:, 1]).all() and cells[:, 0].tolist() == [-1.0, 3.5, 5.0]

    def run(model, scores):
        return BatteryRunData(run_id=model, model=model, family="cnn", recipe="r", params={}, tags={},
                              metrics={}, scores=scores, unavailable={})

    from harness.reports.report import Headlines
    heads = Headlines({}, {}, {})
    two = report_figures([run("a", {TASK: standard, f"{TASK}:mask": mask})], heads)
    assert "generalization_matrix.png" in two
    assert "generalization_matrix.png" not in report_figures([run("a", {TASK: standard})], heads)
