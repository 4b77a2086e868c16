"""The ``api:`` adapter against a local fake of each vendor's wire format (tests/fake_vendor_server.py)."""

from __future__ import annotations

import base64
import email.utils
import json
import logging
import random
import urllib.parse
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from PIL import Image

from harness.models.api import APIModel
from harness.models.api_concurrency import DECREASE
from harness.models.base import ModelError, ModelSpec
from harness.models.registry import build_adapter
from harness.readouts.parse import api_error_status
from harness.readouts.prompt import PromptChoice
from harness.stimuli.base import Prompt, Stimulus, StimulusSet, png_bytes
from tests.fake_vendor_server import Blocked, FakeVendorServer, Malformed, Payload, Reply, Sleep, Status, reveals_key

KEY = "sk-test-NEVER-LOG-THIS-0123456789abcdef"
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "google": "GEMINI_API_KEY",
           "openai-compatible": "LOCAL_LLM_KEY"}
PROVIDERS = list(KEY_ENV)
IMAGE = Image.new("RGB", (24, 16), (200, 30, 30))
PROMPT = "Three colored chart marks are shown, numbered 1, 2 and 3. Which one is the odd one out?"
SETTINGS = {"max_new_tokens": 40, "temperature": 0.0}


@pytest.fixture
def server():
    with FakeVendorServer(key=KEY) as s:
        yield s


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    for name in [*KEY_ENV.values(), "OPENAI_API_KEY", "GOOGLE_API_KEY"]:
        monkeypatch.delenv(name, raising=False)
    for name in KEY_ENV.values():
        monkeypatch.setenv(name, KEY)


# a model of each vendor whose capability row accepts temperature (named in the capability table)
MODEL = {"openai": "gpt-4o", "anthropic": "claude-3-7-sonnet-20250219", "google": "gemini-2.0-flash"}


def make(provider: str, server: FakeVendorServer, model: str | None = None, **options) -> APIModel:
    model = model or MODEL.get(provider, "test-model")
    base = server.url + "/v1" if provider.startswith("openai") else server.url
    opts = {"base_url": base, "backoff_base_s": 0.001, "backoff_cap_s": 0.01, "timeout_s": 5.0,
            **options}
    if provider == "openai-compatible":
        opts.setdefault("api_key_env", KEY_ENV[provider])
    adapter = build_adapter(ModelSpec(id=f"{provider}-m", source="api", name=f"{provider}/{model}",
                                      options=opts))
    assert isinstance(adapter, APIModel)
    return adapter


@pytest.mark.parametrize("provider", PROVIDERS)
def test_request_and_reply_in_each_wire_format(provider, server):
    gen = make(provider, server).generate(IMAGE, PROMPT, SETTINGS)
    assert gen.error is None and gen.text == "2"
    (req,) = server.requests
    assert req.vendor == ("openai" if provider.startswith("openai") else provider)
    assert req.image_png == png_bytes(IMAGE)  # the exact PNG bytes, base64 in the vendor's format
    assert req.prompt == PROMPT
    assert req.order == ["image", "text"]  # image before the prompt text
    budget = {"openai": req.body.get("max_completion_tokens"), "openai-compatible": req.body.get("max_tokens"),
              "anthropic": req.body.get("max_tokens"),
              "google": req.body.get("generationConfig", {}).get("maxOutputTokens")}[provider]
    assert budget == 40
    temperature = (req.body.get("generationConfig", {}) if provider == "google" else req.body)["temperature"]
    assert temperature == 0.0
    n_in = len(PROMPT.split()) + 100
    assert gen.usage["input_tokens"] == n_in and gen.usage["output_tokens"] == 1
    assert gen.latency_s > 0


def test_thinking_parts_are_not_the_answer(server):
    # The fake Anthropic and Gemini replies lead with a thinking block that mentions "1" and "3".
    for provider in ("anthropic", "google"):
        gen = make(provider, server).generate(IMAGE, PROMPT, SETTINGS)
        assert gen.text == "2"
    assert make("google", server).generate(IMAGE, PROMPT, SETTINGS).usage["thinking_tokens"] == 7


