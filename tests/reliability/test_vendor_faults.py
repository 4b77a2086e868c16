"""Reliability campaign: the fake vendor's fault modes with a planted key.

One battery of 120 trials against the fake vendor, whose first replies are every fault mode it has
(rate limits with each Retry-After form, 5xx, x-should-retry, 409, malformed and wrongly-shaped
bodies, dropped connections, timeouts, cut-short answers, refusals, safety stops, odd answers; not
money run out, after which a model sends nothing more: tests/test_api_out_of_money.py) and error
bodies that echo the planted key raw, repr-escaped, URL-encoded, base64 and in fragments. The key
itself ends in a newline, as keys read from files do. Checks: every trial is recorded exactly once
with a value or a reason, and no form of the key is in any file the run produced, nor in its output
or logs. Prints one summary line.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.parse
from collections import Counter

import pytest
import yaml

from tests.conftest import MIRROR
from tests.fake_vendor_server import Drop, FakeVendorServer, Malformed, Payload, Reply, Sleep, Status, reveals_key

KEY = "sk-proj-PLANTED-key-Zq8vR3xW7mT1nB5y"
TASK = "similarity.chart.mark_color"


def echo(form: str, code: int = 401) -> Status:
    return Status(code, body={"error": {"message": f"Incorrect API key provided: {form}"}})


def openai_body(finish: str, content: str | None, refusal: str | None = None) -> Payload:
    return Payload({"id": "c", "object": "chat.completion", "model": "gpt-4o", "choices": [
        {"index": 0, "finish_reason": finish,
         "message": {"role": "assistant", "content": content, "refusal": refusal}}]})


# (fault, the parse status of the trial that meets it; None: retried, and the retry is answered)
FAULTS = [
    (Status(429, retry_after=-1), None),
    (Status(429, headers={"retry-after-ms": "3"}), None),
    (Status(503, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"), None),
    (Status(500), None),
    (Status(529), None),
    (Status(409), None),
    (Status(400, headers={"x-should-retry": "true"}), None),
    (Malformed(), None),
    (Payload({"choices": []}), None),
    (Drop(), None),
    (Sleep(1.0), None),
    (Status(503, headers={"x-should-retry": "false"}), "null:api_error:http_503"),
    (echo(KEY), "null:api_error:http_401"),
    (echo(repr(f"Bearer {KEY}\n".encode())), "null:api_error:http_401"),
    (echo(urllib.parse.quote(f"Bearer {KEY}\n")), "null:api_error:http_401"),
    (echo(base64.b64encode(f"Bearer {KEY}\n".encode()).decode(), 403), "null:api_error:http_403"),
    (echo(base64.b64encode(f"user:{KEY}".encode()).decode(), 400), "null:api_error:http_400"),
    (echo(f"...{KEY[9:21]}...", 400), "null:api_error:http_400"),
    (echo(json.dumps({"key": KEY + "\n"}), 400), "null:api_error:http_400"),
    (openai_body("length", ""), "null:truncated"),
    (openai_body("stop", None, refusal="I can't compare these marks."), "null:refusal"),
    (openai_body("content_filter", ""), "null:safety"),
    (Reply("ſix"), "null:out_of_options"),
    (Reply("9" * 400), "null:out_of_options"),
    (Reply("which one, " * 5000), "null:no_integer"),
    (Reply("FİVE or thirty-ſix"), "null:out_of_options"),
]


@pytest.mark.slow
def test_fault_modes_with_a_planted_key(tmp_path, monkeypatch, capfd, caplog):
    from harness.recipes import load_recipe
    from harness.run import run_recipe

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_API_KEY", KEY + "\n")
    with FakeVendorServer(key=KEY) as server:
        # a retried fault is followed by a good reply, so the trial it hit is answered
        server.script(*[a for fault, status in FAULTS for a in ((fault,) if status else (fault, Reply()))])
        recipe = {
            "name": "vendor-faults", "tasks": [TASK],
            "models": [{"id": "fake-openai", "source": "api", "name": "openai/gpt-4o", "family": "api",
                        "batch_size": 8, "options": {
                            "base_url": server.url + "/v1", "concurrency": 1, "max_retries": 2,
                            "backoff_base_s": 0.001, "backoff_cap_s": 0.01, "timeout_s": 0.3}}],
            "bootstrap": {"n_boot": 100}, "runtime": {"progress": False, "device": "cpu"},
            "data": {"mirror": str(MIRROR)},
            "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "faults"},
            "output_dir": str(tmp_path / "out")}
        path = tmp_path / "faults.yaml"
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        run_recipe(load_recipe(path), echo=print)
        n_requests = len(server.requests)
        assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in server.requests)

    lines = (tmp_path / "out/fake-openai/records" / f"{TASK}.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    ids = Counter(r["trial_id"] for r in records)
    assert len(ids) == 120 and set(ids.values()) == {1}  # every trial, once
    statuses = Counter(r["parse_status"] for r in records)
    expected = Counter(s for _, s in FAULTS if s is not None)
    assert statuses == expected + Counter({"ok": 120 - sum(expected.values())})  # the rest answered

    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    out, err = capfd.readouterr()
    texts = {str(p.relative_to(tmp_path)): p.read_bytes().decode("utf-8", "replace") for p in files}
    texts |= {"stdout": out, "stderr": err, "log": caplog.text}
    assert not [name for name, text in texts.items() if reveals_key(text, KEY)]
    with capfd.disabled():
        print(f"\nvendor faults: {len(FAULTS)} fault modes over {n_requests} requests, 120 trials each "
              f"recorded once ({statuses['ok']} ok, {len(records) - statuses['ok']} null with reasons), "
              f"key planted in {sum('Incorrect API key' in str(f) for f, _ in FAULTS)} forms: "
              f"0 of {len(files)} files + output + logs reveal 8 characters of it in any form")
