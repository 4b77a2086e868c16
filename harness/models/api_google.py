"""Gemini's generateContent wire format: the request, the credential header, the model lookup, the
answer and its usage, a refused key and money run out.

``google``: ``POST {base_url}/v1beta/models/{model}:generateContent`` (default
``https://generativelanguage.googleapis.com``, else ``$GOOGLE_GEMINI_BASE_URL``), ``x-goog-api-key``
(a header, so the key never sits in a URL); key ``GOOGLE_API_KEY``, else ``GEMINI_API_KEY``
(google-genai's order).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from .api_capabilities import RequestPlan

# Gemini finishReasons that withhold an answer on content grounds (google.genai.types.FinishReason).
GOOGLE_SAFETY = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                 "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR"}
# Money run out: a RESOURCE_EXHAUSTED whose QuotaFailure names a per-day quota (any other is a rate limit).
GOOGLE_QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"
PER_DAY = re.compile(r"per_?day", re.IGNORECASE)  # quotaId ...PerDay..., quotaMetric ..._per_day
# Gemini answers a bad key with 400 INVALID_ARGUMENT, its ErrorInfo naming the reason.
GOOGLE_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
GOOGLE_KEY_REASONS = {"API_KEY_INVALID", "API_KEY_EXPIRED"}


def _model_path(model: str) -> str:
    return urllib.parse.quote(model, safe=".-_")


def url(base_url: str | None, model: str) -> str:
    return f"{base_url}/v1beta/models/{_model_path(model)}:generateContent"


def body(image_b64: str | None, prompt: str, plan: RequestPlan) -> dict[str, Any]:
    """One user turn, the image before the prompt; the settings in ``generationConfig``."""
    config: dict[str, Any] = {"maxOutputTokens": plan.max_tokens}
    temperature, top_p = plan.sampling.get("temperature"), plan.sampling.get("top_p")
    if temperature is not None:
        config["temperature"] = temperature
    if top_p is not None:
        config["topP"] = top_p
    if plan.seed is not None:
        config["seed"] = plan.seed
    if "budget" in plan.thinking:
        config["thinkingConfig"] = {"thinkingBudget": plan.thinking["budget"]}
    parts: list[dict[str, Any]] = [] if image_b64 is None else [
        {"inlineData": {"mimeType": "image/png", "data": image_b64}}]
    return {"contents": [{"role": "user", "parts": [*parts, {"text": prompt}]}], "generationConfig": config}


def credentials(key: str | None) -> dict[str, str]:
    return {"x-goog-api-key": key or ""}


def model_url(base_url: str | None, model: str) -> str:
    return f"{base_url}/v1beta/models/{_model_path(model)}"


def read(payload: dict[str, Any]) -> tuple[Any, dict[str, Any], str | None, Any]:
    """(text, usage, cut, reasoning) of a response body (a blocked prompt: no text and no usage);
    raises KeyError and the like on another shape."""
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
    cut = None
    if finish == "MAX_TOKENS":
        cut = "truncated: finishReason MAX_TOKENS"
    elif finish in GOOGLE_SAFETY:
        cut = f"safety: finishReason {finish}"
    return text, usage, cut, reasoning


def money(error: dict[str, Any]) -> tuple[str, str] | None:
    """(what happened, what to do) where an error says a per-day quota is used up, else None."""
    details = error.get("details")
    if error.get("status") != "RESOURCE_EXHAUSTED" or not isinstance(details, list):
        return None
    quotas = [v for d in details if isinstance(d, dict) and d.get("@type") == GOOGLE_QUOTA_FAILURE
              for v in d.get("violations") or [] if isinstance(v, dict)]
    per_day = [v.get("quotaId") or v.get("quotaMetric") for v in quotas
               if PER_DAY.search(f"{v.get('quotaId', '')} {v.get('quotaMetric', '')}")]
    if per_day:
        return f"per-day quota used up ({per_day[0]})", "wait for the quota's daily reset or raise it"
    return None


def is_bad_key(body: Any) -> bool:
    """Whether a Gemini error body says the key is not valid (a 400, not a 401)."""
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    return isinstance(details, list) and any(
        isinstance(d, dict) and d.get("@type") == GOOGLE_ERROR_INFO and d.get("reason") in GOOGLE_KEY_REASONS
        for d in details)
