"""CHART-6 figures (the paper's Figures 4-7) from score_chart6 scores of synthetic presentations.

What a figure draws is read back from its artists and checked against the scores (and, for the
pooled breakdowns, against the per-item proportions recomputed from the records)."""

import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

TESTS_USED = ("ggr", "vlat", "calvi", "holf")
N_REPS = 3


def _wrong(s):
    if s.meta["options"]:
        return next(o for o in s.meta["options"] if o != s.ground_truth)
    return (abs(s.ground_truth) + 1) * 3  # far outside the 5% band


def synthetic_records(stimset, model: str, skill: float, valid: float, seed: int) -> list[dict]:
    """Presentations answered correctly with probability skill x the item's human accuracy
    (so errors follow people's), invalid with probability 1 - valid."""
    rng = np.random.default_rng(seed)
    records = []
    for s in stimset.test:
        p = skill * (s.human_target if s.human_target is not None else 0.5)
        for rep in range(N_REPS):
            ok = rng.random() < valid
            response = (s.ground_truth if rng.random() < p else _wrong(s)) if ok else None
            records.append({"trial_id": f"{stimset.task_id}|{s.stimulus_id}|{model}|rep{rep}",
                            "stimulus_id": s.stimulus_id, "rep": rep, "response": response,
                            "parse_status": "ok" if ok else "null:no_answer"})
    return records


@pytest.fixture(scope="module")
def battery(sources):
    """{model: {task_id: (stimset, records, scores)}} for two models on four tests."""
    from harness.scores.chart6 import score_chart6
    from harness.scores.tasks import Bootstrap
    from harness.stimuli.registry import get_task

    out: dict = {}
    for key in TESTS_USED:
        stimset = get_task(f"literacy.chart.{key}").build(sources)
        for seed, (model, skill, valid) in enumerate((("model-a", 0.9, 0.8), ("model-b", 0.5, 0.6))):
            records = synthetic_records(stimset, model, skill, valid, seed)
            scores = score_chart6(records, stimset, boot=Bootstrap(n_boot=300), n_splits=100)
            out.setdefault(model, {})[stimset.task_id] = (stimset, records, scores)
    return out


def scores_of(battery):
    return {m: {t: v[2] for t, v in tasks.items()} for m, tasks in battery.items()}


def named(scores, name):
    return next(s for s in scores if s.name == name)


def errorbar_points(ax) -> list[tuple[float, float]]:
    return [tuple(np.ravel(c.lines[0].get_data())) for c in ax.containers if isinstance(c, ErrorbarContainer)]


def test_battery_figures_of_one_test(battery, tmp_path):
    import matplotlib.pyplot as plt

    from harness.reports.chart6_figures import chart6_battery_figures
    from harness.scores.chart6 import item_table

    stimset, records, scores = battery["model-a"]["literacy.chart.calvi"]
    figs = chart6_battery_figures(stimset.task_id, records, scores, stimset, "model-a")
    assert set(figs) == {f"literacy.chart.calvi.{n}.png" for n in
                         ("accuracy", "error_pattern", "by_graph_type", "by_task_category", "by_item_kind")}
    for name, fig in figs.items():
        assert isinstance(fig, Figure)
        fig.savefig(tmp_path / name)
        assert (tmp_path / name).stat().st_size > 10_000
    # Figure 5 for one test: the humans, then the model's upper (filled) and lower (empty) bound
    ax = figs["literacy.chart.calvi.accuracy.png"].axes[0]
    ys = [y for _, y in errorbar_points(ax)]
    expected = [named(scores, n).value for n in ("human_accuracy", "accuracy_valid", "accuracy_all")]
    assert ys == pytest.approx(expected)
    assert "valid responses" in ax.get_xticklabels()[0].get_text()
    # the error-pattern scatter is the two per-item vectors behind error_r (up to 0.012 jitter)
    table = item_table(records, stimset)
    scatter = figs["literacy.chart.calvi.error_pattern.png"].axes[0].collections
    human = stimset.human.prop_correct
    np.testing.assert_allclose(scatter[1].get_offsets(), np.c_[human, table.p_all], atol=0.0125)
    # by item kind: CALVI's misleading vs standard items, model and humans per level
    kind = figs["literacy.chart.calvi.by_item_kind.png"].axes[0]
    assert [t.get_text() for t in kind.get_yticklabels()] == ["standard", "misleading"]  # easier first
    xs = sorted(round(x, 9) for x, _ in errorbar_points(kind))
    want = sorted(round(named(scores, f"item_kind/{lvl}/{m}").value, 9) for lvl in ("standard", "misleading")
                  for m in ("human_accuracy", "accuracy_valid", "accuracy_all"))
    assert xs == want
    plt.close("all")


