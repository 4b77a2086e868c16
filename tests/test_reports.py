"""Per-run figures and the cross-model report (``gestalt report``), on synthetic battery runs logged
through the real BatteryRun logger into a temporary sqlite store."""

import base64
import csv
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from harness.scores.ranking import CORRECTION, UNPAIRED_CORRECTION
from harness.scores.record import Score
from harness.scores.tasks import family_of

SIL, MARK, SERIES, THINGS = ("closure.nat.silhouette", "similarity.chart.mark_color",
                             "similarity.chart.series_count", "similarity.nat.things")
SHA = {SIL: "a1" * 32, MARK: "b2" * 32, SERIES: "c3" * 32}


def sc(name, value, n, nulls=0, ci=0.08, **kw):
    lo = None if ci is None else max(value - ci, 0.0)
    hi = None if ci is None else value + ci
    return Score(name=name, value=value, ci_low=lo, ci_high=hi, n=n, nulls=nulls,
                 method="synthetic", version="1", **kw)


def battery_scores(level: float, nulls: int = 0) -> dict[str, list[Score]]:
    """Score records named and shaped as the real scorers emit them; ``level`` sets the model."""
    n_sil = 80 - nulls
    v = nulls / 80
    b = 0.30 + 0.4 * level
    silhouette = [
        sc("accuracy", 0.40 + 0.5 * level, n_sil, nulls, floor=1 / 16, extra={"human_accuracy": 0.73}),
        sc("B", b, n_sil, nulls, floor=1 / 16, ceiling=0.71,
           extra={"B_full_low": (1 - v) * b, "B_full_high": (1 - v) * b + v, "null_fraction": v}),
        sc("kappa", 0.10 + 0.35 * level, n_sil, nulls, floor=0.0, ceiling=0.4925,
           extra={"ceiling_ci": [0.43, 0.55], "ceiling_loo": 0.48}),
        sc("kappa_pairwise", 0.09 + 0.35 * level, n_sil, nulls, floor=0.0, ceiling=0.4925),
        sc("human_kappa_pairwise", 0.4925, 80, ci=0.06),
        sc("human_kappa_loo", 0.48, 80, ci=0.06),
    ]
    bk = 0.40 + 0.3 * (1 - level)  # ranks reversed against the silhouettes on purpose
    mark = [
        sc("B", bk, 120, floor=0.35, ceiling=0.78,
           extra={"reference": "kernel", "position_shares": [0.31, 0.34, 0.35],
                  "human_vs_reference": 0.70, "B_full_low": bk, "B_full_high": bk}),
        sc("B_majority", bk - 0.05, 120, floor=0.36, ceiling=0.78,
           extra={"reference": "majority", "position_shares": [0.30, 0.34, 0.36],
                  "human_vs_reference": 0.78, "B_full_low": bk - 0.05, "B_full_high": bk - 0.05}),
        sc("human_majority_split_half", 0.78, 120, ci=0.02),
        sc("human_individual_agreement_loo", 0.74, 120, ci=0.02),
    ]
    a = [max(0.0, min(1.0, 1.1 - k * (0.05 + 0.04 * (1 - level)))) for k in range(1, 21)]
    cap = next((k for k in range(1, 21) if a[k - 1] < 0.5), 21) - 1
    series = [sc("accuracy", float(np.mean(a)), 40, floor=0.05),
              sc("mae", 2.0 - level, 40, ci=0.5, extra={"constant_median_mae": 5.0})]
    series += [sc(f"a_k{k:02d}", a[k - 1], 2, ci=0.25) for k in range(1, 21)]
    series += [sc("capacity", float(cap), 40, ci=2.0, extra={"band": [6, 12], "in_band": 6 <= cap <= 12}),
               sc("capacity_in_band", float(6 <= cap <= 12), 40, ci=None, extra={"band": [6, 12]})]
    return {SIL: silhouette, MARK: mark, SERIES: series}


