"""Batch mode (``options.batch``): a battery's pending trials go to the vendor's batch interface as
one batch, answered at batch prices; the batch id is kept beside the records so a killed process
polls the same batch again and never submits twice; failed items are sent again by a rerun. The
battery is the silhouette task; the vendors' batch endpoints are the local stand-in's, built from
the SDKs' types (tests.fake_vendor_batches)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time

import pytest
import yaml

from tests import lifecycle as life
from tests.fake_vendor_batches import FakeBatchServer

MODELS = {"openai": "openai/gpt-4o-2024-08-06", "anthropic": "anthropic/claude-haiku-4-5",
          "google": "google/gemini-2.0-flash"}
BASE = {"openai": "/v1", "anthropic": "", "google": ""}
STATE = f"out/fake-api/records/{life.TASK}.batch.json"


@pytest.fixture(autouse=True)
def online_again(monkeypatch):
    monkeypatch.setenv("GESTALT_OFFLINE", "0")  # --offline sets it for the process; undone after each test


def batch_recipe(tmp_path, url: str, vendor: str, **options):
    path = life.api_recipe(tmp_path, url)
    recipe = yaml.safe_load(path.read_text())
    model = recipe["models"][0]
    model["name"] = MODELS[vendor]
    model["options"].update({"base_url": url + BASE[vendor], "batch": True, "batch_poll_s": 0, **options})
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def trial_ids(records):
    return {r["trial_id"] for r in records}


@pytest.mark.parametrize("vendor", sorted(MODELS))
def test_a_battery_is_submitted_once_polled_and_mapped_to_its_trials(tmp_path, vendor):
    with FakeBatchServer(key=life.KEY, answer=life.answer, polls_running=2) as server:
        code, out, err = life.cli(batch_recipe(tmp_path, server.url, vendor))
    assert code == 0, err[-2000:]
    assert not server.requests  # no synchronous call: every trial answered by the batch
    ((_, batch_id, n),) = [s for s in server.submissions if s[0] == vendor]
    assert n == life.TRIALS and server.polls == [batch_id] * 3  # running, running, ended
    assert f"submitted batch {batch_id} ({life.TRIALS} requests" in out
    records = life.record_lines(tmp_path)
    assert len(records) == life.TRIALS and {r["parse_status"] for r in records} == {"ok"}
    assert {r["response"] for r in records} == {"cat"}
    assert all(r["usage"]["batch"] == 1 and r["extras"]["batch"] == batch_id for r in records)
    sent = [cid for cid, _ in server.batches[batch_id]["items"]]
    if vendor != "anthropic":  # the custom id is the trial id where the vendor takes any text
        assert set(sent) == trial_ids(records)
    else:  # Anthropic's custom ids are ^[a-zA-Z0-9_-]{1,64}$: a digest of each trial id
        assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", cid) for cid in sent) and len(set(sent)) == life.TRIALS
    assert not (tmp_path / STATE).exists()  # every answer recorded: the batch is done with


def test_a_process_killed_after_submission_polls_the_same_batch_on_rerun(tmp_path):
    with FakeBatchServer(key=life.KEY, answer=life.answer, polls_running=10**6) as server:
        path = batch_recipe(tmp_path, server.url, "openai", batch_poll_s=0.05)
        proc = life.start(path)
        try:
            deadline = time.monotonic() + 300
            while not server.polls:  # submitted, and waiting on the vendor
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
        ((_, batch_id, _),) = server.submissions
        state = json.loads((tmp_path / STATE).read_text())
        assert [b["id"] for b in state["batches"]] == [batch_id] and len(state["requests"]) == life.TRIALS
        assert not life.record_lines(tmp_path)

        server.polls_running = 0  # the batch has ended meanwhile
        polled = len(server.polls)
        code, _, err = life.cli(path)
        assert code == 0, err[-2000:]
        assert len(server.submissions) == 1 and server.polls[polled:] == [batch_id]  # polled, not resubmitted
        assert not server.requests
    records = life.record_lines(tmp_path)
    assert len(records) == life.TRIALS and {r["parse_status"] for r in records} == {"ok"}


def test_a_submission_without_a_stored_id_is_never_repeated(tmp_path):
    """The vendor may have created a batch whose id never reached the state file: the rerun
    stops and says what to do rather than pay twice."""
    with FakeBatchServer(key=life.KEY, answer=life.answer) as server:
        path = batch_recipe(tmp_path, server.url, "openai")
        state = tmp_path / STATE
        state.parent.mkdir(parents=True)
        state.write_text(json.dumps({"provider": "openai", "model": "gpt-4o-2024-08-06", "nonce": "ab12",
                                     "batches": [{"id": None, "requests": []}], "requests": {}, "rejected": {}}))
        code, _, err = life.cli(path)
        assert code != 0 and not server.submissions and not server.requests
    assert str(state) in err and "gestalt_batch" in err and "delete the file to submit again" in err


@pytest.mark.parametrize("vendor, code", [("openai", "http_500"), ("anthropic", "http_529"),
                                          ("google", "http_503")])
def test_failed_items_are_failure_nulls_that_a_rerun_sends_again(tmp_path, vendor, code):
    with FakeBatchServer(key=life.KEY, answer=life.answer, fail_first=5) as server:
        path = batch_recipe(tmp_path, server.url, vendor)
        status, _, err = life.cli(path)
        assert status == 1, "a battery with failed items must not exit 0"
        records = life.record_lines(tmp_path)
        failed = [r for r in records if r["parse_status"] != "ok"]
        assert len(failed) == 5 and {r["parse_status"] for r in failed} == {f"null:api_error:{code}"}

        server.fail_first = 0
        status, out, err = life.cli(path)
        assert status == 0, err[-2000:]
        assert "re-sending 5 failed calls" in out
        assert server.submissions[-1][2] == 5 and len(server.submissions) == 2  # only the failed, once
        assert not server.requests
    records = life.record_lines(tmp_path)
    assert len(records) == life.TRIALS and {r["parse_status"] for r in records} == {"ok"}


def test_a_batch_run_costs_the_batch_prices(tmp_path):
    with FakeBatchServer(key=life.KEY, answer=life.answer) as server:
        code, _, err = life.cli(batch_recipe(tmp_path, server.url, "openai"))
    assert code == 0, err[-2000:]
    records = life.record_lines(tmp_path)
    tokens_in = sum(r["usage"]["input_tokens"] for r in records)
    tokens_out = sum(r["usage"]["output_tokens"] for r in records)
    (run,) = life.battery_runs(tmp_path)
    # gpt-4o-2024-08-06: batch 1.25 in, 5.00 out per million (the interactive price is 2.50 / 10.00)
    assert math.isclose(run.data.metrics["cost_usd"], (tokens_in * 1.25 + tokens_out * 5.00) / 1e6, rel_tol=1e-6)


def test_dry_run_says_batch_mode_and_prices_at_batch_rates(tmp_path):
    with FakeBatchServer(key=life.KEY, answer=life.answer) as server:
        code, out, err = life.cli(batch_recipe(tmp_path, server.url, "openai"), "--dry-run")
        assert code == 0, err[-2000:]
        assert not server.submissions and not server.requests
    assert "batch mode: each task's pending calls go to the openai batch interface" in out
    (line,) = [x for x in out.splitlines() if "estimated" in x]
    n_in, n_out, usd = re.search(r"~([\d,]+) input tokens, <= ([\d,]+) output tokens, ~\$([\d.]+)", line).groups()
    n_in, n_out = int(n_in.replace(",", "")), int(n_out.replace(",", ""))
    assert "batch prices" in line
    assert float(usd) == pytest.approx((n_in * 1.25 + n_out * 5.00) / 1e6, abs=0.01)


@pytest.mark.parametrize("options, message", [
    ({"bacth": True}, "did you mean batch?"),
    ({"batch": "yes"}, "models.0.options.batch: Input should be a valid boolean"),
])
def test_batch_option_is_checked_at_preflight(tmp_path, options, message):
    path = life.api_recipe(tmp_path, "http://127.0.0.1:9")
    recipe = yaml.safe_load(path.read_text())
    recipe["models"][0]["options"].update(options)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    code, _, err = life.cli(path, "--offline")
    assert code == 2 and message in err


def test_batch_needs_a_vendor_batch_interface(tmp_path):
    path = life.api_recipe(tmp_path, "http://127.0.0.1:9")  # an openai-compatible server
    recipe = yaml.safe_load(path.read_text())
    recipe["models"][0]["options"]["batch"] = True
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    code, _, err = life.cli(path, "--offline")
    assert code == 2 and "openai-compatible lacks" in err


def test_a_request_not_in_the_stored_batch_is_a_failed_call(tmp_path, monkeypatch):
    """A pending trial whose request the stored batch does not hold (the recipe changed after
    submission) is not sent at the interactive price behind the user's back: it is a failed call,
    which the next run sends in a new batch."""
    from PIL import Image

    from harness.models.api import APIModel
    from harness.models.api_batch import BatchJob
    from harness.models.base import ModelSpec
    from harness.readouts.parse import api_error_status, failed_call

    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    image, settings = Image.new("RGB", (8, 8), "white"), {"max_new_tokens": 40, "seed": 0}
    with FakeBatchServer(key=life.KEY, answer=life.answer) as server:
        model = APIModel(ModelSpec(id="m", source="api", name=MODELS["openai"], options={
            "base_url": server.url + "/v1", "api_key_env": life.ENV_KEY, "batch": True, "batch_poll_s": 0}))
        job = BatchJob(model, tmp_path / "t.batch.json")
        job.expect(["t|s|m|rep0"])
        job.collector().generate_many([image], ["Which?"], settings)
        job.submit()
        job.wait()
        kept, changed = job.answerer().generate_many([image, image], ["Which?", "Which one?"], settings)
        assert not server.requests and len(server.submissions) == 1
    assert kept.text == "It is a cat." and kept.usage["batch"] == 1
    assert changed.text is None and failed_call(api_error_status(changed.error))


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_a_results_download_cut_off_is_read_again_by_the_rerun(tmp_path, vendor):
    with FakeBatchServer(key=life.KEY, answer=life.answer, drop_downloads=1) as server:
        path = batch_recipe(tmp_path, server.url, vendor)
        code, _, err = life.cli(path)
        assert code != 0
        line = next(x for x in err.splitlines() if x.startswith("gestalt"))
        assert "could not read the results of batch" in line and "a rerun reads them again" in line
        assert "Traceback" not in err
        code, _, err = life.cli(path)
        assert code == 0, err[-2000:]
        assert len(server.submissions) == 1  # the same batch, read again: never submitted twice
    assert len(life.record_lines(tmp_path)) == life.TRIALS


def noise(side: int, seed: int):
    """An image whose PNG does not compress: its inline size is about 4/3 of its pixels' bytes."""
    import numpy as np
    from PIL import Image

    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8))


