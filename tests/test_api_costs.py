"""Cost known before and counted after: the price table as data, tokens per trial (cached and
thinking included), the dry run's estimate per model, the run's tokens and cost in MLflow."""

from __future__ import annotations

import csv
import json
import math
import re
from datetime import date

import pytest
import yaml

from harness.exit_status import Exit
from harness.models.api_costs import MESSAGE_TOKENS, PRICES, cost_usd, estimate_input_tokens, image_tokens, price_of
from tests import lifecycle as life
from tests.conftest import MIRROR, REPO
from tests.fake_vendor_server import FakeVendorServer


def test_price_table_rows_are_complete_dated_and_sourced():
    rows = list(csv.DictReader(PRICES.open()))
    assert rows
    for row in rows:
        assert row["vendor"] in {"openai", "anthropic", "google"} and row["model"]
        for col in ("input_usd_per_mtok", "output_usd_per_mtok", "batch_input_usd_per_mtok",
                    "batch_output_usd_per_mtok"):
            assert float(row[col]) > 0, (row["model"], col)
        assert date.fromisoformat(row["date"]) <= date(2026, 12, 31)
        vendor_site = {"openai": "https://platform.openai.com/", "anthropic": "https://platform.claude.com/",
                       "google": "https://ai.google.dev/"}[row["vendor"]]
        assert row["source"].startswith(vendor_site), row["model"]  # the vendor's own page
        # where only a third party confirms a figure, the row says which and who
        assert row["confirmed"] in {"vendor page", "third party"}, row["model"]
        if row["confirmed"] == "third party" or "third party" in row["note"]:
            assert re.search(r"third[- ]party.*https://", row["note"]), row["model"]


@pytest.mark.parametrize("model,cached", [("gpt-5-mini", 0.025), ("o3", 0.50)])
def test_cached_input_rates_are_the_vendors(model, cached):
    assert price_of("openai", model).cached_input == cached  # as the vendor's model pages give them


def test_the_shipped_recipes_api_models_are_priced():
    from tests.conftest import REPO

    names = set()
    for path in (REPO / "recipes").glob("*.yaml"):
        text = path.read_text()
        names |= {m["name"] for m in (yaml.safe_load(text).get("models") or []) if m.get("source") == "api"}
        names |= set(re.findall(r"extractor_model: \{source: api, name: ([\w./-]+)\}", text))
    assert names
    for name in names:
        provider, _, model = name.partition("/")
        assert price_of(provider, model) is not None, name


def test_cost_counts_cached_input_and_thinking_at_their_rates():
    price = price_of("openai", "gpt-4o-2024-08-06")
    usage = {"input_tokens": 1000, "cached_tokens": 200, "output_tokens": 10, "thinking_tokens": 5}
    assert cost_usd(price, usage) == pytest.approx((800 * 2.50 + 200 * 1.25 + 15 * 10.00) / 1e6)
    assert price_of("azure", "gpt-4o-2024-08-06") == price  # Azure bills OpenAI's model it serves
    assert price_of("openai", "acme-vision-9") is None


@pytest.mark.parametrize("provider,model,size,tokens", [
    ("openai", "gpt-4o", (512, 512), 85 + 170),  # one 512 px tile
    ("openai", "gpt-4o", (1024, 1024), 85 + 170 * 4),  # shortest side 768: 2 x 2 tiles
    ("openai", "gpt-4o-mini", (512, 512), 2833 + 5667),  # the same tiles, at gpt-4o-mini's token counts
    ("openai", "o3", (512, 512), 75 + 150),
    ("openai", "gpt-5-nano-2025-08-07", (640, 480), math.ceil(20 * 15 * 2.46)),  # 32 px patches x multiplier
    ("openai", "gpt-4.1-mini", (1800, 2400), math.ceil(1452 * 1.62)),  # the page's example: scaled to 1452 patches
    ("anthropic", "claude-opus-4-6", (750, 100), 100),  # width x height / 750
    ("anthropic", "claude-opus-4-6", (1568, 1568), 1600),  # scaled down to ~1,600 tokens
    ("google", "gemini-2.5-flash", (384, 384), 258),  # one image of at most 384 px
    ("google", "gemini-2.5-flash", (1000, 500), 258 * 2),  # 768 px tiles
])
def test_image_tokens_follow_each_model_familys_rule(provider, model, size, tokens):
    assert image_tokens(provider, model, *size) == tokens
    # about 4 characters a token, and the message wrapping
    assert estimate_input_tokens(provider, model, size, "x" * 40) == tokens + 10 + MESSAGE_TOKENS


