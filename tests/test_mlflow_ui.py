"""The MLflow UI in a real browser: `gestalt ui` on a store with three finished batteries opens on
the runs table with the headline metrics as columns, and a run page shows them with their values."""


import pytest

from tests.conftest import require
from tests.browser import base_of, chromium, page_text, three_batteries, ui

HEADLINES = ("sil.kappa", "sil.B", "color.B", "count.capacity")


def shown(v: float) -> str:
    """A number as the UI's JavaScript prints it."""
    return str(int(v)) if v == int(v) else repr(v)


@pytest.mark.slow
def test_runs_table_and_run_page_show_the_three_runs_and_headline_metrics(tmp_path):
    require(chromium(), "chromium")
    from mlflow import MlflowClient

    db = three_batteries(tmp_path)
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("gestalt")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 3
    with ui(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:") and f"/#/experiments/{exp.experiment_id}/runs?" in url
        table = page_text(url)
        assert "Traces 0" not in table  # the runs table, not the GenAI overview
        for run in runs:
            assert run.info.run_name in table
            for name in HEADLINES:
                assert name in table
                value = run.data.metrics[name]
                assert len(repr(value)) <= 6, (name, value)  # rounded at logging, not 0.24240012...
                assert shown(value) in table, (name, value)
        run = runs[0]
        page = page_text(f"{base_of(url)}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}")
        assert run.info.run_name in page
        for name in HEADLINES:
            assert name in page and shown(run.data.metrics[name]) in page
