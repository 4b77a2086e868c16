"""A local stand-in for the vendors' HTTP APIs, on 127.0.0.1, for the ``api:`` adapter tests.

It speaks three wire formats, chosen by path:

- OpenAI chat completions: ``POST .../chat/completions`` (``Authorization: Bearer <key>``)
- Azure OpenAI: ``POST /openai/deployments/<name>/chat/completions?api-version=...`` (``api-key``)
- Anthropic messages: ``POST /v1/messages`` (``x-api-key``, ``anthropic-version``)
- Google Gemini: ``POST /v1beta/models/<model>:generateContent`` (``x-goog-api-key``)

Each request is checked against its vendor's format (auth header, one user turn with a base64 PNG
image part *before* the text part); a malformed request gets a 400 naming the problem. The
decoded image bytes, prompt and body of every request are recorded.

Behaviour is scripted per request from a queue of actions (then ``reply`` by default):
``Reply(text)``, ``Status(code, retry_after=None, headers=None, body=None)``, ``Payload(body)``
(a 200 with exactly that body: the vendors' documented shapes), ``Drop()`` (the connection closes
with no answer), ``Sleep(seconds)`` (answer only
after the client's timeout), ``Malformed()`` (a 200 whose body is not JSON), ``Blocked()`` (Gemini:
no candidates). A request may carry text alone (no image part): the LLM answer extractor. A wrong key gets a 401
whose body echoes the key it was sent, as some vendors do
partially, so redaction can be tested.

Money: ``credit=N`` answers N generation requests, then every further one with the vendor's own
out-of-money error (:data:`OUT_OF_MONEY`: Anthropic's credit 400, OpenAI's ``insufficient_quota``
429, Gemini's per-day ``RESOURCE_EXHAUSTED`` 429); ``broke`` counts those. Setting ``credit`` again
(None: no limit) is the user adding credit.

Usage: by default a request bills its prompt's words + 100 input tokens. ``billing="documented"``
bills as the vendors document instead (:func:`documented_input_tokens`): the image by the rule of
the model's family, the text at four characters a token, plus the few tokens of the message
wrapping that every vendor adds. ``billed`` lists the (input, output) tokens of every answer the
fake produced, also one the client stopped waiting for (``Sleep``): a vendor bills the work it did.

The model endpoints that preflight asks (no generation, no scripted action used): OpenAI and
compatible ``GET .../models/<model>`` and ``GET .../models``, Anthropic ``GET /v1/models/<model>``,
Gemini ``GET /v1beta/models/<model>``; ``models`` names the models served (None: any name), an
unknown one gets the vendor's 404. They are recorded in ``model_checks``, not ``requests``.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from collections.abc import Callable


@dataclass
class Reply:
    text: str | None = None  # None: the server's answer function decides


@dataclass
class Status:
    code: int
    retry_after: float | str | None = None
    headers: dict[str, str] | None = None
    body: dict | None = None  # default: {"error": {"message": "scripted <code>"}}


@dataclass
class Payload:
    """A 200 with exactly this body (a vendor's documented response shape)."""

    body: dict


@dataclass
class Sleep:
    seconds: float


@dataclass
class Malformed:
    pass


@dataclass
class Drop:
    """Close the connection without answering (a reset mid-request)."""


@dataclass
class Blocked:
    pass


@dataclass
class Recorded:
    vendor: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    image_png: bytes | None
    prompt: str | None
    order: list[str]  # part kinds in the user turn, e.g. ["image", "text"]


class BadRequest(Exception):
    pass


_PNG = b"\x89PNG\r\n\x1a\n"


def _png(data: str) -> bytes:
    raw = base64.b64decode(data, validate=True)
    if not raw.startswith(_PNG):
        raise BadRequest("image is not a PNG")
    return raw


def parse_openai(body: dict) -> tuple[bytes | None, str | None, list[str]]:
    (msg,) = body["messages"]
    if msg["role"] != "user":
        raise BadRequest("expected one user message")
    image = prompt = None
    order = []
    for part in msg["content"]:
        if part["type"] == "image_url":
            url = part["image_url"]["url"]
            if not url.startswith("data:image/png;base64,"):
                raise BadRequest("image_url is not a base64 PNG data URL")
            image = _png(url.split(",", 1)[1])
            order.append("image")
        elif part["type"] == "text":
            prompt = part["text"]
            order.append("text")
    return image, prompt, order


def parse_anthropic(body: dict) -> tuple[bytes | None, str | None, list[str]]:
    if not isinstance(body.get("max_tokens"), int):
        raise BadRequest("max_tokens is required")
    (msg,) = body["messages"]
    image = prompt = None
    order = []
    for part in msg["content"]:
        if part["type"] == "image":
            src = part["source"]
            if src["type"] != "base64" or src["media_type"] != "image/png":
                raise BadRequest("image source must be base64 image/png")
            image = _png(src["data"])
            order.append("image")
        elif part["type"] == "text":
            prompt = part["text"]
            order.append("text")
    return image, prompt, order


def parse_google(body: dict) -> tuple[bytes | None, str | None, list[str]]:
    (content,) = body["contents"]
    image = prompt = None
    order = []
    for part in content["parts"]:
        if "inlineData" in part:
            if part["inlineData"]["mimeType"] != "image/png":
                raise BadRequest("inlineData must be image/png")
            image = _png(part["inlineData"]["data"])
            order.append("image")
        elif "text" in part:
            prompt = part["text"]
            order.append("text")
    return image, prompt, order


def reply_openai(model: str, text: str, n_in: int, n_out: int) -> dict:
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out,
                      "completion_tokens_details": {"reasoning_tokens": 0}}}


