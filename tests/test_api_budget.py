"""A budget is spend: ``budget_usd`` caps what a recipe's batteries have spent in all runs so far,
read from their records, so a rerun under the same budget sends nothing once it is reached; a
budget-stopped run still logs its spend, counted from the records of every process of the run;
a FAILED run's scores are provisional and never ranked. The battery is the silhouette task
answered by the fake vendor, priced as gpt-4o."""

from __future__ import annotations

import re

import pytest
import yaml

from harness.exit_status import Exit
from harness.models.api_costs import Budget, BudgetReached, cost_usd, price_of, spend
from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer, Sleep, Status
from tests.test_api_costs import priced_recipe

GPT4O = price_of("openai", "gpt-4o-2024-08-06")


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", life.KEY)
    monkeypatch.setenv("GESTALT_OFFLINE", "0")
    with FakeVendorServer(key=life.KEY, answer=life.answer) as s:
        yield s


def budgeted(tmp_path, url: str, budget: float):
    path = priced_recipe(tmp_path, url)
    recipe = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**recipe, "budget_usd": budget}, sort_keys=False))
    return path


def spent_in_records(tmp_path) -> float:
    folder = tmp_path / "out" / "fake-api" / "records"
    return sum(cost_usd(GPT4O, r.get("usage") or {}) for f in (f"{life.TASK}.jsonl", f"{life.TASK}.failed.jsonl")
               for r in life.whole_records(folder / f))


def call_bound(path) -> float:
    """The most one call of the battery costs: what each call in flight may add past the budget."""
    from harness.recipes import load_recipe
    from harness.run import call_bound_usd, preflight

    recipe = load_recipe(path)
    planned, stimsets, _ = preflight(recipe)
    return call_bound_usd(planned[0], life.TASK, stimsets[life.TASK])


def test_a_budget_holds_across_reruns_and_a_rerun_sends_nothing_once_it_is_reached(tmp_path, server):
    path = budgeted(tmp_path, server.url, 0.004)
    code, out, err = life.cli(path)
    assert code == Exit.NEEDS_CHANGE  # the budget must be raised: a requeued job would send nothing
    first = len(server.requests)
    assert 0 < first < life.TRIALS
    assert re.search(r"budget_usd 0\.004: spent \$0\.0000 of \$0\.004", out)  # said at the start
    spent = spent_in_records(tmp_path)
    assert f"spent ${spent:.4f} of $0.004" in out + err  # and at the end

    code, out, err = life.cli(path)  # the identical rerun: the budget is spent, nothing is sent
    assert code == Exit.NEEDS_CHANGE and len(server.requests) == first
    assert f"budget_usd 0.004: spent ${spent:.4f} of $0.004" in out
    assert "budget_usd 0.004 reached" in err
    # the stated overshoot: the calls in flight (the batch size, 4) at most one call's bound each
    assert spent_in_records(tmp_path) <= 0.004 + 4 * call_bound(path)


def test_a_budget_stopped_run_logs_its_spend_and_the_rerun_counts_every_call_of_the_run(tmp_path, server):
    path = budgeted(tmp_path, server.url, 0.004)
    code, out, _ = life.cli(path)
    assert code == Exit.NEEDS_CHANGE
    sent = len(server.requests)
    assert f"{sent} new trials, {sent} model calls" in out  # not "0 new trials, 0 model calls"
    (run,) = life.battery_runs(tmp_path)
    assert run.data.metrics["model_calls"] == sent
    assert run.data.metrics["cost_usd"] == pytest.approx(spent_in_records(tmp_path))
    assert run.data.metrics["tokens_in"] == sum(r["usage"]["input_tokens"] for r in life.record_lines(tmp_path))

    path.write_text(path.read_text().replace("budget_usd: 0.004", "budget_usd: 10"))
    code, out, err = life.cli(path)
    assert code == 0, err[-2000:]
    (after,) = life.battery_runs(tmp_path)
    # one scope: the run's calls, whichever process made them
    assert after.data.metrics["model_calls"] == len(server.requests) == life.TRIALS
    assert after.data.metrics["tokens_in"] == sum(r["usage"]["input_tokens"] for r in life.record_lines(tmp_path))
    assert after.data.metrics["cost_usd"] == pytest.approx(spent_in_records(tmp_path))


