"""Scorecard registration (SPEC 8): an external LoggedModel per model identity with the battery
metrics linked to it, promoted to the Model Registry with an alias and version tags."""

import pytest

from tests.test_reports import MARK, SERIES, SHA, SIL, THINGS, log_battery_run


@pytest.fixture()
def uri(tmp_path):
    return f"sqlite:///{tmp_path}/mlflow.db"


def test_scorecard_logged_model_metrics_version_alias_and_tags(uri, tmp_path):
    from mlflow import MlflowClient

    from harness.tracking.scorecards import find_scorecards, register_scorecard

    run_id, scores = log_battery_run(uri, "reg", "resnet-a", "supervised", 0.4, tmp_path=tmp_path,
                                     nulls=4, recipe="quick")
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    before = {k: len(client.get_metric_history(run_id, k)) for k in run.data.metrics}

    card = register_scorecard(uri, run_id)
    assert card.name == "gestalt-scorecard-resnet-a" and card.alias == "latest-quick"

    lm = client.get_logged_model(card.model_id)
    assert lm.tags["mlflow.model.isExternal"] == "true" and lm.tags["gestalt.model"] == "resnet-a"
    linked = {m.key: m for m in lm.metrics}
    # every scored task's metrics, its headline and interval among them
    assert set(linked) == set(run.data.metrics) and "Silhouette.B_ci_lower" in linked
    for key, m in linked.items():
        assert m.value == pytest.approx(run.data.metrics[key]) and m.run_id == run_id
        task = key.split("/")[0] if "/" in key else {"Silhouette": SIL, "Mark_color": MARK,
                                                     "Series_count": SERIES}[key.split(".")[0]]
        assert m.dataset_name == task and m.dataset_digest == SHA[task][:36]
    # the run's own history gains no duplicate points; it now lists the model and stimulus sets
    assert {k: len(client.get_metric_history(run_id, k)) for k in run.data.metrics} == before
    inputs = client.get_run(run_id).inputs
    assert card.model_id in {i.model_id for i in inputs.model_inputs}
    assert {d.dataset.name for d in inputs.dataset_inputs} == set(SHA)

    mv = client.get_model_version_by_alias(card.name, card.alias)
    assert str(mv.version) == card.version == "1" and mv.source == f"models:/{card.model_id}"
    assert mv.tags["gestalt.run_id"] == run_id and mv.tags["gestalt.model"] == "resnet-a"
    # the scores are a Markdown table in the description, not dozens of truncated tags
    assert not any("/" in k for k in mv.tags)
    cells = [[c.replace("&ensp;", "").strip(" *") for c in line.strip("|").split(" | ")]
             for line in mv.description.splitlines() if line.startswith("| ")]
    rows = {(c[0], c[1]): c for c in cells}
    for s in scores[SIL]:
        if s.name in ("B", "kappa", "accuracy"):  # the headline, then the family's secondary scores
            value, interval = rows[(SIL, s.name)][2:4]
            assert float(value) == pytest.approx(s.value, abs=0.001) and len(value.split(".")[1]) == 3
            assert float(interval.strip("[]").split(",")[0]) == pytest.approx(s.ci_low, abs=0.001)
    assert rows[(SIL, "kappa")][7] == "4"  # nulls
    assert (SERIES, "a_k01") not in rows and (SERIES, "capacity") in rows
    assert rows[(THINGS, "unavailable")][8].startswith("THINGS object images")

    # the MLflow 3.17.2 dataset-search workaround: name and digest together find the model
    exp_id = run.info.experiment_id
    found = find_scorecards(uri, exp_id, SIL, SHA[SIL], order_by=f"{SIL}/B")
    assert [m.model_id for m in found] == [card.model_id]
    assert find_scorecards(uri, exp_id, SIL, "0" * 64) == []


def test_same_identity_accumulates_new_weights_get_their_own_model(uri, tmp_path):
    from mlflow import MlflowClient

    from harness.tracking.scorecards import register_scorecard

    client = MlflowClient(uri)
    first, _ = log_battery_run(uri, "reg", "resnet-a", "supervised", 0.4, tmp_path=tmp_path)
    second, _ = log_battery_run(uri, "reg", "resnet-a", "supervised", 0.7, tmp_path=tmp_path)
    retrained, _ = log_battery_run(uri, "reg", "resnet-a", "supervised", 0.5, tmp_path=tmp_path,
                                   model_version="timm:resnet-a@v2")
    a = register_scorecard(uri, first, alias="paper")
    b = register_scorecard(uri, second, alias="paper")
    assert a.model_id == b.model_id and (a.version, b.version) == ("1", "2")
    assert {m.run_id for m in client.get_logged_model(a.model_id).metrics} == {first, second}
    assert str(client.get_model_version_by_alias(a.name, "paper").version) == "2"
    again = register_scorecard(uri, first, alias="paper")  # same run: same version, alias moves back
    assert again.version == "1" and str(client.get_model_version_by_alias(a.name, "paper").version) == "1"
    assert len(client.search_model_versions(f"name = '{a.name}'")) == 2
    c = register_scorecard(uri, retrained)
    assert c.model_id != a.model_id and c.version == "3"


def test_bad_alias_and_unfinished_run_are_refused(uri, tmp_path):
    from harness.tracking.scorecards import RegistryError, register_scorecard

    run_id, _ = log_battery_run(uri, "reg", "m", "supervised", 0.4, tmp_path=tmp_path)
    with pytest.raises(RegistryError, match="reserves 'latest'"):
        register_scorecard(uri, run_id, alias="latest")
    failed, _ = log_battery_run(uri, "reg", "m", "supervised", 0.4, tmp_path=tmp_path, fail=True)
    with pytest.raises(RegistryError, match="is FAILED, not FINISHED: rerun its recipe"):
        register_scorecard(uri, failed)
