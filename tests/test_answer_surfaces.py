"""The answer as each surface shows it beyond the terminal: the runs table's answer column per task,
`gestalt ui`'s page, and the report: censored values marked, each ceiling with its source, no
figure whose statistic the run's n cannot carry, no link to a port that will not answer later."""

import json
import re
from types import SimpleNamespace

import pytest

from tests import test_reports as T


def censored_below(level, nulls=0):
    """The synthetic battery with its ceilings' sources as the scorers state them, and
    resnet-a's (level 0.2) capacity fitted below the tested range."""
    from dataclasses import replace

    from harness.scores.odd_one_out import b_ceiling_source

    scores = REAL_BATTERY(level, nulls)
    scores[T.SIL] = [replace(s, method="synthetic; ceiling: human_loo_modal_agreement") if s.name == "B" else s
                     for s in scores[T.SIL]]
    scores[T.MARK] = [replace(s, extra={**s.extra, "ceiling_source": b_ceiling_source(T.MARK, 0.718)})
                      if s.name == "B" else s for s in scores[T.MARK]]
    if level == 0.2:
        scores[T.SERIES] = [s if s.name != "capacity" else T.sc(
            "capacity", 1.0, 40, ci=0.0, extra={"band": [6, 12], "in_band": False, "censored": "below",
                                                "ci_low_censored": "below", "ci_high_censored": "below"})
            for s in scores[T.SERIES]]
    return scores


REAL_BATTERY = T.battery_scores


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("answers")
    uri = f"sqlite:///{tmp}/mlflow.db"
    mp = pytest.MonkeyPatch()
    mp.setattr(T, "battery_scores", censored_below)
    try:
        runs = {model: T.log_battery_run(uri, "ans", model, family, level, tmp_path=tmp)
                for model, family, level in T.MODELS}
    finally:
        mp.undo()
    # as `gestalt ui --port 5123` leaves it while it serves the store
    (tmp / "mlflow.db.ui").write_text("http://127.0.0.1:5123\n")
    return SimpleNamespace(uri=uri, tmp=tmp, runs=runs)


@pytest.fixture(scope="module")
def report(store):
    from harness.reports.report import build_report

    out = store.tmp / "report"
    build_report(store.uri, "ans", out)
    return SimpleNamespace(out=out, index=(out / "index.html").read_text(),
                           cards={m: (out / "scorecards" / f"{m}.html").read_text() for m, _, _ in T.MODELS})


def test_each_model_run_carries_its_answer_per_task_first_in_the_runs_table(store, report):
    """Per task one tag column reading whole (headline, 95% interval, rank group), ahead of the
    sortable headline metrics, each column as wide as its name and its longest value."""
    from mlflow import MlflowClient

    from harness.tracking.store import SHARED_VIEW_TAG, column_width

    client = MlflowClient(store.uri)
    exp = client.get_experiment_by_name("ans")
    groups = json.loads(open(client.download_artifacts(
        client.search_runs([exp.experiment_id], "tags.`gestalt.summary` = 'true'")[0].info.run_id,
        "rank_groups.json", str(store.tmp / "g"))).read())
    letters = {(g["model"], g["task"]): g["groups"] for g in groups["groups"]}
    for model, _, _ in T.MODELS:
        tags = client.get_run(store.runs[model][0]).data.tags
        for task in (T.SIL, T.MARK):
            assert re.fullmatch(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] [a-z]+(; .*)?", tags[task]), tags[task]
            assert tags[task].split(";")[0].endswith(" " + letters[(model, task)])
        # series counting is not ranked (people's capacity is a band): its verdict, no letter
        assert re.fullmatch(r"capacity \d+\.\d \[\d+\.\d, \d+\.\d\]( censored \w+)?; capacity_in_band [01]",
                            tags[T.SERIES]), tags[T.SERIES]
        assert (model, T.SERIES) not in letters
    assert f"not ranked: {T.SERIES} (people's capacity is a band" in groups["method"]
    state = json.loads(json.loads(exp.tags[SHARED_VIEW_TAG])["state"])
    answer = [f"tags.`{t}`" for t in (T.SIL, T.MARK, T.SERIES)]
    heads = ["metrics.`Silhouette.B`", "metrics.`Mark_color.B`", "metrics.`Series_count.capacity`"]
    assert state["selectedColumns"][:6] == answer + heads
    assert state["columnOrder"][:7] == ["attributes.`Run Name`", *answer, *heads]
    assert "metrics.`Silhouette.B_ci_upper`" in state["selectedColumns"]  # still there, after
    widest = max((client.get_run(store.runs[m][0]).data.tags[T.SERIES] for m, _, _ in T.MODELS), key=len)
    assert state["columnWidths"][f"tags.`{T.SERIES}`"] >= column_width(widest)
    assert state["columnWidths"]["metrics.`Silhouette.B_ci_lower`"] >= column_width("Silhouette.B_ci_lower")