@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_then_success_is_retried(provider, server):
    server.script(Status(429), Status(503), Reply("3"))
    gen = make(provider, server).generate(IMAGE, PROMPT, SETTINGS)
    assert (gen.text, gen.error) == ("3", None)
    assert len(server.requests) == 3


def test_retry_after_is_honoured_up_to_the_cap(server):
    server.script(Status(429, retry_after=0.004), Status(429, retry_after=30), Reply())
    adapter = make("openai", server, backoff_cap_s=0.02)
    waits: list[float] = []
    adapter._sleep = waits.append
    assert adapter.generate(IMAGE, PROMPT, SETTINGS).text == "2"
    assert waits == [0.004, 0.02]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_persistent_500_is_a_null_with_reason(provider, server):
    server.script(*[Status(500)] * 10)
    adapter = make(provider, server, max_retries=3)
    gen = adapter.generate(IMAGE, PROMPT, SETTINGS)
    assert gen.text is None and gen.error.startswith("http_500:")
    assert len(server.requests) == 4


def test_client_errors_are_not_retried(server):
    server.script(Status(400), Reply())
    gen = make("anthropic", server).generate(IMAGE, PROMPT, SETTINGS)
    assert gen.text is None and gen.error.startswith("http_400:")
    assert len(server.requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_timeout_retried_then_terminal(provider, server):
    server.script(Sleep(1.0), Reply("1"))
    assert make(provider, server, timeout_s=0.2).generate(IMAGE, PROMPT, SETTINGS).text == "1"
    server.script(Sleep(1.0), Sleep(1.0))
    gen = make(provider, server, timeout_s=0.2, max_retries=1).generate(IMAGE, PROMPT, SETTINGS)
    assert gen.text is None and gen.error.startswith("timeout:")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_malformed_json_retried_then_terminal(provider, server):
    server.script(Malformed(), Reply("1"))
    assert make(provider, server).generate(IMAGE, PROMPT, SETTINGS).text == "1"
    server.script(Malformed(), Malformed(), Malformed())
    gen = make(provider, server, max_retries=2).generate(IMAGE, PROMPT, SETTINGS)
    assert gen.text is None and gen.error.startswith("malformed_json:")


def test_unexpected_failure_is_a_null_not_an_exception(server, monkeypatch):
    adapter = make("openai", server)

    def broken(payload):
        raise RuntimeError(f"bug while reading a reply sent with {KEY}")

    monkeypatch.setattr(adapter, "_read", broken)
    gen = adapter.generate(IMAGE, PROMPT, SETTINGS)
    assert gen.text is None and gen.error.startswith("unexpected: RuntimeError")
    assert KEY not in gen.error and len(server.requests) == 1


def test_gemini_blocked_prompt_is_a_safety_null(server):
    server.script(Blocked(), Reply())
    gen = make("google", server).generate(IMAGE, PROMPT, SETTINGS)
    assert gen.error == "safety: prompt blocked (SAFETY)" and api_error_status(gen.error) == "null:safety"
    assert len(server.requests) == 1


def test_concurrency_limit_and_order():
    with FakeVendorServer(key=KEY, answer=lambda p: p.split()[-1], delay_s=0.3) as server:
        adapter = make("openai", server, concurrency=3)
        prompts = [f"item {i}" for i in range(12)]
        gens = adapter.generate_many([IMAGE] * 12, prompts, SETTINGS)
        assert [g.text for g in gens] == [str(i) for i in range(12)]  # order kept
        assert server.max_in_flight == 3
        server.max_in_flight = 0
        make("openai", server, concurrency=1).generate_many([IMAGE] * 4, prompts[:4], SETTINGS)
        assert server.max_in_flight == 1


def test_in_flight_grows_while_answered_and_shrinks_on_pushback():
    assert APIModel(ModelSpec(id="d", source="api", name="openai/gpt-4o"))._window.ceiling == 32  # the default
    with FakeVendorServer(key=KEY, delay_s=0.2) as server:
        adapter = make("openai", server, concurrency=2, max_concurrency=6)
        assert all(g.text == "2" for g in adapter.generate_many([IMAGE] * 24, ["q"] * 24, SETTINGS))
        assert server.max_in_flight == 6 and adapter._window.limit == 6
        server.script(Status(529, retry_after=0), Status(429, retry_after=0))
        assert adapter.generate(IMAGE, "q", SETTINGS).text == "2"  # answered on the third attempt
        assert adapter._window.limit == int(6 * DECREASE)  # one cut: both came within a round trip


def test_backoff_is_exponential_jittered_and_capped(server):
    adapter = make("openai", server, backoff_base_s=1.0, backoff_cap_s=8.0)
    adapter._rng = random.Random(0)
    for attempt in range(8):
        nominal = min(8.0, 2.0 ** attempt)
        waits = [adapter._backoff(attempt, None) for _ in range(50)]
        assert all(nominal / 2 <= w <= nominal for w in waits)
        assert len(set(waits)) > 1  # jittered


def test_temperature_and_budget_rules(server):
    make("openai", server, model="o3-mini", reasoning_effort="high", max_tokens=4000).generate(
        IMAGE, PROMPT, SETTINGS)
    body = server.requests[-1].body
    assert "temperature" not in body and body["max_completion_tokens"] == 4000
    assert body["reasoning_effort"] == "high"
    make("anthropic", server, thinking_budget=1024, max_tokens=3000).generate(IMAGE, PROMPT, SETTINGS)
    body = server.requests[-1].body
    assert "temperature" not in body and body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["max_tokens"] == 3000
    make("google", server, model="gemini-2.5-flash", thinking_budget=0).generate(IMAGE, PROMPT, SETTINGS)
    config = server.requests[-1].body["generationConfig"]
    assert config["thinkingConfig"] == {"thinkingBudget": 0} and config["temperature"] == 0.0
    make("openai-compatible", server, supports_temperature=False).generate(IMAGE, PROMPT, SETTINGS)
    assert "temperature" not in server.requests[-1].body


def test_key_never_leaks(server, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    for provider in PROVIDERS:
        adapter = make(provider, server, max_retries=1)
        seen += [repr(adapter), json.dumps(adapter.fingerprint), adapter.model_version]
        server.script(Status(500), Status(500))
        seen.append(repr(adapter.generate(IMAGE, PROMPT, SETTINGS)))
        seen.append(repr(adapter.generate(IMAGE, PROMPT, SETTINGS)))  # success
    # The key is really sent (so the checks below are not vacuous) ...
    assert all(KEY in json.dumps(r.headers) for r in server.requests)
    # ... and a vendor 401 that echoes the key is scrubbed before it reaches the error.
    with FakeVendorServer(key="another-key") as other:
        adapter = make("openai", other)
        gen = adapter.generate(IMAGE, PROMPT, SETTINGS)
        assert gen.error.startswith("http_401:") and "[redacted]" in gen.error
        seen.append(repr(gen))
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ModelError) as err:
        make("openai", server)
    assert "OPENAI_API_KEY" in str(err.value)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(ModelError) as err:
        make("openai", server, bogus=1)
    seen.append(str(err.value))
    seen.append(caplog.text)
    assert caplog.records  # retries were logged
    for text in seen:
        assert KEY not in text


def test_check_errors(server, monkeypatch):
    with pytest.raises(ModelError, match="provider"):
        build_adapter(ModelSpec(id="x", source="api", name="acme/model"))
    with pytest.raises(ModelError, match="api_key_env") as err:
        build_adapter(ModelSpec(id="x", source="api", name="openai/gpt-4o", options={"api_key": KEY}))
    assert KEY not in str(err.value)
    with pytest.raises(ModelError, match="base_url"):
        build_adapter(ModelSpec(id="x", source="api", name="openai-compatible/llava"))
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)  # the fallback name works
    assert make("google", server).generate(IMAGE, PROMPT, SETTINGS).text == "2"
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(ModelError, match="GOOGLE_API_KEY or GEMINI_API_KEY"):  # google-genai's order
        make("google", server)