def test_a_call_that_timed_out_counts_at_its_estimated_cost():
    answered = {"parse_status": "ok", "usage": {"input_tokens": 1000, "output_tokens": 10}}
    timed_out = {"parse_status": "null:api_error:timeout"}
    refused = {"parse_status": "null:api_error:http_401"}
    one = cost_usd(GPT4O, answered["usage"])
    assert spend([answered, timed_out, refused], GPT4O, timed_out_usd=0.5) == pytest.approx(one + 0.5)


def test_a_budget_starts_from_what_was_spent_and_says_so():
    budget = Budget(limit_usd=1.0, spent_usd=0.75)
    assert budget.line() == "budget_usd 1: spent $0.7500 of $1"
    budget.charge(0.2, "gpt-4o prices")
    with pytest.raises(BudgetReached, match=r"spent \$1\.0500 of \$1 at gpt-4o prices"):
        budget.charge(0.1, "gpt-4o prices")
    with pytest.raises(BudgetReached):  # reached: nothing more is sent
        Budget(limit_usd=1.0, spent_usd=1.0).charge(0.0, "gpt-4o prices")


def test_timeouts_count_against_the_budget_in_a_run(tmp_path, server):
    path = budgeted(tmp_path, server.url, 10)
    recipe = yaml.safe_load(path.read_text())
    recipe["models"][0]["options"]["timeout_s"] = 0.5
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    server.script(Sleep(2.0), Sleep(2.0))
    code, out, _ = life.cli(path)
    assert code == Exit.RERUN_FIXES  # timed-out calls under a budget not reached: a rerun sends them
    bound = call_bound(path)
    assert f"spent ${spent_in_records(tmp_path) + 2 * bound:.4f} of $10" in out


# -- a FAILED run's scores are provisional ---------------------------------------------------------

def test_a_failed_runs_scores_are_provisional_and_not_ranked(tmp_path, server):
    path = life.api_recipe(tmp_path, server.url, models=("fake-api", "fake-b"))
    server.script(*[Status(500)] * 5)  # the first battery ends with five failed calls
    code, out, err = life.cli(path)
    assert code == Exit.RERUN_FIXES
    table, answer = out.split("rank groups per task", 1)
    assert any("fake-api" in x and "provisional" in x for x in table.splitlines())
    assert not any("fake-b" in x and "provisional" in x for x in table.splitlines())
    answer = answer.split(" new trials")[0]  # the rank groups, before the run's last lines
    (line,) = [x for x in answer.splitlines() if "fake-api" in x]
    assert line.split()[0] == "-" and "provisional: 5 failed calls left" in line
    (run,) = life.battery_runs(tmp_path)
    assert run.data.tags["gestalt.scores"] == "provisional"
    (finished,) = life.battery_runs(tmp_path, "fake-b")
    assert "gestalt.scores" not in finished.data.tags

    code, out, err = life.cli(path)
    assert code == 0, err[-2000:]
    (after,) = life.battery_runs(tmp_path)
    assert "gestalt.scores" not in after.data.tags and "provisional" not in out


def test_the_outcome_names_every_failure_kind_with_its_count():
    from harness.run import _failure

    kinds = ["timeout", "http_500", "http_429", "connection", "http_503"]
    records = [{"parse_status": "ok"}] * 10 + [
        {"parse_status": f"null:api_error:{k}"} for i, k in enumerate(kinds) for _ in range(i + 1)]
    why = _failure(records)
    for i, k in enumerate(kinds):
        assert f"null:api_error:{k} x{i + 1}" in why
