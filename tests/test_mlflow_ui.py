"""The MLflow UI in a real browser, as a new user meets it: `gestalt recipe` with three models, then
`gestalt ui` and headless Chromium in a fresh profile. Home -> the experiment lands on the runs
table (not the GenAI overview) with each task's headline and its interval as columns, the
sidebar's Runs view too; the experiment's summary run shows the matrix one click further; the
registered scorecard is a table; runs of different models have different colours."""

import pytest

from tests.conftest import require
from tests.browser import Browser, base_of, chromium, three_batteries, ui

HEADLINES = ("Silhouette.B", "Mark_color.B", "Series_count.acc")


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
    with ui(tmp_path) as url, Browser(width=2400) as page:
        base = base_of(url)
        registered = gestalt("register", runs[0].info.run_id, cwd=tmp_path)  # while the UI serves the store
        assert registered.returncode == 0, registered.stderr
        assert registered.stdout.strip().splitlines()[-1].startswith(f"{base}/#/models/")
        page.goto(f"{base}/")  # Home, in a profile that has never seen MLflow
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
            assert name in table and f"{name}_ci_upper" in table
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