def test_fingerprint_names_what_changes_answers(server):
    a = make("openai", server, max_tokens=100, concurrency=2)
    b = make("openai", server, max_tokens=100, concurrency=8, timeout_s=1, max_retries=0)
    c = make("openai", server, max_tokens=200)
    assert a.fingerprint == b.fingerprint  # runtime knobs are not the model
    assert a.fingerprint != c.fingerprint
    spec = ModelSpec(id="v", source="api", name="openai-compatible/llava",
                     options={"base_url": "http://user:pw@host:8000/v1?token=abc"})
    fp = APIModel(spec).fingerprint
    assert fp["base_url"] == "http://host:8000/v1" and "pw" not in json.dumps(fp)
    assert APIModel(ModelSpec(id="g", source="api", name="openai/gpt-4o", revision="2024-08-06")
                    ).model_version == "openai/gpt-4o@2024-08-06"


def test_readout_records_api_errors_as_null(server):
    stimset = StimulusSet(
        task_id="similarity.chart.mark_color", version="1", response_space="choice",
        stimuli=[Stimulus(f"s{i}", "test", 1, Image.new("RGB", (8, 8), (i, 0, 0))) for i in range(3)],
        human_ref_id="x", prompt=Prompt("p.v1", PROMPT), options=(1, 2, 3))
    server.script(Status(500), Status(500), Reply("Mark 3."), Reply("Two"))
    adapter = make("anthropic", server, max_retries=1, concurrency=1)
    responses = PromptChoice(stimset).respond(adapter, stimset.stimuli)
    assert [r.parse_status for r in responses] == ["null:api_error:http_500", "ok", "ok"]
    assert [r.response for r in responses] == [None, 3, 2]
    assert responses[0].raw_output is None and responses[0].extras["error"].startswith("http_500")
    assert responses[1].usage["output_tokens"] == 2


