"""``api:<provider>/<model>``: closed and served models over HTTP (httpx2, one pooled client).

Why gestalt builds the requests itself rather than calling the vendors' SDKs: docs/api-transport.md.

Providers and wire formats:

- ``openai``: Chat Completions, ``POST {base_url}/chat/completions`` (default base
  ``https://api.openai.com/v1``), ``Authorization: Bearer``; key ``OPENAI_API_KEY``.
- ``azure``: Azure OpenAI, ``azure/<deployment>``: ``POST {base_url}/openai/deployments/<deployment>/
  chat/completions?api-version=<options.api_version>`` with an ``api-key`` header; key
  ``AZURE_OPENAI_API_KEY``; ``options.served_model`` names the OpenAI model the deployment serves (its
  capability row), else the deployment name is used.
- ``openai-compatible``: the same format at ``options.base_url`` (vLLM, Ollama, LM Studio); a key
  only if ``options.api_key_env`` names one.
- ``anthropic``: Messages, ``POST {base_url}/v1/messages`` (default ``https://api.anthropic.com``),
  ``x-api-key`` + ``anthropic-version``; key ``ANTHROPIC_API_KEY``.
- ``google``: Gemini ``POST {base_url}/v1beta/models/{model}:generateContent`` (default
  ``https://generativelanguage.googleapis.com``), ``x-goog-api-key`` (a header, so the key never
  sits in a URL); key ``GEMINI_API_KEY``, else ``GOOGLE_API_KEY``.

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
and ``x-should-retry`` overrides the status rule, as the vendors' SDKs do. A quota or spend-cap 429
(``insufficient_quota``, a per-day quota) is not retried. Other 4xx and any unexpected error fail
at once. A terminal failure returns ``Generation(text=None, error="<code>: <detail>")``, e.g.
``http_500: ...``, ``timeout: ...``, ``quota: ...``; the readouts record it as
``null:api_error:<code>``. Timeout 600 s per attempt (the SDKs' default; reasoning calls are slow).

Secrets: keys are read from the environment at request time (surrounding whitespace stripped) and
never stored on the adapter; every error text is scrubbed of the key in any representation
(:func:`scrub_secret`) before it is stored or logged.

``latency_s`` is the wall time of the attempt that succeeded; ``usage`` is normalised across vendors
to ``input_tokens``, ``output_tokens`` (the answer, thinking excluded), ``thinking_tokens`` (where
the vendor reports it: OpenAI, Gemini) and ``total_tokens``. ``generate_many`` runs requests on a
thread pool of ``options.concurrency``.
"""

from __future__ import annotations

import base64
import email.utils
import json
import logging
import math
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx2
from PIL import Image

from .. import __version__
from ..stimuli.base import png_bytes
from .api_capabilities import MIN_OUTPUT_WHEN_THINKING, Family, family_of
from .base import Generation, ModelAdapter, ModelError, ModelSpec

log = logging.getLogger(__name__)

ADAPTER_VERSION = "1"
USER_AGENT = f"gestalt-harness/{__version__} httpx2/{httpx2.__version__}"
PROVIDERS: dict[str, dict[str, Any]] = {
    "openai": {"base_url": "https://api.openai.com/v1", "keys": ("OPENAI_API_KEY",)},
    "azure": {"base_url": None, "keys": ("AZURE_OPENAI_API_KEY",)},
    "openai-compatible": {"base_url": None, "keys": ()},
    "anthropic": {"base_url": "https://api.anthropic.com", "keys": ("ANTHROPIC_API_KEY",)},
    "google": {"base_url": "https://generativelanguage.googleapis.com",
               "keys": ("GEMINI_API_KEY", "GOOGLE_API_KEY")},
}
OPENAI_FORMAT = ("openai", "azure", "openai-compatible")
# Options that change an answer (fingerprint) and runtime knobs that do not.
ANSWER_OPTIONS = {"base_url", "max_tokens", "supports_temperature", "thinking_budget", "adaptive_thinking",
                  "reasoning_effort", "anthropic_version", "extra_body", "api_version", "served_model"}
# ``generation`` holds the recipe's generation settings, which reach the model through the readout.
RUNTIME_OPTIONS = {"api_key_env", "timeout_s", "max_retries", "backoff_base_s", "backoff_cap_s",
                   "concurrency", "generation"}
DEFAULTS = {"timeout_s": 600.0, "max_retries": 6, "backoff_base_s": 1.0, "backoff_cap_s": 60.0,
            "concurrency": 4, "anthropic_version": "2023-06-01"}
