"""What the API models share whatever the vendor: one pooled ``httpx2`` client per model, the
in-flight window, the retry policy, and how a failed call is told apart (sent again, or final).

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

Requests in flight per model (:mod:`harness.models.api_concurrency`): ``options.concurrency`` (4)
at the start, grown while the vendor answers up to ``options.max_concurrency`` (32 when neither is
set; ``concurrency`` alone stays fixed), cut on a 429 or 529, and held for its retry-after.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpx2

from . import api_anthropic, api_google, api_openai
from .api_capabilities import RequestPlan
from .api_concurrency import AdaptiveConcurrency, RateLimits, rate_limits
from .api_secrets import scrub_secret
from .base import Generation, ModelAdapter, ModelSpec

# the API model's lines (retries, calls given up): one logger to quiet, whichever module writes them
log = logging.getLogger(f"{__package__}.api")

CONNECT_TIMEOUT_S = 5.0  # the SDKs' (openai and anthropic DEFAULT_TIMEOUT): a dead host fails fast
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
# so each is a failed call a rerun sends again, never an answer. Each vendor's module names them by
# its fields (``money``); what gestalt says of such a call comes before the vendor's own words,
# apart by this.
VENDOR_SAID = " | "


class Retryable(Exception):
    """A failed attempt to retry; ``billed``: it reached the vendor, which may have answered and
    billed it though no usage came back (a read timeout, a cut response or stream, an unreadable 200)."""

    def __init__(self, code: str, detail: str = "", retry_after: float | None = None, billed: bool = False):
        super().__init__(code)
        self.code, self.detail, self.retry_after, self.billed = code, detail, retry_after, billed


class Terminal(Exception):
    def __init__(self, code: str, detail: str = ""):
        super().__init__(code)
        self.code, self.detail = code, detail


def refused_for_money(provider: str, body: Any) -> str | None:
    """What a vendor's error body says of money run out, as "<provider> refused the call: <what>;
    <what to do>", or None for any other error (a rate limit among them)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    money = {"anthropic": api_anthropic.money, "google": api_google.money}.get(provider, api_openai.money)
    said = money(error)  # the OpenAI format's vendors: any provider but those two
    return None if said is None else f"{provider} refused the call: {said[0]}; {said[1]}"


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


