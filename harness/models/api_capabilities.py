"""Which request parameters each API model family accepts: the one table the adapter consults.

:mod:`harness.models.api` looks a model up here *before* it builds a request: a parameter the family
does not accept is dropped (and the drop recorded with the trial and in the run params), or, where
dropping it would change the experiment, the run is refused at preflight. A model matching no row
gets its vendor's default family (the last row of the vendor) and a warning.

Rows are tried in order; ``pattern`` is matched (``re.match``) against the model name (for Azure:
``options.served_model``, else the deployment name). ``evidence`` says where each rule comes from: the
vendor's documentation, or the error the vendor returned (issue 17 of this repository).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One row: what a model family accepts. Parameter names are gestalt's; the adapter maps
    them to each wire format."""

    provider: str  # openai (also azure) | anthropic | google | openai-compatible
    name: str
    pattern: str
    temperature: bool = True
    top_p: bool = True
    temperature_with_top_p: bool = True  # False: at most one of the two per request
    seed: bool = True
    budget_param: str = "max_completion_tokens"  # the output-budget field of the wire format
    # Thinking: forms the family accepts ("enabled" = Anthropic budget_tokens, "adaptive",
    # "budget" = Gemini thinkingBudget, "effort" = OpenAI reasoning_effort).
    thinking: tuple[str, ...] = ()
    thinks_by_default: bool = False  # the output budget is shared with thinking unless turned off
    thinking_budget_min: int | None = None
    thinking_budget_max: int | None = None
    thinking_can_be_off: bool = True  # a budget of 0 is accepted
    sampling_with_thinking: bool = True  # temperature/top_p accepted while thinking is on
    sampling_needs_effort_none: bool = False  # gpt-5.x: sampling only with reasoning_effort "none"
    evidence: str = ""

    def matches(self, model: str) -> bool:
        return re.match(self.pattern, model) is not None


# Below this output budget a model that thinks by default typically spends it all on thinking and
# returns no answer (Gemini 2.5/3 and OpenAI reasoning models at 40 tokens: issue 17, defect 6).
MIN_OUTPUT_WHEN_THINKING = 1024

OPENAI_REASONING_DOC = "https://platform.openai.com/docs/guides/reasoning (unsupported parameters)"
ANTHROPIC_THINKING_DOC = ("https://docs.claude.com/en/docs/build-with-claude/extended-thinking "
                          "(budget_tokens >= 1024 and < max_tokens; not compatible with temperature)")

