"""OpenAI's Chat Completions wire format, which Azure OpenAI and the OpenAI-compatible servers share:
the request, the credential headers, the model lookup, the answer and its usage, money run out.

- ``openai``: ``POST {base_url}/chat/completions`` (default base ``https://api.openai.com/v1``, else
  ``$OPENAI_BASE_URL``), ``Authorization: Bearer``; key ``OPENAI_API_KEY``; ``OpenAI-Organization`` /
  ``OpenAI-Project`` from ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` where set (as the openai SDK reads
  them).
- ``azure``: Azure OpenAI, ``azure/<deployment>``: ``POST {base_url}/openai/deployments/<deployment>/
  chat/completions?api-version=<options.api_version>`` with an ``api-key`` header; key
  ``AZURE_OPENAI_API_KEY``; ``options.served_model`` names the OpenAI model the deployment serves (its
  capability row), else the deployment name is used.
- ``openai-compatible``: the same format at ``options.base_url`` (vLLM, Ollama, LM Studio); a key
  only if ``options.api_key_env`` names one.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from .api_capabilities import RequestPlan

OPENAI_FORMAT = ("openai", "azure", "openai-compatible")
# OpenAI's organisation and project headers, from the variables the openai SDK reads.
OPENAI_ACCOUNT_HEADERS = {"OPENAI_ORG_ID": "openai-organization", "OPENAI_PROJECT_ID": "openai-project"}
# Money run out, by OpenAI's error.code (error.type ``insufficient_quota`` for any of them): (what
# happened, what to do).
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


def url(provider: str, base_url: str | None, model: str, api_version: str | None) -> str:
    """Where a generation is posted (Azure: the deployment's path and its api-version)."""
    if provider == "azure":
        deployment = urllib.parse.quote(model, safe="")
        query = urllib.parse.urlencode({"api-version": api_version})
        return f"{base_url}/openai/deployments/{deployment}/chat/completions?{query}"
    return f"{base_url}/chat/completions"


def body(model: str, image_b64: str | None, prompt: str, plan: RequestPlan, budget_param: str) -> dict[str, Any]:
    """One user turn, the image before the prompt; ``budget_param``: the family's output-budget field."""
    content: list[dict[str, Any]] = [] if image_b64 is None else [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image_b64}"}}]
    out: dict[str, Any] = {"messages": [{"role": "user", "content": [
        *content, {"type": "text", "text": prompt}]}], "model": model}
    out[budget_param] = plan.max_tokens
    if "effort" in plan.thinking:
        out["reasoning_effort"] = plan.thinking["effort"]
    if plan.seed is not None:
        out["seed"] = plan.seed
    temperature, top_p = plan.sampling.get("temperature"), plan.sampling.get("top_p")
    if temperature is not None:
        out["temperature"] = temperature
    if top_p is not None:
        out["top_p"] = top_p
    return out


def credentials(provider: str, key: str | None) -> dict[str, str]:
    """Azure's ``api-key``, else a bearer token where there is a key, and OpenAI's account headers."""
    if provider == "azure":
        return {"api-key": key or ""}
    headers = {"authorization": f"Bearer {key}"} if key else {}
    if provider == "openai":
        headers.update({h: os.environ[v].strip() for v, h in OPENAI_ACCOUNT_HEADERS.items()
                        if os.environ.get(v, "").strip()})
    return headers


def model_url(provider: str, base_url: str | None, model: str, api_version: str | None) -> str:
    """``GET /models/<model>``; Azure's data plane lists models only (``GET /openai/models``), so
    there the key alone is checked."""
    if provider == "azure":
        query = urllib.parse.urlencode({"api-version": api_version})
        return f"{base_url}/openai/models?{query}"
    return f"{base_url}/models/{urllib.parse.quote(model, safe='')}"


def read(payload: dict[str, Any]) -> tuple[Any, dict[str, Any], str | None, Any]:
    """(text, usage, cut, reasoning) of a response body; raises KeyError and the like on another shape."""
    choice = payload["choices"][0]
    message = choice["message"]
    content = message.get("content")
    if isinstance(content, list):  # some compatible servers return parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    # OpenAI-compatible reasoning servers (vLLM, DeepSeek, Ollama) put thoughts here
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    finish = choice.get("finish_reason")
    cut = None
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
    return content or "", usage, cut, reasoning


def money(error: dict[str, Any]) -> tuple[str, str] | None:
    """(what happened, what to do) where an error says money ran out, else None."""
    code = error.get("code")
    if code in OPENAI_MONEY or error.get("type") == "insufficient_quota":
        return OPENAI_MONEY[code if code in OPENAI_MONEY else "insufficient_quota"]
    return None
