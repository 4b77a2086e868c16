"""``api:<provider>/<model>``: closed and served models over HTTP, standard library only.

Providers and wire formats (no vendor SDKs):

- ``openai``: Chat Completions, ``POST {base_url}/chat/completions`` (default base
  ``https://api.openai.com/v1``), ``Authorization: Bearer``; key ``OPENAI_API_KEY``.
- ``openai-compatible``: the same format at ``options.base_url`` (vLLM, Ollama, LM Studio); a key
  only if ``options.api_key_env`` names one.
- ``anthropic``: Messages, ``POST {base_url}/v1/messages`` (default ``https://api.anthropic.com``),
  ``x-api-key`` + ``anthropic-version``; key ``ANTHROPIC_API_KEY``.
- ``google``: Gemini ``POST {base_url}/v1beta/models/{model}:generateContent`` (default
  ``https://generativelanguage.googleapis.com``), ``x-goog-api-key`` (a header, so the key never
  sits in a URL); key ``GEMINI_API_KEY``, else ``GOOGLE_API_KEY``.

Every request is one user turn holding the image (base64 PNG, the exact bytes of
:func:`harness.stimuli.base.png_bytes`) *before* the prompt text.

Decoding: temperature from the readout settings (0 for the batteries) where the model accepts one;
it is omitted for OpenAI reasoning models (o1/o3/o4, gpt-5: they reject it) and with Anthropic
extended thinking (which requires the default), or when ``options.supports_temperature`` is false.
Output budget: ``options.max_tokens`` (size it for thinking tiers), else the readout's
``max_new_tokens``. ``options.thinking_budget`` enables Anthropic thinking / sets Gemini's
``thinkingBudget``; ``options.reasoning_effort`` is passed to OpenAI.

Failures never leave the battery: 429, 408, 5xx (incl. Anthropic's 529), timeouts, dropped
connections and malformed bodies are retried with capped exponential backoff and jitter
(``Retry-After`` honoured up to the cap); other 4xx, a Gemini reply with no candidates (blocked
prompt) and any unexpected error fail at once. A terminal failure returns
``Generation(text=None, error="<code>: <detail>")``, e.g. ``http_500: ...``, ``timeout: ...``,
``unexpected: ...``; the prompt readouts record it as ``null:api_error:<code>``.

Secrets: keys are read from the environment at request time and never stored on the adapter; they
appear in no fingerprint, model_version, repr, log message or error text (vendor error bodies are
scrubbed of the key before use).

``latency_s`` is the wall time of the attempt that succeeded; ``usage`` is normalised to
``input_tokens``, ``output_tokens``, and where the vendor reports them ``reasoning_tokens`` and
``total_tokens``. ``generate_many`` runs requests on a thread pool of ``options.concurrency``.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import random
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from collections.abc import Callable

from PIL import Image

from ..stimuli.base import png_bytes
from .base import Generation, ModelError, ModelSpec

log = logging.getLogger(__name__)

ADAPTER_VERSION = "1"
PROVIDERS = {
    "openai": {"base_url": "https://api.openai.com/v1", "keys": ("OPENAI_API_KEY",)},
    "openai-compatible": {"base_url": None, "keys": ()},
    "anthropic": {"base_url": "https://api.anthropic.com", "keys": ("ANTHROPIC_API_KEY",)},
    "google": {"base_url": "https://generativelanguage.googleapis.com",
               "keys": ("GEMINI_API_KEY", "GOOGLE_API_KEY")},
}
# Options that change an answer (fingerprint) and runtime knobs that do not.
ANSWER_OPTIONS = {"base_url", "max_tokens", "supports_temperature", "thinking_budget",
                  "reasoning_effort", "anthropic_version", "extra_body"}
# ``generation`` holds the recipe's generation settings, which reach the model through the readout.
RUNTIME_OPTIONS = {"api_key_env", "timeout_s", "max_retries", "backoff_base_s", "backoff_cap_s",
                   "concurrency", "generation"}
DEFAULTS = {"timeout_s": 120.0, "max_retries": 6, "backoff_base_s": 1.0, "backoff_cap_s": 60.0,
            "concurrency": 4, "anthropic_version": "2023-06-01"}
RETRY_STATUS = {408, 429, 500, 502, 503, 504, 529}
OPENAI_REASONING = re.compile(r"^(o\d|gpt-5)")
DETAIL_CHARS = 300


class _Retryable(Exception):
    def __init__(self, code: str, detail: str = "", retry_after: float | None = None):
        super().__init__(code)
        self.code, self.detail, self.retry_after = code, detail, retry_after


class _Terminal(Exception):
    def __init__(self, code: str, detail: str = ""):
        super().__init__(code)
        self.code, self.detail = code, detail


def split_name(name: str) -> tuple[str, str]:
    """``provider/model`` -> (provider, model); the model part may itself contain slashes."""
    provider, _, model = name.partition("/")
    return provider, model


def _b64_png(image: Image.Image) -> str:
    return base64.b64encode(png_bytes(image)).decode("ascii")


class APIModel:
    capabilities = frozenset({"generate"})

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.provider, self.model = split_name(spec.name)
        self.options = {**DEFAULTS, **spec.options}
        self._rng = random.Random()
        self._sleep: Callable[[float], None] = time.sleep

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
        if int(self.options["concurrency"]) < 1:
            raise ModelError(f"model {s.id!r}: options.concurrency must be >= 1")
        names = self._key_names()
        if names and self._key() is None:
            raise ModelError(f"model {s.id!r}: no API key; set the environment variable "
                             f"{' or '.join(names)}")

    @property
    def base_url(self) -> str | None:
        url = self.options.get("base_url") or PROVIDERS.get(self.provider, {}).get("base_url")
        return url.rstrip("/") if url else None

    def _key_names(self) -> tuple[str, ...]:
        if self.options.get("api_key_env"):
            return (self.options["api_key_env"],)
        return PROVIDERS.get(self.provider, {}).get("keys", ())

    def _key(self) -> str | None:
        for name in self._key_names():
            if os.environ.get(name):
                return os.environ[name]
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

    # -- requests --------------------------------------------------------------------------
    def _temperature(self, settings: dict[str, Any]) -> float | None:
        supported = self.options.get("supports_temperature")
        if supported is None:
            supported = not (
                (self.provider == "openai" and OPENAI_REASONING.match(self.model))
                or (self.provider == "anthropic" and self.options.get("thinking_budget")))
        if not supported or settings.get("temperature") is None:
            return None
        return float(settings["temperature"])

    def _request(self, image: Image.Image, prompt: str,
                 settings: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
        """(url, headers, body) in the provider's wire format."""
        max_tokens = int(self.options.get("max_tokens") or settings.get("max_new_tokens", 40))
        temperature = self._temperature(settings)
        top_p = settings.get("top_p")
        data = _b64_png(image)
        key = self._key()
        headers = {"content-type": "application/json"}
        if self.provider in ("openai", "openai-compatible"):
            url = f"{self.base_url}/chat/completions"
            if key:
                headers["authorization"] = f"Bearer {key}"
            body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
                {"type": "text", "text": prompt}]}]}
            # OpenAI itself takes max_completion_tokens (max_tokens is refused by reasoning models);
            # compatible servers reliably understand max_tokens.
            body["max_completion_tokens" if self.provider == "openai" else "max_tokens"] = max_tokens
            if self.options.get("reasoning_effort"):
                body["reasoning_effort"] = self.options["reasoning_effort"]
            if temperature is not None:
                body["temperature"] = temperature
            if top_p is not None:
                body["top_p"] = top_p
        elif self.provider == "anthropic":
            url = f"{self.base_url}/v1/messages"
            headers["x-api-key"] = key or ""
            headers["anthropic-version"] = self.options["anthropic_version"]
            body = {"model": self.model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                {"type": "text", "text": prompt}]}]}
            if self.options.get("thinking_budget"):
                body["thinking"] = {"type": "enabled", "budget_tokens": int(self.options["thinking_budget"])}
            if temperature is not None:
                body["temperature"] = temperature
            if top_p is not None:
                body["top_p"] = top_p
        else:  # google
            url = f"{self.base_url}/v1beta/models/{urllib.parse.quote(self.model, safe='.-_')}:generateContent"
            headers["x-goog-api-key"] = key or ""
            config: dict[str, Any] = {"maxOutputTokens": max_tokens}
            if temperature is not None:
                config["temperature"] = temperature
            if top_p is not None:
                config["topP"] = top_p
            if self.options.get("thinking_budget") is not None:
                config["thinkingConfig"] = {"thinkingBudget": int(self.options["thinking_budget"])}
            body = {"contents": [{"role": "user", "parts": [
                {"inlineData": {"mimeType": "image/png", "data": data}}, {"text": prompt}]}],
                "generationConfig": config}
        body.update(self.options.get("extra_body") or {})
        return url, headers, body

    def _scrub(self, text: str) -> str:
        key = self._key()
        if key:
            text = text.replace(key, "[redacted]")
        return text[:DETAIL_CHARS]

    def _post(self, url: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=float(self.options["timeout_s"])) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            try:
                detail = self._scrub(e.read().decode("utf-8", "replace"))
            except (OSError, http.client.HTTPException):
                detail = ""
            if e.code in RETRY_STATUS:
                retry_after = e.headers.get("retry-after")
                try:
                    wait = float(retry_after) if retry_after else None
                except ValueError:
                    wait = None
                raise _Retryable(f"http_{e.code}", detail, wait) from None
            raise _Terminal(f"http_{e.code}", detail) from None
        except TimeoutError as e:
            raise _Retryable("timeout", f"no response within {self.options['timeout_s']} s") from e
        except urllib.error.URLError as e:
            if isinstance(e.reason, (TimeoutError, socket.timeout)):
                raise _Retryable("timeout", f"no response within {self.options['timeout_s']} s") from None
            raise _Retryable("connection", self._scrub(str(e.reason))) from None
        except (OSError, http.client.HTTPException) as e:  # reset or dropped mid-response
            raise _Retryable("connection", self._scrub(type(e).__name__)) from None
        try:
            payload = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _Retryable("malformed_json", self._scrub(raw.decode("utf-8", "replace"))) from None
        if not isinstance(payload, dict):
            raise _Retryable("malformed_json", f"top-level {type(payload).__name__}")
        return payload

    def _read(self, payload: dict[str, Any]) -> tuple[str, dict[str, int]]:
        """(text, usage) from a provider's response body; raises _Retryable on a malformed one."""
        try:
            if self.provider in ("openai", "openai-compatible"):
                message = payload["choices"][0]["message"]
                content = message.get("content")
                if isinstance(content, list):  # some compatible servers return parts
                    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                text = content if content else (message.get("refusal") or "")
                u = payload.get("usage") or {}
                usage = {"input_tokens": u.get("prompt_tokens"), "output_tokens": u.get("completion_tokens"),
                         "total_tokens": u.get("total_tokens"),
                         "reasoning_tokens": (u.get("completion_tokens_details") or {}).get("reasoning_tokens")}
            elif self.provider == "anthropic":
                text = "".join(b.get("text", "") for b in payload["content"] if b.get("type") == "text")
                u = payload.get("usage") or {}
                usage = {"input_tokens": u.get("input_tokens"), "output_tokens": u.get("output_tokens")}
            else:
                candidates = payload.get("candidates")
                if not candidates:
                    reason = (payload.get("promptFeedback") or {}).get("blockReason", "no candidates")
                    raise _Terminal("no_candidates", str(reason))
                parts = (candidates[0].get("content") or {}).get("parts") or []
                text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
                u = payload.get("usageMetadata") or {}
                usage = {"input_tokens": u.get("promptTokenCount"),
                         "output_tokens": u.get("candidatesTokenCount"),
                         "reasoning_tokens": u.get("thoughtsTokenCount"),
                         "total_tokens": u.get("totalTokenCount")}
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise _Retryable("malformed_json", f"unexpected response shape ({type(e).__name__}: {e})") from None
        if not isinstance(text, str):
            raise _Retryable("malformed_json", f"answer text is a {type(text).__name__}")
        return text, {k: int(v) for k, v in usage.items() if isinstance(v, (int, float))}

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        cap = float(self.options["backoff_cap_s"])
        if retry_after is not None:
            return min(cap, retry_after)
        delay = min(cap, float(self.options["backoff_base_s"]) * 2 ** attempt)
        return delay * (0.5 + 0.5 * self._rng.random())  # jitter spreads synchronized retries

    # -- generate --------------------------------------------------------------------------
    def generate(self, image: Image.Image, prompt: str, settings: dict[str, Any]) -> Generation:
        url, headers, body = self._request(image, prompt, settings)
        attempts = int(self.options["max_retries"]) + 1
        for attempt in range(attempts):
            t0 = time.perf_counter()
            try:
                text, usage = self._read(self._post(url, headers, body))
                return Generation(text=text, latency_s=time.perf_counter() - t0, usage=usage)
            except _Terminal as e:
                log.warning("%s: %s, not retried", self.spec.id, e.code)
                return Generation(text=None, latency_s=time.perf_counter() - t0,
                                  error=f"{e.code}: {e.detail}")
            except _Retryable as e:
                last, latency = e, time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001 - a failed call must stay a null trial, never abort
                log.warning("%s: unexpected %s, not retried", self.spec.id, type(e).__name__)
                return Generation(text=None, latency_s=time.perf_counter() - t0,
                                  error=f"unexpected: {type(e).__name__}: {self._scrub(str(e))}")
            if attempt + 1 < attempts:
                wait = self._backoff(attempt, last.retry_after)
                log.warning("%s: %s (attempt %d/%d), retrying in %.2f s", self.spec.id, last.code,
                            attempt + 1, attempts, wait)
                self._sleep(wait)
        log.warning("%s: %s after %d attempts, giving up", self.spec.id, last.code, attempts)
        return Generation(text=None, latency_s=latency,
                          error=f"{last.code}: {last.detail} (after {attempts} attempts)")

    def generate_many(self, images: list[Image.Image], prompts: list[str],
                      settings: dict[str, Any]) -> list[Generation]:
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
        workers = max(1, min(int(self.options["concurrency"]), len(images)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda ip: self.generate(ip[0], ip[1], settings), zip(images, prompts)))
