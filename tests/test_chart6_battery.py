"""CHART-6 offline end to end: a tiny random VLM and an OpenAI-compatible local server answer GGR and
VLAT through the real recipe path; records validate, invalid answers are counted, nothing crashes."""

import json

import yaml

from tests.conftest import MIRROR
from tests.fake_vendor_server import FakeVendorServer, Status
from tests.tiny_vlms import build_llava

# a task variant (BASE:NAME) runs through the CHART-6 readout, scorer and figures like its base
TASKS = ["literacy.chart.ggr", "literacy.chart.vlat", "literacy.chart.holf_multi", "literacy.chart.ggr:again"]


def test_chart6_battery_offline(tmp_path, monkeypatch):
    import mlflow

    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from harness.trials.records import validate

    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    monkeypatch.delenv("GESTALT_CHART6_OSF", raising=False)
    vlm = build_llava(tmp_path / "tiny-llava", answer="4")
    answers = iter(["$3.27", "About 35%", "B) 45", "3 or 4"] * 1000)
    with FakeVendorServer(key="sk-local", answer=lambda p: next(answers)) as server:
        server.script(Status(500), Status(500), Status(500), Status(500), Status(500), Status(500))
        recipe = {
            "name": "chart6-offline", "tasks": TASKS,
            "models": [
                {"id": "tiny-llava", "source": "hf-vlm", "name": str(vlm), "family": "open-vlm",
                 "batch_size": 8, "generation": {"n_reps": 2, "max_new_tokens": 6}},
                {"id": "local-api", "source": "api", "name": "openai-compatible/local-1", "family": "api",
                 "batch_size": 8, "generation": {"n_reps": 2},
                 "options": {"base_url": server.url + "/v1", "api_key_env": "LOCAL_LLM_KEY",
                             "backoff_base_s": 0.001, "backoff_cap_s": 0.01, "max_retries": 1}},
            ],
            "bootstrap": {"n_boot": 200},
            "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
            "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "chart6"},
            "output_dir": str(tmp_path / "out")}
        path = tmp_path / "r.yaml"
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        results = run_recipe(load_recipe(path), echo=lambda *_: None)

    for r in results:
        assert "literacy.chart.holf_multi" in r.unavailable
        for task, n_items in (("literacy.chart.ggr", 13), ("literacy.chart.vlat", 53),
                              ("literacy.chart.ggr:again", 13)):
            recs = [validate(json.loads(x)) for x in
                    (tmp_path / "out" / r.model_id / "records" / f"{task}.jsonl").read_text().splitlines()]
            assert len(recs) == 2 * n_items and {x["rep"] for x in recs} == {0, 1}
            names = {s.name for s in r.scores[task]}
            assert {"valid_rate", "accuracy_all", "gap_all"} <= names, names
    api_names = {s.name for s in results[1].scores["literacy.chart.ggr"]}
    assert "accuracy_valid" in api_names  # only defined when some answer is valid
    api = [validate(json.loads(x)) for x in
           (tmp_path / "out/local-api/records/literacy.chart.ggr.jsonl").read_text().splitlines()]
    assert any(x["parse_status"].startswith("null:api_error") for x in api)
    assert any(x["parse_status"] == "ok" for x in api)
    assert any(x["parse_status"] == "null:multiple_numbers" for x in api)

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["chart6"], output_format="list")
    assert sorted(r.info.run_name for r in runs) == ["local-api", "tiny-llava"]
    # the API battery's failed calls (the scripted 500s) remain: its run says so, a rerun sends them again
    assert {r.info.run_name: r.info.status for r in runs} == {"tiny-llava": "FINISHED", "local-api": "FAILED"}
    assert "failed calls" in (results[1].failed or "")
    for run in runs:
        assert 0 <= run.data.metrics["literacy.chart.ggr/valid_rate"] <= 1