def log_battery_run(uri, experiment, model, family, level, *, tmp_path, nulls=0, fail=False,
                    model_version=None, figure=False, recipe="synthetic"):
    """One battery run as harness.run logs it (same logger, metric names and artifacts)."""
    from harness.tracking.mlflow_run import BatteryRun

    scores = battery_scores(level, nulls)
    tags = {"gestalt.model": model, "gestalt.recipe": recipe, "gestalt.recipe_sha256": "f" * 64,
            "gestalt.family": family}
    intervals = {}
    try:
        with BatteryRun(uri=uri, experiment=experiment, run_name=model, tags=tags, tasks=list(scores)) as run:
            run.log_params({"model": model, "model_version": model_version or f"timm:{model}@v1",
                            "model_family": family, "harness_version": "0.test", "seed": 0,
                            "readouts": "synthetic", "weights": "pypi:x"})
            for task, task_scores in scores.items():
                n_null = nulls if task == SIL else 0
                n = 80 if task == SIL else (120 if task == MARK else 40)
                records = [{"parse_status": "null:refused" if i < n_null else "ok"} for i in range(n)]
                path = tmp_path / f"{model}-{task}.jsonl"
                path.write_text("".join(json.dumps(r) + "\n" for r in records))
                figs = {}
                if figure and task == SIL:
                    from harness.reports.figures import plt
                    fig, ax = plt.subplots(figsize=(2, 2))
                    ax.plot([0, 1], [0, 1])
                    figs[f"{SIL}.confusion.png"] = fig
                run.log_task(task, task_scores, records, figs, path)
                intervals[task] = {"version": "1", "readout": "synthetic", "stimulus_set_sha256": SHA[task],
                                   "scores": [s.to_dict() for s in task_scores]}
            intervals[THINGS] = {"unavailable": "THINGS object images are not in the source mirror"}
            run.log_battery(intervals=intervals, recipe={"name": recipe}, recipe_sha256="f" * 64,
                            stimulus_sets={t: SHA[t] for t in SHA})
            if fail:
                raise RuntimeError("crash")
    except RuntimeError:
        pass
    return run.run_id, scores


