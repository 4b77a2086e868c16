"""recipes/chart6.yaml with the paper's LLM answer extractor and its API model, end to end against
the fake vendor server: the extractor's text-only calls (no image) work, both models get the
parameters their capability rows allow, and every trial is recorded."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import MIRROR, REPO
from tests.fake_vendor_server import FakeVendorServer

KEY = "sk-chart6-llm-extractor-0123456789"


def answer(prompt: str | None) -> str:
    if prompt and prompt.endswith("Extracted answer:"):  # the extractor (Table 5)
        choices = re.search(r"Choices: (.*?)\. Model response:", prompt)
        return choices.group(1).split(", ")[0] if choices else "42"
    return "Looking at the chart, I would say roughly 42, give or take."


@pytest.mark.slow
def test_chart6_recipe_with_llm_extractor_and_api_model(tmp_path, monkeypatch):
    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from harness.trials.records import validate

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    recipe = yaml.safe_load((REPO / "recipes" / "chart6.yaml").read_text())
    (api,) = [m for m in recipe["models"] if m["source"] == "api"]
    with FakeVendorServer(key=KEY, answer=answer) as server:
        api["options"] = {"base_url": server.url + "/v1", "backoff_base_s": 0.001, "max_retries": 1}
        api["generation"] |= {"n_reps": 2, "extractor": "llm", "extractor_model": {
            "source": "api", "name": "openai/gpt-4-0613", "options": {"base_url": server.url + "/v1"}}}
        recipe |= {"models": [api], "tasks": ["literacy.chart.ggr"], "data": {"mirror": str(MIRROR)},
                   "runtime": {"progress": False, "device": "cpu"}, "bootstrap": {"n_boot": 100},
                   "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "chart6"},
                   "output_dir": str(tmp_path / "out")}
        path = tmp_path / "chart6.yaml"
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        (result,) = run_recipe(load_recipe(path), echo=lambda *_: None)
        requests = list(server.requests)

    lines = (tmp_path / "out" / api["id"] / "records" / "literacy.chart.ggr.jsonl").read_text().splitlines()
    records = [validate(json.loads(x)) for x in lines]
    assert len(records) == 2 * 13 and {r["rep"] for r in records} == {0, 1}
    assert all(r["parse_status"] == "ok" for r in records), {r["parse_status"] for r in records}
    assert all(r["extras"]["extracted"] for r in records)
    assert all(r["extras"]["extractor_usage"]["input_tokens"] > 0 for r in records)  # its calls are paid too
    assert "accuracy_all" in {s.name for s in result.scores["literacy.chart.ggr"]}

    answering = [r for r in requests if r.body["model"] == "gpt-4o-2024-08-06"]
    extracting = [r for r in requests if r.body["model"] == "gpt-4-0613"]
    assert len(answering) == len(extracting) == 2 * 13
    assert all(r.order == ["image", "text"] for r in answering)
    assert all(r.order == ["text"] for r in extracting)  # no image block
    # GPT-4V's Table 2 decoding and a seed per repetition; the paper's GPT-4 extractor settings
    assert {(r.body["temperature"], r.body["top_p"]) for r in answering} == {(0.2, 1.0)}
    assert {r.body["seed"] for r in answering} == {0, 1}
    assert {(r.body["temperature"], r.body["top_p"], r.body["max_completion_tokens"])
            for r in extracting} == {(1.0, 1.0, 2000)}
    assert KEY not in "\n".join(lines)
