"""What gestalt says about API costs and budgets. The dry run's expected output counts thinking: a
model that thinks on a request (by default, as gemini-2.5-flash and gpt-5-nano do, or by its
options) bills its thinking as output, which the length of the task's answers leaves out; until a
recorded call says how much it thinks, a call is expected to think its thinking budget, else its
whole output budget. Under a ``budget_usd`` the dry run says the budget and what the recipe's
batteries have spent. A battery the budget stopped says in the score table how many trials it has
and that it is not scored."""

from __future__ import annotations

import re

import pytest
import yaml

from harness.exit_status import Exit
from harness.models.api import APIModel
from harness.models.api_costs import expected_output_tokens
from harness.models.base import ModelSpec
from tests import lifecycle as life
from tests.test_api_costs import priced_recipe


def model(name: str, **options) -> APIModel:
    return APIModel(ModelSpec(id="m", source="api", name=name, options={"max_tokens": 2048, **options}))


@pytest.mark.parametrize("name, options, thinking", [
    ("google/gemini-2.5-flash", {}, 2048),  # on by default, no typical amount documented
    ("openai/gpt-5-nano", {}, 2048),
    ("google/gemini-2.5-flash", {"thinking_budget": 512}, 512),
    ("google/gemini-2.5-flash", {"thinking_budget": 0}, 0),  # turned off
    ("google/gemini-2.5-flash-lite", {}, 0),  # off by default
    ("openai/gpt-4o-2024-08-06", {}, 0),
    ("anthropic/claude-sonnet-4-6", {"thinking_budget": 1024}, 1024),
])
def test_the_thinking_a_call_is_expected_to_bill(name, options, thinking):
    assert model(name, **options).expected_thinking(2048) == thinking


def test_recorded_calls_say_how_much_a_model_thinks():
    assert expected_output_tokens([], ["3"], thinking=2048) == 2049
    recorded = [{"usage": {"output_tokens": 2, "thinking_tokens": 300}}]
    assert expected_output_tokens(recorded, ["3"], thinking=2048) == 302


def test_the_dry_run_expects_a_thinking_model_to_bill_its_thinking(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", life.KEY)
    path = priced_recipe(tmp_path, "http://127.0.0.1:9")
    recipe = yaml.safe_load(path.read_text())
    recipe["models"][0] |= {"name": "openai/gpt-5-nano"}
    recipe["models"][0]["options"]["max_tokens"] = 2048
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    code, out, err = life.cli(path, "--dry-run")
    assert code == 0, err[-2000:]
    (line,) = [x for x in out.splitlines() if "estimated" in x]
    bound, expected = re.search(r"<= ([\d,]+) output tokens.*expected ~([\d,]+) output tokens", line).groups()
    assert int(expected.replace(",", "")) == int(bound.replace(",", "")) == life.TRIALS * 2048


def test_the_dry_run_says_the_budget_and_what_was_spent(tmp_path, monkeypatch):
    from tests.fake_vendor_server import FakeVendorServer
    from tests.test_api_budget import budgeted, spent_in_records

    monkeypatch.setenv("OPENAI_API_KEY", life.KEY)
    monkeypatch.setenv("GESTALT_OFFLINE", "0")
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        path = budgeted(tmp_path, server.url, 0.004)
        code, out, err = life.cli(path, "--dry-run")
        assert code == 0, err[-2000:]
        assert "budget_usd 0.004: spent $0.0000 of $0.004" in out
        code, _, err = life.cli(path)  # stopped by the budget
        assert code == Exit.NEEDS_CHANGE and len(server.requests) > 0
        sent = len(server.requests)
        code, out, err = life.cli(path, "--dry-run")
        assert code == 0, err[-2000:]
        assert len(server.requests) == sent  # a plan: nothing is sent
    assert f"budget_usd 0.004: spent ${spent_in_records(tmp_path):.4f} of $0.004" in out


def test_a_budget_stopped_battery_says_its_trials_and_that_it_is_not_scored(tmp_path, monkeypatch):
    from tests.fake_vendor_server import FakeVendorServer
    from tests.test_api_budget import budgeted

    monkeypatch.setenv("OPENAI_API_KEY", life.KEY)
    monkeypatch.setenv("GESTALT_OFFLINE", "0")
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        code, out, err = life.cli(budgeted(tmp_path, server.url, 0.004))
    assert code == Exit.NEEDS_CHANGE
    trials = len(life.record_lines(tmp_path))
    table = out.split("rank groups per task")[0]
    (row,) = [x for x in table.splitlines() if x.split()[:2] == ["fake-api", life.TASK]]
    assert f"not scored: {trials} of {life.TRIALS} trials, stopped by budget_usd" in row