# each vendor's model families: OpenAI's tiles (three token scales) and its patches (three multipliers)
FAMILIES = [("openai", "gpt-4o-2024-08-06"), ("openai", "gpt-4o-mini"), ("openai", "gpt-4.1"), ("openai", "o3"),
            ("openai", "gpt-5"), ("openai", "gpt-5-nano"), ("openai", "gpt-5-mini"), ("openai", "gpt-4.1-mini"),
            ("openai", "gpt-4.1-nano"), ("openai", "o4-mini"), ("anthropic", "claude-sonnet-4-6"),
            ("google", "gemini-2.5-flash")]
SIZES = [(64, 48), (640, 480), (1024, 768), (2400, 1800), (300, 1200)]


@pytest.mark.parametrize("provider,model", FAMILIES)
def test_estimated_input_tokens_are_within_5_percent_of_the_bill(provider, model, monkeypatch):
    """The fake vendor bills by each vendor's documented rule; the estimate, made without a key or a
    call, lands within 5% of what it billed for every image size."""
    from PIL import Image

    from harness.models.api import APIModel
    from harness.models.base import ModelSpec

    env = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "google": "GEMINI_API_KEY"}[provider]
    monkeypatch.setenv(env, life.KEY)
    prompt = "Three colored chart marks are shown, numbered 1, 2 and 3. Which one is the odd one out?"
    with FakeVendorServer(key=life.KEY, billing="documented") as server:
        adapter = APIModel(ModelSpec(id="m", source="api", name=f"{provider}/{model}", options={
            "base_url": server.url + ("/v1" if provider == "openai" else ""), "max_tokens": 4096}))
        for size in SIZES:
            gen = adapter.generate(Image.new("RGB", size, (200, 30, 30)), prompt, {"max_new_tokens": 40})
            assert gen.error is None, gen.error
            billed, estimated = gen.usage["input_tokens"], estimate_input_tokens(provider, model, size, prompt)
            assert abs(estimated - billed) <= 0.05 * billed, (size, estimated, billed)


def test_output_is_estimated_as_a_bound_and_as_expected():
    from harness.models.api_costs import Job, estimate, estimate_line, expected_output_tokens

    # the expected figure: the mean the recorded calls billed (thinking is output), else the answers' length
    recorded = [{"usage": {"output_tokens": 2, "thinking_tokens": 100}}, {"usage": {"output_tokens": 4}},
                {"parse_status": "null:api_error:timeout"}]
    assert expected_output_tokens(recorded, ["3"]) == 53
    assert expected_output_tokens([], ["3", "Yes, the middle one"]) == 3
    jobs = [Job(100, (640, 480), "Which one?", 2000, 53.0)]
    e = estimate("openai", "gpt-5-nano", jobs)
    assert e.tokens_out_bound == 200_000 and e.tokens_out_expected == 5300
    assert e.usd_bound == pytest.approx((e.tokens_in * 0.05 + 200_000 * 0.40) / 1e6)
    assert e.usd_expected == pytest.approx((e.tokens_in * 0.05 + 5300 * 0.40) / 1e6)
    line = estimate_line("openai", "gpt-5-nano", jobs)
    assert "<= 200,000 output tokens, ~$0.08" in line and "expected ~5,300 output tokens, ~$0.01" in line
    assert "expected ~5,300 output tokens; no price" in estimate_line("openai", "acme-vision-9", jobs)


def test_usage_records_cached_tokens_from_each_vendors_fields():
    from anthropic.types import Message, Usage
    from google.genai import types as gt
    from openai.types import CompletionUsage
    from openai.types.completion_usage import PromptTokensDetails

    from tests.test_api_vendor_sdks import gestalt

    openai_body = {"id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4o",
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "3"}}],
                   "usage": CompletionUsage(prompt_tokens=90, completion_tokens=2, total_tokens=92,
                                            prompt_tokens_details=PromptTokensDetails(cached_tokens=64)
                                            ).model_dump()}
    gen, _ = gestalt("openai", "gpt-4o", reply=openai_body)
    assert gen.usage["input_tokens"] == 90 and gen.usage["cached_tokens"] == 64

    message = Message(id="m", type="message", role="assistant", model="claude-opus-4-6", stop_reason="end_turn",
                      content=[{"type": "text", "text": "3"}],
                      usage=Usage(input_tokens=26, output_tokens=2, cache_read_input_tokens=64,
                                  cache_creation_input_tokens=0))
    gen, _ = gestalt("anthropic", "claude-opus-4-6", reply=message.model_dump(mode="json"))
    # Anthropic's input_tokens leave out the cache reads; gestalt's include them, as OpenAI's do
    assert gen.usage["input_tokens"] == 90 and gen.usage["cached_tokens"] == 64

    reply = gt.GenerateContentResponse(
        candidates=[gt.Candidate(content=gt.Content(role="model", parts=[gt.Part(text="3")]),
                                 finish_reason=gt.FinishReason.STOP)],
        usage_metadata=gt.GenerateContentResponseUsageMetadata(
            prompt_token_count=90, candidates_token_count=2, cached_content_token_count=64,
            total_token_count=92)).model_dump(mode="json", by_alias=True, exclude_none=True)
    gen, _ = gestalt("google", "gemini-2.0-flash", reply=reply)
    assert gen.usage["input_tokens"] == 90 and gen.usage["cached_tokens"] == 64