def test_gemini_inline_batches_are_split_under_the_20_mb_cap_and_resumed_together(tmp_path, monkeypatch):
    """Gemini takes an inline batch only under 20 MB (the stand-in refuses a larger body with a 400,
    as the vendor does). Seven ~5.3 MB images go as several batches, each body under the cap; a
    process killed while waiting polls every one of them again without submitting; each answer
    reaches its own trial. A single request over the cap is recorded as a rejected request naming
    its trial, and the others are still sent."""
    from harness.models.api import APIModel
    from harness.models.api_batch import BatchJob
    from harness.models.base import ModelSpec
    from harness.readouts.parse import api_error_status, failed_call

    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    settings = {"max_new_tokens": 40, "seed": 0}
    images = [noise(1150, i) for i in range(7)] + [noise(2600, 7)]  # the last alone is ~27 MB inline
    prompts = [f"Which one, {i}?" for i in range(len(images))]
    trials = [f"t|s{i}|m|rep0" for i in range(len(images))]
    with FakeBatchServer(key=life.KEY, answer=lambda p: f"answer to {p}", polls_running=10**6) as server:
        model = APIModel(ModelSpec(id="m", source="api", name=MODELS["google"], options={
            "base_url": server.url, "api_key_env": life.ENV_KEY, "batch": True, "batch_poll_s": 0}))
        state = tmp_path / "t.batch.json"
        echoed: list[str] = []
        job = BatchJob(model, state, echoed.append)
        job.expect(trials)
        job.collector().generate_many(images, prompts, settings)
        job.submit()  # the process is killed here, while the batches run
        submitted = [batch_id for _, batch_id, _ in server.submissions]
        # the stand-in refuses a body over the cap, so each batch it holds was under it
        assert len(submitted) >= 3 and sum(n for _, _, n in server.submissions) == 7
        assert [b["id"] for b in json.loads(state.read_text())["batches"]] == submitted
        assert any(trials[-1] in line and "20 MB" in line for line in echoed)

        server.polls_running = 0
        rerun = BatchJob(model, state, echoed.append)
        assert rerun.submitted
        rerun.wait()
        answers = rerun.answerer().generate_many(images, prompts, settings)
        assert len(server.submissions) == len(submitted) and set(server.polls) == set(submitted)
        assert not server.requests
    assert [a.text for a in answers[:7]] == [f"answer to {p}" for p in prompts[:7]]
    assert {a.extras["batch"] for a in answers[:7]} == set(submitted)
    big = answers[-1]
    assert big.text is None and trials[-1] in big.error and "20 MB" in big.error
    assert not failed_call(api_error_status(big.error))  # the same request is refused again: final