def reply_anthropic(model: str, text: str, n_in: int, n_out: int) -> dict:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "thinking", "thinking": "Let me look. 1? 3?", "signature": "x"},
                        {"type": "text", "text": text}],
            "stop_reason": "end_turn", "usage": {"input_tokens": n_in, "output_tokens": n_out}}


def reply_google(model: str, text: str, n_in: int, n_out: int) -> dict:
    return {"candidates": [{"content": {"role": "model", "parts": [
                {"text": "Thinking: maybe 1 or 3.", "thought": True}, {"text": text}]},
                "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": n_in, "candidatesTokenCount": n_out,
                              "thoughtsTokenCount": 7, "totalTokenCount": n_in + n_out + 7},
            "modelVersion": model}


# -- billing by the vendors' documented rules (written apart from harness.models.api_costs, which
# the tests hold against it) ---------------------------------------------------------------------
WRAPPING_TOKENS = 8  # the message wrapping a vendor bills beside the parts (OpenAI's chat format: 7-8)
PATCH_MODELS = [("gpt-4.1-mini", 1.62), ("gpt-4.1-nano", 2.46), ("gpt-5-mini", 1.62), ("gpt-5-nano", 2.46),
                ("o4-mini", 1.72)]  # platform.openai.com/docs/guides/images-vision
TILE_MODELS = [("gpt-4o-mini", 2833, 5667), ("gpt-5", 70, 140), ("o1", 75, 150), ("o3", 75, 150)]


def png_size(png: bytes) -> tuple[int, int]:
    return struct.unpack(">II", png[16:24])  # IHDR's width and height


def _family(model: str, table: list) -> tuple | None:
    return next((row for row in sorted(table, key=lambda r: -len(r[0]))
                 if model == row[0] or model.startswith(row[0] + "-")), None)


def openai_image_tokens(model: str, w: int, h: int) -> int:
    patch = _family(model, PATCH_MODELS)
    if patch is not None:
        n = math.ceil(w / 32) * math.ceil(h / 32)
        if n > 1536:
            shrink = math.sqrt(1536 * 1024 / (w * h))
            shrink *= min(math.floor(w * shrink / 32) / (w * shrink / 32),
                          math.floor(h * shrink / 32) / (h * shrink / 32))
            n = min(1536, math.ceil(w * shrink / 32) * math.ceil(h * shrink / 32))
        return math.ceil(n * patch[1])
    _, base, tile = _family(model, TILE_MODELS) or ("", 85, 170)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return base + tile * math.ceil(w / 512) * math.ceil(h / 512)


def anthropic_image_tokens(w: int, h: int) -> int:
    if max(w, h) > 1568:
        w, h = w * 1568 / max(w, h), h * 1568 / max(w, h)
    return min(1600, math.ceil(w * h / 750))  # "more than ~1,600 tokens": scaled down to them


def google_image_tokens(w: int, h: int) -> int:
    return 258 if max(w, h) <= 384 else 258 * math.ceil(w / 768) * math.ceil(h / 768)


def documented_input_tokens(vendor: str, model: str, image: bytes | None, prompt: str | None) -> int:
    tokens = WRAPPING_TOKENS + math.ceil(len(prompt or "") / 4)
    if image is not None:
        w, h = png_size(image)
        tokens += (anthropic_image_tokens(w, h) if vendor == "anthropic" else
                   google_image_tokens(w, h) if vendor == "google" else openai_image_tokens(model, w, h))
    return tokens


# Each vendor's answer once the account's money is gone, in the shape the vendor sends it.
OPENAI_OUT_OF_MONEY = (429, {"error": {
    "message": "You exceeded your current quota, please check your plan and billing details. For more "
               "information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
    "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}})
OUT_OF_MONEY: dict[str, tuple[int, dict]] = {
    "anthropic": (400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
                   "to upgrade or purchase credits."}, "request_id": "req_011CfakeCreditBalance"}),
    "openai": OPENAI_OUT_OF_MONEY,
    "azure": OPENAI_OUT_OF_MONEY,
    # Gemini's free tier, its requests per day used up: a QuotaFailure naming the per-day quota,
    # and a RetryInfo that a rate limit's retry would wrongly believe
    "google": (429, {"error": {
        "code": 429, "status": "RESOURCE_EXHAUSTED",
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
                        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                        "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                        "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"},
                        "quotaValue": "200"}]},
                    {"@type": "type.googleapis.com/google.rpc.Help", "links": [{
                        "description": "Learn more about Gemini API quotas",
                        "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "43s"}]}}),
}


VENDORS = {
    "openai": (parse_openai, reply_openai),
    "azure": (parse_openai, reply_openai),
    "anthropic": (parse_anthropic, reply_anthropic),
    "google": (parse_google, reply_google),
}
GOOGLE_PATH = re.compile(r"^/v1beta/models/(?P<model>[^/:]+):generateContent$")


class FakeVendorServer:
    def __init__(self, key: str | None = None, answer: Callable[[str | None], str] = lambda p: "2",
                 delay_s: float = 0.0, models: set[str] | None = None, billing: str = "flat",
                 credit: int | None = None):
        self.key = key
        # keys its model check accepts though generation refuses them: a key revoked between the
        # preflight's check and the battery
        self.revoked: set[str] = set()
        self.credit = credit  # generation requests answered before the money runs out (None: never)
        self.broke = 0  # generation requests answered with the vendor's out-of-money error
        self.billing = billing
        self.models = models
        self.model_checks: list[tuple[str, str]] = []  # (vendor, path) of each GET that passed its key check
        self.answer = answer
        self.delay_s = delay_s
        self.actions: deque = deque()
        self.requests: list[Recorded] = []
        self.refused = 0  # generation requests answered 401 for their key
        self.billed: list[tuple[int, int]] = []  # (input, output) tokens of each answer made, read or not
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                server._handle(self)

            def do_GET(self):
                server._model_check(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)
        self._thread.start()

    def script(self, *actions) -> FakeVendorServer:
        self.actions.extend(actions)
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- request handling --------------------------------------------------------------------
    def _vendor(self, path: str) -> tuple[str, str | None]:
        path, _, query = path.partition("?")
        if path.startswith("/openai/deployments/") and path.endswith("/chat/completions"):
            return ("azure", None) if "api-version=" in query else ("unknown", None)
        if path.endswith("/chat/completions"):
            return "openai", None
        if path == "/v1/messages":
            return "anthropic", None
        m = GOOGLE_PATH.match(path)
        if m:
            return "google", m.group("model")
        return "unknown", None

    def _model_check(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.partition("?")[0]
        m = re.match(r"^(?:/v1beta|/v1|(?P<base>.*?))/models(?:/(?P<model>[^/]+))?$", path)
        if m is None:
            return self._send(h, 404, {"error": f"no route {h.path}"})
        vendor = ("google" if path.startswith("/v1beta/") else "azure" if "api-key" in h.headers else
                  "anthropic" if "x-api-key" in h.headers else "openai")
        ok, sent = self._auth_ok(vendor, h.headers)
        if not ok and sent not in self.revoked:
            return self._send(h, 401, {"error": {"message": f"Incorrect API key provided: {sent}"}})
        with self._lock:
            self.model_checks.append((vendor, path))
        model = m.group("model")
        if model is None:  # the list: what an OpenAI-compatible server serves
            return self._send(h, 200, {"object": "list", "data": [
                {"id": name, "object": "model"} for name in sorted(self.models or ())]})
        model = urllib.parse.unquote(model)
        if self.models is not None and model not in self.models:
            body = ({"error": {"code": 404, "message": f"models/{model} is not found", "status": "NOT_FOUND"}}
                    if vendor == "google" else
                    {"type": "error", "error": {"type": "not_found_error", "message": f"model: {model}"}}
                    if vendor == "anthropic" else
                    {"error": {"message": f"The model '{model}' does not exist", "type": "invalid_request_error",
                               "code": "model_not_found", "param": None}})
            return self._send(h, 404, body)
        return self._send(h, 200, {"id": model, "name": f"models/{model}", "type": "model", "object": "model"})

    def _auth_ok(self, vendor: str, headers) -> tuple[bool, str]:
        sent = {"openai": (headers.get("authorization") or "").removeprefix("Bearer "),
                "azure": headers.get("api-key") or "",
                "anthropic": headers.get("x-api-key") or "",
                "google": headers.get("x-goog-api-key") or ""}[vendor]
        if vendor == "anthropic" and not headers.get("anthropic-version"):
            return False, "missing anthropic-version"
        return (self.key is None or sent == self.key), sent

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            action = self.actions.popleft() if self.actions else Reply()
        try:
            self._respond(h, action)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)
        finally:
            self._done(h)

    def _done(self, h: BaseHTTPRequestHandler) -> None:
        """The request leaves the in-flight count once, before its answer is written: after the write
        the client may already have sent its next request, which would otherwise count twice."""
        with self._lock:
            if not getattr(h, "counted_done", False):
                h.counted_done = True
                self.in_flight -= 1

    def _respond(self, h: BaseHTTPRequestHandler, action) -> None:
        raw = h.rfile.read(int(h.headers.get("content-length") or 0))
        vendor, model = self._vendor(h.path)
        if vendor == "unknown":
            return self._send(h, 404, {"error": f"no route {h.path}"})
        ok, sent = self._auth_ok(vendor, h.headers)
        if not ok:
            with self._lock:
                self.refused += 1
            return self._send(h, 401, {"error": {"message": f"Incorrect API key provided: {sent}"}})
        try:
            body = json.loads(raw)
            image, prompt, order = VENDORS[vendor][0](body)
        except (BadRequest, KeyError, ValueError, TypeError) as e:
            return self._send(h, 400, {"error": {"message": f"bad request: {e!r}"}})
        with self._lock:
            self.requests.append(Recorded(vendor, h.path, dict(h.headers.items()), body, image, prompt, order))
        with self._lock:
            broke = self.credit is not None and self.credit <= 0
            if broke:
                self.broke += 1
            elif self.credit is not None:
                self.credit -= 1
        if broke:
            return self._send(h, *OUT_OF_MONEY[vendor])
        if self.delay_s:
            time.sleep(self.delay_s)
        if isinstance(action, Status):
            extra = {"retry-after": str(action.retry_after)} if action.retry_after is not None else {}
            extra.update(action.headers or {})
            body = action.body if action.body is not None else {"error": {"message": f"scripted {action.code}"}}
            return self._send(h, action.code, body, extra)
        if isinstance(action, Payload):
            return self._send(h, 200, action.body)
        if isinstance(action, Drop):
            h.close_connection = True
            return None
        if isinstance(action, Sleep):
            time.sleep(action.seconds)
            action = Reply()
        if isinstance(action, Malformed):
            return self._send_raw(h, 200, b'{"choices": [{"message": {"content": "2"')
        if isinstance(action, Blocked):
            return self._send(h, 200, {"promptFeedback": {"blockReason": "SAFETY"}})
        text = action.text if action.text is not None else self.answer(prompt)
        model = model or body.get("model", "")
        n_in = (documented_input_tokens(vendor, model, image, prompt) if self.billing == "documented" else
                len((prompt or "").split()) + 100)
        n_out = len(text.split())
        with self._lock:
            self.billed.append((n_in, n_out))
        self._send(h, 200, VENDORS[vendor][1](model, text, n_in, n_out))

    def _send(self, h, code: int, payload: dict, headers: dict | None = None) -> None:
        self._send_raw(h, code, json.dumps(payload).encode(), headers)

    def _send_raw(self, h, code: int, data: bytes, headers: dict | None = None) -> None:
        self._done(h)
        h.send_response(code)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)


# -- finding a planted key -----------------------------------------------------------------------

_B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{8,}")


def reveals_key(text: str, key: str, piece: int = 8) -> bool:
    """Whether ``text`` shows any ``piece`` characters of ``key``: as written, after URL-decoding,
    after undoing backslash escapes, or inside any base64 run (decoded at each alignment; there 6
    bytes, i.e. 8 base64 characters, count). Independent of the scrubber it checks."""
    views = [text, urllib.parse.unquote(text), urllib.parse.unquote_plus(text)]
    try:
        views.append(text.encode("latin-1", "ignore").decode("unicode_escape", "ignore"))
    except UnicodeDecodeError:
        pass
    if any(key[i:i + piece] in v for v in views for i in range(len(key) - piece + 1)):
        return True
    raw = key.encode()
    windows = {raw[i:i + 6] for i in range(len(raw) - 5)}
    for run in _B64_RUN.findall(text):
        for alphabet in (run, run.replace("-", "+").replace("_", "/")):
            for offset in range(4):
                chunk = alphabet[offset:]
                chunk = chunk[:len(chunk) - len(chunk) % 4]
                try:
                    decoded = base64.b64decode(chunk, validate=False)
                except ValueError:
                    continue
                if any(w in decoded for w in windows):
                    return True
    return False
