"""An API model's battery keeps the model's in-flight window full from its first trial to its last
and writes each record as its answer arrives: the window never drains at a chunk's end
(``batch_size`` no longer paces an API model), a battery killed mid-way loses no answer it paid
for (its rerun buys each trial once), and under ``budget_usd`` a call starts only while the
budget left covers it and every call in flight at their bound. The battery is the silhouette
task answered by the fake vendor on 127.0.0.1, in each vendor's wire format."""

from __future__ import annotations

import threading
import time

import pytest
import yaml

from harness.exit_status import Exit
from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer
from tests.test_api_budget import budgeted, spent_in_records

# (model name, base url under the fake's address): each vendor's wire format
VENDORS = {"openai-compatible": ("openai-compatible/fake-1", "/v1"), "openai": ("openai/gpt-4o-2024-08-06", "/v1"),
           "anthropic": ("anthropic/claude-sonnet-4-5", ""), "google": ("google/gemini-2.0-flash", "")}
HOLD_S = 60.0  # how long the held request waits for the others before giving up (the failing case)


def battery(tmp_path, url: str, vendor: str = "openai-compatible", *, batch_size: int, concurrency: int):
    """The lifecycle battery for ``vendor``: ``batch_size`` trials handed over at once by the
    runner as it did, ``concurrency`` requests in flight at most."""
    path = life.api_recipe(tmp_path, url, batch_size=batch_size, tracking=False)
    recipe = yaml.safe_load(path.read_text())
    name, base = VENDORS[vendor]
    recipe["models"][0].update(name=name)
    recipe["models"][0]["options"].update(base_url=url + base, concurrency=concurrency)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


class HoldsTheFirst(FakeVendorServer):
    """Holds its first request unanswered until ``others`` more have arrived (or ``HOLD_S`` passed:
    ``gave_up``), answering those meanwhile: it is answered only where a battery sends past a
    chunk whose slowest call is still out."""

    def __init__(self, others: int, **kw):
        super().__init__(**kw)
        self.others = others
        self.arrived = 0
        self.gave_up = False
        self._more = threading.Condition()

    def _respond(self, h, action) -> None:
        with self._more:
            self.arrived += 1
            first = self.arrived == 1
            self._more.notify_all()
            if first:
                self.gave_up = not self._more.wait_for(lambda: self.arrived > self.others, HOLD_S)
        super()._respond(h, action)


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_the_window_stays_full_past_a_chunks_slowest_call(tmp_path, vendor):
    """Chunks of 4 and 4 in flight: the first call is held until 6 more arrive, which the
    chunked battery never sent (it waited for the chunk's slowest call)."""
    with HoldsTheFirst(6, key=life.KEY, answer=life.answer) as server:
        code, out, err = life.cli(battery(tmp_path, server.url, vendor, batch_size=4, concurrency=4))
    assert code == 0, err[-2000:]
    assert not server.gave_up  # the others were sent while the first call was out
    assert server.max_in_flight <= 4  # the window is still the model's
    ids = [r["trial_id"] for r in life.record_lines(tmp_path)]
    assert len(ids) == len(set(ids)) == life.TRIALS == len(server.requests)


class AnswersThenHolds(FakeVendorServer):
    """Answers its first ``answers`` requests, then holds every later one unanswered (calls in
    flight when the battery is killed) until ``release``, and closes them unanswered: ``billed``
    lists only the answers it gave."""

    def __init__(self, answers: int, **kw):
        super().__init__(**kw)
        self.answers = answers
        self.held = 0
        self.release = threading.Event()

    def _respond(self, h, action) -> None:
        with self._lock:
            hold = self.answers <= 0
            self.answers -= not hold
            self.held += hold
        if not hold:
            return super()._respond(h, action)
        h.rfile.read(int(h.headers.get("content-length") or 0))
        self.release.wait()
        h.close_connection = True


@pytest.mark.slow
def test_a_battery_killed_mid_way_rebuys_no_answer(tmp_path):
    """The run is SIGKILLed while some calls are out, after the vendor has answered 10 of a chunk of
    32 (each answer billed); the rerun buys only the trials never answered."""
    with AnswersThenHolds(10, key=life.KEY, answer=life.answer) as server:
        path = battery(tmp_path, server.url, batch_size=32, concurrency=4)
        proc = life.start(path)
        deadline = time.time() + 300
        while time.time() < deadline and not server.held:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        # the answers given are written as they arrive: wait for them, or (never written) a while
        written = time.time() + 10
        while time.time() < written and len(life.record_lines(tmp_path)) < len(server.billed):
            time.sleep(0.02)
        proc.kill()
        proc.communicate()
        assert len(server.billed) == 10 and server.held > 0
        assert len(life.record_lines(tmp_path)) == 10
        server.release.set()
        server.answers = life.TRIALS
        code, out, err = life.cli(path)
    assert code == 0, err[-2000:]
    assert len(server.billed) == life.TRIALS  # every trial bought once, across the kill
    ids = [r["trial_id"] for r in life.record_lines(tmp_path)]
    assert len(ids) == len(set(ids)) == life.TRIALS


def test_a_call_starts_only_while_the_budget_left_covers_it_and_the_calls_in_flight(tmp_path, monkeypatch):
    from tests.test_api_budget import call_bound

    monkeypatch.setenv("OPENAI_API_KEY", life.KEY)
    monkeypatch.setenv("GESTALT_OFFLINE", "0")
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        path = budgeted(tmp_path, server.url, 0.004)
        recipe = yaml.safe_load(path.read_text())
        recipe["models"][0]["options"]["concurrency"] = 8
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        bound = call_bound(path)
        assert 0.004 / 8 < bound < 0.004 / 2  # the budget covers a few calls at their bound, not 8
        code, out, err = life.cli(path)
        assert code == Exit.NEEDS_CHANGE
        assert "budget_usd 0.004 reached" in err
        sent = len(server.requests)
        assert 0 < sent < life.TRIALS and len(life.record_lines(tmp_path)) == sent  # every call recorded
        assert server.max_in_flight <= 0.004 // bound
        spent = spent_in_records(tmp_path)
        assert 0.004 - bound < spent <= 0.004  # stopped where the next call might not be covered