RETRY_STATUS = {408, 409, 429}  # and every 5xx
DETAIL_CHARS = 300
# A 429 that waiting does not cure: OpenAI's spent credit, a per-day quota.
QUOTA_MARKERS = ("insufficient_quota", "billing", "PerDay", "spend limit", "credit balance")
# Gemini finishReasons that withhold an answer on content grounds (google.genai.types.FinishReason).
GOOGLE_SAFETY = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                 "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR"}
NEUTRAL = 1.0  # temperature and top_p that leave the model's distribution as it is


class _Retryable(Exception):
    def __init__(self, code: str, detail: str = "", retry_after: float | None = None):
        super().__init__(code)
        self.code, self.detail, self.retry_after = code, detail, retry_after


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

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.provider, self.model = split_name(spec.name)
        self.options = {**DEFAULTS, **spec.options}
        self._rng = random.Random()
        self._sleep: Callable[[float], None] = time.sleep
        self._http: httpx2.Client | None = None
        self._http_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"APIModel({self.spec.id!r}, {self.provider}/{self.model})"

    # -- identity --------------------------------------------------------------------------
    def check(self) -> None:
        s = self.spec
        if self.provider not in PROVIDERS or not self.model:
            raise ModelError(f"model {s.id!r}: api name {s.name!r} must be <provider>/<model> with "
                             f"provider one of {sorted(PROVIDERS)}")
        if "api_key" in s.options:
            raise ModelError(f"model {s.id!r}: API keys are read only from the environment; name "
                             f"the variable with options.api_key_env instead of options.api_key")
        unknown = set(s.options) - ANSWER_OPTIONS - RUNTIME_OPTIONS
        if unknown:
            raise ModelError(f"model {s.id!r}: unknown api option(s) {sorted(unknown)}; known: "
                             f"{sorted(ANSWER_OPTIONS | RUNTIME_OPTIONS)}")
        if self.base_url is None:
            raise ModelError(f"model {s.id!r}: provider {self.provider} needs options.base_url")
        if self.provider == "azure" and not self.options.get("api_version"):
            raise ModelError(f"model {s.id!r}: Azure OpenAI needs options.api_version "
                             f"(e.g. 2024-10-21)")
        if int(self.options["concurrency"]) < 1:
            raise ModelError(f"model {s.id!r}: options.concurrency must be >= 1")
        names = self._key_names()
        if names and self._key() is None:
            raise ModelError(f"model {s.id!r}: no API key; set the environment variable "
                             f"{' or '.join(names)}")
        family, known = self.family
        if not known:
            log.warning("model %s: %s/%s is not in the capability table; using the %s defaults (%s)",
                        s.id, self.provider, self.capability_model, self.provider, family.name)

    @property
    def base_url(self) -> str | None:
        url = self.options.get("base_url") or PROVIDERS.get(self.provider, {}).get("base_url")
        return url.rstrip("/") if url else None

    @property
    def capability_model(self) -> str:
        """The model name the capability table is read with (Azure: the model a deployment serves)."""
        return str(self.options.get("served_model") or self.model)

    @property
    def family(self) -> tuple[Family, bool]:
        return family_of(self.provider, self.capability_model)

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
        key = self._key()
        headers = {"content-type": "application/json", "user-agent": USER_AGENT}
        temperature, top_p = plan.sampling.get("temperature"), plan.sampling.get("top_p")
        if self.provider in OPENAI_FORMAT:
            if self.provider == "azure":
                deployment = urllib.parse.quote(self.model, safe="")
                query = urllib.parse.urlencode({"api-version": self.options["api_version"]})
                url = f"{self.base_url}/openai/deployments/{deployment}/chat/completions?{query}"
                headers["api-key"] = key or ""
            else:
                url = f"{self.base_url}/chat/completions"
                if key:
                    headers["authorization"] = f"Bearer {key}"
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
            headers["x-api-key"] = key or ""
            headers["anthropic-version"] = self.options["anthropic_version"]
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
            headers["x-goog-api-key"] = key or ""
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

    def _scrub(self, text: str) -> str:
        return scrub_secret(text[:4 * DETAIL_CHARS], self._key())[:DETAIL_CHARS]

    def _client(self) -> httpx2.Client:
        with self._http_lock:
            if self._http is None:
                workers = int(self.options["concurrency"])
                self._http = httpx2.Client(
                    timeout=httpx2.Timeout(float(self.options["timeout_s"])), trust_env=True,
                    limits=httpx2.Limits(max_connections=workers, max_keepalive_connections=workers))
            return self._http

    def _post(self, url: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = self._client().post(url, content=json.dumps(body).encode(), headers=headers)
        except httpx2.TimeoutException:
            raise _Retryable("timeout", f"no response within {self.options['timeout_s']} s") from None
        except httpx2.TransportError as e:  # refused, reset or dropped mid-response
            raise _Retryable("connection", self._scrub(f"{type(e).__name__}: {e}")) from None
        if resp.status_code >= 400:
            detail = self._scrub(resp.text)
            code = f"http_{resp.status_code}"
            if resp.status_code == 429 and any(m in resp.text for m in QUOTA_MARKERS):
                raise _Terminal("quota", detail)
            should = (resp.headers.get("x-should-retry") or "").strip().lower()
            retry = should == "true" or (should != "false" and (
                resp.status_code in RETRY_STATUS or resp.status_code >= 500))
            if retry:
                raise _Retryable(code, detail, retry_after_s(resp.headers))
            raise _Terminal(code, detail)
        try:
            payload = json.loads(resp.content)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _Retryable("malformed_json", self._scrub(resp.content.decode("utf-8", "replace"))) from None
        if not isinstance(payload, dict):
            raise _Retryable("malformed_json", f"top-level {type(payload).__name__}")
        return payload

    def _read(self, payload: dict[str, Any]) -> tuple[str, dict[str, int], str | None]:
        """(text, usage, cut) from a provider's response body; ``cut`` is "<truncated|refusal|
        safety>: <vendor's reason>" for an answer cut short. Raises _Retryable on a malformed one."""
        cut = None
        try:
            if self.provider in OPENAI_FORMAT:
                choice = payload["choices"][0]
                message = choice["message"]
                content = message.get("content")
                if isinstance(content, list):  # some compatible servers return parts
                    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                text = content or ""
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
                         "thinking_tokens": thinking}
            elif self.provider == "anthropic":
                text = "".join(b.get("text", "") for b in payload["content"] if b.get("type") == "text")
                stop = payload.get("stop_reason")
                if stop in ("max_tokens", "model_context_window_exceeded"):
                    cut = f"truncated: stop_reason {stop}"
                elif stop == "refusal":
                    cut = "refusal: stop_reason refusal"
                u = payload.get("usage") or {}
                # Anthropic bills thinking inside output_tokens and reports no split.
                usage = {"input_tokens": u.get("input_tokens"), "output_tokens": u.get("output_tokens")}
                if not any(b.get("type") in ("thinking", "redacted_thinking") for b in payload["content"]):
                    usage["thinking_tokens"] = 0
            else:
                u = payload.get("usageMetadata") or {}
                usage = {"input_tokens": u.get("promptTokenCount"),
                         "output_tokens": u.get("candidatesTokenCount") or 0,
                         "thinking_tokens": u.get("thoughtsTokenCount") or 0,
                         "total_tokens": u.get("totalTokenCount")}
                candidates = payload.get("candidates")
                if not candidates:
                    reason = (payload.get("promptFeedback") or {}).get("blockReason", "no candidates")
                    return "", {}, f"safety: prompt blocked ({reason})"
                parts = (candidates[0].get("content") or {}).get("parts") or []
                text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
                finish = candidates[0].get("finishReason")
                if finish == "MAX_TOKENS":
                    cut = "truncated: finishReason MAX_TOKENS"
                elif finish in GOOGLE_SAFETY:
                    cut = f"safety: finishReason {finish}"
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise _Retryable("malformed_json", f"unexpected response shape ({type(e).__name__}: {e})") from None
        if not isinstance(text, str):
            raise _Retryable("malformed_json", f"answer text is a {type(text).__name__}")
        return text, {k: int(v) for k, v in usage.items() if isinstance(v, (int, float))}, cut

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        cap = float(self.options["backoff_cap_s"])
        if retry_after is not None:
            return min(cap, max(0.0, retry_after))
        delay = min(cap, float(self.options["backoff_base_s"]) * 2 ** attempt)
        return delay * (0.5 + 0.5 * self._rng.random())  # jitter spreads synchronized retries

    # -- generate --------------------------------------------------------------------------
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
        attempts = int(self.options["max_retries"]) + 1
        last, latency = _Retryable("unexpected"), 0.0
        for attempt in range(attempts):
            t0 = time.perf_counter()
            try:
                text, usage, cut = self._read(self._post(url, headers, body))
                return Generation(text=text, latency_s=time.perf_counter() - t0, usage=usage,
                                  error=self._scrub(cut) if cut else None, settings_dropped=plan.dropped)
            except _Terminal as e:
                log.warning("%s: %s, not retried", self.spec.id, e.code)
                return Generation(text=None, latency_s=time.perf_counter() - t0,
                                  error=f"{e.code}: {e.detail}", settings_dropped=plan.dropped)
            except _Retryable as e:
                last, latency = e, time.perf_counter() - t0
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
        workers = max(1, min(int(self.options["concurrency"]), len(images)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda ip: self.generate(ip[0], ip[1], settings), zip(images, prompts)))
