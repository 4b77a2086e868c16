"""``api:<provider>/<model>``: closed and served models over HTTP (httpx2, one pooled client).

Why gestalt builds the requests itself rather than calling the vendors' SDKs: docs/api-transport.md.

Providers and wire formats:

- ``openai``: Chat Completions, ``POST {base_url}/chat/completions`` (default base
  ``https://api.openai.com/v1``, else ``$OPENAI_BASE_URL``), ``Authorization: Bearer``; key
  ``OPENAI_API_KEY``; ``OpenAI-Organization`` / ``OpenAI-Project`` from ``OPENAI_ORG_ID`` /
  ``OPENAI_PROJECT_ID`` where set (as the openai SDK reads them).
- ``azure``: Azure OpenAI, ``azure/<deployment>``: ``POST {base_url}/openai/deployments/<deployment>/
  chat/completions?api-version=<options.api_version>`` with an ``api-key`` header; key
  ``AZURE_OPENAI_API_KEY``; ``options.served_model`` names the OpenAI model the deployment serves (its
  capability row), else the deployment name is used.
- ``openai-compatible``: the same format at ``options.base_url`` (vLLM, Ollama, LM Studio); a key
  only if ``options.api_key_env`` names one.
- ``anthropic``: Messages, ``POST {base_url}/v1/messages`` (default ``https://api.anthropic.com``,
  else ``$ANTHROPIC_BASE_URL``), ``x-api-key`` + the pinned SDK's ``anthropic-version``; key
  ``ANTHROPIC_API_KEY``. An output budget Anthropic only takes streamed (:meth:`APIModel.streams`)
  is sent with ``stream: true``; the server-sent events are gathered into the message
  (:func:`anthropic_streamed_message`), an ``error`` event classified by its error type.
- ``google``: Gemini ``POST {base_url}/v1beta/models/{model}:generateContent`` (default
  ``https://generativelanguage.googleapis.com``, else ``$GOOGLE_GEMINI_BASE_URL``),
  ``x-goog-api-key`` (a header, so the key never sits in a URL); key ``GOOGLE_API_KEY``, else
  ``GEMINI_API_KEY`` (google-genai's order).

Every request is one user turn holding the image (base64 PNG, the exact bytes of
:func:`harness.stimuli.base.png_bytes`) *before* the prompt text; ``image=None`` sends the text alone
(the CHART-6 LLM answer extractor).

Parameters: :mod:`harness.models.api_capabilities` says which of temperature, top_p, seed, the
output-budget field and the thinking forms a model family accepts. :meth:`APIModel.plan` applies it
before a request is built: a setting the model does not accept is left out and reported in
``Generation.settings_dropped``; where leaving it out would change the experiment (a setting the
readout marks ``exact`` with a value other than the vendor's default 1.0), or where the thinking
and output budgets cannot work, it raises :class:`ModelError` (at preflight, via the readouts).
Output budget: ``options.max_tokens`` (size it for thinking tiers), else the readout's
``max_new_tokens``. ``options.thinking_budget`` enables Anthropic thinking / sets Gemini's
``thinkingBudget``; ``options.adaptive_thinking`` asks Anthropic for adaptive thinking;
``options.reasoning_effort`` is passed to OpenAI.

Answers cut short are not answers: ``finish_reason: length`` / ``stop_reason: max_tokens`` /
``finishReason: MAX_TOKENS`` give the error ``truncated``, a refusal ``refusal``, a content filter,
Gemini safety/recitation stop or blocked prompt ``safety`` (recorded as ``null:truncated`` etc.).

Failures never leave the battery: 408, 409, 429, 5xx (incl. Anthropic's 529), timeouts, dropped
connections and malformed bodies are retried with capped exponential backoff and jitter; the wait
honours ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date; never negative) up to the cap,
and ``x-should-retry`` overrides the status rule, as the vendors' SDKs do. Money run out (spent
credit, a spend cap, a per-day quota: :func:`refused_for_money`, by the vendor's fields, by the
documented message only for Anthropic's 400s that have no field) is never retried and never an
answer: ``quota: <provider> refused the call: <what>; <what to do> | <vendor's body>``, a failed
call; the model then sends nothing more, each later call recorded as the same failed call, not sent.
Other 4xx and any unexpected error fail at once. A terminal failure returns
``Generation(text=None, error="<code>: <detail>")``, e.g. ``http_500: ...``, ``timeout: ...``,
``quota: ...``; the readouts record it as ``null:api_error:<code>``. Timeout 600 s per attempt
(the SDKs' default; reasoning calls are slow), connect timeout 5 s (the SDKs').
:meth:`APIModel.verify` asks the vendor about the key and the model without generating (preflight).

Secrets: keys are read from the environment at request time (surrounding whitespace stripped) and
never stored on the adapter; every stored text (errors, answers, reasoning) is scrubbed of the key
in any representation (:func:`scrub_secret`) before it is stored or logged.

``latency_s`` is the wall time of the attempt that succeeded; ``usage`` is normalised across vendors
to ``input_tokens`` (cached included), ``cached_tokens``, ``output_tokens`` (the answer, thinking
excluded), ``thinking_tokens`` (where the vendor reports it: OpenAI, Gemini, Anthropic's
``output_tokens_details``) and ``total_tokens``; attempts that reached the vendor but brought back
no usage (a read timeout, a cut response or stream, an unreadable 200) add their bound
(:func:`harness.models.api_costs.unreported_usage`), since the vendor may have billed them.
The vendors' reasoning fields are kept in ``Generation.extras['reasoning']``, never in the answer.
Requests in flight per model (:mod:`harness.models.api_concurrency`): ``options.concurrency`` (4)
at the start, grown while the vendor answers up to ``options.max_concurrency`` (32 when neither is
set; ``concurrency`` alone stays fixed), cut on a 429 or 529, and held for its retry-after;
``generate_many`` keeps that many requests in flight, and a battery hands the model its trials
as calls of their own, ``max_in_flight`` at once (:mod:`harness.trials.runner`), so the window
alone paces them from the first trial to the last. ``options.batch`` sends a battery's trials
through the vendor's batch interface instead, at its batch price (:mod:`harness.models.api_batch`).
"""

from __future__ import annotations

import base64
import email.utils
import json
import logging
import math
import os
import random
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any

import httpx2
from PIL import Image
from pydantic import Field, field_validator, model_validator

from ..version import __version__
from ..stimuli.base import png_bytes
from .api_capabilities import MIN_OUTPUT_WHEN_THINKING, Family, family_of
from .api_concurrency import AdaptiveConcurrency, RateLimits, rate_limits
from .api_costs import estimate_input_tokens, unreported_usage
from .base import Generation, ModelAdapter, ModelError, ModelOptions, ModelSpec, NotReady

log = logging.getLogger(__name__)