# -- what each model accepts, cut-short answers, transport rules ---------------------------------

@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_only_request_has_no_image_part(provider, server):
    # The CHART-6 LLM extractor calls generate(None, ...); main raised AttributeError here.
    gen = make(provider, server).generate(None, PROMPT, SETTINGS)
    assert (gen.text, gen.error) == ("2", None)
    (req,) = server.requests
    assert req.order == ["text"] and req.image_png is None and req.prompt == PROMPT


def test_unbuildable_request_is_a_null_not_an_exception(server, monkeypatch):
    adapter = make("openai", server)
    monkeypatch.setattr("harness.models.api.png_bytes", lambda im: 1 / 0)
    gen = adapter.generate(IMAGE, PROMPT, SETTINGS)
    assert gen.text is None and gen.error.startswith("request: ZeroDivisionError")
    assert server.requests == []


def sent(server) -> dict:
    return server.requests[-1].body


def test_parameters_follow_the_capability_table(server):
    # Opus 4.7 rejects temperature: the readout's default temperature 0 is left out.
    gen = make("anthropic", server, model="claude-opus-4-7").generate(IMAGE, PROMPT, SETTINGS)
    assert gen.text == "2" and "temperature" not in sent(server)
    assert gen.settings_dropped == {"temperature": 0.0}
    # Sonnet 4.5: not both; the neutral top_p 1.0 goes, temperature stays.
    gen = make("anthropic", server, model="claude-sonnet-4-5").generate(
        IMAGE, PROMPT, {**SETTINGS, "temperature": 0.2, "top_p": 1.0})
    assert sent(server)["temperature"] == 0.2 and "top_p" not in sent(server)
    assert gen.settings_dropped == {"top_p": 1.0}
    # o-series: no top_p, no temperature ...
    gen = make("openai", server, model="o4-mini", max_tokens=4000).generate(
        IMAGE, PROMPT, {**SETTINGS, "top_p": 0.9})
    assert not {"temperature", "top_p"} & set(sent(server))
    # ... but gpt-5-chat-latest and gpt-5.x at reasoning_effort none take temperature.
    make("openai", server, model="gpt-5-chat-latest").generate(IMAGE, PROMPT, SETTINGS)
    assert sent(server)["temperature"] == 0.0
    make("openai", server, model="gpt-5.2", reasoning_effort="none").generate(IMAGE, PROMPT, SETTINGS)
    assert sent(server)["temperature"] == 0.0 and sent(server)["reasoning_effort"] == "none"
    make("openai", server, model="gpt-5.2", reasoning_effort="high", max_tokens=4000).generate(
        IMAGE, PROMPT, SETTINGS)
    assert "temperature" not in sent(server)


