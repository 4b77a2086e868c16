"""One headline per task on every surface: the terminal's answer, the runs table (answer tag and
sortable metric), the report's matrix and the registered scorecard all show the scoring family's
headline (:meth:`Family.lead_score`). Series counting's is the capacity (SPEC section 6: replication
holds when its interval lies in people's 6-12 band; the paper: "read only as capacity-band
membership"), never its accuracy."""

import re

import pytest

from harness.scores.tasks import FAMILIES, Bootstrap, family_of
from tests import test_answer_surfaces as A
from tests import test_reports as T

TASKS = (T.SIL, T.MARK, T.SERIES)


@pytest.fixture(scope="module")
def scores():
    """resnet-a's battery, its capacity censored below the tested range."""
    return A.censored_below(0.2)


def test_series_counting_is_headlined_by_its_capacity(scores):
    family = family_of(T.SERIES)
    assert family.lead_name == "capacity"
    assert family.lead_score(scores[T.SERIES]).name == "capacity"
    assert family.headline[0] == "capacity"  # the score tables list it first, as the most telling
    for f in FAMILIES.values():  # what the runs table's columns are named after is what is logged
        assert f.lead_name in {s for s in f.headline if "*" not in s}, f.name


def test_the_terminal_and_the_runs_table_show_the_capacity(scores):
    from harness.reports.summary import answer_text
    from harness.reports.terminal import BatteryResult, answer_lines
    from harness.tracking.metrics import plan_metrics, score_metrics

    lines = answer_lines([BatteryResult("resnet-a", "run", scores=scores)], Bootstrap(n_boot=200))
    assert any("resnet-a  capacity 1.0 [1.0, 1.0] censored below" in ln for ln in lines), lines
    assert answer_text(T.SERIES, scores[T.SERIES], "").startswith("capacity 1.0 [1.0, 1.0] censored below")
    plan = plan_metrics(TASKS)
    for task in TASKS:
        family = family_of(task)
        lead = family.lead_score(scores[task])
        logged = score_metrics(task, scores[task], family)
        column = plan.task_names(task)[0]  # the runs table's sortable headline column
        assert column == family.short_name(task, lead.name) and logged[column] == pytest.approx(lead.value)
    assert plan.task_names(T.SERIES)[0] == "Series_count.capacity"


def test_the_report_matrix_and_the_scorecard_show_the_capacity(scores):
    from harness.reports import figures as F
    from harness.reports.report import headline
    from harness.tracking.scorecards import scorecard_markdown

    for task in TASKS:
        assert headline(task, scores[task]) is family_of(task).lead_score(scores[task])
    cells = {("resnet-a", t): headline(t, scores[t]) for t in TASKS}
    fig = F.agreement_matrix_figure([("resnet-a", "supervised")], [(t, cells[("resnet-a", t)].name) for t in TASKS],
                                    cells)
    texts = [t.get_text() for t in fig.axes[0].texts]
    F.plt.close(fig)
    assert any(re.fullmatch(r"1\.0 censored below\n\[1\.0, 1\.0\]", t) for t in texts), texts
    card = scorecard_markdown("resnet-a", "r", {T.SERIES: {"scores": [s.to_dict() for s in scores[T.SERIES]]}})
    bold = re.findall(r"\*\*(\w+)\*\*", card.split("\n", 1)[1])
    assert bold == ["capacity"], card
    rows = [ln for ln in card.splitlines() if ln.startswith("| ") and "series_count" in ln]
    assert "capacity_in_band" in rows[1] and "censored below" in rows[0]  # the verdict, as on the terminal
