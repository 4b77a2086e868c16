"""Attempts the vendor may bill without reporting usage (a read timeout, a cut response or stream):
each counts at its bound, the request's estimated input and its whole output budget, logged in
MLflow as ``cost_usd_unreported_max`` beside the reported ``cost_usd`` and charged to ``budget_usd``,
so what gestalt says it spent is never below the bill. The fake vendor bills every answer it makes,
also one the client stopped waiting for."""

from __future__ import annotations

import time

import pytest
import yaml

from harness.exit_status import Exit
from harness.models.api_costs import cost_usd, unreported_usd
from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer, Reply, Sleep
from tests.test_api_budget import GPT4O, budgeted, call_bound, spent_in_records


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", life.KEY)
    monkeypatch.setenv("GESTALT_OFFLINE", "0")
    with FakeVendorServer(key=life.KEY, answer=life.answer) as s:
        yield s


def billed_usd(server, timeout_s: float = 10.0) -> float:
    """What the fake billed at gpt-4o prices, once every answer it started is made: a call the
    client stopped waiting for is still being answered when the run ends."""
    deadline = time.monotonic() + timeout_s
    while len(server.billed) < len(server.requests) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(server.billed) == len(server.requests)
    return sum(cost_usd(GPT4O, {"input_tokens": i, "output_tokens": o}) for i, o in server.billed)


def unreported_in_records(tmp_path) -> float:
    folder = tmp_path / "out" / "fake-api" / "records"
    return sum(unreported_usd(GPT4O, r.get("usage") or {}) for f in (f"{life.TASK}.jsonl", f"{life.TASK}.failed.jsonl")
               for r in life.whole_records(folder / f))


def with_timeouts(path, timeout_s: float = 0.3, max_retries: int = 2):
    recipe = yaml.safe_load(path.read_text())
    recipe["models"][0]["options"] |= {"timeout_s": timeout_s, "max_retries": max_retries}
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def test_an_attempt_the_vendor_may_bill_is_counted_at_its_bound(server, monkeypatch):
    from PIL import Image

    from harness.models.api import APIModel
    from harness.models.api_costs import estimate_input_tokens
    from harness.models.base import ModelSpec
    from tests.fake_vendor_server import Drop

    def model(url: str) -> APIModel:
        return APIModel(ModelSpec(id="m", source="api", name="openai/gpt-4o-2024-08-06", options={
            "base_url": url + "/v1", "max_tokens": 50, "timeout_s": 0.3, "max_retries": 2,
            "backoff_base_s": 0.001, "backoff_cap_s": 0.01}))

    image, prompt = Image.new("RGB", (64, 48)), "Which one?"
    server.script(Sleep(1.0), Drop())  # read past the timeout, then cut: each may have been billed
    gen = model(server.url).generate(image, prompt, {"max_new_tokens": 40})
    assert gen.error is None and gen.usage["input_tokens"] > 0  # the third attempt answered
    tokens_in = estimate_input_tokens("openai", "gpt-4o-2024-08-06", image.size, prompt)
    assert gen.usage["unreported_attempts"] == 2
    assert gen.usage["unreported_input_tokens"] == 2 * tokens_in and gen.usage["unreported_output_tokens"] == 2 * 50
    assert unreported_usd(GPT4O, gen.usage) == pytest.approx(2 * (tokens_in * 2.50 + 50 * 10.00) / 1e6)
    assert cost_usd(GPT4O, gen.usage) == cost_usd(GPT4O, {k: gen.usage[k] for k in ("input_tokens", "output_tokens")})

    refused = model("http://127.0.0.1:9").generate(image, prompt, {"max_new_tokens": 40})
    assert refused.error.startswith("connection") and not refused.usage  # never reached a vendor: never billed


def test_timed_out_calls_are_logged_beside_the_reported_cost_and_cover_the_bill(tmp_path, server):
    """One call in ten answers after the client gave up, and the fake bills it all the same."""
    path = with_timeouts(budgeted(tmp_path, server.url, 10))
    server.script(*([Reply()] * 9 + [Sleep(1.0)]) * 8)
    code, out, err = life.cli(path)
    assert code == 0, err[-2000:]
    billed = billed_usd(server)
    (run,) = life.battery_runs(tmp_path)
    reported, unreported = run.data.metrics["cost_usd"], run.data.metrics["cost_usd_unreported_max"]
    assert reported == pytest.approx(spent_in_records(tmp_path)) and reported < billed  # the vendor's word falls short
    assert unreported == pytest.approx(unreported_in_records(tmp_path)) and reported + unreported >= billed
    assert f"spent ${reported + unreported:.4f} of $10" in out  # the budget counts them too


def test_the_budget_stop_counts_calls_the_vendor_may_have_billed_unreported(tmp_path, server):
    path = with_timeouts(budgeted(tmp_path, server.url, 0.004))
    server.script(*[Reply(), Sleep(1.0)] * 40)
    code, out, err = life.cli(path)
    assert code == Exit.NEEDS_CHANGE, err[-2000:]
    spent = spent_in_records(tmp_path) + unreported_in_records(tmp_path)
    assert f"spent ${spent:.4f} of $0.004" in out + err
    assert billed_usd(server) <= spent  # what gestalt says it spent is never below the bill
    assert spent <= 0.004 + 4 * 3 * call_bound(path)  # the calls in flight, each with its retries, at most