def priced_recipe(tmp_path, url: str):
    path = life.api_recipe(tmp_path, url)
    recipe = yaml.safe_load(path.read_text())
    model = recipe["models"][0]
    model["name"] = "openai/gpt-4o-2024-08-06"
    model["options"] = {k: v for k, v in model["options"].items() if k != "api_key_env"}
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def test_dry_run_prints_calls_tokens_and_cost_per_model(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", life.KEY)
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        code, out, err = life.cli(priced_recipe(tmp_path, server.url), "--dry-run")
        assert code == 0, err[-2000:]
        assert not server.requests and not server.model_checks  # a plan: nothing is asked of the vendor
    (line,) = [x for x in out.splitlines() if "estimated" in x]
    n_calls, n_in, n_out, usd = re.search(
        r"(\d+) calls, ~([\d,]+) input tokens, <= ([\d,]+) output tokens, ~\$([\d.]+)", line).groups()
    assert int(n_calls) == life.TRIALS
    n_in, n_out = int(n_in.replace(",", "")), int(n_out.replace(",", ""))
    assert n_out == life.TRIALS * 40  # the protocol's output budget, an upper bound
    assert float(usd) == pytest.approx((n_in * 2.50 + n_out * 10.00) / 1e6, abs=0.01)


def test_the_run_logs_its_tokens_and_cost(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", life.KEY)
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        code, _, err = life.cli(priced_recipe(tmp_path, server.url))
    assert code == 0, err[-2000:]
    records = life.record_lines(tmp_path)
    tokens_in = sum(r["usage"]["input_tokens"] for r in records)
    tokens_out = sum(r["usage"]["output_tokens"] + r["usage"].get("thinking_tokens", 0) for r in records)
    (run,) = life.battery_runs(tmp_path)
    metrics = run.data.metrics
    assert metrics["tokens_in"] == tokens_in and metrics["tokens_out"] == tokens_out
    assert math.isclose(metrics["cost_usd"], (tokens_in * 2.50 + tokens_out * 10.00) / 1e6, rel_tol=1e-6)


def test_budget_stops_the_battery_cleanly_and_a_rerun_continues(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", life.KEY)
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        path = priced_recipe(tmp_path, server.url)
        recipe = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({**recipe, "budget_usd": 0.004}, sort_keys=False))
        code, _, err = life.cli(path)
        assert code == Exit.NEEDS_CHANGE
        line = next(x for x in err.splitlines() if x.startswith("gestalt"))
        assert "budget_usd 0.004 reached" in line
        spent = life.record_lines(tmp_path)
        assert 0 < len(spent) < life.TRIALS and len(server.requests) == len(spent)  # records kept
        (run,) = life.battery_runs(tmp_path)
        assert run.info.status == "FAILED"

        path.write_text(yaml.safe_dump({**recipe, "budget_usd": 1.0}, sort_keys=False))
        code, out, err = life.cli(path)
        assert code == 0, err[-2000:]
        assert f"{life.TRIALS - len(spent)} new trials" in out and len(server.requests) == life.TRIALS
        (after,) = life.battery_runs(tmp_path)
        assert after.info.run_id == run.info.run_id and after.info.status == "FINISHED"


def test_budget_needs_a_price_for_every_api_model(tmp_path):
    from harness.recipes import RecipeError, load_recipe
    from harness.run import check_budget, plan

    path = life.api_recipe(tmp_path, "http://127.0.0.1:9")  # openai-compatible/fake-1: no price
    recipe = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**recipe, "budget_usd": 5}, sort_keys=False))
    loaded = load_recipe(path)
    with pytest.raises(RecipeError, match=r"budget_usd.*fake-1.*no price"):
        check_budget(loaded, plan(loaded))


def test_anthropic_thinking_tokens_are_split_out_where_reported():
    from anthropic.types import Message, OutputTokensDetails, Usage

    from tests.test_api_vendor_sdks import gestalt

    message = Message(id="m", type="message", role="assistant", model="claude-opus-4-6", stop_reason="end_turn",
                      content=[{"type": "thinking", "thinking": "1 or 3?", "signature": "s"},
                               {"type": "text", "text": "3"}],
                      usage=Usage(input_tokens=26, output_tokens=120,
                                  output_tokens_details=OutputTokensDetails(thinking_tokens=118)))
    gen, _ = gestalt("anthropic", "claude-opus-4-6", reply=message.model_dump(mode="json"))
    assert gen.usage["output_tokens"] == 2 and gen.usage["thinking_tokens"] == 118
    # billed the same: thinking is output
    price = price_of("anthropic", "claude-opus-4-6")
    assert cost_usd(price, gen.usage) == pytest.approx((26 * 5.00 + 120 * 25.00) / 1e6)