def test_seed_is_sent_where_accepted(server):
    settings = {**SETTINGS, "seed": 7}
    make("openai", server).generate(IMAGE, PROMPT, settings)
    assert sent(server)["seed"] == 7
    make("google", server).generate(IMAGE, PROMPT, settings)
    assert sent(server)["generationConfig"]["seed"] == 7
    gen = make("anthropic", server).generate(IMAGE, PROMPT, settings)
    assert "seed" not in sent(server) and gen.settings_dropped == {"seed": 7}


@pytest.mark.parametrize("provider,model,options,settings,needle", [
    # the paper's decoding cannot be dropped silently (exact)
    ("openai", "o3", {"max_tokens": 4000}, {"temperature": 0.2, "exact": ["temperature"]}, "temperature"),
    ("anthropic", "claude-sonnet-4-5", {}, {"temperature": 0.2, "top_p": 0.6,
                                            "exact": ["temperature", "top_p"]}, "together"),
    # thinking budgets
    ("anthropic", "claude-sonnet-4-5", {"thinking_budget": 500, "max_tokens": 4000}, {}, "thinking_budget 500"),
    ("anthropic", "claude-sonnet-4-5", {"thinking_budget": 2048}, {}, "max_tokens=40"),
    ("anthropic", "claude-opus-4-7", {"thinking_budget": 2048, "max_tokens": 4000}, {}, "adaptive"),
    ("google", "gemini-2.5-pro", {"thinking_budget": 0}, {}, "cannot be turned off"),
    # thinking by default at the protocol's 40 tokens
    ("google", "gemini-2.5-flash", {}, {}, "max_tokens=40"),
    ("openai", "gpt-5-nano", {}, {}, "max_tokens=40"),
    ("openai", "gpt-4o", {"reasoning_effort": "high"}, {}, "reasoning_effort"),
])
def test_settings_that_cannot_work_are_refused_with_one_line(provider, model, options, settings, needle, server):
    adapter = make(provider, server, model=model, **options)
    with pytest.raises(ModelError) as err:
        adapter.plan({**SETTINGS, **settings})
    message = str(err.value)
    assert "\n" not in message and needle in message and model in message
    gen = adapter.generate(IMAGE, PROMPT, {**SETTINGS, **settings})  # never sent if it got this far
    assert gen.error.startswith("refused:") and server.requests == []


def test_unknown_model_gets_vendor_defaults_and_a_warning(server, caplog):
    caplog.set_level(logging.WARNING)
    make("openai", server, model="gpt-4o-2024-08-06")
    assert "capability table" not in caplog.text
    make("openai", server, model="acme-vision-9")
    assert "acme-vision-9 is not in the capability table" in caplog.text


@pytest.mark.parametrize("provider", ["openai", "anthropic", "google"])
def test_cut_short_answers_are_null_reasons(provider, server):
    # A thinking model that spends its budget gives empty text with a length stop.
    body = {"openai": {"choices": [{"index": 0, "finish_reason": "length",
                                    "message": {"role": "assistant", "content": ""}}]},
            "anthropic": {"content": [], "stop_reason": "max_tokens", "usage": {}},
            "google": {"candidates": [{"finishReason": "MAX_TOKENS", "content": {"role": "model"}}]}}
    server.script(Payload(body[provider]))
    gen = make(provider, server).generate(IMAGE, PROMPT, SETTINGS)
    assert api_error_status(gen.error) == "null:truncated" and len(server.requests) == 1


def test_refusals_are_not_answers(server):
    # OpenAI's refusal text is not the model's answer.
    server.script(Payload({"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": None, "refusal": "I won't count 3 marks."}}]}))
    gen = make("openai", server).generate(IMAGE, PROMPT, SETTINGS)
    assert api_error_status(gen.error) == "null:refusal" and gen.text == ""


def test_retry_after_forms(server):
    adapter = make("openai", server, backoff_cap_s=30.0)
    waits: list[float] = []
    adapter._sleep = waits.append
    date = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    server.script(Status(429, headers={"retry-after-ms": "250"}), Status(503, retry_after=date),
                  Status(429, retry_after=-1), Reply())
    assert adapter.generate(IMAGE, PROMPT, SETTINGS).text == "2"  # Retry-After -1 must not raise
    assert waits[0] == 0.25 and 15 <= waits[1] <= 20 and waits[2] == 0.0