FAMILIES: tuple[Family, ...] = (
    # -- OpenAI (Chat Completions; Azure OpenAI deployments follow the model they serve) ---------
    Family("openai", "gpt-5-chat", r"gpt-5(?:\.\d+)?-chat",
           evidence="gpt-5-chat-latest is the non-reasoning ChatGPT model: sampling accepted "
                    "(issue 17, defect 4)"),
    Family("openai", "gpt-5.x", r"gpt-5\.\d+", thinking=("effort",), thinks_by_default=False,
           sampling_needs_effort_none=True,
           evidence="https://platform.openai.com/docs/guides/latest-model: gpt-5.1+ default to "
                    "reasoning_effort none; temperature/top_p only with effort none"),
    Family("openai", "gpt-5", r"gpt-5", temperature=False, top_p=False, thinking=("effort",),
           thinks_by_default=True, thinking_can_be_off=False,
           evidence=OPENAI_REASONING_DOC + "; 400 'Unsupported value: temperature' (issue 17)"),
    Family("openai", "o-series", r"o\d", temperature=False, top_p=False, thinking=("effort",),
           thinks_by_default=True, thinking_can_be_off=False,
           evidence=OPENAI_REASONING_DOC + "; top_p refused (issue 17, defect 4)"),
    Family("openai", "gpt-4 and earlier (default)", r"",
           evidence="https://platform.openai.com/docs/api-reference/chat/create: temperature, top_p, "
                    "seed, max_completion_tokens"),
    # -- Anthropic (Messages; no seed parameter exists) -----------------------------------------
    Family("anthropic", "claude-opus-4.7+", r"claude-opus-(?:4-(?:[7-9]|\d\d)|[5-9])", temperature=False,
           temperature_with_top_p=False, seed=False, budget_param="max_tokens", thinking=("adaptive",),
           evidence="400 'temperature is deprecated for this model'; thinking type 'enabled' refused, "
                    "'adaptive' only (issue 17, defects 2 and 5)"),
    Family("anthropic", "claude-4.5/4.6", r"claude-(?:opus|sonnet|haiku)-4-[56]",
           temperature_with_top_p=False, seed=False, budget_param="max_tokens",
           thinking=("enabled", "adaptive"), thinking_budget_min=1024, sampling_with_thinking=False,
           evidence="https://docs.claude.com/en/docs/about-claude/models/migrating-to-claude-4: "
                    "temperature or top_p, not both (issue 17, defect 3); " + ANTHROPIC_THINKING_DOC),
    Family("anthropic", "claude-3.x/4.0/4.1 (default)", r"", seed=False, budget_param="max_tokens",
           thinking=("enabled",), thinking_budget_min=1024, sampling_with_thinking=False,
           evidence="https://docs.claude.com/en/api/messages; " + ANTHROPIC_THINKING_DOC),
    # -- Google (Gemini generateContent) --------------------------------------------------------
    Family("google", "gemini-3", r"gemini-3", budget_param="maxOutputTokens", thinking=("budget",),
           thinks_by_default=True, thinking_can_be_off=False,
           evidence="https://ai.google.dev/gemini-api/docs/thinking: Gemini 3 cannot turn thinking "
                    "off; MAX_TOKENS with no parts at 40 tokens (issue 17, defect 6)"),
    Family("google", "gemini-2.5-pro", r"gemini-2\.5-pro", budget_param="maxOutputTokens",
           thinking=("budget",), thinks_by_default=True, thinking_budget_min=128,
           thinking_budget_max=32768, thinking_can_be_off=False,
           evidence="https://ai.google.dev/gemini-api/docs/thinking: thinkingBudget 128-32768, "
                    "cannot be 0"),
    Family("google", "gemini-2.5-flash-lite", r"gemini-2\.5-flash-lite", budget_param="maxOutputTokens",
           thinking=("budget",), thinking_budget_min=512, thinking_budget_max=24576,
           evidence="https://ai.google.dev/gemini-api/docs/thinking: 0 or 512-24576, off by default"),
    Family("google", "gemini-2.5-flash", r"gemini-2\.5-flash", budget_param="maxOutputTokens",
           thinking=("budget",), thinks_by_default=True, thinking_budget_max=24576,
           evidence="https://ai.google.dev/gemini-api/docs/thinking: 0-24576, on by default"),
    Family("google", "gemini-2.0 and earlier (default)", r"", budget_param="maxOutputTokens",
           evidence="https://ai.google.dev/api/generate-content#generationconfig: temperature, "
                    "topP, seed, maxOutputTokens"),
    # -- OpenAI-compatible servers (vLLM, Ollama, LM Studio) -------------------------------------
    Family("openai-compatible", "served model (default)", r"", budget_param="max_tokens",
           evidence="vLLM/Ollama OpenAI-compatible servers accept the sampling parameters and "
                    "max_tokens"),
)

# Azure OpenAI serves OpenAI's models under deployment names; the rules are the model's.
TABLE_PROVIDER = {"azure": "openai"}


def family_of(provider: str, model: str) -> tuple[Family, bool]:
    """(family, known): the first matching row, or the vendor's default row with ``known=False``."""
    rows = [f for f in FAMILIES if f.provider == TABLE_PROVIDER.get(provider, provider)]
    for f in rows[:-1]:
        if f.matches(model):
            return f, True
    return rows[-1], _known_default(provider, model)


# Model-name prefixes that the default rows describe (so a gpt-4o is not "unknown").
_DEFAULT_PREFIXES = {"openai": r"(?:gpt-4|gpt-3\.5|chatgpt)", "azure": r"(?:gpt-4|gpt-3\.5|chatgpt)",
                     "anthropic": r"claude-(?:3|(?:opus|sonnet)-4(?:-[01])?(?:-\d{8})?$)",
                     "google": r"gemini-(?:1\.|2\.0)", "openai-compatible": r""}


def _known_default(provider: str, model: str) -> bool:
    return re.match(_DEFAULT_PREFIXES.get(provider, r"(?!)"), model) is not None