def chart6_with_extractor(tmp_path, url: str, **recipe_keys):
    """recipes/chart6.yaml's API model on GGR (13 items, one presentation) with the paper's GPT-4
    extractor."""
    recipe = yaml.safe_load((REPO / "recipes" / "chart6.yaml").read_text())
    (api,) = [m for m in recipe["models"] if m["source"] == "api"]
    api["options"] = {"base_url": url + "/v1", "backoff_base_s": 0.001, "max_retries": 1}
    api["generation"] |= {"n_reps": 1, "extractor": "llm", "extractor_model": {
        "source": "api", "name": "openai/gpt-4-0613", "options": {"base_url": url + "/v1"}}}
    recipe |= {"models": [api], "tasks": ["literacy.chart.ggr"], "data": {"mirror": str(MIRROR)},
               "runtime": {"progress": False, "device": "cpu"}, "bootstrap": {"n_boot": 100},
               "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "chart6"},
               "output_dir": str(tmp_path / "out"), **recipe_keys}
    path = tmp_path / "chart6.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path, api["id"]


@pytest.mark.slow
def test_extractor_calls_are_estimated_counted_and_charged(tmp_path, monkeypatch):
    import mlflow

    from harness.recipes import load_recipe
    from harness.run import describe_plan, preflight, run_recipe
    from tests.test_chart6_llm_extractor import KEY, answer

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeVendorServer(key=KEY, answer=answer) as server:
        path, model_id = chart6_with_extractor(tmp_path, server.url, budget_usd=100)
        recipe = load_recipe(path)
        planned, stimsets, _ = preflight(recipe)
        plan_text = describe_plan(recipe, planned, stimsets)
        (head, line) = [x for x in plan_text.splitlines() if "answer extractor" in x or "estimated" in x][1:]
        assert "answer extractor" in head and "gpt-4-0613" in head
        n_calls, n_in, n_out, usd = re.search(
            r"(\d+) calls, ~([\d,]+) input tokens, <= ([\d,]+) output tokens, ~\$([\d.]+)", line).groups()
        assert int(n_calls) == 13 and int(n_out.replace(",", "")) == 13 * 2000  # the paper's GPT-4 budget
        assert int(n_in.replace(",", "")) > 13 * 270  # each prompt holds an answer of up to 270 tokens
        assert float(usd) == pytest.approx((int(n_in.replace(",", "")) * 30.0 + 13 * 2000 * 60.0) / 1e6, abs=0.01)

        run_recipe(recipe, echo=lambda *_: None)
    records = [json.loads(x) for x in (tmp_path / "out" / model_id / "records" /
                                       "literacy.chart.ggr.jsonl").read_text().splitlines()]
    model, extractor = price_of("openai", "gpt-4o-2024-08-06"), price_of("openai", "gpt-4-0613")
    expected = sum(cost_usd(model, r["usage"]) + cost_usd(extractor, r["extras"]["extractor_usage"])
                   for r in records)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = [r for r in mlflow.search_runs(experiment_names=["chart6"], output_format="list")
              if r.info.run_name == model_id]
    assert run.data.metrics["cost_usd"] == pytest.approx(expected)  # the extractor's calls included
    usage = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/intervals.json")["literacy.chart.ggr"]["usage"]
    assert usage["cost_usd"] == pytest.approx(expected) and usage["extractor_calls"] == 13
    assert usage["tokens_in"] == sum(r["usage"]["input_tokens"] for r in records)
    assert usage["extractor_tokens_in"] == sum(r["extras"]["extractor_usage"]["input_tokens"] for r in records)


def test_budget_counts_the_extractors_calls():
    from harness.models.api_costs import spend

    model, extractor = price_of("openai", "gpt-4o"), price_of("openai", "gpt-4-0613")
    record = {"usage": {"input_tokens": 1000, "output_tokens": 10},
              "extras": {"extractor_usage": {"input_tokens": 1000, "output_tokens": 10}}}
    one = cost_usd(model, record["usage"]) + cost_usd(extractor, record["extras"]["extractor_usage"])
    assert spend([record, record], model, extractor) == pytest.approx(2 * one)
    # an open model answering, a paid extractor reading its answers
    assert spend([record], None, extractor) == pytest.approx(cost_usd(extractor, record["extras"]["extractor_usage"]))
