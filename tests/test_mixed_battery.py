"""One recipe, three kinds of model: an encoder, a tiny open VLM and an API model (a local fake of
the vendor), each one MLflow run with the same task metrics; failed API calls become null trials
with reasons; the API key reaches no record, log, param or artifact."""

import json
import os

import pytest
import yaml

from tests.conftest import MIRROR
from tests.fake_vendor_server import FakeVendorServer, Status
from tests.test_things import fake_root
from tests.tiny_vlms import build_llava

KEY = "sk-mixed-battery-SECRET-777"
TASKS = ["closure.nat.silhouette", "similarity.chart.mark_color", "similarity.chart.series_count",
         "similarity.nat.things"]


def answer(prompt):
    if prompt and "silhouette" in prompt:
        return "It is a cat."
    if prompt and "How many" in prompt:
        return "7"
    return "The odd one is 2."


@pytest.fixture
def mixed(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_LLM_KEY", KEY)
    monkeypatch.delenv("GESTALT_THINGS_IMAGES", raising=False)
    vlm = build_llava(tmp_path / "tiny-llava", answer="cat 1")
    from harness.sources import Sources
    from harness.stimuli import things

    images = fake_root(tmp_path, things.build(Sources(mirror=MIRROR), seed=0, n_triplets=12))
    with FakeVendorServer(key=KEY, answer=answer) as server:
        # one terminal failure (a 400 is not retried) and one transient 429 that is retried
        server.script(Status(400), Status(429))
        recipe = {
            "name": "mixed", "tasks": TASKS,
            "models": [
                {"id": "tiny-vit", "source": "timm", "name": "test_vit", "weights": "random",
                 "family": "supervised", "batch_size": 40},
                {"id": "tiny-llava", "source": "hf-vlm", "name": str(vlm), "family": "vlm", "batch_size": 8,
                 "generation": {"max_new_tokens": 8}},
                {"id": "fake-api", "source": "api", "name": "openai-compatible/fake-1", "family": "api",
                 "batch_size": 8,
                 "options": {"base_url": server.url + "/v1", "api_key_env": "LOCAL_LLM_KEY",
                             "backoff_base_s": 0.001, "backoff_cap_s": 0.01, "concurrency": 4}},
            ],
            "task_options": {"similarity.nat.things": {"n_triplets": 12, "image_root": str(images)}},
            "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
            "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
            "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "mixed"},
            "output_dir": str(tmp_path / "out")}
        path = tmp_path / "mixed.yaml"
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        yield path, server


def test_mixed_recipe_one_run_per_model_same_metrics_no_key(mixed, tmp_path, capfd):
    import mlflow

    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from harness.trials.records import validate

    path, server = mixed
    results = run_recipe(load_recipe(path), echo=print)
    assert [r.model_id for r in results] == ["tiny-vit", "tiny-llava", "fake-api"]
    assert not any(r.unavailable for r in results)  # THINGS runs on the configured image root

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    runs = {r.info.run_name: r for r in mlflow.search_runs(experiment_names=["mixed"], output_format="list")}
    assert set(runs) == {"tiny-vit", "tiny-llava", "fake-api"}
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    usage = {"tokens_in", "tokens_out", "cost_usd"}  # an API battery's own: what its calls used
    assert {"tokens_in", "tokens_out"} <= set(runs["fake-api"].data.metrics)
    keys = {name: {k for k in r.data.metrics if k != "model_calls" and k not in usage}
            for name, r in runs.items()}
    assert keys["tiny-vit"] == keys["tiny-llava"] == keys["fake-api"]
    for task in TASKS:
        assert any(k.startswith(task + "/") for k in keys["fake-api"])

    # the API battery completed; the 400 became one null trial with its reason
    api_recs = []
    for task in TASKS:
        f = tmp_path / "out/fake-api/records" / f"{task}.jsonl"
        api_recs += [validate(json.loads(x)) for x in f.read_text().splitlines()]
    nulls = [r for r in api_recs if r["parse_status"] != "ok"]
    assert len(nulls) == 1 and nulls[0]["parse_status"].startswith("null:api_error")
    assert nulls[0]["response"] is None and nulls[0]["correct"] is None
    sil = [r for r in api_recs if r["task_id"] == "closure.nat.silhouette" and r["parse_status"] == "ok"]
    assert sil and all(r["response"] == "cat" and r["prompt_hash"] for r in sil)
    assert all("usage" in r and r["latency_s"] is not None for r in api_recs if r["parse_status"] == "ok")
    api_metrics = runs["fake-api"].data.metrics
    null_task = nulls[0]["task_id"]
    n_test = {"closure.nat.silhouette": 80, "similarity.chart.mark_color": 120,
              "similarity.chart.series_count": 200, "similarity.nat.things": 12}[null_task]
    assert api_metrics[f"{null_task}/null_rate"] == pytest.approx(1 / n_test, rel=1e-3)
    # B with the (1-v)B .. (1-v)B+v bracket of the null fraction v (in intervals.json)
    v = api_metrics[f"{null_task}/null_rate"]
    if null_task != "similarity.chart.series_count":
        logged = mlflow.artifacts.load_dict(f"{runs['fake-api'].info.artifact_uri}/intervals.json")
        b = next(s for s in logged[null_task]["scores"] if s["name"] == "B")
        assert b["extra"]["B_full_low"] == pytest.approx((1 - v) * b["value"], abs=0.01)
        assert b["extra"]["B_full_high"] == pytest.approx((1 - v) * b["value"] + v, abs=0.01)

    # tiny VLM records carry prompt and the exact model version
    vlm = [json.loads(x) for x in (tmp_path / "out/tiny-llava/records/similarity.chart.mark_color.jsonl")
           .read_text().splitlines()]
    assert len(vlm) == 120 and all(r["response"] == 1 for r in vlm)
    assert vlm[0]["run_meta"]["model_version"].startswith(str(tmp_path / "tiny-llava"))

    # the key is nowhere: records, stale files, the MLflow store (params, tags, metrics), artifacts, logs
    haystacks = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "tiny-llava" not in p.parts[-2:]]
    assert haystacks and not any(KEY.encode() in h for h in haystacks)
    out, err = capfd.readouterr()
    assert KEY not in out and KEY not in err
    for run in runs.values():
        assert KEY not in json.dumps(run.data.params) and KEY not in json.dumps(run.data.tags)


def test_dry_run_counts_the_calls(mixed):
    import subprocess
    import sys

    path, _ = mixed
    res = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path), "--dry-run"],
                         capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert res.returncode == 0, res.stderr
    # tiny-llava and fake-api: 80 + 120 + 200 + 12 generate calls each (series count: 10 plots per k,
    # k = 1..20); encoders make none
    assert "total generate/API calls if nothing is cached: 824" in res.stdout, res.stdout[-2000:]
    assert KEY not in res.stdout