class APITransport(ModelAdapter):
    """Sends an API model's requests: the pooled client, the window, the retries. The model names
    its vendor (``provider``), reads its key, builds its headers and reads an answer (``answer``)."""

    provider: str

    def __init__(self, spec: ModelSpec, options: dict[str, Any]):
        super().__init__(spec)
        self.options = options
        self._rng = random.Random()
        self._sleep: Callable[[float], None] = time.sleep
        self._http: httpx2.Client | None = None
        self._http_lock = threading.Lock()
        # a recipe's own concurrency without a ceiling stays that number (a server that takes no more)
        start = max(1, int(options["concurrency"]))
        ceiling = options.get("max_concurrency") or (
            start if "concurrency" in spec.options else max(MAX_CONCURRENCY, start))
        self._window = AdaptiveConcurrency(start, max(start, int(ceiling)))
        self._refused: list[str] = []  # the refused-key answers since the last answer (the breaker)
        # what the vendor said when it first refused a call for money: every later call would be
        # refused too, so none is sent (each a failed call the rerun sends, money added)
        self._out_of_money: str | None = None

    # -- what the model supplies ---------------------------------------------------------------
    def _key(self) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} must read its key")

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError(f"{type(self).__name__} must build its headers")

    def answer(self, payload: dict[str, Any], plan: RequestPlan, t0: float) -> Generation:
        raise NotImplementedError(f"{type(self).__name__} must read its answers")

    # -- the client and the window -------------------------------------------------------------
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
                raise Terminal("quota", self._not_sent())
            payload = self._send("POST", url, headers, json.dumps(body).encode(), stream,
                                 lambda limits: self._window.observe(started, limits))
        except Retryable as e:
            self._window.release(started, "pushback" if e.code in PUSHBACK else "failed", e.retry_after)
            raise
        except BaseException:
            self._window.release(started, "failed")
            raise
        self._window.release(started)
        return payload

    # -- one attempt: the response, or the failure it stands for --------------------------------
    def _send(self, method: str, url: str, headers: dict[str, str], content: bytes | None,
              stream: bool = False, observe: Callable[[RateLimits | None], None] | None = None) -> dict[str, Any]:
        """The response body (a streamed one: the message its events build); raises Retryable or
        Terminal by the vendor's status and fields. ``observe`` is told the response's rate limits."""
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
            raise Retryable("timeout", f"no response within {self.options['timeout_s']} s",
                            billed=not isinstance(e, NOT_SENT)) from None
        except httpx2.TransportError as e:  # refused, reset or dropped mid-response
            raise Retryable("connection", self._scrub(f"{type(e).__name__}: {e}"),
                            billed=not isinstance(e, NOT_SENT)) from None
        if resp.status_code >= 400:
            self._raise_status(resp)
        try:
            payload = json.loads(resp.content)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise Retryable("malformed_json", self._scrub(resp.content.decode("utf-8", "replace")),
                            billed=True) from None
        if not isinstance(payload, dict):
            raise Retryable("malformed_json", f"top-level {type(payload).__name__}", billed=True)
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
                raise Retryable("malformed_json", self._scrub(data), billed=True) from None
            if event == "error":
                detail = self._scrub(data)
                if (money := refused_for_money(self.provider, body)) is not None:
                    raise Terminal("quota", f"{money}{VENDOR_SAID}{detail}")
                kind = (body.get("error") or {}).get("type") if isinstance(body, dict) else None
                status = api_anthropic.ANTHROPIC_ERROR_STATUS.get(str(kind), 500)
                if status in RETRY_STATUS or status >= 500:
                    raise Retryable(f"http_{status}", detail)
                raise Terminal(f"http_{status}", detail)
            events.append(body)
        try:
            message = api_anthropic.anthropic_streamed_message(events)
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise Retryable("malformed_json", f"unexpected event ({type(e).__name__}: {e})", billed=True) from None
        if message is None:
            raise Retryable("connection", "the event stream ended before message_stop", billed=True)
        return message

    def _raise_status(self, resp: httpx2.Response) -> None:
        """Raises the Retryable or Terminal an error response stands for."""
        detail = self._scrub(resp.text)
        code = f"http_{resp.status_code}"
        try:
            error_body = json.loads(resp.content)
        except (json.JSONDecodeError, UnicodeDecodeError):
            error_body = None
        if resp.status_code in (400, 402, 403, 429) and (
                money := refused_for_money(self.provider, error_body)) is not None:
            raise Terminal("quota", f"{money}{VENDOR_SAID}{detail}")
        if resp.status_code == 400 and api_google.is_bad_key(error_body):
            raise Terminal("auth", detail)
        should = (resp.headers.get("x-should-retry") or "").strip().lower()
        retry = should == "true" or (should != "false" and (
            resp.status_code in RETRY_STATUS or resp.status_code >= 500))
        if retry:
            raise Retryable(code, detail, retry_after_s(resp.headers))
        raise Terminal(code, detail)

    # -- the retry policy ----------------------------------------------------------------------
    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        cap = float(self.options["backoff_cap_s"])
        if retry_after is not None:
            return min(cap, max(0.0, retry_after))
        delay = min(cap, float(self.options["backoff_base_s"]) * 2 ** attempt)
        return delay * (0.5 + 0.5 * self._rng.random())  # jitter spreads synchronized retries

    def _get(self, url: str) -> dict[str, Any]:
        """A GET with the retry policy of a generation; raises Terminal, or Retryable when the
        retries are spent."""
        attempts = int(self.options["max_retries"]) + 1
        for attempt in range(attempts):
            try:
                return self._send("GET", url, self._headers(), None)
            except Retryable as e:
                if attempt + 1 == attempts:
                    raise
                self._sleep(self._backoff(attempt, e.retry_after))
        raise AssertionError("unreachable")

    def _attempts(self, url: str, headers: dict[str, str], body: dict[str, Any], plan: RequestPlan,
                  tokens_in: int, billed: list[Retryable], stream: bool) -> Generation:
        """The call with its retries; each failed attempt the vendor may have billed goes to ``billed``."""
        # what a tokens-per-minute limit counts: the input, and the output budget (OpenAI counts it)
        tokens = tokens_in + plan.max_tokens
        if stream:
            body = {**body, "stream": True}
        attempts = int(self.options["max_retries"]) + 1
        last, latency = Retryable("unexpected"), 0.0
        for attempt in range(attempts):
            t0 = time.perf_counter()
            try:
                gen = self.answer(self._paced_post(url, headers, body, stream, tokens), plan, t0)
                self._refused.clear()
                return gen
            except Terminal as e:
                if e.code in REFUSED_KEY:
                    self._refused.append(e.code)
                if e.code == "quota" and self._out_of_money is None:
                    self._out_of_money = e.detail.split(VENDOR_SAID, 1)[0]
                    log.warning("%s: %s; no further call is sent", self.spec.id, self._out_of_money)
                log.warning("%s: %s, not retried", self.spec.id, e.code)
                return Generation(text=None, latency_s=time.perf_counter() - t0,
                                  error=f"{e.code}: {e.detail}", settings_dropped=plan.dropped)
            except Retryable as e:
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