def test_a_batch_submits_no_more_than_the_budget_left_allows(tmp_path, monkeypatch):
    """Each request of a batch may bill its input and its whole output budget: the batch holds only
    as many as the budget left covers at that bound; the rest wait for a rerun with more budget."""
    from harness.exit_status import Exit
    from harness.models.api_costs import cost_usd, price_of
    from tests.test_api_budget import call_bound

    monkeypatch.setenv(life.ENV_KEY, life.KEY)  # the bound is read from the preflight's adapter
    with FakeBatchServer(key=life.KEY, answer=life.answer) as server:
        path = batch_recipe(tmp_path, server.url, "openai")
        recipe = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({**recipe, "budget_usd": 0.02}, sort_keys=False))
        code, out, err = life.cli(path)
        assert code == Exit.NEEDS_CHANGE, err[-2000:]  # stopped by the budget: raise it to go on
        ((_, _, sent),) = server.submissions
        bound = call_bound(path)  # at the batch prices
        assert sent * bound <= 0.02 < (sent + 1) * bound and sent < life.TRIALS
        assert f"{life.TRIALS - sent} of {life.TRIALS} batch requests not sent" in err
        records = life.record_lines(tmp_path)
        assert len(records) == sent and {r["parse_status"] for r in records} == {"ok"}
        billed = sum(cost_usd(price_of("openai", "gpt-4o-2024-08-06"), r["usage"]) for r in records)
        assert billed <= 0.02 and f"spent ${billed:.4f} of $0.02" in out + err

        path.write_text(yaml.safe_dump({**recipe, "budget_usd": 1}, sort_keys=False))
        code, out, err = life.cli(path)
        assert code == 0, err[-2000:]
        assert server.submissions[-1][2] == life.TRIALS - sent and len(life.record_lines(tmp_path)) == life.TRIALS