def test_a_censored_value_is_marked_on_every_surface(store, report):
    """resnet-a's capacity 1.0 [1.0, 1.0] lies below the tested range: said beside the number in
    the report, its scorecard and the runs table's answer column, not only in a figure legend."""
    from mlflow import MlflowClient

    row = re.search(r"<tr><td>resnet-a</td><td>similarity.chart.series_count</td><td>capacity</td>.*?</tr>",
                    report.index).group(0)
    assert "censored below the tested range" in row, row
    assert "censored below the tested range" in report.cards["resnet-a"]
    assert "censored" not in report.cards["dino-s"]
    tag = MlflowClient(store.uri).get_run(store.runs["resnet-a"][0]).data.tags[T.SERIES]
    assert tag.startswith("capacity 1.0 [1.0, 1.0] censored below; "), tag


def test_the_report_ranks_no_task_the_terminal_leaves_unranked(report):
    """The report's rank-group table holds the ranked tasks only, and says why series counting
    is not among them, as the terminal and the summary run do."""
    table = report.index[report.index.index("Rank groups per task"):]
    table = table[:table.index("</table>")]
    assert T.SIL in table and T.MARK in table and T.SERIES not in table.split("</p>", 1)[1]
    assert f"not ranked: {T.SERIES} (people&#x27;s capacity is a band" in table


def test_scorecards_do_not_link_to_the_port_the_ui_serves_on_now(store, report):
    """A report outlives `gestalt ui`: its pages name the run and how to open it, no address of a
    local server that will not answer later."""
    for page in (report.index, *report.cards.values()):
        assert "5123" not in page and "127.0.0.1" not in page
    run_id = store.runs["dino-s"][0]
    assert run_id in report.cards["dino-s"] and "gestalt ui" in report.cards["dino-s"]


def test_the_rank_correlation_heatmap_is_not_drawn_at_three_models(report):
    """With 3 models Spearman's rho takes only +-1 and +-0.5: no heatmap, and the report says why."""
    assert not (report.out / "rank_correlations.png").exists()
    assert "rank_correlations.png" not in report.index
    assert "not drawn" in report.index and "3 models" in report.index


def test_each_ceiling_is_stated_with_its_source(store, report):
    """Where a ceiling is shown, what it is and where it comes from: in the report, the
    scorecards and the summary run's description."""
    from mlflow import MlflowClient

    client = MlflowClient(store.uri)
    exp = client.get_experiment_by_name("ans")
    (summary,) = client.search_runs([exp.experiment_id], "tags.`gestalt.summary` = 'true'")
    note = summary.data.tags["mlflow.note.content"]
    for page in (report.index, report.cards["dino-s"], note):
        assert "human_loo_modal_agreement" in page  # the silhouettes' B ceiling
        assert "cited" in page and "THINGS" in page  # the colour triplets' B ceiling


def test_the_colour_triplets_ceiling_says_it_is_borrowed_from_things(sources):
    """The colour task's B ceiling 0.863 is the THINGS test-retest figure the paper cites, not a
    measurement on the colour triplets, whose own split-half of majorities the source names."""
    from harness.scores.odd_one_out import score_odd_one_out
    from harness.scores.tasks import Bootstrap
    from harness.stimuli import mark_color
    from tests.test_human_references import by_name, records

    marks = mark_color.build(sources, seed=0)
    s = by_name(score_odd_one_out(records(marks, marks.human.targets["kernel"]), marks, boot=Bootstrap(n_boot=200)))
    split = s["human_majority_split_half"].value
    source = s["B"].extra["ceiling_source"]
    assert "THINGS" in source and "not measured on" in source and f"{split:.3f}" in source, source
    assert "not measured on" in s["human_modal_test_retest"].method


def test_ui_page_quiets_mlflow_and_opens_on_the_experiment():
    """`gestalt ui`'s page: no assistant panel nor registry promotion on a first visit, the bare
    root address sent to the experiment's runs table, the runs-table state set again when the
    experiment's view changed, the summary's figures shown whole; the URL it prints carries no
    shared view (MLflow shows a "You're viewing a shared view" banner over one)."""
    from harness.tracking.store import SHARED_VIEW_TAG, runs_table_url
    from harness.tracking.ui_server import QUIET, STYLE, first_visit_defaults, first_visit_script, view_states

    assert QUIET.items() <= first_visit_defaults().items()
    view = {"name": "h", "createdAt": 1, "updatedAt": 7,
            "state": json.dumps({"selectedColumns": ["tags.`t`"], "columnOrder": ["tags.`t`"],
                                 "columnWidths": {"tags.`t`": 200}})}
    states = view_states({"3": {SHARED_VIEW_TAG: json.dumps(view)}})
    key = 'MLflowLocalStorage-1.1-ExperimentPage-["3"]-ReactComponentState'
    assert states[key][0] == "7" and json.loads(states[key][1])["columnOrder"] == ["tags.`t`"]
    script = first_visit_script(first_visit_defaults(), states, "/experiments/3/runs").decode()
    assert '"/experiments/3/runs"' in script and "history.replaceState" in script
    assert b"truncation-gradient" in STYLE and b"max-width:100%" in STYLE
    assert "viewStateShareKey" not in runs_table_url("http://127.0.0.1:5000", "3")
