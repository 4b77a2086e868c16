"""Anthropic's Messages wire format: the request, the credential headers, the model lookup, a
streamed answer's events, the answer and its usage, the error types and money run out.

``anthropic``: ``POST {base_url}/v1/messages`` (default ``https://api.anthropic.com``, else
``$ANTHROPIC_BASE_URL``), ``x-api-key`` + the pinned SDK's ``anthropic-version``; key
``ANTHROPIC_API_KEY``. An output budget Anthropic only takes streamed
(:func:`anthropic_nonstreaming_limit`) is sent with ``stream: true``; the server-sent events are
gathered into the message (:func:`anthropic_streamed_message`), an ``error`` event classified by its
error type (:data:`ANTHROPIC_ERROR_STATUS`).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from typing import Any

from .api_capabilities import RequestPlan

# Anthropic refuses a non-streaming request that may run over 10 minutes: expected time is an hour
# per 128k output tokens (anthropic's _calculate_nonstreaming_timeout); some models have a lower cap
# (anthropic._constants.MODEL_NONSTREAMING_TOKENS).
ANTHROPIC_NONSTREAMING_TOKENS = 128_000 * 600 // 3600
ANTHROPIC_NONSTREAMING_BY_MODEL = {"claude-opus-4-20250514": 8_192, "claude-opus-4-0": 8_192,
                                   "claude-4-opus-20250514": 8_192}
# Anthropic's error types and the status each comes with (its errors page); an error in a stream
# arrives as an ``error`` event after the 200, naming only its type.
ANTHROPIC_ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
                          "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                          "rate_limit_error": 429, "api_error": 500, "timeout_error": 504,
                          "overloaded_error": 529}
# Money run out: the billing error (error.type) and the spend caps (error.details.error_code,
# anthropic.types.shared.*ErrorDetails), each (what happened, what to do).
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


def anthropic_nonstreaming_limit(model: str) -> int:
    """The most output tokens Anthropic accepts in a non-streaming request for ``model``."""
    return ANTHROPIC_NONSTREAMING_BY_MODEL.get(model, ANTHROPIC_NONSTREAMING_TOKENS)


def url(base_url: str | None) -> str:
    return f"{base_url}/v1/messages"


def body(model: str, image_b64: str | None, prompt: str, plan: RequestPlan) -> dict[str, Any]:
    """One user turn, the image before the prompt."""
    content: list[dict[str, Any]] = [] if image_b64 is None else [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image_b64}}]
    out: dict[str, Any] = {"max_tokens": plan.max_tokens, "messages": [{"role": "user", "content": [
        *content, {"type": "text", "text": prompt}]}], "model": model}
    if "budget" in plan.thinking:
        out["thinking"] = {"type": "enabled", "budget_tokens": plan.thinking["budget"]}
    elif plan.thinking.get("adaptive"):
        out["thinking"] = {"type": "adaptive"}
    temperature, top_p = plan.sampling.get("temperature"), plan.sampling.get("top_p")
    if temperature is not None:
        out["temperature"] = temperature
    if top_p is not None:
        out["top_p"] = top_p
    return out


def credentials(key: str | None, version: str) -> dict[str, str]:
    return {"x-api-key": key or "", "anthropic-version": version}


def model_url(base_url: str | None, model: str) -> str:
    return f"{base_url}/v1/models/{urllib.parse.quote(model, safe='')}"


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


def read(payload: dict[str, Any]) -> tuple[Any, dict[str, Any], str | None, Any]:
    """(text, usage, cut, reasoning) of a Message; raises KeyError and the like on another shape."""
    text = "".join(b.get("text", "") for b in payload["content"] if b.get("type") == "text")
    reasoning = "".join(b.get("thinking", "") for b in payload["content"] if b.get("type") == "thinking")
    stop = payload.get("stop_reason")
    cut = None
    if stop in ("max_tokens", "model_context_window_exceeded"):
        cut = f"truncated: stop_reason {stop}"
    elif stop == "refusal":
        cut = "refusal: stop_reason refusal"
    u = payload.get("usage") or {}
    # Anthropic bills thinking inside output_tokens, split out in output_tokens_details.thinking_tokens
    # where it reports one; its input_tokens leave out cache reads and writes, gestalt's include them
    # (as OpenAI's).
    cached = u.get("cache_read_input_tokens") or 0
    fresh, out = u.get("input_tokens"), u.get("output_tokens")
    usage = {"input_tokens": fresh + cached + (u.get("cache_creation_input_tokens") or 0)
             if isinstance(fresh, int) else None, "output_tokens": out, "cached_tokens": cached}
    thought = (u.get("output_tokens_details") or {}).get("thinking_tokens")
    if isinstance(thought, int) and isinstance(out, int):
        usage.update(output_tokens=out - thought, thinking_tokens=thought)
    elif not any(b.get("type") in ("thinking", "redacted_thinking") for b in payload["content"]):
        usage["thinking_tokens"] = 0
    return text, usage, cut, reasoning


def money(error: dict[str, Any]) -> tuple[str, str] | None:
    """(what happened, what to do) where an error says money ran out, else None."""
    kind, details = error.get("type"), error.get("details")
    if kind in ANTHROPIC_MONEY_TYPES:
        return ANTHROPIC_MONEY_TYPES[kind]
    if isinstance(details, dict) and details.get("error_code") in ANTHROPIC_MONEY_CODES:
        return ANTHROPIC_MONEY_CODES[details["error_code"]]
    if kind == "invalid_request_error":
        message = str(error.get("message", "")).lower()
        return next(((what, do) for phrase, what, do in ANTHROPIC_MONEY_MESSAGES if phrase in message), None)
    return None