def test_x_should_retry_and_409(server):
    server.script(Status(409), Status(400, headers={"x-should-retry": "true"}), Reply())
    assert make("openai", server).generate(IMAGE, PROMPT, SETTINGS).text == "2"
    assert len(server.requests) == 3
    server.script(Status(503, headers={"x-should-retry": "false"}), Reply())
    gen = make("openai", server).generate(IMAGE, PROMPT, SETTINGS)
    assert gen.error.startswith("http_503") and len(server.requests) == 4


def test_quota_429_is_not_retried(server):
    quota = {"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota",
                       "code": "insufficient_quota"}}
    server.script(*[Status(429, body=quota)] * 7)
    gen = make("openai", server).generate(IMAGE, PROMPT, SETTINGS)
    assert gen.error.startswith("quota:") and len(server.requests) == 1


def test_transport_defaults_and_azure(server, monkeypatch):
    adapter = make("openai", server)
    assert APIModel(ModelSpec(id="d", source="api", name="openai/gpt-4o")).options["timeout_s"] == 600.0
    adapter.generate(IMAGE, PROMPT, SETTINGS)
    assert server.requests[-1].headers["user-agent"].startswith("gestalt-harness/")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    azure = build_adapter(ModelSpec(id="az", source="api", name="azure/vision-deploy", options={
        "base_url": server.url, "api_version": "2024-10-21", "served_model": "gpt-4o"}))
    assert azure.generate(IMAGE, PROMPT, SETTINGS).text == "2"
    req = server.requests[-1]
    assert req.vendor == "azure"
    assert req.path == "/openai/deployments/vision-deploy/chat/completions?api-version=2024-10-21"
    assert req.headers["api-key"] == KEY
    with pytest.raises(ModelError, match="api_version"):
        build_adapter(ModelSpec(id="az", source="api", name="azure/d", options={"base_url": server.url}))


def test_key_with_trailing_newline_is_stripped_and_never_stored(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY + "\n")
    assert make("openai", server).generate(IMAGE, PROMPT, SETTINGS).text == "2"
    assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"


def test_every_representation_of_the_key_is_scrubbed(server):
    forms = [KEY, repr(f"Bearer {KEY}\n".encode()), urllib.parse.quote(f"Bearer {KEY}\n"),
             base64.b64encode(f"Bearer {KEY}\n".encode()).decode(), base64.b64encode(f"u:{KEY}".encode()).decode(),
             base64.urlsafe_b64encode(KEY.encode()).decode(), KEY[5:17], json.dumps({"k": KEY + "\n"})]
    for form in forms:
        assert reveals_key(form, KEY)  # the oracle sees each planted form ...
        server.script(Status(401, body={"error": {"message": f"bad credential {form} sent"}}))
        gen = make("openai", server).generate(IMAGE, PROMPT, SETTINGS)
        assert gen.error.startswith("http_401") and "[redacted]" in gen.error, form
        assert not reveals_key(gen.error, KEY), (form, gen.error)  # ... and none is left


def test_dropped_settings_are_recorded_per_trial_and_per_run(server, tmp_path):
    from harness.recipes import load_recipe
    from harness.run import preflight
    from tests.conftest import MIRROR

    stimset = StimulusSet(
        task_id="similarity.chart.mark_color", version="1", response_space="choice",
        stimuli=[Stimulus("s0", "test", 1, Image.new("RGB", (8, 8)))], human_ref_id="x",
        prompt=Prompt("p.v1", PROMPT), options=(1, 2, 3))
    opus = make("anthropic", server, model="claude-opus-4-7")
    (response,) = PromptChoice(stimset).respond(opus, stimset.stimuli)
    assert response.extras["settings_dropped"] == {"temperature": 0.0, "seed": stimset.seed}

    def recipe(model: dict) -> object:
        path = tmp_path / "r.yaml"
        path.write_text(yaml.safe_dump({
            "name": "drops", "tasks": ["similarity.chart.mark_color"], "data": {"mirror": str(MIRROR)},
            "models": [{"id": "m", "source": "api", "family": "api",
                        "options": {"base_url": server.url}, **model}]}))
        return load_recipe(path)

    (planned,) = preflight(recipe({"name": "anthropic/claude-opus-4-7"}))[0]
    assert planned.settings_dropped == {"similarity.chart.mark_color": {"temperature": 0.0, "seed": 0}}
    # a temperature the recipe sets is the experiment: refused before any run exists
    with pytest.raises(ModelError, match=r"'m'.*temperature=0.3"):
        preflight(recipe({"name": "anthropic/claude-opus-4-7", "generation": {"temperature": 0.3}}))
    with pytest.raises(ModelError, match=r"max_tokens=40"):
        preflight(recipe({"name": "openai/gpt-5-nano", "options": {"base_url": server.url + "/v1"}}))


