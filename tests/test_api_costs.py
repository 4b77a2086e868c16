"""Cost known before and counted after: the price table as data, tokens per trial (cached and
thinking included), the dry run's estimate per model, the run's tokens and cost in MLflow."""

from __future__ import annotations

import csv
import math
import re
from datetime import date

import pytest
import yaml

from harness.models.api_costs import PRICES, cost_usd, estimate_input_tokens, price_of
from tests import lifecycle as life
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
        assert re.match(r"https://", row["source"]) and re.match(r"https://", row["via"])


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


@pytest.mark.parametrize("provider,size,tokens", [
    ("openai", (512, 512), 85 + 170),  # one 512 px tile
    ("openai", (1024, 1024), 85 + 170 * 4),  # shortest side 768: 2 x 2 tiles
    ("anthropic", (750, 100), 100),  # width x height / 750
    ("google", (384, 384), 258),  # one image of at most 384 px
    ("google", (1000, 500), 258 * 2),  # 768 px tiles
])
def test_image_tokens_follow_each_vendors_rule(provider, size, tokens):
    assert estimate_input_tokens(provider, size, "") == tokens
    assert estimate_input_tokens(provider, size, "x" * 40) == tokens + 10  # about 4 characters a token


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
        assert code == 1
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