MODELS = [("dino-s", "self-supervised", 0.9), ("resnet-a", "supervised", 0.2),
          ("resnet-b", "supervised", 0.6)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{tmp}/mlflow.db"
    # superseded by the later run of the same model; a FAILED run is never read
    log_battery_run(uri, "rep", "resnet-b", "supervised", 0.05, tmp_path=tmp)
    runs = {}
    for model, family, level in MODELS:
        runs[model] = log_battery_run(uri, "rep", model, family, level, tmp_path=tmp,
                                      nulls=4 if model == "resnet-a" else 0,
                                      figure=model == "dino-s")
    log_battery_run(uri, "rep", "crashed", "supervised", 0.5, tmp_path=tmp, fail=True)
    return SimpleNamespace(uri=uri, tmp=tmp, runs=runs)


@pytest.fixture(scope="module")
def report(store):
    from harness.reports.report import build_report

    out = store.tmp / "report"
    written = build_report(store.uri, "rep", out)
    return SimpleNamespace(out=out, written=written)


def test_report_writes_every_file_from_the_latest_finished_runs(store, report):
    out = report.out
    for name in ("matrix.png", "accuracy_vs_kappa.png", "a_k.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert not (out / "rank_correlations.png").exists()  # 3 models: no rho told from chance
    for name in ("scores.csv", "scores.md", "rank_correlations.csv", "index.html", "runs.json"):
        assert (out / name).stat().st_size > 0
    runs = json.loads((out / "runs.json").read_text())
    used = [u for u in runs if u["answers"]]
    assert {u["model"]: u["run_id"] for u in used} == {m: store.runs[m][0] for m, _, _ in MODELS}
    # the run the later one replaced: listed, with what replaced it
    (old,) = [u for u in runs if not u["answers"]]
    assert old["model"] == "resnet-b" and set(old["superseded"].values()) == {store.runs["resnet-b"][0]}
    # families in the paper's order (supervised first); within one, the best mean position
    # between floor and ceiling (1 where none) over the headline scores that order models (series
    # counting's capacity has no order) comes first
    assert [u["family"] for u in used] == ["supervised", "supervised", "self-supervised"]

    def mean_position(model):
        heads = [next(s for s in task if s.name == "B") for t, task in store.runs[model][1].items() if t != SERIES]
        return np.mean([(s.value - s.floor) / ((s.ceiling or 1.0) - s.floor) for s in heads])

    assert mean_position(used[0]["model"]) > mean_position(used[1]["model"])
    assert sorted(p.name for p in (out / "scorecards").iterdir()) == [f"{m}.html" for m in
                                                                      sorted(m for m, _, _ in MODELS)]


def test_scores_table_has_cis_floors_ceilings_null_rates_and_bracket(store, report):
    rows = list(csv.DictReader((report.out / "scores.csv").open()))
    names = {r["score"] for r in rows}
    assert not any(re.match(r"a_k\d+$", n) or n.startswith("human_") for n in names)
    assert {"accuracy", "B", "kappa", "kappa_pairwise", "B_majority", "mae", "capacity"} <= names
    for model, _, _ in MODELS:
        scores = store.runs[model][1]
        for task, task_scores in scores.items():
            for s in task_scores:
                if s.name.startswith("human_") or s.name.startswith("a_k"):
                    continue
                row = next(r for r in rows if (r["model"], r["task"], r["score"]) == (model, task, s.name))
                assert float(row["value"]) == pytest.approx(s.value)
                if s.ci_low is not None:
                    assert float(row["ci_low"]) == pytest.approx(s.ci_low)
                assert (row["floor"] == "") == (s.floor is None)
                assert (row["ceiling"] == "") == (s.ceiling is None)
                if s.name in ("B", "B_majority", "accuracy"):
                    v = s.nulls / (s.n + s.nulls)
                    assert float(row["full_low"]) == pytest.approx((1 - v) * s.value)
                    assert float(row["full_high"]) == pytest.approx((1 - v) * s.value + v)
                else:
                    assert row["full_low"] == ""
        unavailable = next(r for r in rows if r["model"] == model and r["task"] == THINGS)
        assert unavailable["note"].startswith("unavailable:")
    a_sil = next(r for r in rows if r["model"] == "resnet-a" and r["task"] == SIL and r["score"] == "B")
    assert float(a_sil["task_null_rate"]) == pytest.approx(4 / 80)
    md = (report.out / "scores.md").read_text()
    assert "| resnet-a | supervised | closure.nat.silhouette | B |" in md


# resources a page would fetch; a link (<a href>) to the MLflow run is navigation, not a resource
EXTERNAL = re.compile(r"""(?:src|(?<!<a )href)\s*=\s*["']?\s*(?:https?:)?//|@import|url\(|<script|<link""", re.I)


def test_scorecards_are_self_contained_and_carry_each_models_numbers(store, report):
    for model, family, _ in MODELS:
        page = (report.out / "scorecards" / f"{model}.html").read_text()
        assert not EXTERNAL.search(page)
        srcs = re.findall(r'<img[^>]*src="([^"]+)"', page)
        assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
        assert all(base64.b64decode(s.split(",", 1)[1])[:4] == b"\x89PNG" for s in srcs)
        assert store.runs[model][0] in page and family in page
        for task, task_scores in store.runs[model][1].items():
            for name in ("B", "accuracy", "kappa", "capacity"):
                s = next((x for x in task_scores if x.name == name), None)
                if s is not None:  # with its family's decimals, as on every surface
                    d = family_of(task).decimals_of(name)
                    assert f"<td class=num>{s.value:.{d}f}</td>" in page, (model, task, name)
        null_rate = 4 / 80 if model == "resnet-a" else 0.0
        assert f"<td>{SIL}</td><td>{null_rate:.3f}</td>" in page
        assert f"<td>{THINGS}</td><td>unavailable</td>" in page
        # redrawn from intervals: a(k) and the odd-one-out references for every model
        assert f"{SERIES}.a_k.png" in page and f"{MARK}.agreement.png" in page
    # the logged figure of a run is embedded as it was logged
    assert f"{SIL}.confusion.png" in (report.out / "scorecards" / "dino-s.html").read_text()
    index = (report.out / "index.html").read_text()
    assert not EXTERNAL.search(index.replace('href="scorecards/', ""))
    assert all(f'href="scorecards/{m}.html"' in index for m, _, _ in MODELS)


def test_rank_correlation_matches_the_spearman_formula():
    from harness.reports.report import rank_correlations

    a = {"m1": 0.1, "m2": 0.2, "m3": 0.3, "m4": 0.4, "m5": 0.9}
    b = {"m1": 0.5, "m2": 0.3, "m3": 0.6, "m4": 0.7, "only_b": 0.1}
    c = {"m1": 0.2, "m2": 0.2}
    rho, n = rank_correlations({"a": a, "b": b, "c": c}, ["a", "b", "c"])
    shared = ["m1", "m2", "m3", "m4"]  # ranks a: 1 2 3 4, b: 2 1 3 4
    d = np.argsort(np.argsort([a[m] for m in shared])) - np.argsort(np.argsort([b[m] for m in shared]))
    expected = 1 - 6 * float((d ** 2).sum()) / (4 * (4 ** 2 - 1))
    assert expected == pytest.approx(0.8)
    assert rho[0, 1] == pytest.approx(expected) and rho[1, 0] == pytest.approx(expected)
    assert n[0, 1] == 4 and n[0, 0] == 5 and n[1, 1] == 5
    assert np.isnan(rho[0, 2]) and n[0, 2] == 2  # two shared models: no correlation
    assert rho[0, 0] == pytest.approx(1.0)


def test_report_rank_correlations_csv_over_models(store, report):
    rows = list(csv.DictReader((report.out / "rank_correlations.csv").open()))
    pair = next(r for r in rows if {r["task_a"], r["task_b"]} == {SIL, MARK})
    assert int(pair["n"]) == 3 and {pair["score_a"], pair["score_b"]} == {"B"}
    # the synthetic mark-colour B is built to reverse the silhouette order exactly
    assert float(pair["spearman_rho"]) == pytest.approx(-1.0)
    # series counting's headline, the capacity in or out of people's band, has no order to correlate
    assert not any(SERIES in (r["task_a"], r["task_b"]) for r in rows)


def test_report_on_chosen_runs_and_bad_requests(store, tmp_path):
    from harness.reports.report import ReportError, build_report

    ids = [store.runs["dino-s"][0], store.runs["resnet-a"][0]]
    build_report(store.uri, "rep", tmp_path / "two", run_ids=ids)
    used = json.loads((tmp_path / "two" / "runs.json").read_text())
    assert sorted(u["run_id"] for u in used) == sorted(ids)
    with pytest.raises(ReportError, match="no experiment 'nope'"):
        build_report(store.uri, "nope", tmp_path / "x")
    with pytest.raises(ReportError, match="recipe 'other'"):
        build_report(store.uri, "rep", tmp_path / "x", recipe="other")


def test_per_run_figures_for_series_count_and_odd_one_out():
    from harness.reports.battery import battery_figures
    from harness.reports.figures import close

    scores = battery_scores(0.5)
    no_observers = SimpleNamespace(human={}, task_id=SERIES)
    figs = battery_figures(SERIES, [], scores[SERIES], no_observers, "m")
    assert set(figs) == {f"{SERIES}.a_k.png"}
    ax = figs[f"{SERIES}.a_k.png"].axes[0]
    line = ax.lines[-2] if ax.lines[-1].get_marker() == "v" else ax.lines[-1]
    assert list(line.get_xdata()) == list(range(1, 21))
    assert list(line.get_ydata()) == [s.value for s in scores[SERIES] if s.name.startswith("a_k")]
    close(figs)
    figs = battery_figures(MARK, [], scores[MARK], SimpleNamespace(human={}, task_id=MARK), "m")
    assert set(figs) == {f"{MARK}.agreement.png"}
    labels = [t.get_text() for t in figs[f"{MARK}.agreement.png"].axes[0].get_yticklabels()]
    assert labels[0].startswith("B vs kernel") and labels[1].startswith("B_majority vs majority")
    close(figs)


def test_figures_are_the_ones_each_scoring_family_names(monkeypatch):
    """A scoring family names its figures; the run and the report draw what the tasks' families
    name, so a family that names none gets none, whatever its task ids."""
    import dataclasses

    from harness.reports import report as R
    from harness.reports.battery import RUN_FIGURES, battery_figures
    from harness.reports.figures import close
    from harness.scores import tasks as T

    for family in T.FAMILIES.values():  # every figure a family names has a drawing
        assert set(family.run_figures) <= set(RUN_FIGURES), family.name
        assert set(family.report_figures) <= set(R.REPORT_FIGURES), family.name
    runs = [R.BatteryRunData(run_id=m, model=m, family="f", recipe="r", params={}, tags={}, metrics={},
                             scores={SERIES: battery_scores(level)[SERIES]}, unavailable={})
            for m, level in (("m1", 0.2), ("m2", 0.8))]
    heads = R.headlines(runs, [SERIES])
    stimset = SimpleNamespace(human={}, task_id=SERIES)
    assert "a_k.png" in R.report_figures(runs, heads)
    figs = battery_figures(SERIES, [], runs[0].scores[SERIES], stimset, "m1")
    assert set(figs) == {f"{SERIES}.a_k.png"}
    close(figs)
    silent = dataclasses.replace(T.FAMILIES["capacity"], run_figures=(), report_figures=())
    monkeypatch.setitem(T.FAMILIES, "capacity", silent)
    assert "a_k.png" not in R.report_figures(runs, heads)
    assert battery_figures(SERIES, [], runs[0].scores[SERIES], stimset, "m1") == {}


def test_index_lists_every_task_humans_captions_and_run_links(store, report):
    from PIL import Image

    index = (report.out / "index.html").read_text()
    for task in (SIL, MARK, SERIES, THINGS):
        assert f"<td>{task}</td>" in index
    assert "THINGS object images are not in the source mirror" in index  # unavailable, with the reason
    assert "Human references" in index and "human_kappa_pairwise" in index
    figures = re.findall(r"<figure>.*?</figure>", index, re.S)
    assert len(figures) >= 3
    for fig in figures:
        caption = re.search(r"<figcaption>(.*?)</figcaption>", fig, re.S).group(1)
        assert "n = " in caption or "n per cell" in caption, caption
        assert "bootstrap" in caption or "no interval" in caption, caption
    for model, _, _ in MODELS:
        run_id = store.runs[model][0]
        page = (report.out / "scorecards" / f"{model}.html").read_text()
        assert f"<code>{run_id}</code>" in page and "127.0.0.1" not in page  # no link to a passing port
        assert run_id in index
    for name in ("matrix.png", "a_k.png", "accuracy_vs_kappa.png"):
        dpi = Image.open(report.out / name).info["dpi"]
        assert min(dpi) >= 149.5, (name, dpi)


def test_the_report_leads_with_the_matrix_and_keeps_one_summary_run_in_mlflow(store, report, tmp_path):
    """The report's first figure is the matrix; the experiment has one summary run (made by the
    first report, updated by the next) holding the matrix and the dissociation figure, which its
    page shows, and each model's run has its own colour."""
    from mlflow import MlflowClient

    from harness.reports.report import build_report

    index = (report.out / "index.html").read_text()
    assert re.search(r"<figure>.*?</figure>", index, re.S).group(0).count("<b>matrix.png</b>") == 1
    build_report(store.uri, "rep", tmp_path / "again")
    client = MlflowClient(store.uri)
    exp = client.get_experiment_by_name("rep")
    (summary,) = client.search_runs([exp.experiment_id], "tags.`gestalt.summary` = 'true'")
    assert summary.info.status == "FINISHED" and summary.info.run_id in index
    assert {a.path for a in client.list_artifacts(summary.info.run_id)} >= {
        "matrix.png", "dissociation.png", "rank_groups.json", "runs.json"}
    note = summary.data.tags["mlflow.note.content"]
    assert f"get-artifact?path=matrix.png&run_uuid={summary.info.run_id}" in note
    assert "NOT PAIRED" in note and UNPAIRED_CORRECTION in note and CORRECTION in note
    colors = {m: client.get_run(store.runs[m][0]).data.tags["mlflow.runColor"] for m, _, _ in MODELS}
    assert len(set(colors.values())) == len(MODELS)


def test_null_bracket_column_only_when_some_trial_was_null(store, report, tmp_path):
    from harness.reports.report import BRACKET_HEADER, build_report

    assert BRACKET_HEADER in (report.out / "index.html").read_text()  # resnet-a has 4 nulls
    assert BRACKET_HEADER in (report.out / "scores.md").read_text()
    assert BRACKET_HEADER not in (report.out / "scorecards" / "dino-s.html").read_text()
    out = tmp_path / "clean"
    build_report(store.uri, "rep", out, run_ids=[store.runs["dino-s"][0], store.runs["resnet-b"][0]])
    for name in ("index.html", "scores.md"):
        text = (out / name).read_text()
        assert BRACKET_HEADER not in text and "(1-v)x" not in text


def test_matrix_annotations_contrast_with_their_cells():
    from harness.reports import figures as F

    def luminance(rgba):
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    scores = battery_scores(0.5)
    models = [(f"m{i}", "supervised") for i in range(5)]
    cells = {}
    for i, (m, _) in enumerate(models):  # values from below the floor to the ceiling: darkest to brightest
        for task in (SIL, MARK):
            s = next(x for x in scores[task] if x.name == "B")
            cells[(m, task)] = Score(**{**s.__dict__, "value": s.floor + (s.ceiling - s.floor) * (i / 4 * 1.3 - 0.25)})
    fig = F.agreement_matrix_figure(models, [(SIL, "B"), (MARK, "B")], cells)
    ax = fig.axes[0]
    image = ax.images[0]
    for text in ax.texts:
        x, y = (round(v) for v in text.get_position())
        cell = image.cmap(image.norm(image.get_array()[y, x]))
        fg = F.matplotlib.colors.to_rgba(text.get_color())
        hi, lo = sorted((luminance(cell) + 0.05, luminance(fg) + 0.05), reverse=True)
        assert hi / lo >= 4.5, (text.get_text(), cell, fg)
    F.plt.close(fig)


def _inside(inner, outer, slack=1.0):
    return (inner.x0 >= outer.x0 - slack and inner.y0 >= outer.y0 - slack
            and inner.x1 <= outer.x1 + slack and inner.y1 <= outer.y1 + slack)


@pytest.mark.parametrize("long_names", [False, True])
def test_confusion_figure_keeps_every_label_on_the_page_and_off_the_matrices(long_names):
    """The confusion figure is laid out by hand (no layout engine, so saving it draws it once):
    every text lies inside the figure, the tick labels clear the other panel, and the matrices
    and colour bar do not overlap, with the silhouettes' 16 classes and with much longer names."""
    from harness.reports.figures import confusion_figure, plt
    from harness.sources import Sources
    from harness.stimuli.registry import get_task
    from tests.conftest import MIRROR

    stimset = get_task(SIL).build(Sources(mirror=MIRROR))
    names = {c: (f"{c} (a much longer class name)" if long_names else c) for c in stimset.options}
    stimset.options = [names[c] for c in stimset.options]
    for s in stimset.test:
        s.ground_truth = names[s.ground_truth]
        s.meta["observer_responses"] = [names.get(r, r) for r in s.meta.get("observer_responses", [])]
    records = [{"parse_status": "ok", "ground_truth": s.ground_truth, "response": s.ground_truth}
               for s in stimset.test]
    fig = confusion_figure(records, stimset, "a-model-with-a-long-identifier-v2")
    assert fig.get_layout_engine() is None
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    model_ax, human_ax, bar = fig.axes
    texts = [t for t in fig.findobj(plt.Text) if t.get_visible() and t.get_text()]
    assert len(texts) > 3 * len(stimset.options)  # the tick labels are among them
    for t in texts:
        assert _inside(t.get_window_extent(renderer), page), t.get_text()
    boxes = [ax.get_window_extent(renderer) for ax in (model_ax, human_ax, bar)]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not boxes[i].overlaps(boxes[j]), (i, j)
    for label in model_ax.get_yticklabels():  # the shared rows are labelled once, on the left
        assert label.get_window_extent(renderer).x1 <= boxes[0].x0
    assert not any(lab.get_visible() and lab.get_text() for lab in human_ax.get_yticklabels())
    for ax, box in ((model_ax, boxes[0]), (human_ax, boxes[1])):
        for label in ax.get_xticklabels():
            assert label.get_window_extent(renderer).y1 <= box.y0
    plt.close(fig)


def _assert_laid_out(fig, plt) -> None:
    """Every text of a one-axes figure lies on the page, the tick labels clear the axes, and the
    axis labels clear the tick labels."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page, ax = fig.bbox, fig.axes[0]
    box = ax.get_window_extent(renderer)

    def drawn(labels, axis: int, limits) -> list:  # matplotlib keeps labels of ticks beyond the limits, undrawn
        lo, hi = sorted(limits)
        return [t for t in labels if t.get_visible() and t.get_text() and lo <= t.get_position()[axis] <= hi]

    xlabels = drawn(ax.get_xticklabels(), 0, ax.get_xlim())
    ylabels = drawn(ax.get_yticklabels(), 1, ax.get_ylim())
    tick_labels = set(ax.get_xticklabels()) | set(ax.get_yticklabels())
    texts = xlabels + ylabels + [t for t in fig.findobj(plt.Text)
                                 if t.get_visible() and t.get_text() and t not in tick_labels]
    for t in texts:
        assert _inside(t.get_window_extent(renderer), page), t.get_text()
    xticks = [t.get_window_extent(renderer) for t in xlabels]
    yticks = [t.get_window_extent(renderer) for t in ylabels]
    assert xticks and yticks
    assert all(b.y1 <= box.y0 for b in xticks) and all(b.x1 <= box.x0 for b in yticks)
    if ax.xaxis.label.get_text():
        assert ax.xaxis.label.get_window_extent(renderer).y1 <= min(b.y0 for b in xticks)
    if ax.yaxis.label.get_text():
        assert ax.yaxis.label.get_window_extent(renderer).x1 <= min(b.x0 for b in yticks)
    assert ax.title.get_window_extent(renderer).y0 >= box.y1


@pytest.mark.parametrize("title", ["", "a title much wider than the axes it stands over, as a report may give one"])
def test_accuracy_kappa_figure_is_laid_out_by_hand_with_every_label_on_the_page(title):
    """Saved once per run: no layout engine (it would draw the figure twice per save), and the
    margins still hold the tick labels, the axis labels and a title of any width."""
    from harness.reports.figures import accuracy_kappa_figure, plt

    scores = {s.name: s for s in battery_scores(0.9)[SIL]}
    fig = accuracy_kappa_figure([{"label": "m", "accuracy": scores["accuracy"], "kappa": scores["kappa"]}],
                                title=title)
    assert fig.get_layout_engine() is None
    _assert_laid_out(fig, plt)
    plt.close(fig)


def test_mlae_vs_humans_figure_is_laid_out_by_hand_with_every_label_on_the_page():
    from harness.reports.bars_figures import mlae_vs_humans_figure
    from harness.reports.figures import plt

    humans = {"extra": {"human": {"cleveland_mcgill_1984": {"mlae": 1.4, "ci_low": 1.3, "ci_high": 1.5},
                                  "heer_bostock_2010": {"mlae": 1.2, "ci_low": 1.0, "ci_high": 1.5}}}}
    scores = [sc(name, 4.0, 200, ci=0.2, **humans) for name in ("mlae", "mlae_midmean", "mlae_haehn")]
    fig = mlae_vs_humans_figure("ratio.chart.grape_type1", scores, "a-model-with-a-long-identifier-v2")
    assert fig.get_layout_engine() is None
    _assert_laid_out(fig, plt)
    plt.close(fig)


@pytest.mark.parametrize("n_models", [2, 12])
def test_matrix_figure_keeps_every_label_on_the_page(n_models):
    """The matrix's texts (cells, task headers, family names and the colour bar's label, which
    ran off a short figure's top and bottom) all lie inside the saved page, few models or many."""
    from harness.reports import figures as F

    scores = battery_scores(0.5)
    models = [(f"model-{i}", "supervised" if i % 2 else "self-supervised") for i in range(n_models)]
    cells = {(m, t): F.score_named(scores[t], name) for m, _ in models
             for t, name in ((SIL, "B"), (MARK, "B"), (SERIES, "accuracy"))}
    fig = F.agreement_matrix_figure(models, [(SIL, "B"), (MARK, "B"), (SERIES, "accuracy")], cells,
                                    groups={(m, SIL): "ab"[i % 2] for i, (m, _) in enumerate(models)})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks = set()
    for ax in fig.axes:  # matplotlib keeps labels of ticks beyond an axis's limits, undrawn
        for axis, labels, limits in ((0, ax.get_xticklabels(), ax.get_xlim()),
                                     (1, ax.get_yticklabels(), ax.get_ylim())):
            lo, hi = sorted(limits)
            shown = (ax.xaxis, ax.yaxis)[axis].get_visible()  # the family names' twin hides its x axis
            ticks |= {t for t in labels if not shown or not lo - 1e-9 <= t.get_position()[axis] <= hi + 1e-9}
    texts = [t for t in fig.findobj(F.plt.Text) if t.get_visible() and t.get_text() and t not in ticks]
    assert any("floor" in t.get_text() and "bound" in t.get_text() for t in texts)  # the colour bar's label
    for t in texts:
        assert _inside(t.get_window_extent(renderer), fig.bbox), t.get_text()
    assert any(t.get_text().endswith(" a") or " a\n" in t.get_text() for t in fig.axes[0].texts)
    F.plt.close(fig)