ADAPTER_VERSION = "1"
USER_AGENT = f"gestalt-harness/{__version__} httpx2/{httpx2.__version__}"
PROVIDERS: dict[str, dict[str, Any]] = {
    "openai": {"base_url": "https://api.openai.com/v1", "keys": ("OPENAI_API_KEY",)},
    "azure": {"base_url": None, "keys": ("AZURE_OPENAI_API_KEY",)},
    "openai-compatible": {"base_url": None, "keys": ()},
    "anthropic": {"base_url": "https://api.anthropic.com", "keys": ("ANTHROPIC_API_KEY",)},
    # google-genai's get_env_api_key: GOOGLE_API_KEY first
    "google": {"base_url": "https://generativelanguage.googleapis.com",
               "keys": ("GOOGLE_API_KEY", "GEMINI_API_KEY")},
}
OPENAI_FORMAT = ("openai", "azure", "openai-compatible")
# Options that change an answer (fingerprint) and runtime knobs that do not.
ANSWER_OPTIONS = {"base_url", "max_tokens", "supports_temperature", "thinking_budget", "adaptive_thinking",
                  "reasoning_effort", "anthropic_version", "extra_body", "api_version", "served_model"}
# ``generation`` holds the recipe's generation settings, which reach the model through the readout.
RUNTIME_OPTIONS = {"api_key_env", "timeout_s", "max_retries", "backoff_base_s", "backoff_cap_s",
                   "concurrency", "max_concurrency", "generation", "batch", "batch_poll_s"}
# Providers whose batch interface ``options.batch`` uses (harness.models.api_batch).
BATCH_PROVIDERS = ("openai", "anthropic", "google")
Tokens = Annotated[int, Field(ge=0, le=10_000_000)]
Seconds = Annotated[float, Field(ge=0, le=7 * 86400)]
Requests = Annotated[int, Field(ge=1, le=4096)]


class APIOptions(ModelOptions):
    """ANSWER_OPTIONS and RUNTIME_OPTIONS (above), typed."""

    base_url: str | None = None
    max_tokens: Tokens | None = None
    supports_temperature: bool | None = None
    thinking_budget: Tokens | None = None
    adaptive_thinking: bool = False
    reasoning_effort: str | None = None
    anthropic_version: str = "2026-10-21"  # anthropic 2.14's ANTHROPIC_API_VERSION
    extra_body: dict[str, Any] | None = None
    api_version: str | None = None
    served_model: str | None = None
    api_key_env: str | None = None
    api_key: None = None  # refused below: a key in a recipe would reach logs and MLflow
    timeout_s: Seconds = 600.0
    max_retries: int = Field(6, ge=0, le=1000)
    backoff_base_s: Seconds = 1.0
    backoff_cap_s: Seconds = 60.0
    concurrency: Requests = 4
    max_concurrency: Requests | None = None
    batch: bool = False
    batch_poll_s: Seconds | None = None

    @field_validator("api_key", mode="before")
    @classmethod
    def _key_from_environment(cls, v):
        raise ValueError("API keys are read only from the environment; name the variable with "
                         "options.api_key_env instead of options.api_key")

    @model_validator(mode="after")
    def _ceiling(self):
        if self.max_concurrency is not None and self.max_concurrency < self.concurrency:
            raise ValueError("options.max_concurrency must be >= options.concurrency")
        return self


DEFAULTS = {k: APIOptions.model_fields[k].default for k in ("timeout_s", "max_retries", "backoff_base_s",
                                                           "backoff_cap_s", "concurrency", "anthropic_version")}
CONNECT_TIMEOUT_S = 5.0  # the SDKs' (openai and anthropic DEFAULT_TIMEOUT): a dead host fails fast
# Where the SDKs read a base URL when the client is given none (options.base_url comes first).
BASE_URL_ENV = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL", "google": "GOOGLE_GEMINI_BASE_URL"}
# OpenAI's organisation and project headers, from the variables the openai SDK reads.
OPENAI_ACCOUNT_HEADERS = {"OPENAI_ORG_ID": "openai-organization", "OPENAI_PROJECT_ID": "openai-project"}
# Anthropic refuses a non-streaming request that may run over 10 minutes: expected time is an hour
# per 128k output tokens (anthropic's _calculate_nonstreaming_timeout); some models have a lower cap
# (anthropic._constants.MODEL_NONSTREAMING_TOKENS).
ANTHROPIC_NONSTREAMING_TOKENS = 128_000 * 600 // 3600
ANTHROPIC_NONSTREAMING_BY_MODEL = {"claude-opus-4-20250514": 8_192, "claude-opus-4-0": 8_192,
                                   "claude-4-opus-20250514": 8_192}


def anthropic_nonstreaming_limit(model: str) -> int:
    """The most output tokens Anthropic accepts in a non-streaming request for ``model``."""
    return ANTHROPIC_NONSTREAMING_BY_MODEL.get(model, ANTHROPIC_NONSTREAMING_TOKENS)


# Anthropic's error types and the status each comes with (its errors page); an error in a stream
# arrives as an ``error`` event after the 200, naming only its type.
ANTHROPIC_ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
                          "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                          "rate_limit_error": 429, "api_error": 500, "timeout_error": 504,
                          "overloaded_error": 529}


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str | None, str]]:
    """(event, data) of each server-sent event in a stream's lines (the WHATWG rules gestalt needs:
    ``event:`` and ``data:`` fields, data lines joined by newlines, a blank line ends an event,
    comments skipped)."""
    event: str | None = None
    data: list[str] = []
    for line in [*lines, ""]:
        if not line:
            if event is not None or data:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)


