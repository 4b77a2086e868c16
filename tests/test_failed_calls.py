"""A failed call is not an answer: a battery's failure nulls (auth, quota, rate limit after retries,
server error, timeout, transport) are sent again by a rerun, in the same MLflow run, and the run's
status and exit code say whether any remain. Answer nulls (unparseable, refusal, truncated,
safety) are final. The battery is the silhouette task answered by the fake vendor."""

from __future__ import annotations

import pytest

from harness.exit_status import Exit
from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer, Status


@pytest.fixture
def server():
    with FakeVendorServer(key=life.KEY, answer=life.answer) as s:
        yield s


@pytest.fixture(autouse=True)
def online_again(monkeypatch):
    monkeypatch.setenv("GESTALT_OFFLINE", "0")  # --offline sets it for the process; undone after each test


DEAD = "sk-dead-key-000000000000"


def test_rerun_with_a_good_key_sends_exactly_the_failed_trials(tmp_path, server):
    path = life.api_recipe(tmp_path, server.url)
    server.revoked.add(DEAD)  # a key that stops working after the check, during the battery
    code, _, err = life.cli(path, key=DEAD)
    assert code == Exit.NEEDS_CHANGE and "FAILED" in err  # a refused key: requeued, it fails again
    assert len(server.requests) == 0  # the fake records only requests that passed its key check
    (run,) = life.battery_runs(tmp_path)
    assert run.info.status == "FAILED"
    assert {r["parse_status"] for r in life.record_lines(tmp_path)} == {"null:api_error:http_401"}

    code, out, err = life.cli(path)
    assert code == 0, err[-2000:]
    assert f"re-sending {life.TRIALS} failed calls" in out
    assert len(server.requests) == life.TRIALS
    assert f"continuing run {run.info.run_id}" in out and f"{life.TRIALS} new trials" in out
    (after,) = life.battery_runs(tmp_path)
    assert after.info.run_id == run.info.run_id and after.info.status == "FINISHED"
    assert "gestalt.outcome" not in after.data.tags  # the earlier failure no longer describes the run
    records = life.record_lines(tmp_path)
    assert len(records) == life.TRIALS and {r["parse_status"] for r in records} == {"ok"}
    # the failed attempts are kept beside the records, not mixed with them
    kept = life.whole_records(tmp_path / "out/fake-api/records" / f"{life.TASK}.failed.jsonl")
    assert len(kept) == life.TRIALS and all(r["parse_status"] == "null:api_error:http_401" for r in kept)


def test_partly_failed_battery_fails_and_a_rerun_sends_only_its_failures(tmp_path, server):
    path = life.api_recipe(tmp_path, server.url)
    server.script(*[Status(500)] * 5)  # max_retries 0: five trials end as failed calls
    code, _, err = life.cli(path)
    assert code == Exit.RERUN_FIXES, "a battery with failed calls a rerun sends again is requeued"
    line = next(x for x in err.splitlines() if x.startswith("gestalt"))
    assert "5 of 80 trials are failed calls" in line and "null:api_error:http_500 x5" in line
    (run,) = life.battery_runs(tmp_path)
    assert run.info.status == "FAILED"

    code, out, err = life.cli(path)
    assert code == 0, err[-2000:]
    assert "re-sending 5 failed calls" in out
    assert len(server.requests) == life.TRIALS + 5
    (after,) = life.battery_runs(tmp_path)
    assert after.info.run_id == run.info.run_id and after.info.status == "FINISHED"

    code, out, _ = life.cli(path)  # nothing failed remains: up to date, nothing sent
    assert code == 0 and "up to date" in out and len(server.requests) == life.TRIALS + 5


@pytest.mark.parametrize("status,extras,failed", [
    ("null:api_error:http_401", {}, True),
    ("null:api_error:quota", {}, True),
    ("null:api_error:timeout", {}, True),
    ("null:api_error:ConnectionError", {}, True),
    ("null:api_error:http_429", {}, True),
    ("null:api_error:http_529", {}, True),
    ("null:api_error:http_403", {}, True),
    # the vendor rejects the request itself: the same request fails the same way
    ("null:api_error:http_400", {}, False),
    ("null:api_error:http_413", {}, False),
    ("null:api_error:refused", {}, False),
    # a published decision file that does not cover the image: asking again gives the same answer
    ("null:api_error:no_decision", {}, False),
    ("null:extractor_error", {"extractor_error": "http_503: overloaded"}, True),
    ("null:extractor_error", {"extractor_error": "truncated: finish_reason length"}, False),
    ("null:truncated", {}, False),
    ("null:refusal", {}, False),
    ("null:safety", {}, False),
    ("null:no_label", {}, False),
    ("null:parse_error", {}, False),
    ("ok", {}, False),
])
def test_failure_nulls_are_told_from_answer_nulls(status, extras, failed):
    from harness.readouts.parse import failed_call

    assert failed_call(status, extras) is failed


@pytest.mark.parametrize("flags", [(), ("--offline",)])  # --offline is about source data, not keys
def test_a_refused_key_leaves_its_model_out_before_any_run(tmp_path, server, flags):
    path = life.api_recipe(tmp_path, server.url)
    code, _, err = life.cli(path, *flags, key=DEAD)
    assert code == Exit.NOTHING_RAN
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert line.startswith("gestalt: incomplete: 1 model left out: fake-api") and life.ENV_KEY in line
    assert "refused" in line and DEAD not in line
    assert not life.battery_runs(tmp_path) and not life.record_lines(tmp_path) and not server.requests
    assert len(server.model_checks) == 0  # the fake counts only checks that passed its key check


def test_preflight_names_every_refused_key_in_one_line(tmp_path, server):
    path = life.api_recipe(tmp_path, server.url, models=("fake-api", "fake-b"))
    code, _, err = life.cli(path, key=DEAD)
    assert code == Exit.NOTHING_RAN
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert "fake-api (" in line and "fake-b (" in line and line.count("refused") == 2  # one try, not two


def test_a_model_whose_key_is_refused_again_and_again_stops_sending(tmp_path, server):
    from harness.models.api import REFUSED_KEY_BREAKER

    path = life.api_recipe(tmp_path, server.url)
    server.revoked.add(DEAD)
    code, _, err = life.cli(path, key=DEAD)
    assert code == Exit.NEEDS_CHANGE
    assert server.refused == REFUSED_KEY_BREAKER  # not one request per trial
    records = life.record_lines(tmp_path)
    # every trial a failed call, so a rerun with a good key sends them all
    assert len(records) == life.TRIALS and {r["parse_status"] for r in records} == {"null:api_error:http_401"}
