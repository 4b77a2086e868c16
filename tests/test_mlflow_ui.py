"""The MLflow UI in a real browser, as a new user meets it: `gestalt recipe` with three models, then
`gestalt ui` and headless Chromium in a fresh profile. The Experiments list -> the experiment lands
on the runs table (not the GenAI overview) with each task's headline and its interval as columns, the
sidebar's Runs view too; the experiment's summary run shows the matrix one click further; the
registered scorecard is a table; runs of different models have different colours."""

import pytest

from tests.conftest import require
from tests.browser import TASKS, Browser, base_of, chromium, three_batteries, ui

HEADLINES = ("Silhouette.B", "Mark_color.B", "Series_count.capacity")


def shown(v: float) -> str:
    """A number as the UI's JavaScript prints it."""
    return str(int(v)) if v == int(v) else repr(v)


@pytest.mark.slow
def test_a_fresh_browser_finds_the_answer_from_home(tmp_path):
    require(chromium(), "chromium")
    from mlflow import MlflowClient

    from tests.browser import gestalt

    db = three_batteries(tmp_path)
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("gestalt")
    runs = client.search_runs([exp.experiment_id], "tags.`gestalt.model` != ''")
    (summary,) = client.search_runs([exp.experiment_id], "tags.`gestalt.summary` = 'true'")
    assert len(runs) == 3 and len({r.data.tags["mlflow.runColor"] for r in runs}) == 3
    assert all(len(r.data.metrics) <= 40 for r in runs)
    # wide enough that the grid renders every column (it draws only those in view)
    with ui(tmp_path) as url, Browser(width=3600) as page:
        base = base_of(url)
        registered = gestalt("register", runs[0].info.run_id, cwd=tmp_path)  # while the UI serves the store
        assert registered.returncode == 0, registered.stderr
        assert registered.stdout.strip().splitlines()[-1].startswith(f"{base}/#/models/")
        page.goto(f"{base}/#/experiments")  # the Experiments list, in a profile that has never seen MLflow
        page.click("gestalt")
        page.wait_for(f"location.hash.includes('/experiments/{exp.experiment_id}/runs')", "the runs table")
        page.wait_for("document.body.innerText.includes('Silhouette.B_ci_lower')", "the headline columns")
        table = page.text()
        assert "Detect issues" not in table and "Traces 0" not in table  # not the GenAI overview
        for run in runs:
            assert run.info.run_name in table
            for name in HEADLINES:
                value = run.data.metrics[name]
                assert len(repr(value)) <= 6, (name, value)  # rounded at logging, not 0.24240012...
                assert shown(value) in table, (name, value)
        for name in HEADLINES:
            assert name in table and f"{name}_ci_upper" in table, table
        page.click("Runs", "a")  # the sidebar's view of the same table
        page.wait_for("document.body.innerText.includes('Silhouette.B_ci_upper')", "headline columns under Runs")
        page.click(summary.info.run_name)  # the second click: the matrix on the summary run's page
        page.wait_for("Array.from(document.images).some(i => i.src.includes('matrix.png') && i.naturalWidth > 400)",
                      "the summary's matrix")
        page.goto(registered.stdout.strip().splitlines()[-1])  # the URL register printed
        page.wait_for("document.querySelectorAll('table th').length >= 9", "the scorecard's table")
        cells = page.evaluate("Array.from(Array.from(document.querySelectorAll('table'))"
                              ".find(t => t.innerText.includes('95% interval')).querySelectorAll('td'))"
                              ".map(e => e.textContent)")
        assert "closure.nat.silhouette" in [c.strip() for c in cells]
        assert all(c[0] == "\u2002" and c[-1] == "\u2002" for c in cells if c), cells  # padded apart


@pytest.mark.slow
def test_the_answer_reads_whole_at_1600x1000(tmp_path):
    """At 1600x1000 in a fresh profile: the root address opens the experiment's runs table, with no
    shared-view banner nor assistant panel, each task's answer column (headline, interval, group)
    on screen and unclipped, every metric header whole; the summary run's matrix in view without a
    click; the Registered Models page without a modal."""
    require(chromium(), "chromium")
    import time

    from mlflow import MlflowClient

    db = three_batteries(tmp_path)
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("gestalt")
    runs = client.search_runs([exp.experiment_id], "tags.`gestalt.model` != ''")
    (summary,) = client.search_runs([exp.experiment_id], "tags.`gestalt.summary` = 'true'")
    with ui(tmp_path) as url, Browser(width=1600, height=1000) as page:
        assert "viewStateShareKey" not in url
        base = base_of(url)
        page.goto(f"{base}/")
        page.wait_for(f"location.hash.includes('/experiments/{exp.experiment_id}/runs')", "the runs table")
        page.wait_for("document.body.innerText.includes('Silhouette.B')", "the headline columns")
        time.sleep(3)
        text = page.text()
        assert "shared view" not in text and "Ask questions about your experiments" not in text
        for run in runs:
            for task in TASKS:
                answer = run.data.tags[task]
                cell = page.evaluate(
                    f"(() => {{const c = Array.from(document.querySelectorAll('[col-id=\"tags.`{task}`\"]'))"
                    f".find(e => e.innerText.trim() === {answer!r}); if (!c) return null;"
                    " const r = c.getBoundingClientRect();"
                    f" return [r.right, innerWidth, c.scrollWidth, c.clientWidth];}})()")
                assert cell is not None, (task, answer, text[:2000])
                right, width, scroll, client_width = cell
                assert right <= width and scroll <= client_width, (task, answer, cell)
        cut = page.evaluate("Array.from(document.querySelectorAll('.ag-header-cell-text'))"
                            ".filter(e => e.scrollWidth > e.clientWidth).map(e => e.innerText)")
        assert not cut, cut
        page.click(summary.info.run_name)
        page.wait_for("Array.from(document.images).some(i => i.src.includes('matrix.png') && i.naturalWidth)",
                      "the summary's matrix")
        time.sleep(2)
        box = page.evaluate("(() => {const i = Array.from(document.images).find(i => i.src.includes('matrix.png'));"
                            " const r = i.getBoundingClientRect(); return [r.left, r.right, r.bottom, innerWidth,"
                            " innerHeight, i.parentElement.closest('div').getBoundingClientRect().right];})()")
        left, right, bottom, width, height, _ = box
        assert 0 <= left and right <= width and bottom <= height, box
        assert "Show more" not in page.text()
        page.goto(f"{base}/#/models")
        page.wait_for("document.body.innerText.includes('Registered Models')", "the registry")
        time.sleep(3)
        assert page.evaluate("document.querySelectorAll('.ant-modal, [role=dialog]').length") == 0