def anthropic_streamed_message(events: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The Message an Anthropic stream's events build, as the anthropic SDK's ``accumulate_event``
    builds it for the blocks gestalt reads (text, thinking); None if ``message_stop`` never came.
    ``message_delta``'s usage counts are running totals: they replace, and one it leaves out keeps
    ``message_start``'s."""
    message: dict[str, Any] | None = None
    for e in events:
        kind = e["type"]
        if kind == "message_start":
            message = {**e["message"], "content": list(e["message"].get("content") or []),
                       "usage": dict(e["message"].get("usage") or {})}
        elif message is None:
            raise KeyError(f"{kind} before message_start")
        elif kind == "content_block_start":
            message["content"].append(dict(e["content_block"]))
        elif kind == "content_block_delta":
            block, delta = message["content"][e["index"]], e["delta"]
            field_of = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking")}
            if delta["type"] in field_of and block.get("type") == field_of[delta["type"]][0]:
                name = field_of[delta["type"]][1]
                block[name] = block.get(name, "") + delta[name]
            elif delta["type"] == "signature_delta" and block.get("type") == "thinking":
                block["signature"] = delta["signature"]
        elif kind == "message_delta":
            message.update(stop_reason=e["delta"].get("stop_reason"), stop_sequence=e["delta"].get("stop_sequence"))
            message["usage"].update({k: v for k, v in (e.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            return message
    return None
RETRY_STATUS = {408, 409, 429}  # and every 5xx
# Transport failures before the request reached the vendor: nothing it could bill. Every other
# timeout or dropped connection came after the request was sent, and the vendor may bill its answer.
NOT_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)
REFUSED_KEY = {"http_401", "http_403", "auth"}  # the vendor refused the key (Gemini: a 400 naming it)
# Consecutive refused-key answers after which a model sends nothing more: the key is dead, and
# every further call would fail the same way (each such trial is a failed call a rerun sends again).
REFUSED_KEY_BREAKER = 5
PUSHBACK = {"http_429", "http_529"}  # the vendor asks for fewer requests: the in-flight window shrinks
MAX_CONCURRENCY = 32
DETAIL_CHARS = 300
# Money run out: errors that waiting does not cure (retrying them as a rate limit would spend
# minutes for nothing) and that the user does (credit added, a limit raised, the quota's day over),
# so each is a failed call a rerun sends again, never an answer. Named by the vendors' fields:
# OpenAI's error.code (error.type ``insufficient_quota`` for any of them), Anthropic's billing error
# (error.type) and spend caps (error.details.error_code, anthropic.types.shared.*ErrorDetails), a
# Gemini RESOURCE_EXHAUSTED whose QuotaFailure names a per-day quota. Each maps to (what happened,
# what to do).
OPENAI_MONEY = {
    "insufficient_quota": ("quota used up (insufficient_quota)", "add credit or raise the limit"),
    "credit_balance_exhausted": ("credit balance exhausted (out of credit)", "add credit"),
    "organization_spend_limit_exceeded": ("spend limit of the organization reached",
                                          "raise the spend limit or wait for its monthly reset"),
    "project_spend_limit_exceeded": ("spend limit of the project reached",
                                     "raise the spend limit or wait for its monthly reset"),
    "organization_usage_limit_exceeded": ("usage limit of the organization reached",
                                          "ask OpenAI for a higher usage limit"),
}
ANTHROPIC_MONEY_TYPES = {"billing_error": ("billing error", "fix the organization's billing")}
ANTHROPIC_MONEY_CODES = {
    "enforced_spend_limit_reached": ("monthly spend limit of the API tier reached",
                                     "move to a higher tier or wait for the next month"),
    "contract_spend_limit_reached": ("spend limit of the contract reached", "raise the contract's limit"),
    "linked_organization_spend_limit_reached": ("the linked organization's spend limit reached or its credit "
                                                "used up", "raise its limit or add credit"),
    "linked_organization_billing_unavailable": ("the linked organization cannot be billed",
                                                "fix that organization's billing"),
}
# Anthropic answers a spent credit balance and a spend limit set in its Console with a plain 400
# invalid_request_error: the message its errors page documents is all that tells them apart from a
# bad request, so it is read there, and only there (lower-cased phrase, what happened, what to do).
ANTHROPIC_MONEY_MESSAGES = (
    ("credit balance is too low", "credit balance too low (out of credit)", "add credit"),
    ("reached your specified workspace api usage limits", "workspace spend limit reached",
     "raise the workspace's spend limit or wait until the date the vendor names"),
    ("reached your specified api usage limits", "spend limit reached",
     "raise the spend limit or wait until the date the vendor names"),
)
GOOGLE_QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"
PER_DAY = re.compile(r"per_?day", re.IGNORECASE)  # quotaId ...PerDay..., quotaMetric ..._per_day
# What gestalt says of a call refused for money comes before the vendor's own words, apart by this.
VENDOR_SAID = " | "
# Gemini answers a bad key with 400 INVALID_ARGUMENT, its ErrorInfo naming the reason.
GOOGLE_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
GOOGLE_KEY_REASONS = {"API_KEY_INVALID", "API_KEY_EXPIRED"}


def is_bad_key(body: Any) -> bool:
    """Whether a Gemini error body says the key is not valid (a 400, not a 401)."""
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    return isinstance(details, list) and any(
        isinstance(d, dict) and d.get("@type") == GOOGLE_ERROR_INFO and d.get("reason") in GOOGLE_KEY_REASONS
        for d in details)


def refused_for_money(provider: str, body: Any) -> str | None:
    """What a vendor's error body says of money run out, as "<provider> refused the call: <what>;
    <what to do>", or None for any other error (a rate limit among them)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    said: tuple[str, str] | None = None
    code, kind, details = error.get("code"), error.get("type"), error.get("details")
    if provider == "anthropic":
        if kind in ANTHROPIC_MONEY_TYPES:
            said = ANTHROPIC_MONEY_TYPES[kind]
        elif isinstance(details, dict) and details.get("error_code") in ANTHROPIC_MONEY_CODES:
            said = ANTHROPIC_MONEY_CODES[details["error_code"]]
        elif kind == "invalid_request_error":
            message = str(error.get("message", "")).lower()
            said = next(((what, do) for phrase, what, do in ANTHROPIC_MONEY_MESSAGES if phrase in message), None)
    elif provider == "google":
        if error.get("status") == "RESOURCE_EXHAUSTED" and isinstance(details, list):
            quotas = [v for d in details if isinstance(d, dict) and d.get("@type") == GOOGLE_QUOTA_FAILURE
                      for v in d.get("violations") or [] if isinstance(v, dict)]
            per_day = [v.get("quotaId") or v.get("quotaMetric") for v in quotas
                       if PER_DAY.search(f"{v.get('quotaId', '')} {v.get('quotaMetric', '')}")]
            if per_day:
                said = f"per-day quota used up ({per_day[0]})", "wait for the quota's daily reset or raise it"
    elif code in OPENAI_MONEY or kind == "insufficient_quota":  # the OpenAI format's vendors
        said = OPENAI_MONEY[code if code in OPENAI_MONEY else "insufficient_quota"]
    return None if said is None else f"{provider} refused the call: {said[0]}; {said[1]}"


def out_of_money(records: Iterable[dict[str, Any]]) -> str | None:
    """What the first trial whose call a vendor refused for money says happened and what to do
    (gestalt's words, before the vendor's own), or None where no vendor did."""
    for r in records:
        extras = r.get("extras") or {}
        for error in (extras.get("error"), extras.get("extractor_error")):
            if isinstance(error, str) and error.startswith("quota: ") and VENDOR_SAID in error:
                return error.removeprefix("quota: ").split(VENDOR_SAID, 1)[0]
    return None


# Gemini finishReasons that withhold an answer on content grounds (google.genai.types.FinishReason).
GOOGLE_SAFETY = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                 "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR"}
NEUTRAL = 1.0  # temperature and top_p that leave the model's distribution as it is


class _Retryable(Exception):
    """A failed attempt to retry; ``billed``: it reached the vendor, which may have answered and
    billed it though no usage came back (a read timeout, a cut response or stream, an unreadable 200)."""

    def __init__(self, code: str, detail: str = "", retry_after: float | None = None, billed: bool = False):
        super().__init__(code)
        self.code, self.detail, self.retry_after, self.billed = code, detail, retry_after, billed


class _Terminal(Exception):
    def __init__(self, code: str, detail: str = ""):
        super().__init__(code)
        self.code, self.detail = code, detail


@dataclass(frozen=True)
class RequestPlan:
    """What one request sends, after the capability table: gestalt names, not wire names."""

    max_tokens: int
    sampling: dict[str, float] = field(default_factory=dict)  # temperature, top_p
    seed: int | None = None
    thinking: dict[str, Any] = field(default_factory=dict)  # budget / adaptive / effort
    dropped: dict[str, Any] = field(default_factory=dict)


def split_name(name: str) -> tuple[str, str]:
    """``provider/model`` -> (provider, model); the model part may itself contain slashes."""
    provider, _, model = name.partition("/")
    return provider, model


def _b64_png(image: Image.Image) -> str:
    return base64.b64encode(png_bytes(image)).decode("ascii")


def secret_forms(secret: str) -> list[str]:
    """The ways a secret turns up in error text: raw, repr/JSON-escaped, URL-encoded, base64 (at
    each of the three alignments it can take inside a longer base64 string)."""
    forms = [secret, secret.encode("unicode_escape").decode("ascii"), json.dumps(secret)[1:-1],
             urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + secret.encode()).decode("ascii").rstrip("=")
        forms.append(encoded[(4 * pad + 2) // 3:-1])
    return [f for f in dict.fromkeys(forms) if f]


FRAGMENT = 8  # shortest piece of a key that counts as a leak


def scrub_secret(text: str, secret: str | None) -> str:
    """``text`` with every run of characters that belongs to a form of ``secret`` in pieces of
    ``FRAGMENT`` or more characters replaced by ``[redacted]`` (linear in ``len(text)``)."""
    if not secret or not text:
        return text
    grams = {f[i:i + FRAGMENT] for f in secret_forms(secret) for i in range(max(1, len(f) - FRAGMENT + 1))}
    hit = bytearray(len(text))
    for i in range(len(text) - FRAGMENT + 1):
        if text[i:i + FRAGMENT] in grams:
            hit[i:i + FRAGMENT] = b"\1" * FRAGMENT
    if len(secret) < FRAGMENT and secret in text:  # a short key is still not shown
        return text.replace(secret, "[redacted]")
    out, i = [], 0
    while i < len(text):
        if hit[i]:
            while i < len(text) and hit[i]:
                i += 1
            out.append("[redacted]")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def retry_after_s(headers: httpx2.Headers, now: float | None = None) -> float | None:
    """The server's requested wait: ``retry-after-ms``, then ``Retry-After`` in seconds or as an
    HTTP date; None when absent or unreadable; never negative."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            wait = float(value) / scale
        except ValueError:
            continue
        return max(0.0, wait) if math.isfinite(wait) else None
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class APIModel(ModelAdapter):
    capabilities = frozenset({"generate"})
    Options = APIOptions

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.provider, self.model = split_name(spec.name)
        self.options = {**DEFAULTS, **spec.options}
        self._rng = random.Random()
        self._sleep: Callable[[float], None] = time.sleep
        self._http: httpx2.Client | None = None
        self._http_lock = threading.Lock()
        # a recipe's own concurrency without a ceiling stays that number (a server that takes no more)
        start = max(1, int(self.options["concurrency"]))
        ceiling = self.options.get("max_concurrency") or (
            start if "concurrency" in spec.options else max(MAX_CONCURRENCY, start))
        self._window = AdaptiveConcurrency(start, max(start, int(ceiling)))
        self._refused: list[str] = []  # the refused-key answers since the last answer (the breaker)
        # what the vendor said when it first refused a call for money: every later call would be
        # refused too, so none is sent (each a failed call the rerun sends, money added)
        self._out_of_money: str | None = None

    def __repr__(self) -> str:
        return f"APIModel({self.spec.id!r}, {self.provider}/{self.model})"

    # -- identity --------------------------------------------------------------------------
    def check(self) -> None:
        s = self.spec
        if self.provider not in PROVIDERS or not self.model:
            raise ModelError(f"model {s.id!r}: api name {s.name!r} must be <provider>/<model> with "
                             f"provider one of {sorted(PROVIDERS)}")
        if self.options.get("batch") and self.provider not in BATCH_PROVIDERS:
            raise ModelError(f"model {s.id!r}: options.batch needs a vendor batch interface, which "
                             f"{self.provider} lacks; providers with one: {', '.join(BATCH_PROVIDERS)}")
        if self.base_url is None:
            raise ModelError(f"model {s.id!r}: provider {self.provider} needs options.base_url")
        if self.provider == "azure" and not self.options.get("api_version"):
            raise ModelError(f"model {s.id!r}: Azure OpenAI needs options.api_version "
                             f"(e.g. 2024-10-21)")
        names = self._key_names()
        if names and self._key() is None:
            raise NotReady(f"model {s.id!r}: no API key; set the environment variable "
                             f"{' or '.join(names)}")
        if (reason := self.unknown_reason()) is not None:
            log.warning("model %s: %s", s.id, reason)

    @property
    def base_url(self) -> str | None:
        url = (self.options.get("base_url") or os.environ.get(BASE_URL_ENV.get(self.provider, ""), "").strip()
               or PROVIDERS.get(self.provider, {}).get("base_url"))
        return url.rstrip("/") if url else None

    @property
    def capability_model(self) -> str:
        """The model name the capability table is read with (Azure: the model a deployment serves)."""
        return str(self.options.get("served_model") or self.model)

    @property
    def family(self) -> tuple[Family, bool]:
        return family_of(self.provider, self.capability_model)

    def unknown_reason(self) -> str | None:
        """Why the request follows the vendor's conservative row (recorded with each trial), or
        None for a model the capability table names."""
        family, known = self.family
        if known:
            return None
        return (f"{self.provider}/{self.capability_model} is not in the capability table; "
                f"requests follow the {family.name} row: {family.evidence}")

    def _key_names(self) -> tuple[str, ...]:
        if self.options.get("api_key_env"):
            return (self.options["api_key_env"],)
        return tuple(PROVIDERS.get(self.provider, {}).get("keys", ()))

    def _key(self) -> str | None:
        # Keys from files and secret stores often end in a newline: never part of the key.
        for name in self._key_names():
            value = os.environ.get(name, "").strip()
            if value:
                return value
        return None

    @property
    def fingerprint(self) -> dict[str, Any]:
        s = self.spec
        opts = {k: v for k, v in s.options.items() if k in ANSWER_OPTIONS and k != "base_url"}
        fp = {"source": s.source, "provider": self.provider, "model": self.model,
              "revision": s.revision, "options": opts, "adapter": f"api/{ADAPTER_VERSION}"}
        if self.options.get("base_url"):
            # Where the model is served identifies it for openai-compatible servers; drop any
            # credentials or query string someone put in the URL.
            u = urllib.parse.urlsplit(self.options["base_url"])
            fp["base_url"] = f"{u.scheme}://{u.hostname}{':' + str(u.port) if u.port else ''}{u.path}"
        return fp

    @property
    def model_version(self) -> str:
        rev = f"@{self.spec.revision}" if self.spec.revision else ""
        return f"{self.provider}/{self.model}{rev}"

    def fetch(self) -> str:
        return f"{self.spec.id}: nothing to fetch (served over HTTP)"

    # -- what a request may carry (the capability table) -------------------------------------
    def _refuse(self, why: str) -> ModelError:
        return ModelError(f"model {self.spec.id!r} ({self.provider}/{self.capability_model}): {why}")

    def _thinking(self, family: Family, max_tokens: int) -> tuple[dict[str, Any], bool]:
        """(thinking request, whether the model thinks on this request); refuses what cannot work."""
        o = self.options
        budget, effort = o.get("thinking_budget"), o.get("reasoning_effort")
        adaptive = bool(o.get("adaptive_thinking"))
        form = {"anthropic": "enabled", "google": "budget"}.get(self.provider)
        if budget is not None and form not in family.thinking:
            extra = " (it accepts only adaptive thinking: options.adaptive_thinking)" \
                if "adaptive" in family.thinking else ""
            raise self._refuse(f"options.thinking_budget is not accepted by the {family.name} "
                               f"family{extra}")
        if adaptive and "adaptive" not in family.thinking:
            raise self._refuse(f"options.adaptive_thinking is not accepted by the {family.name} family")
        if effort is not None and "effort" not in family.thinking:
            raise self._refuse(f"options.reasoning_effort is not accepted by the {family.name} family")
        if budget is not None and int(budget) == 0:
            if not family.thinking_can_be_off:
                raise self._refuse("thinking cannot be turned off (options.thinking_budget 0)")
            return ({"budget": 0} if self.provider == "google" else {}), False  # Anthropic: omit it
        if budget is not None and not (self.provider == "google" and int(budget) == -1):  # -1: dynamic
            budget = int(budget)
            lo, hi = family.thinking_budget_min, family.thinking_budget_max
            if (lo is not None and budget < lo) or (hi is not None and budget > hi):
                raise self._refuse(f"options.thinking_budget {budget} is outside "
                                   f"{lo or 1}..{hi if hi is not None else 'max_tokens - 1'}")
            if budget >= max_tokens:
                raise self._refuse(f"the output budget max_tokens={max_tokens} must exceed "
                                   f"options.thinking_budget={budget} (thinking counts against it)")
            return {"budget": budget}, True
        thinking: dict[str, Any]
        if adaptive:
            thinking, thinks = {"adaptive": True}, True
        elif budget is not None:
            thinking, thinks = {"budget": -1}, True
        elif effort is not None:
            thinking, thinks = {"effort": effort}, effort != "none"
        else:
            thinking, thinks = {}, family.thinks_by_default
        if thinks and max_tokens < MIN_OUTPUT_WHEN_THINKING:
            raise self._refuse(f"the model thinks before it answers and max_tokens={max_tokens} "
                               f"leaves no room for the answer; set generation.max_new_tokens "
                               f"(or options.max_tokens) >= {MIN_OUTPUT_WHEN_THINKING}"
                               + (" or turn thinking off" if family.thinking_can_be_off else ""))
        return thinking, thinks

    def expected_thinking(self, max_tokens: int) -> int:
        """The thinking tokens a call with this output budget is expected to bill before a recorded
        call says how many (the dry run's expected cost): none where the request does not think, else
        its thinking budget where one is set, else its whole output budget: the vendors document no
        typical amount for thinking on by default, and gemini-2.5-flash and gpt-5-nano were measured
        billing five times and more what their answers' length suggests."""
        thinking, thinks = self._thinking(self.family[0], max_tokens)
        if not thinks:
            return 0
        budget = thinking.get("budget")
        return budget if isinstance(budget, int) and budget > 0 else max_tokens

    def plan(self, settings: dict[str, Any]) -> RequestPlan:
        """The request's parameters for these readout settings, by the capability table.

        ``settings["exact"]`` names the settings the experiment depends on (the paper's decoding):
        one the model does not accept is refused unless its value is the neutral 1.0, which the
        vendor applies anyway. Others are dropped and listed in ``RequestPlan.dropped``.
        """
        family, _ = self.family
        max_tokens = int(self.options.get("max_tokens") or settings.get("max_new_tokens", 40))
        thinking, thinks = self._thinking(family, max_tokens)
        exact = set(settings.get("exact") or ())
        effort = self.options.get("reasoning_effort")
        sampling_ok = ((not thinks or family.sampling_with_thinking)
                       and not (family.sampling_needs_effort_none and effort not in (None, "none")))
        in_family = {"temperature": family.temperature and self.options.get("supports_temperature") is not False,
                     "top_p": family.top_p}
        sampling: dict[str, float] = {}
        dropped: dict[str, Any] = {}

        def drop(name: str, value: float, why: str) -> None:
            if name in exact and value != NEUTRAL:
                raise self._refuse(f"{why}; the experiment sets {name}={value}, and leaving it out "
                                   f"would change it")
            dropped[name] = value

        for name in ("temperature", "top_p"):
            value = settings.get(name)
            if value is None:
                continue
            if in_family[name] and sampling_ok:
                sampling[name] = float(value)
            else:
                drop(name, float(value), f"the {family.name} family does not accept {name}"
                     + (" while it thinks" if in_family[name] else ""))
        if len(sampling) == 2 and not family.temperature_with_top_p:
            # One of the two must go: the neutral one changes nothing, else the one not exact.
            name = next((n for n in ("top_p", "temperature") if sampling[n] == NEUTRAL),
                        next((n for n in ("top_p", "temperature") if n not in exact), "top_p"))
            drop(name, sampling.pop(name), f"the {family.name} family does not accept temperature "
                                           f"and top_p together")
        seed = settings.get("seed")
        if seed is not None and not family.seed:
            dropped["seed"] = seed
            seed = None
        return RequestPlan(max_tokens=max_tokens, sampling=sampling,
                           seed=int(seed) if seed is not None else None, thinking=thinking,
                           dropped=dropped)

    # -- requests --------------------------------------------------------------------------
    def _request(self, image: Image.Image | None, prompt: str,
                 plan: RequestPlan) -> tuple[str, dict[str, str], dict[str, Any]]:
        """(url, headers, body) in the provider's wire format."""
        family, _ = self.family
        data = _b64_png(image) if image is not None else None
        headers = {"content-type": "application/json", **self._headers()}
        temperature, top_p = plan.sampling.get("temperature"), plan.sampling.get("top_p")
        if self.provider in OPENAI_FORMAT:
            if self.provider == "azure":
                deployment = urllib.parse.quote(self.model, safe="")
                query = urllib.parse.urlencode({"api-version": self.options["api_version"]})
                url = f"{self.base_url}/openai/deployments/{deployment}/chat/completions?{query}"
            else:
                url = f"{self.base_url}/chat/completions"
            content: list[dict[str, Any]] = [] if data is None else [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]
            body: dict[str, Any] = {"messages": [{"role": "user", "content": [
                *content, {"type": "text", "text": prompt}]}], "model": self.model}
            body[family.budget_param] = plan.max_tokens
            if "effort" in plan.thinking:
                body["reasoning_effort"] = plan.thinking["effort"]
            if plan.seed is not None:
                body["seed"] = plan.seed
            if temperature is not None:
                body["temperature"] = temperature
            if top_p is not None:
                body["top_p"] = top_p
        elif self.provider == "anthropic":
            url = f"{self.base_url}/v1/messages"
            content = [] if data is None else [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]
            body = {"max_tokens": plan.max_tokens, "messages": [{"role": "user", "content": [
                *content, {"type": "text", "text": prompt}]}], "model": self.model}
            if "budget" in plan.thinking:
                body["thinking"] = {"type": "enabled", "budget_tokens": plan.thinking["budget"]}
            elif plan.thinking.get("adaptive"):
                body["thinking"] = {"type": "adaptive"}
            if temperature is not None:
                body["temperature"] = temperature
            if top_p is not None:
                body["top_p"] = top_p
        else:  # google
            url = f"{self.base_url}/v1beta/models/{urllib.parse.quote(self.model, safe='.-_')}:generateContent"
            config: dict[str, Any] = {"maxOutputTokens": plan.max_tokens}
            if temperature is not None:
                config["temperature"] = temperature
            if top_p is not None:
                config["topP"] = top_p
            if plan.seed is not None:
                config["seed"] = plan.seed
            if "budget" in plan.thinking:
                config["thinkingConfig"] = {"thinkingBudget": plan.thinking["budget"]}
            parts: list[dict[str, Any]] = [] if data is None else [
                {"inlineData": {"mimeType": "image/png", "data": data}}]
            body = {"contents": [{"role": "user", "parts": [*parts, {"text": prompt}]}],
                    "generationConfig": config}
        body.update(self.options.get("extra_body") or {})
        return url, headers, body

    def _headers(self) -> dict[str, str]:
        """The user agent and the provider's credential headers (the key read now, never kept)."""
        key = self._key()
        headers = {"user-agent": USER_AGENT}
        if self.provider == "azure":
            headers["api-key"] = key or ""
        elif self.provider in OPENAI_FORMAT:
            if key:
                headers["authorization"] = f"Bearer {key}"
            if self.provider == "openai":
                headers.update({h: os.environ[v].strip() for v, h in OPENAI_ACCOUNT_HEADERS.items()
                                if os.environ.get(v, "").strip()})
        elif self.provider == "anthropic":
            headers["x-api-key"] = key or ""
            headers["anthropic-version"] = self.options["anthropic_version"]
        else:
            headers["x-goog-api-key"] = key or ""
        return headers

    # -- preflight: the key and the model name, asked of the vendor without generating ----------
    def _model_url(self) -> str:
        """The vendor's model lookup: OpenAI and compatible servers ``GET /models/<model>``,
        Anthropic ``GET /v1/models/<model>``, Gemini ``GET /v1beta/models/<model>``; Azure's data
        plane lists models only (``GET /openai/models``), so there the key alone is checked."""
        if self.provider == "azure":
            query = urllib.parse.urlencode({"api-version": self.options["api_version"]})
            return f"{self.base_url}/openai/models?{query}"
        if self.provider in OPENAI_FORMAT:
            return f"{self.base_url}/models/{urllib.parse.quote(self.model, safe='')}"
        if self.provider == "anthropic":
            return f"{self.base_url}/v1/models/{urllib.parse.quote(self.model, safe='')}"
        return f"{self.base_url}/v1beta/models/{urllib.parse.quote(self.model, safe='.-_')}"

    def _get(self, url: str) -> dict[str, Any]:
        """A GET with the retry policy of a generation; raises _Terminal, or _Retryable when the
        retries are spent."""
        attempts = int(self.options["max_retries"]) + 1
        for attempt in range(attempts):
            try:
                return self._send("GET", url, self._headers(), None)
            except _Retryable as e:
                if attempt + 1 == attempts:
                    raise
                self._sleep(self._backoff(attempt, e.retry_after))
        raise AssertionError("unreachable")

    def verify(self) -> None:
        """Preflight: one authenticated request that generates nothing, so a refused key or a model
        name the vendor does not know stops the run in one line before any trial (ModelError)."""
        names = " or ".join(f"${n}" for n in self._key_names()) or "no key"
        where = f"model {self.spec.id!r} ({self.provider}/{self.model})"
        try:
            try:
                self._get(self._model_url())
            except _Terminal as e:
                if e.code != "http_404" or self.provider != "openai-compatible":
                    raise
                # servers that only list their models (vLLM): the name must be among them
                listed = self._get(f"{self.base_url}/models").get("data") or []
                if not any(isinstance(m, dict) and m.get("id") == self.model for m in listed):
                    raise _Terminal("http_404", "not among the served models") from None
        except _Terminal as e:
            if e.code in REFUSED_KEY:
                raise ModelError(f"{where}: the API key in {names} was refused ({e.code}); set a valid "
                                 f"key, or skip this check with --offline") from None
            if e.code == "http_404":
                raise ModelError(f"{where}: the vendor does not know model {self.model!r} ({e.code}); "
                                 f"check the name") from None
            raise ModelError(f"{where}: the credential check failed ({e.code}: "
                             f"{' '.join(e.detail.split())})") from None
        except _Retryable as e:
            raise ModelError(f"{where}: could not reach {self.base_url} to check the key and model "
                             f"({e.code}); skip this check with --offline") from None

    def _scrub(self, text: str) -> str:
        return scrub_secret(text[:4 * DETAIL_CHARS], self._key())[:DETAIL_CHARS]

    @property
    def max_in_flight(self) -> int:
        """The most requests it keeps in flight (its window's ceiling): a battery hands it this many
        trials at once, each a call of its own, and its window decides how many go out."""
        return self._window.ceiling

    def _client(self) -> httpx2.Client:
        with self._http_lock:
            if self._http is None:
                workers = self._window.ceiling
                self._http = httpx2.Client(
                    timeout=httpx2.Timeout(float(self.options["timeout_s"]), connect=CONNECT_TIMEOUT_S),
                    trust_env=True,
                    limits=httpx2.Limits(max_connections=workers, max_keepalive_connections=workers))
            return self._http


    def streams(self, plan: RequestPlan) -> bool:
        """Whether the request goes out streamed: an Anthropic output budget above what it takes in
        one non-streaming response (:func:`anthropic_nonstreaming_limit`)."""
        return self.provider == "anthropic" and plan.max_tokens > anthropic_nonstreaming_limit(self.model)

    def _not_sent(self) -> str:
        """The error detail of a call not sent because the vendor refused an earlier one for money."""
        return f"{self._out_of_money}{VENDOR_SAID}not sent: the vendor refused an earlier call for money"

    def _paced_post(self, url: str, headers: dict[str, str], body: dict[str, Any],
                    stream: bool = False, tokens: int = 0) -> dict[str, Any]:
        """A POST inside the model's in-flight window, which a 429 or 529 shrinks and the vendor's
        rate-limit headers pace (``tokens``: the request's estimate, for a tokens-per-minute limit)."""
        started = self._window.acquire(tokens)
        try:
            if self._out_of_money is not None:  # refused for money while this call waited or backed off
                raise _Terminal("quota", self._not_sent())
            payload = self._send("POST", url, headers, json.dumps(body).encode(), stream,
                                 lambda limits: self._window.observe(started, limits))
        except _Retryable as e:
            self._window.release(started, "pushback" if e.code in PUSHBACK else "failed", e.retry_after)
            raise
        except BaseException:
            self._window.release(started, "failed")
            raise
        self._window.release(started)
        return payload

    def _send(self, method: str, url: str, headers: dict[str, str], content: bytes | None,
              stream: bool = False, observe: Callable[[RateLimits | None], None] | None = None) -> dict[str, Any]:
        """The response body (a streamed one: the message its events build); raises _Retryable or
        _Terminal by the vendor's status and fields. ``observe`` is told the response's rate limits."""
        try:
            if stream:
                with self._client().stream(method, url, content=content, headers=headers) as resp:
                    if observe is not None:
                        observe(rate_limits(resp.headers))
                    if resp.status_code >= 400:
                        resp.read()
                        self._raise_status(resp)
                    return self._streamed(resp.iter_lines())
            resp = self._client().request(method, url, content=content, headers=headers)
            if observe is not None:
                observe(rate_limits(resp.headers))
        except httpx2.TimeoutException as e:
            raise _Retryable("timeout", f"no response within {self.options['timeout_s']} s",
                             billed=not isinstance(e, NOT_SENT)) from None
        except httpx2.TransportError as e:  # refused, reset or dropped mid-response
            raise _Retryable("connection", self._scrub(f"{type(e).__name__}: {e}"),
                             billed=not isinstance(e, NOT_SENT)) from None
        if resp.status_code >= 400:
            self._raise_status(resp)
        try:
            payload = json.loads(resp.content)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _Retryable("malformed_json", self._scrub(resp.content.decode("utf-8", "replace")),
                             billed=True) from None
        if not isinstance(payload, dict):
            raise _Retryable("malformed_json", f"top-level {type(payload).__name__}", billed=True)
        return payload

    def _streamed(self, lines: Iterable[str]) -> dict[str, Any]:
        """The Message an Anthropic event stream builds; an ``error`` event is classified by its
        error type as the status it stands for, a stream cut before ``message_stop`` retried."""
        events = []
        for event, data in sse_events(lines):
            if event in (None, "ping") or not data:
                continue
            try:
                body = json.loads(data)
            except json.JSONDecodeError:
                raise _Retryable("malformed_json", self._scrub(data), billed=True) from None
            if event == "error":
                detail = self._scrub(data)
                if (money := refused_for_money(self.provider, body)) is not None:
                    raise _Terminal("quota", f"{money}{VENDOR_SAID}{detail}")
                kind = (body.get("error") or {}).get("type") if isinstance(body, dict) else None
                status = ANTHROPIC_ERROR_STATUS.get(str(kind), 500)
                if status in RETRY_STATUS or status >= 500:
                    raise _Retryable(f"http_{status}", detail)
                raise _Terminal(f"http_{status}", detail)
            events.append(body)
        try:
            message = anthropic_streamed_message(events)
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise _Retryable("malformed_json", f"unexpected event ({type(e).__name__}: {e})", billed=True) from None
        if message is None:
            raise _Retryable("connection", "the event stream ended before message_stop", billed=True)
        return message

    def _raise_status(self, resp: httpx2.Response) -> None:
        """Raises the _Retryable or _Terminal an error response stands for."""
        detail = self._scrub(resp.text)
        code = f"http_{resp.status_code}"
        try:
            error_body = json.loads(resp.content)
        except (json.JSONDecodeError, UnicodeDecodeError):
            error_body = None
        if resp.status_code in (400, 402, 403, 429) and (
                money := refused_for_money(self.provider, error_body)) is not None:
            raise _Terminal("quota", f"{money}{VENDOR_SAID}{detail}")
        if resp.status_code == 400 and is_bad_key(error_body):
            raise _Terminal("auth", detail)
        should = (resp.headers.get("x-should-retry") or "").strip().lower()
        retry = should == "true" or (should != "false" and (
            resp.status_code in RETRY_STATUS or resp.status_code >= 500))
        if retry:
            raise _Retryable(code, detail, retry_after_s(resp.headers))
        raise _Terminal(code, detail)

    def _read(self, payload: dict[str, Any]) -> tuple[str, dict[str, int], str | None, str]:
        """(text, usage, cut, reasoning) from a provider's response body; ``cut`` is "<truncated|
        refusal|safety>: <vendor's reason>" for an answer cut short; ``reasoning`` the vendor's
        reasoning fields (never part of the answer). Raises _Retryable on a malformed one."""
        cut = None
        reasoning = ""
        try:
            if self.provider in OPENAI_FORMAT:
                choice = payload["choices"][0]
                message = choice["message"]
                content = message.get("content")
                if isinstance(content, list):  # some compatible servers return parts
                    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                text = content or ""
                # OpenAI-compatible reasoning servers (vLLM, DeepSeek, Ollama) put thoughts here
                reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
                finish = choice.get("finish_reason")
                if message.get("refusal"):
                    cut = f"refusal: {message['refusal']}"
                elif finish == "length":
                    cut = "truncated: finish_reason length"
                elif finish == "content_filter":
                    cut = "safety: finish_reason content_filter"
                u = payload.get("usage") or {}
                thinking = (u.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
                completion = u.get("completion_tokens")
                usage = {"input_tokens": u.get("prompt_tokens"), "total_tokens": u.get("total_tokens"),
                         "output_tokens": completion - thinking if isinstance(completion, int) else None,
                         "thinking_tokens": thinking,
                         "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0}
            elif self.provider == "anthropic":
                text = "".join(b.get("text", "") for b in payload["content"] if b.get("type") == "text")
                reasoning = "".join(b.get("thinking", "") for b in payload["content"]
                                    if b.get("type") == "thinking")
                stop = payload.get("stop_reason")
                if stop in ("max_tokens", "model_context_window_exceeded"):
                    cut = f"truncated: stop_reason {stop}"
                elif stop == "refusal":
                    cut = "refusal: stop_reason refusal"
                u = payload.get("usage") or {}
                # Anthropic bills thinking inside output_tokens, split out in
                # output_tokens_details.thinking_tokens where it reports one; its input_tokens
                # leave out cache reads and writes, gestalt's include them (as OpenAI's).
                cached = u.get("cache_read_input_tokens") or 0
                fresh, out = u.get("input_tokens"), u.get("output_tokens")
                usage = {"input_tokens": fresh + cached + (u.get("cache_creation_input_tokens") or 0)
                         if isinstance(fresh, int) else None, "output_tokens": out, "cached_tokens": cached}
                thought = (u.get("output_tokens_details") or {}).get("thinking_tokens")
                if isinstance(thought, int) and isinstance(out, int):
                    usage.update(output_tokens=out - thought, thinking_tokens=thought)
                elif not any(b.get("type") in ("thinking", "redacted_thinking") for b in payload["content"]):
                    usage["thinking_tokens"] = 0
            else:
                u = payload.get("usageMetadata") or {}
                usage = {"input_tokens": u.get("promptTokenCount"),
                         "output_tokens": u.get("candidatesTokenCount") or 0,
                         "thinking_tokens": u.get("thoughtsTokenCount") or 0,
                         "cached_tokens": u.get("cachedContentTokenCount") or 0,
                         "total_tokens": u.get("totalTokenCount")}
                candidates = payload.get("candidates")
                if not candidates:
                    reason = (payload.get("promptFeedback") or {}).get("blockReason", "no candidates")
                    return "", {}, f"safety: prompt blocked ({reason})", ""
                parts = (candidates[0].get("content") or {}).get("parts") or []
                text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
                reasoning = "".join(p.get("text", "") for p in parts if p.get("thought"))
                finish = candidates[0].get("finishReason")
                if finish == "MAX_TOKENS":
                    cut = "truncated: finishReason MAX_TOKENS"
                elif finish in GOOGLE_SAFETY:
                    cut = f"safety: finishReason {finish}"
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise _Retryable("malformed_json", f"unexpected response shape ({type(e).__name__}: {e})",
                             billed=True) from None
        if not isinstance(text, str) or not isinstance(reasoning, str):
            raise _Retryable("malformed_json", f"answer text is a {type(text).__name__}", billed=True)
        return text, {k: int(v) for k, v in usage.items() if isinstance(v, (int, float))}, cut, reasoning

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        cap = float(self.options["backoff_cap_s"])
        if retry_after is not None:
            return min(cap, max(0.0, retry_after))
        delay = min(cap, float(self.options["backoff_base_s"]) * 2 ** attempt)
        return delay * (0.5 + 0.5 * self._rng.random())  # jitter spreads synchronized retries

    # -- generate --------------------------------------------------------------------------
    def answer(self, payload: dict[str, Any], plan: RequestPlan, t0: float) -> Generation:
        """The Generation of a vendor's response body (raises _Retryable on a malformed one)."""
        text, usage, cut, reasoning = self._read(payload)
        # an answer may echo what it was sent, the key included: stored scrubbed like errors
        key = self._key()
        extras = {"reasoning": scrub_secret(reasoning, key)} if reasoning else {}
        if (unknown := self.unknown_reason()) is not None:
            extras["capabilities"] = unknown
        return Generation(text=scrub_secret(text, key), latency_s=time.perf_counter() - t0,
                          usage=usage, error=self._scrub(cut) if cut else None,
                          settings_dropped=plan.dropped, extras=extras)

    def generate(self, image: Image.Image | None, prompt: str, settings: dict[str, Any]) -> Generation:
        t0 = time.perf_counter()
        try:
            plan = self.plan(settings)
            url, headers, body = self._request(image, prompt, plan)
        except ModelError as e:
            return Generation(text=None, error=f"refused: {self._scrub(str(e))}")
        except Exception as e:  # noqa: BLE001 - a request that cannot be built is one null trial
            return Generation(text=None, latency_s=time.perf_counter() - t0,
                              error=f"request: {type(e).__name__}: {self._scrub(str(e))}")
        if self._out_of_money is not None:
            return Generation(text=None, settings_dropped=plan.dropped, error=f"quota: {self._not_sent()}")
        if len(self._refused) >= REFUSED_KEY_BREAKER:
            return Generation(text=None, settings_dropped=plan.dropped,
                              error=f"{self._refused[-1]}: not sent: the key was refused {len(self._refused)} "
                                    f"times in a row")
        tokens_in = estimate_input_tokens(self.provider, self.capability_model, image.size if image else None,
                                          prompt)
        billed: list[_Retryable] = []  # attempts the vendor may have billed without reporting usage
        gen = self._attempts(url, headers, body, plan, tokens_in, billed)
        if billed:
            gen.usage.update(unreported_usage(len(billed), tokens_in, plan.max_tokens))
        return gen

    def _attempts(self, url: str, headers: dict[str, str], body: dict[str, Any], plan: RequestPlan,
                  tokens_in: int, billed: list[_Retryable]) -> Generation:
        """The call with its retries; each failed attempt the vendor may have billed goes to ``billed``."""
        # what a tokens-per-minute limit counts: the input, and the output budget (OpenAI counts it)
        tokens = tokens_in + plan.max_tokens
        stream = self.streams(plan)
        if stream:
            body = {**body, "stream": True}
        attempts = int(self.options["max_retries"]) + 1
        last, latency = _Retryable("unexpected"), 0.0
        for attempt in range(attempts):
            t0 = time.perf_counter()
            try:
                gen = self.answer(self._paced_post(url, headers, body, stream, tokens), plan, t0)
                self._refused.clear()
                return gen
            except _Terminal as e:
                if e.code in REFUSED_KEY:
                    self._refused.append(e.code)
                if e.code == "quota" and self._out_of_money is None:
                    self._out_of_money = e.detail.split(VENDOR_SAID, 1)[0]
                    log.warning("%s: %s; no further call is sent", self.spec.id, self._out_of_money)
                log.warning("%s: %s, not retried", self.spec.id, e.code)
                return Generation(text=None, latency_s=time.perf_counter() - t0,
                                  error=f"{e.code}: {e.detail}", settings_dropped=plan.dropped)
            except _Retryable as e:
                last, latency = e, time.perf_counter() - t0
                if e.billed:
                    billed.append(e)
            except Exception as e:  # noqa: BLE001 - a failed call must stay a null trial, never abort
                log.warning("%s: unexpected %s, not retried", self.spec.id, type(e).__name__)
                return Generation(text=None, latency_s=time.perf_counter() - t0,
                                  error=f"unexpected: {type(e).__name__}: {self._scrub(str(e))}",
                                  settings_dropped=plan.dropped)
            if attempt + 1 < attempts:
                wait = self._backoff(attempt, last.retry_after)
                log.warning("%s: %s (attempt %d/%d), retrying in %.2f s", self.spec.id, last.code,
                            attempt + 1, attempts, wait)
                self._sleep(wait)
        log.warning("%s: %s after %d attempts, giving up", self.spec.id, last.code, attempts)
        return Generation(text=None, latency_s=latency, settings_dropped=plan.dropped,
                          error=f"{last.code}: {last.detail} (after {attempts} attempts)")

    def generate_many(self, images: Sequence[Image.Image | None], prompts: list[str],
                      settings: dict[str, Any]) -> list[Generation]:
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
        workers = max(1, min(self._window.ceiling, len(images)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda ip: self.generate(ip[0], ip[1], settings), zip(images, prompts)))
