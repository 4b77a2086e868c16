"""gestalt's requests and response handling against the vendors' own definitions, not its fake.

Expected requests are built by the official SDKs (openai, anthropic, google-genai, pinned in the
``dev`` extra) through their own request construction, captured at the transport; gestalt's request
for the same model and settings is captured the same way and must match: URL path, body, and the
credential header. Responses are the SDKs' typed response models (the documented shapes) for normal,
truncated, refused and blocked answers, serialised as the vendors send them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from anthropic import types as at
from anthropic.types.raw_message_delta_event import Delta
from google import genai
from google.genai import types as gt
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionTokensDetails
from PIL import Image

from harness.models.api import APIModel
from harness.models.base import ModelSpec
from harness.readouts.parse import api_error_status
from harness.stimuli.base import png_bytes

KEY = "sk-vendor-test-0123456789abcdef"
BASE = "http://vendor.test"
IMAGE = Image.new("RGB", (12, 8), (10, 200, 30))
DATA = base64.b64encode(png_bytes(IMAGE)).decode()
PROMPT = "How many bars are in the chart?"


class Capture:
    """An httpx2 transport that records each request and answers with a fixed body."""

    def __init__(self, reply: dict[str, Any] | None = None):
        self.requests: list[httpx2.Request] = []
        self.reply = reply or {}

    def client(self) -> httpx2.Client:
        return httpx2.Client(transport=httpx2.MockTransport(self._handle))

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return httpx2.Response(200, json=self.reply)


def sdk_request(call: Callable[[httpx2.Client], Any]) -> httpx2.Request:
    cap = Capture()
    with contextlib.suppress(Exception):  # the empty reply may not parse; the request is what counts
        call(cap.client())
    (req,) = cap.requests
    return req


def gestalt(provider: str, model: str, reply: dict[str, Any] | None = None, image=IMAGE,
            settings: dict[str, Any] | None = None, **options):
    env = {"openai": "OPENAI_API_KEY", "azure": "AZURE_OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY",
           "google": "GEMINI_API_KEY"}[provider]
    base = BASE + "/v1" if provider == "openai" else BASE
    adapter = APIModel(ModelSpec(id="m", source="api", name=f"{provider}/{model}",
                                 options={"base_url": base, "max_retries": 0, **options}))
    cap = Capture(reply)
    adapter._http = cap.client()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(env, KEY)
        gen = adapter.generate(image, PROMPT, settings or {"max_new_tokens": 40, "temperature": 0.0})
    return gen, (cap.requests[0] if cap.requests else None)


def body(req: httpx2.Request) -> dict[str, Any]:
    return json.loads(req.content)


def snake(obj: Any) -> Any:
    """Gemini's JSON accepts camelCase and snake_case field names (proto3 JSON); compare in one."""
    if isinstance(obj, dict):
        return {re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower(): snake(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [snake(v) for v in obj]
    return obj


OPENAI_MESSAGES = [{"role": "user", "content": [
    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{DATA}"}},
    {"type": "text", "text": PROMPT}]}]
ANTHROPIC_MESSAGES = [{"role": "user", "content": [
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": DATA}},
    {"type": "text", "text": PROMPT}]}]


def openai_sdk(**kwargs):
    return sdk_request(lambda http: openai.OpenAI(api_key=KEY, base_url=BASE + "/v1", http_client=http,
                                                  max_retries=0).chat.completions.create(**kwargs))


def anthropic_sdk(**kwargs):
    return sdk_request(lambda http: anthropic.Anthropic(api_key=KEY, base_url=BASE, http_client=http,
                                                        max_retries=0).messages.create(**kwargs))


def gemini_sdk(model: str, config: gt.GenerateContentConfig, parts: list[gt.Part]):
    return sdk_request(lambda http: genai.Client(
        api_key=KEY, http_options=gt.HttpOptions(base_url=BASE, httpx_client=http)).models.generate_content(
        model=model, contents=[gt.Content(role="user", parts=parts)], config=config))


# -- requests ----------------------------------------------------------------------------------

def test_openai_request_matches_the_sdk():
    # CHART-6's API slot: GPT-4V's Table 2 decoding, per-repetition seed.
    settings = {"max_new_tokens": 270, "temperature": 0.2, "top_p": 1.0, "seed": 5,
                "exact": ["temperature", "top_p"]}
    _, ours = gestalt("openai", "gpt-4o-2024-08-06", settings=settings)
    theirs = openai_sdk(model="gpt-4o-2024-08-06", messages=OPENAI_MESSAGES, max_completion_tokens=270,
                        temperature=0.2, top_p=1.0, seed=5)
    assert (ours.url.path, body(ours)) == (theirs.url.path, body(theirs))
    assert ours.headers["authorization"] == theirs.headers["authorization"]
    assert ours.headers["user-agent"].startswith("gestalt-harness/")  # not urllib's


def test_openai_reasoning_request_matches_the_sdk():
    # o3 refuses temperature and top_p: gestalt's default temperature 0 is left out.
    gen, ours = gestalt("openai", "o3", settings={"max_new_tokens": 40, "temperature": 0.0, "top_p": 0.9,
                                                  "seed": 1}, max_tokens=4000, reasoning_effort="low")
    theirs = openai_sdk(model="o3", messages=OPENAI_MESSAGES, max_completion_tokens=4000,
                        reasoning_effort="low", seed=1)
    assert body(ours) == body(theirs)
    assert gen.settings_dropped == {"temperature": 0.0, "top_p": 0.9}


def test_text_only_request_matches_the_sdk():
    # The CHART-6 LLM extractor sends no image.
    _, ours = gestalt("openai", "gpt-4-0613", image=None,
                        settings={"max_new_tokens": 2000, "temperature": 1.0, "top_p": 1.0})
    theirs = openai_sdk(model="gpt-4-0613", max_completion_tokens=2000, temperature=1.0, top_p=1.0,
                        messages=[{"role": "user", "content": [{"type": "text", "text": PROMPT}]}])
    assert body(ours) == body(theirs)
    _, ours = gestalt("anthropic", "claude-opus-4-6", image=None, settings={"max_new_tokens": 30})
    theirs = anthropic_sdk(model="claude-opus-4-6", max_tokens=30,
                           messages=[{"role": "user", "content": [{"type": "text", "text": PROMPT}]}])
    assert body(ours) == body(theirs)


def test_azure_request_matches_the_sdk():
    _, ours = gestalt("azure", "my-gpt4o", api_version="2024-10-21", served_model="gpt-4o",
                      settings={"max_new_tokens": 40, "temperature": 0.0, "seed": 3})
    theirs = sdk_request(lambda http: openai.AzureOpenAI(
        api_key=KEY, azure_endpoint=BASE, api_version="2024-10-21", http_client=http,
        max_retries=0).chat.completions.create(model="my-gpt4o", messages=OPENAI_MESSAGES,
                                               max_completion_tokens=40, temperature=0.0, seed=3))
    assert str(ours.url) == str(theirs.url)  # deployment path and api-version query
    assert ours.headers["api-key"] == theirs.headers["api-key"] == KEY
    assert "authorization" not in ours.headers
    assert body(ours) == {**body(theirs), "model": "my-gpt4o"}


def credential_of(req: httpx2.Request) -> str | None:
    """The Anthropic SDK accepts either header as the credential (its _validate_headers)."""
    return req.headers.get("x-api-key") or req.headers.get("authorization", "").removeprefix("Bearer ") or None


def test_anthropic_request_matches_the_sdk():
    _, ours = gestalt("anthropic", "claude-opus-4-6", settings={"max_new_tokens": 1024, "temperature": 0.0})
    # anthropic 2.14's typed params no longer list the sampling parameters; extra_body is the
    # SDK's way to send one (Opus 4.6 still accepts temperature alone).
    theirs = anthropic_sdk(model="claude-opus-4-6", max_tokens=1024, messages=ANTHROPIC_MESSAGES,
                           extra_body={"temperature": 0.0})
    assert (ours.url.path, body(ours)) == (theirs.url.path, body(theirs))
    assert credential_of(ours) == credential_of(theirs) == KEY
    assert ours.headers["anthropic-version"]


def test_anthropic_opus_4_7_gets_no_temperature():
    # Opus 4.7 rejects temperature and the 'enabled' thinking form.
    gen, ours = gestalt("anthropic", "claude-opus-4-7", adaptive_thinking=True,
                        settings={"max_new_tokens": 2048, "temperature": 0.0, "seed": 4})
    theirs = anthropic_sdk(model="claude-opus-4-7", max_tokens=2048, messages=ANTHROPIC_MESSAGES,
                           thinking=at.ThinkingConfigAdaptiveParam(type="adaptive"))
    assert body(ours) == body(theirs)
    assert gen.settings_dropped == {"temperature": 0.0, "seed": 4}  # Anthropic has no seed


def test_anthropic_thinking_request_matches_the_sdk():
    # Sonnet 4.5: temperature or top_p, not both; none while thinking.
    gen, ours = gestalt("anthropic", "claude-sonnet-4-5", thinking_budget=2048, max_tokens=4096,
                        settings={"max_new_tokens": 40, "temperature": 0.0, "top_p": 1.0})
    theirs = anthropic_sdk(model="claude-sonnet-4-5", max_tokens=4096, messages=ANTHROPIC_MESSAGES,
                           thinking=at.ThinkingConfigEnabledParam(type="enabled", budget_tokens=2048))
    assert body(ours) == body(theirs)
    assert set(gen.settings_dropped) == {"temperature", "top_p"}


def test_gemini_request_matches_the_sdk():
    _, ours = gestalt("google", "gemini-2.5-flash", thinking_budget=0,
                      settings={"max_new_tokens": 40, "temperature": 0.0, "top_p": 0.5, "seed": 9})
    theirs = gemini_sdk("gemini-2.5-flash", gt.GenerateContentConfig(
        max_output_tokens=40, temperature=0.0, top_p=0.5, seed=9,
        thinking_config=gt.ThinkingConfig(thinking_budget=0)),
        [gt.Part.from_bytes(data=png_bytes(IMAGE), mime_type="image/png"), gt.Part(text=PROMPT)])
    assert snake(body(ours)) == snake(body(theirs))
    # The SDK defaults to the v1 API; gestalt calls v1beta (thinkingConfig and seed documented there).
    assert ours.url.path.split("/", 2)[2] == theirs.url.path.split("/", 2)[2]
    assert ours.headers["x-goog-api-key"] == theirs.headers["x-goog-api-key"] == KEY


# -- documented response shapes ----------------------------------------------------------------

def openai_reply(finish: str, content: str | None, refusal: str | None = None, reasoning: int = 0) -> dict:
    return ChatCompletion(
        id="c", created=0, model="o3", object="chat.completion",
        choices=[Choice(index=0, finish_reason=finish,  # type: ignore[arg-type]
                        message=ChatCompletionMessage(role="assistant", content=content, refusal=refusal))],
        usage=CompletionUsage(prompt_tokens=90, completion_tokens=40, total_tokens=130,
                              completion_tokens_details=CompletionTokensDetails(reasoning_tokens=reasoning)),
    ).model_dump(mode="json")


def anthropic_reply(stop: str, text: str) -> dict:
    return at.Message(id="m", type="message", role="assistant", model="claude-opus-4-6",
                      content=[at.TextBlock(type="text", text=text)], stop_reason=stop,  # type: ignore[arg-type]
                      usage=at.Usage(input_tokens=90, output_tokens=12)).model_dump(mode="json")


def gemini_reply(finish: str | None, text: str | None, thoughts: int = 0) -> dict:
    parts = [gt.Part(text=text)] if text is not None else None
    candidates = [gt.Candidate(finish_reason=gt.FinishReason(finish), content=gt.Content(role="model", parts=parts))] \
        if finish else None
    feedback = None if finish else gt.GenerateContentResponsePromptFeedback(block_reason=gt.BlockedReason.SAFETY)
    return gt.GenerateContentResponse(
        candidates=candidates, prompt_feedback=feedback,
        usage_metadata=gt.GenerateContentResponseUsageMetadata(
            prompt_token_count=90, candidates_token_count=0 if text is None else 3,
            thoughts_token_count=thoughts, total_token_count=93 + thoughts),
    ).model_dump(mode="json", by_alias=True, exclude_none=True)


CASES = [
    # (provider, model, reply, status, text)
    ("openai", "gpt-4o", openai_reply("stop", "3"), "ok", "3"),
    ("openai", "o3", openai_reply("length", "", reasoning=40), "null:truncated", ""),  # budget spent reasoning
    ("openai", "gpt-4o", openai_reply("stop", None, refusal="I can't help with that."), "null:refusal", ""),
    ("openai", "gpt-4o", openai_reply("content_filter", ""), "null:safety", ""),
    ("anthropic", "claude-opus-4-6", anthropic_reply("end_turn", "3"), "ok", "3"),
    ("anthropic", "claude-opus-4-6", anthropic_reply("max_tokens", "There are thr"), "null:truncated",
     "There are thr"),
    ("anthropic", "claude-opus-4-6", anthropic_reply("refusal", ""), "null:refusal", ""),
    ("google", "gemini-2.0-flash", gemini_reply("STOP", "3"), "ok", "3"),
    ("google", "gemini-2.0-flash", gemini_reply("MAX_TOKENS", None, thoughts=40), "null:truncated", ""),
    ("google", "gemini-2.0-flash", gemini_reply("SAFETY", None), "null:safety", ""),
    ("google", "gemini-2.0-flash", gemini_reply("RECITATION", None), "null:safety", ""),
    ("google", "gemini-2.0-flash", gemini_reply(None, None), "null:safety", ""),  # blocked prompt
]


@pytest.mark.parametrize("provider,model,reply,status,text", CASES,
                         ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_documented_responses_become_answers_or_null_reasons(provider, model, reply, status, text):
    options = {"max_tokens": 4000} if model == "o3" else {}
    gen, _ = gestalt(provider, model, reply=reply, **options)
    got = "ok" if gen.error is None else api_error_status(gen.error)
    assert got == status and (gen.text or "") == text


def test_usage_separates_thinking_tokens_for_every_vendor():
    gen, _ = gestalt("openai", "o3", reply=openai_reply("stop", "3", reasoning=30), max_tokens=4000)
    assert gen.usage == {"input_tokens": 90, "output_tokens": 10, "thinking_tokens": 30, "total_tokens": 130,
                         "cached_tokens": 0}
    gen, _ = gestalt("google", "gemini-2.0-flash", reply=gemini_reply("STOP", "3", thoughts=25))
    assert gen.usage == {"input_tokens": 90, "output_tokens": 3, "thinking_tokens": 25, "total_tokens": 118,
                         "cached_tokens": 0}
    gen, _ = gestalt("anthropic", "claude-opus-4-6", reply=anthropic_reply("end_turn", "3"))
    assert gen.usage == {"input_tokens": 90, "output_tokens": 12, "thinking_tokens": 0, "cached_tokens": 0}


def test_retry_after_is_read_as_the_openai_sdk_reads_it():
    from openai._base_client import SyncAPIClient

    from harness.models.api_transport import retry_after_s

    sdk = openai.OpenAI(api_key=KEY, base_url=BASE)
    for headers in ({"retry-after-ms": "250"}, {"retry-after": "3"}, {"retry-after": "1.5"},
                    {"retry-after-ms": "100", "retry-after": "9"},
                    {"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"}, {"retry-after": "soon"}, {}):
        h = httpx2.Headers(headers)
        theirs = SyncAPIClient._parse_retry_after_header(sdk, h)
        ours = retry_after_s(h)
        assert (ours is None) == (theirs is None), headers
        if ours is not None:
            assert ours == pytest.approx(theirs, abs=2.0), headers


# -- errors, classified by the vendors' fields ------------------------------------------------

def anthropic_error(kind: str, code: str | None = None, message: str = "Request refused.") -> dict:
    """An Anthropic error body as the SDK's types define it (``ErrorResponse``; ``error.details.
    error_code`` as the SDK's ``extract_error_code`` reads it)."""
    from anthropic.types.shared import ErrorResponse

    error: dict[str, Any] = {"type": kind, "message": message}
    if code is not None:
        error["details"] = {"error_code": code}
    return ErrorResponse.model_validate({"type": "error", "error": error}).model_dump(exclude_none=True)


def openai_error(code: str | None, kind: str, message: str) -> dict:
    from openai.types.shared import ErrorObject

    return {"error": ErrorObject(code=code, type=kind, message=message).model_dump()}


def gemini_error(quota_id: str, metric: str = "generativelanguage.googleapis.com/generate_content_requests") -> dict:
    return {"error": {"code": 429, "message": "Resource has been exhausted.", "status": "RESOURCE_EXHAUSTED",
                      "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                   "violations": [{"quotaMetric": metric, "quotaId": quota_id}]}]}}


def failing(provider: str, model: str, status: int, error: dict) -> tuple[str, int]:
    """(gestalt's error code, requests sent) for a vendor that answers every request with this error."""
    env = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "google": "GEMINI_API_KEY"}[provider]
    sent = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(status, json=error)

    adapter = APIModel(ModelSpec(id="m", source="api", name=f"{provider}/{model}", options={
        "base_url": BASE + "/v1" if provider == "openai" else BASE, "max_retries": 2,
        "backoff_base_s": 0.0, "backoff_cap_s": 0.0}))
    adapter._http = httpx2.Client(transport=httpx2.MockTransport(handle))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(env, KEY)
        gen = adapter.generate(IMAGE, PROMPT, {"max_new_tokens": 40})
    return gen.error.split(":", 1)[0], len(sent)


SPEND_CAP = anthropic_error("rate_limit_error", "enforced_spend_limit_reached",
                            "Your organization has reached its usage threshold.")


def test_the_sdk_reads_the_spend_cap_body_as_its_spend_cap_error():
    from anthropic._error_classes import make_status_error
    from anthropic.types.shared import EnforcedSpendLimitReachedError

    err = make_status_error("x", body=SPEND_CAP, response=httpx2.Response(
        429, request=httpx2.Request("POST", BASE + "/v1/messages")))
    assert isinstance(err, EnforcedSpendLimitReachedError)


@pytest.mark.parametrize("provider,model,status,error,code,sent", [
    # spend caps and spent credit: waiting does not cure them, whatever the message says
    ("anthropic", "claude-opus-4-6", 429, SPEND_CAP, "quota", 1),
    ("anthropic", "claude-opus-4-6", 429, anthropic_error("rate_limit_error", "contract_spend_limit_reached"),
     "quota", 1),
    ("anthropic", "claude-opus-4-6", 400, anthropic_error("billing_error", None, "Too low."), "quota", 1),
    ("openai", "gpt-4o", 429, openai_error("insufficient_quota", "insufficient_quota", "Please retry."),
     "quota", 1),
    ("google", "gemini-2.0-flash", 429, gemini_error("GenerateRequestsPerDayPerProjectPerModel-FreeTier"),
     "quota", 1),
    # Anthropic's credit balance and Console spend limits: a 400 invalid_request_error whose
    # documented message is all that says so
    ("anthropic", "claude-opus-4-6", 400, anthropic_error(
        "invalid_request_error", None, "Your credit balance is too low to access the Anthropic API. Please go "
                                       "to Plans & Billing to upgrade or purchase credits."), "quota", 1),
    ("anthropic", "claude-opus-4-6", 400, anthropic_error(
        "invalid_request_error", None, "You have reached your specified API usage limits. You will regain "
                                       "access on 2026-12-01 at 00:00 UTC."), "quota", 1),
    ("anthropic", "claude-opus-4-6", 402, anthropic_error("billing_error", "linked_organization_billing_unavailable"),
     "quota", 1),
    ("openai", "gpt-4o", 429, openai_error("credit_balance_exhausted", "insufficient_quota", "No credit."),
     "quota", 1),
    ("openai", "gpt-4o", 429, openai_error("project_spend_limit_exceeded", "insufficient_quota", "Limit."),
     "quota", 1),
    ("google", "gemini-2.0-flash", 429, gemini_error("", "generativelanguage.googleapis.com/"
                                                         "generate_requests_per_model_per_day"), "quota", 1),
    # the same words elsewhere are no money run out: a bad request stays final, a rate limit is retried
    ("openai", "gpt-4o", 400, openai_error(None, "invalid_request_error", "Your credit balance is too low "
                                                                         "in this example prompt."), "http_400", 1),
    ("anthropic", "claude-opus-4-6", 400, anthropic_error("invalid_request_error", None,
                                                          "messages: the image is not a PNG"), "http_400", 1),
    # rate limits: retried, even where the message mentions billing or a spend limit
    ("openai", "gpt-4o", 429, openai_error("rate_limit_exceeded", "requests",
                                           "Rate limit reached. See https://platform.openai.com/account/"
                                           "billing for your spend limit and credit balance."), "http_429", 3),
    ("anthropic", "claude-opus-4-6", 429, anthropic_error("rate_limit_error", "ramp_limit_exceeded",
                                                          "Ramp limit; see billing."), "http_429", 3),
    ("google", "gemini-2.0-flash", 429, gemini_error("GenerateRequestsPerMinutePerProjectPerModel"),
     "http_429", 3),
])
def test_errors_are_classified_by_the_vendors_fields(provider, model, status, error, code, sent):
    assert failing(provider, model, status, error) == (code, sent)


# -- transport level with the pinned SDKs -------------------------------------------------------

TRANSPORT_VARIABLES = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "OPENAI_ORG_ID",
                       "OPENAI_PROJECT_ID", "GOOGLE_API_KEY", "GEMINI_API_KEY")


@contextlib.contextmanager
def transport_env(env: dict[str, str]):
    """Exactly these of the variables both gestalt and the SDKs read, for one request."""
    with pytest.MonkeyPatch.context() as mp:
        for name in TRANSPORT_VARIABLES:
            mp.delenv(name, raising=False)
        for name, value in env.items():
            mp.setenv(name, value)
        yield


def gestalt_default_request(provider: str, model: str, env: dict[str, str], **options) -> httpx2.Request:
    """gestalt's request with no options.base_url, under these environment variables."""
    adapter = APIModel(ModelSpec(id="m", source="api", name=f"{provider}/{model}",
                                 options={"max_retries": 0, **options}))
    cap = Capture()
    adapter._http = cap.client()
    with transport_env(env):
        adapter.generate(IMAGE, PROMPT, {"max_new_tokens": 40, "temperature": 0.0})
    (req,) = cap.requests
    return req


def sdk_default_request(make: Callable[[httpx2.Client], Any], env: dict[str, str]) -> httpx2.Request:
    with transport_env(env):
        return sdk_request(make)


def test_anthropic_version_header_is_the_pinned_sdks():
    theirs = anthropic_sdk(model="claude-opus-4-6", max_tokens=40, messages=ANTHROPIC_MESSAGES)
    _, ours = gestalt("anthropic", "claude-opus-4-6")
    assert ours.headers["anthropic-version"] == theirs.headers["anthropic-version"]


def test_base_url_organisation_and_project_variables_are_honoured_as_the_sdks_do():
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://proxy.test/openai/v1", "OPENAI_ORG_ID": "org-7",
           "OPENAI_PROJECT_ID": "proj_9"}
    theirs = sdk_default_request(lambda http: openai.OpenAI(http_client=http, max_retries=0).chat.completions.create(
        model="gpt-4o", messages=OPENAI_MESSAGES, max_completion_tokens=40, temperature=0.0), env)
    ours = gestalt_default_request("openai", "gpt-4o", env)
    assert ours.url == theirs.url
    for header in ("openai-organization", "openai-project"):
        assert ours.headers[header] == theirs.headers[header]

    env = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "http://proxy.test/anthropic"}
    theirs = sdk_default_request(lambda http: anthropic.Anthropic(http_client=http, max_retries=0).messages.create(
        model="claude-opus-4-6", max_tokens=40, messages=ANTHROPIC_MESSAGES), env)
    assert gestalt_default_request("anthropic", "claude-opus-4-6", env).url == theirs.url


def test_gemini_key_precedence_is_the_sdks():
    from google.genai._api_client import get_env_api_key

    env = {"GOOGLE_API_KEY": "google-key-0123456789", "GEMINI_API_KEY": "gemini-key-0123456789"}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        theirs = get_env_api_key()
    ours = gestalt_default_request("google", "gemini-2.0-flash", env, base_url=BASE)
    assert ours.headers["x-goog-api-key"] == theirs == "google-key-0123456789"


def test_connect_timeout_is_the_sdks():
    from anthropic._constants import DEFAULT_TIMEOUT as ANTHROPIC_TIMEOUT
    from openai._constants import DEFAULT_TIMEOUT as OPENAI_TIMEOUT

    adapter = APIModel(ModelSpec(id="m", source="api", name="openai/gpt-4o", options={}))
    timeout = adapter._client().timeout
    assert timeout.connect == OPENAI_TIMEOUT.connect == ANTHROPIC_TIMEOUT.connect
    assert timeout.read == OPENAI_TIMEOUT.read  # a reasoning call may think for minutes


@pytest.mark.parametrize("model", ["claude-opus-4-6", "claude-opus-4-20250514"])
@pytest.mark.parametrize("max_tokens", [8_192, 8_193, 21_333, 21_334, 64_000])
def test_requests_the_sdk_refuses_unstreamed_are_streamed(model, max_tokens):
    from anthropic._constants import MODEL_NONSTREAMING_TOKENS

    sdk = anthropic.Anthropic(api_key=KEY, base_url=BASE)
    try:
        sdk._calculate_nonstreaming_timeout(max_tokens, MODEL_NONSTREAMING_TOKENS.get(model))
        sdk_refuses = False
    except ValueError:
        sdk_refuses = True
    adapter = APIModel(ModelSpec(id="m", source="api", name=f"anthropic/{model}",
                                 options={"base_url": BASE, "max_tokens": max_tokens}))
    assert adapter.streams(adapter.plan({"max_new_tokens": 40})) == sdk_refuses


def sse(*events: Any) -> bytes:
    """A Messages event stream as Anthropic sends it: each of the SDK's event types as one SSE
    event (``event: <type>``, ``data: <json>``), a ping among them."""
    out = [b"event: ping\ndata: {\"type\": \"ping\"}\n\n"]
    for e in events:
        body = e if isinstance(e, dict) else e.model_dump(mode="json", exclude_none=True)
        out.append(f"event: {body['type']}\ndata: {json.dumps(body)}\n\n".encode())
    return b"".join(out)


def streamed_answer(text: str = "The odd one out is 3.", thinking: str = "1 and 2 match; ") -> bytes:
    start = at.Message(id="msg_1", type="message", role="assistant", model="claude-opus-4-6", content=[],
                       stop_reason=None, usage=at.Usage(input_tokens=90, output_tokens=1))
    return sse(
        at.RawMessageStartEvent(type="message_start", message=start),
        at.RawContentBlockStartEvent(type="content_block_start", index=0,
                                     content_block=at.ThinkingBlock(type="thinking", thinking="", signature="")),
        *(at.RawContentBlockDeltaEvent(type="content_block_delta", index=0,
                                       delta=at.ThinkingDelta(type="thinking_delta", thinking=w))
          for w in re.findall(r"\S+\s*", thinking)),
        at.RawContentBlockDeltaEvent(type="content_block_delta", index=0,
                                     delta=at.SignatureDelta(type="signature_delta", signature="sig")),
        at.RawContentBlockStopEvent(type="content_block_stop", index=0),
        at.RawContentBlockStartEvent(type="content_block_start", index=1,
                                     content_block=at.TextBlock(type="text", text="")),
        *(at.RawContentBlockDeltaEvent(type="content_block_delta", index=1,
                                       delta=at.TextDelta(type="text_delta", text=w))
          for w in re.findall(r"\S+\s*", text)),
        at.RawContentBlockStopEvent(type="content_block_stop", index=1),
        at.RawMessageDeltaEvent(type="message_delta", delta=Delta(stop_reason="end_turn"),
                                usage=at.MessageDeltaUsage(output_tokens=40, output_tokens_details=
                                                           at.OutputTokensDetails(thinking_tokens=31))),
        at.RawMessageStopEvent(type="message_stop"))


class Streaming(Capture):
    """Answers each request with a fixed event stream."""

    def __init__(self, stream: bytes, status: int = 200):
        super().__init__()
        self.stream, self.status = stream, status

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return httpx2.Response(self.status, content=self.stream, headers={"content-type": "text/event-stream"})


def stream_with(cap: Streaming, **options) -> Any:
    adapter = APIModel(ModelSpec(id="m", source="api", name="anthropic/claude-opus-4-6",
                                 options={"base_url": BASE, "max_tokens": 64_000, "max_retries": 1,
                                          "backoff_base_s": 0.001, "backoff_cap_s": 0.001, **options}))
    adapter._http = cap.client()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANTHROPIC_API_KEY", KEY)
        return adapter.generate(IMAGE, PROMPT, {"max_new_tokens": 40})


def test_a_long_anthropic_answer_is_streamed_and_read_as_the_sdk_reads_it():
    cap = Streaming(streamed_answer())
    gen = stream_with(cap)
    (req,) = cap.requests
    assert body(req)["stream"] is True and body(req)["max_tokens"] == 64_000
    # the SDK's own stream reader, on the same bytes, builds the same message
    sdk = anthropic.Anthropic(api_key=KEY, base_url=BASE, http_client=Streaming(streamed_answer()).client())
    with sdk.messages.stream(model="claude-opus-4-6", max_tokens=64_000,
                             messages=[{"role": "user", "content": PROMPT}]) as events:
        final = events.get_final_message()
    assert gen.error is None and gen.text == final.content[1].text == "The odd one out is 3."
    assert gen.extras["reasoning"] == final.content[0].thinking == "1 and 2 match; "
    assert gen.usage == {"input_tokens": 90, "output_tokens": 40 - 31, "thinking_tokens": 31, "cached_tokens": 0}


def test_a_stream_cut_short_or_an_error_event_is_classified():
    whole = streamed_answer()
    cut = Streaming(whole[:whole.index(b"event: message_delta")])  # no message_stop: retried
    gen = stream_with(cut)
    assert len(cut.requests) == 2 and gen.error.startswith("connection: the event stream ended")
    overloaded = sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    cap = Streaming(whole[:whole.index(b"event: content_block_stop")] + overloaded)
    gen = stream_with(cap)
    assert len(cap.requests) == 2 and api_error_status(gen.error) == "null:api_error:http_529"
    cap = Streaming(sse({"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}))
    gen = stream_with(cap)
    assert len(cap.requests) == 1 and api_error_status(gen.error) == "null:api_error:http_400"
    cap = Streaming(json.dumps({"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}).encode(),
                    status=429)
    gen = stream_with(cap)  # an error status before the stream: as a plain request's
    assert len(cap.requests) == 2 and api_error_status(gen.error) == "null:api_error:http_429"


def test_gemini_bad_key_400_is_an_auth_failure_not_a_rejected_request():
    from google.genai import errors as genai_errors

    from harness.readouts.parse import failed_call

    body = {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                      "status": "INVALID_ARGUMENT",
                      "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                                   "domain": "googleapis.com"}]}}
    assert genai_errors.APIError(400, body).status == "INVALID_ARGUMENT"  # the body as the SDK reads it
    code, sent = failing("google", "gemini-2.0-flash", 400, body)
    assert (code, sent) == ("auth", 1) and failed_call(f"null:api_error:{code}")