def test_report_figures_across_models(battery):
    import matplotlib.pyplot as plt

    from harness.reports.chart6_figures import chart6_report_figures

    by_model = scores_of(battery)
    by_model["model-a"]["closure.nat.silhouette"] = []  # other batteries' tasks are ignored
    figs = chart6_report_figures(by_model)
    assert set(figs) == {f"chart6.{n}.png" for n in
                         ("valid_rate", "accuracy", "error_pattern", "by_graph_type", "by_task_category")}
    # Figure 4: one bar per model and test, at its valid rate
    bars = sorted(round(p.get_height(), 9) for p in figs["chart6.valid_rate.png"].axes[0].patches)
    want = sorted(round(named(s, "valid_rate").value, 9) for tasks in by_model.values()
                  for t, s in tasks.items() if t.startswith("literacy."))
    assert bars == want
    # Figure 5: (A) multiple-choice tests, (B) numerical-response tests
    acc = figs["chart6.accuracy.png"].axes
    assert [a.get_title() for a in acc[:2]] == ["(A) multiple-choice tests", "(B) numerical-response tests"]
    assert [t.get_text() for t in acc[0].get_xticklabels()] == ["GGR", "VLAT", "CALVI"]
    holf = {round(y, 9) for _, y in errorbar_points(acc[1])}
    for model in by_model:
        s = by_model[model]["literacy.chart.holf"]
        assert {round(named(s, n).value, 9) for n in ("accuracy_valid", "accuracy_all", "human_accuracy")} <= holf
    # Figure 7: the ceiling band of each test is its noise ceiling's interval
    err = figs["chart6.error_pattern.png"].axes[0]
    bands = [c.get_paths()[0].vertices[:, 1] for c in err.collections if c.get_label().startswith("human noise")]
    assert len(bands) == len(TESTS_USED)
    for band, key in zip(bands, TESTS_USED):
        ceiling = named(by_model["model-a"][f"literacy.chart.{key}"], "noise_ceiling")
        assert band.min() == pytest.approx(ceiling.ci_low) and band.max() == pytest.approx(ceiling.ci_high)
    # Figure 6: levels split by assessment group, task categories in the paper's order
    cats = [t.get_text() for t in figs["chart6.by_task_category.png"].axes[0].get_yticklabels()]
    assert cats[:3] == [f"{c} (multiple-choice)" for c in
                        ("value identification", "arithmetic computation", "statistical inference")]
    assert all(c.endswith("(numerical-response)") for c in cats[3:])
    assert chart6_report_figures({"m": {"closure.nat.silhouette": []}}) == {}
    plt.close("all")


def test_pooled_breakdown_is_the_mean_over_pooled_items(battery):
    from harness.reports.chart6_figures import breakdown_levels, pool
    from harness.scores.chart6 import item_table

    tasks = {t: v for t, v in battery["model-b"].items() if t in ("literacy.chart.vlat", "literacy.chart.calvi")}
    levels = breakdown_levels({t: v[2] for t, v in tasks.items()}, "graph_type", split_groups=True)
    per_test = []
    for stimset, records, _ in tasks.values():
        table = item_table(records, stimset)
        bar = np.array([s.meta["graph_type"] == "bar" for s in stimset.test]) & (table.total > 0)
        per_test.append(table.p_all[bar])
    pooled = levels["bar (multiple-choice)"]["accuracy_all"]
    items = np.concatenate(per_test)
    assert pooled.tests == 2 and pooled.n == len(items)
    assert pooled.value == pytest.approx(items.mean())
    # its interval approximates the stratified bootstrap (items resampled within each test)
    rng = np.random.default_rng(0)
    draws = np.array([sum(rng.choice(p, len(p)).sum() for p in per_test) / len(items) for _ in range(4000)])
    lo, hi = np.quantile(draws, [0.025, 0.975])
    assert pooled.ci_high - pooled.ci_low == pytest.approx(hi - lo, rel=0.3)
    # one test: its own percentile interval, unchanged
    s = named(tasks["literacy.chart.vlat"][2], "graph_type/bar/accuracy_all")
    one = pool([s])
    assert (one.value, one.ci_low, one.ci_high) == (s.value, s.ci_low, s.ci_high)


def test_rejects_other_tasks():
    from harness.reports.chart6_figures import chart6_battery_figures

    with pytest.raises(ValueError, match="not a CHART-6 task"):
        chart6_battery_figures("closure.nat.silhouette", [], [], None, "m")