def test_capability_table_covers_the_shipped_recipes():
    import re

    from harness.models.api_capabilities import family_of
    from tests.conftest import REPO

    names = set()
    for path in (REPO / "recipes").glob("*.yaml"):
        text = path.read_text()
        names |= {m["name"] for m in (yaml.safe_load(text).get("models") or []) if m.get("source") == "api"}
        names |= set(re.findall(r"extractor_model: \{source: api, name: ([\w./-]+)\}", text))
    assert {"openai/gpt-4o-2024-08-06", "openai/gpt-4-0613"} <= names
    for name in names:
        provider, _, model = name.partition("/")
        _, known = family_of(provider, model)
        assert known, f"{name} is not in harness/models/api_capabilities.py"


# -- preflight: credentials and model names, one request per model, nothing generated ----------

@pytest.mark.parametrize("provider", [*PROVIDERS, "azure"])
def test_verify_asks_the_vendor_once_without_generating(provider, server, monkeypatch):
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    options = {"api_version": "2024-10-21"} if provider == "azure" else {}
    make(provider, server, **options).verify()
    assert len(server.model_checks) == 1 and not server.requests


@pytest.mark.parametrize("provider", PROVIDERS)
def test_verify_refuses_a_bad_key_in_one_line(provider, server, monkeypatch):
    monkeypatch.setenv(KEY_ENV[provider], "sk-wrong-key-0000000000000000")
    with pytest.raises(ModelError) as e:
        make(provider, server).verify()
    text = str(e.value)
    assert "\n" not in text and KEY_ENV[provider] in text and "refused" in text and "http_401" in text
    assert "sk-wrong" not in text and not server.requests


@pytest.mark.parametrize("provider", PROVIDERS)
def test_verify_refuses_an_unknown_model(provider):
    with FakeVendorServer(key=KEY, models={"served-1"}) as server:
        make(provider, server, model="served-1").verify()
        with pytest.raises(ModelError, match=r"does not know model 'no-such-model'"):
            make(provider, server, model="no-such-model").verify()
        assert not server.requests


def test_verify_reports_an_unreachable_vendor(monkeypatch):
    with FakeVendorServer(key=KEY) as server:
        adapter = make("openai", server, max_retries=1)
    with pytest.raises(ModelError, match=r"could not reach .*connection"):
        adapter.verify()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_answer_echoing_the_key_is_stored_scrubbed(provider, server):
    server.script(Reply(f"The header said Bearer {KEY}, so 2"))
    gen = make(provider, server).generate(IMAGE, PROMPT, SETTINGS)
    assert gen.error is None and "[redacted]" in gen.text and gen.text.endswith(", so 2")
    assert not reveals_key(json.dumps(gen.extras), KEY) and not reveals_key(gen.text, KEY)


@pytest.mark.parametrize("provider", ["anthropic", "google", "openai-compatible"])
def test_vendor_reasoning_is_kept_beside_the_answer_not_in_it(provider, server):
    if provider == "openai-compatible":  # vLLM's and DeepSeek's reasoning field
        server.script(Payload({"choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "2", "reasoning_content": f"1? 3? key {KEY}"}}]}))
    gen = make(provider, server).generate(IMAGE, PROMPT, SETTINGS)
    assert gen.text == "2"
    assert gen.extras["reasoning"] and not reveals_key(gen.extras["reasoning"], KEY)
    assert any(c in gen.extras["reasoning"] for c in "13")
