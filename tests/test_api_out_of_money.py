"""Credit or quota run out is never a final answer: each vendor's out-of-money error (Anthropic's
credit 400, OpenAI's ``insufficient_quota`` 429, Gemini's per-day ``RESOURCE_EXHAUSTED`` 429) is a
failed call, sent once and never retried; the model sends nothing more after it, its battery's run
ends FAILED with what happened and what to do, the other models go on, and the rerun, money added,
sends exactly the calls not answered. The vendors are the fake of tests/fake_vendor_server.py."""

from __future__ import annotations

import pytest
import yaml
from PIL import Image

from harness.models.api import APIModel
from harness.models.base import ModelSpec
from harness.readouts.parse import api_error_status, failed_call
from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer

# a model of each vendor that answers the silhouette task's 40-token budget without thinking
MODEL = {"anthropic": "claude-haiku-4-5", "openai": "gpt-4o-2024-08-06", "google": "gemini-2.0-flash"}
VENDORS = list(MODEL)  # Anthropic's credit 400 first: the case that used to be read as an answer
SAYS = {"anthropic": "anthropic refused the call: credit balance too low (out of credit)",
        "openai": "openai refused the call: quota used up (insufficient_quota)",
        "google": "google refused the call: per-day quota used up (GenerateRequestsPerDayPerProjectPerModel-FreeTier)"}
DO = {"anthropic": "add credit", "openai": "add credit or raise the limit",
      "google": "wait for the quota's daily reset or raise it"}
ANSWERED = 60  # of the task's 80 trials, before the money runs out


@pytest.fixture(autouse=True)
def online_again(monkeypatch):
    monkeypatch.setenv("GESTALT_OFFLINE", "0")


def base_url(vendor: str, server: FakeVendorServer) -> str:
    return server.url + "/v1" if vendor == "openai" else server.url


@pytest.mark.parametrize("vendor", VENDORS)
def test_out_of_money_is_a_failed_call_sent_once_and_then_no_more(vendor, monkeypatch):
    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    with FakeVendorServer(key=life.KEY, credit=0) as server:
        adapter = APIModel(ModelSpec(id="m", source="api", name=f"{vendor}/{MODEL[vendor]}", options={
            "base_url": base_url(vendor, server), "api_key_env": life.ENV_KEY, "max_retries": 6,
            "backoff_base_s": 5.0, "backoff_cap_s": 60.0}))  # a retry would make the test take minutes
        image = Image.new("RGB", (24, 16), (200, 30, 30))
        first = adapter.generate(image, "Which one?", {"max_new_tokens": 40})
        assert len(server.requests) == 1 and server.broke == 1  # not retried as a rate limit
        assert first.text is None and failed_call(api_error_status(first.error))
        assert first.error.startswith(f"quota: {SAYS[vendor]}")
        later = adapter.generate(image, "Which one?", {"max_new_tokens": 40})
        assert len(server.requests) == 1  # every further call would be refused too: none is sent
        assert later.text is None and failed_call(api_error_status(later.error))
        assert later.error.startswith(f"quota: {SAYS[vendor]}") and "not sent" in later.error
        assert life.KEY not in first.error + later.error


def recipe(folder, models: list[tuple[str, str, FakeVendorServer]]):
    """The lifecycle battery for each (id, provider, server): retries on, so a retried refusal
    would show in the requests counted."""
    path = life.api_recipe(folder, models[0][2].url, models=tuple(m for m, _, _ in models))
    data = yaml.safe_load(path.read_text())
    for spec, (_, vendor, server) in zip(data["models"], models):
        name = f"{vendor}/{MODEL.get(vendor, 'fake-1')}"
        spec.update(name=name)
        spec["options"].update(base_url=base_url(vendor if vendor != "openai-compatible" else "openai", server),
                               max_retries=3)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_run_out_of_money_fails_and_the_rerun_sends_exactly_the_calls_not_answered(vendor, tmp_path):
    with FakeVendorServer(key=life.KEY, answer=life.answer, credit=ANSWERED) as server:
        path = recipe(tmp_path, [("fake-api", vendor, server)])
        code, out, err = life.cli(path)
        assert code == 1, "money run out is a failure a rerun fixes, never exit 0"
        # the first refusal is the last request: the model sends nothing more
        assert len(server.requests) == ANSWERED + 1 and server.broke == 1
        records = life.record_lines(tmp_path)
        assert len(records) == life.TRIALS
        assert sum(r["parse_status"] == "ok" for r in records) == ANSWERED
        assert {r["parse_status"] for r in records} == {"ok", "null:api_error:quota"}
        (line,) = [x for x in err.splitlines() if x.startswith("gestalt: error:")]
        left = life.TRIALS - ANSWERED
        assert (f"fake-api: {SAYS[vendor]}; {DO[vendor]} and rerun: the {left} calls not answered "
                f"are sent again") in line, line
        assert life.KEY not in out + err
        (run,) = life.battery_runs(tmp_path)
        assert run.info.status == "FAILED"

        server.credit = None  # credit added
        code, out, err = life.cli(path)
        assert code == 0, err[-2000:]
        assert f"re-sending {left} failed calls" in out
        assert len(server.requests) == ANSWERED + 1 + left and server.broke == 1
        (after,) = life.battery_runs(tmp_path)
        assert after.info.run_id == run.info.run_id and after.info.status == "FINISHED"
        records = life.record_lines(tmp_path)
        assert len(records) == life.TRIALS and {r["parse_status"] for r in records} == {"ok"}


def test_a_model_out_of_credit_leaves_the_others_running(tmp_path):
    with (FakeVendorServer(key=life.KEY, answer=life.answer, credit=0) as broke,
          FakeVendorServer(key=life.KEY, answer=life.answer) as paid):
        path = recipe(tmp_path, [("claude", "anthropic", broke), ("local", "openai-compatible", paid)])
        code, _, err = life.cli(path)
        assert code == 1
        assert len(broke.requests) == 1 and len(paid.requests) == life.TRIALS
        (claude,) = life.battery_runs(tmp_path, "claude")
        (local,) = life.battery_runs(tmp_path, "local")
        assert claude.info.status == "FAILED" and local.info.status == "FINISHED"
        (line,) = [x for x in err.splitlines() if x.startswith("gestalt: error:")]
        assert f"claude: {SAYS['anthropic']}; add credit and rerun: the {life.TRIALS} calls" in line
        assert "local" not in line
