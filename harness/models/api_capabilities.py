"""Which request parameters each API model family accepts: the one table the adapter consults.

:mod:`harness.models.api` looks a model up here *before* it builds a request: a parameter the family
does not accept is dropped (and the drop recorded with the trial and in the run params), or, where
dropping it would change the experiment, the run is refused at preflight. A model matching no row
gets its vendor's conservative row (the vendor's last: only what every model of the vendor
accepts), a warning, and the reason in each trial's ``extras.capabilities``.

Rows are tried in order; ``pattern`` must match the whole model name (``re.fullmatch``: a family and
its dated snapshots, so ``claude-opus-4-20250514`` is Opus 4.0, not a later Opus) (for Azure:
``options.served_model``, else the deployment name). ``evidence`` says where each rule comes from: the
vendor's documentation, or the error the vendor returned to a request that sent the parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


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
        return re.fullmatch(self.pattern, model) is not None


@dataclass(frozen=True)
class RequestPlan:
    """What one request sends, after the capability table: gestalt names, not wire names."""

    max_tokens: int
    sampling: dict[str, float] = field(default_factory=dict)  # temperature, top_p
    seed: int | None = None
    thinking: dict[str, Any] = field(default_factory=dict)  # budget / adaptive / effort
    dropped: dict[str, Any] = field(default_factory=dict)


# Below this output budget a model that thinks by default typically spends it all on thinking and
# returns no answer (Gemini 2.5/3 and OpenAI reasoning models at a 40-token budget: no answer text).
MIN_OUTPUT_WHEN_THINKING = 1024

OPENAI_REASONING_DOC = "https://platform.openai.com/docs/guides/reasoning (unsupported parameters)"
ANTHROPIC_THINKING_DOC = ("https://docs.claude.com/en/docs/build-with-claude/extended-thinking "
                          "(budget_tokens >= 1024 and < max_tokens; not compatible with temperature)")

# Snapshot suffixes: OpenAI dates its snapshots -YYYY-MM-DD, Anthropic -YYYYMMDD.
_OPENAI_DATE = r"(?:-\d{4}-\d{2}-\d{2})?"
_ANTHROPIC_DATE = r"(?:-\d{8})?"
CONSERVATIVE = "(unknown: conservative)"

FAMILIES: tuple[Family, ...] = (
    # -- OpenAI (Chat Completions; Azure OpenAI deployments follow the model they serve) ---------
    Family("openai", "gpt-5-chat", r"gpt-5(?:\.\d+)?-chat-latest",
           evidence="gpt-5-chat-latest is the non-reasoning ChatGPT model: sampling accepted "
                    "(unlike gpt-5 and the o-series)"),
    Family("openai", "gpt-5.x", r"gpt-5\.[1-5](?:-(?:mini|nano|pro))?" + _OPENAI_DATE, thinking=("effort",),
           thinks_by_default=False, sampling_needs_effort_none=True,
           evidence="https://platform.openai.com/docs/guides/latest-model: gpt-5.1+ default to "
                    "reasoning_effort none; temperature/top_p only with effort none"),
    Family("openai", "gpt-5", r"gpt-5(?:-(?:mini|nano))?" + _OPENAI_DATE, temperature=False, top_p=False,
           thinking=("effort",), thinks_by_default=True, thinking_can_be_off=False,
           evidence=OPENAI_REASONING_DOC + "; 400 'Unsupported value: temperature'"),
    Family("openai", "o-series", r"o[134](?:-mini|-preview|-pro)?" + _OPENAI_DATE, temperature=False,
           top_p=False, thinking=("effort",), thinks_by_default=True, thinking_can_be_off=False,
           evidence=OPENAI_REASONING_DOC + "; top_p refused by the vendor"),
    Family("openai", "gpt-4 and earlier",
           r"(?:gpt-4(?:o|\.1)?(?:-(?:mini|nano|turbo|32k))?(?:-(?:\d{4}|\d{4}-preview|preview|turbo-preview|"
           r"vision-preview))?" + _OPENAI_DATE + r"|gpt-3\.5-turbo(?:-16k)?(?:-\d{4})?|chatgpt-4o-latest)",
           evidence="https://platform.openai.com/docs/api-reference/chat/create: temperature, top_p, "
                    "seed, max_completion_tokens"),
    Family("openai", "openai " + CONSERVATIVE, r"", temperature=False, top_p=False, seed=False,
           evidence="a model this table does not name: only what every Chat Completions model accepts "
                    "(reasoning models refuse temperature and top_p)"),
    # -- Anthropic (Messages; no seed parameter exists) -----------------------------------------
    Family("anthropic", "claude-opus-4.7", r"claude-opus-4-7" + _ANTHROPIC_DATE, temperature=False,
           temperature_with_top_p=False, seed=False, budget_param="max_tokens", thinking=("adaptive",),
           evidence="400 'temperature is deprecated for this model'; thinking type 'enabled' refused, "
                    "'adaptive' only"),
    Family("anthropic", "claude-4.5/4.6", r"claude-(?:opus|sonnet|haiku)-4-[56]" + _ANTHROPIC_DATE,
           temperature_with_top_p=False, seed=False, budget_param="max_tokens",
           thinking=("enabled", "adaptive"), thinking_budget_min=1024, sampling_with_thinking=False,
           evidence="https://docs.claude.com/en/docs/about-claude/models/migrating-to-claude-4: "
                    "temperature or top_p, not both; " + ANTHROPIC_THINKING_DOC),
    Family("anthropic", "claude-3.x/4.0/4.1",
           r"(?:claude-3(?:-[57])?-(?:opus|sonnet|haiku)(?:-\d{8}|-latest)?"
           r"|claude-(?:opus|sonnet)-4(?:-[01])?" + _ANTHROPIC_DATE + ")",
           seed=False, budget_param="max_tokens", thinking=("enabled",), thinking_budget_min=1024,
           sampling_with_thinking=False,
           evidence="https://docs.claude.com/en/api/messages; " + ANTHROPIC_THINKING_DOC),
    Family("anthropic", "anthropic " + CONSERVATIVE, r"", temperature=False, top_p=False, seed=False,
           budget_param="max_tokens",
           evidence="a model this table does not name: only what every Messages model accepts "
                    "(Opus 4.7 refuses temperature; thinking forms differ by generation)"),
    # -- Google (Gemini generateContent) --------------------------------------------------------
    Family("google", "gemini-3", r"gemini-3(?:\.\d)?-(?:pro|flash|flash-lite)(?:-preview)?",
           budget_param="maxOutputTokens", thinking=("budget",), thinks_by_default=True,
           thinking_can_be_off=False,
           evidence="https://ai.google.dev/gemini-api/docs/thinking: Gemini 3 cannot turn thinking "
                    "off; MAX_TOKENS with no parts at 40 tokens"),
    Family("google", "gemini-2.5-pro", r"gemini-2\.5-pro(?:-(?:preview|exp)-\d{2}-\d{2})?",
           budget_param="maxOutputTokens", thinking=("budget",), thinks_by_default=True,
           thinking_budget_min=128, thinking_budget_max=32768, thinking_can_be_off=False,
           evidence="https://ai.google.dev/gemini-api/docs/thinking: thinkingBudget 128-32768, "
                    "cannot be 0"),
    Family("google", "gemini-2.5-flash-lite", r"gemini-2\.5-flash-lite(?:-preview-\d{2}-\d{2})?",
           budget_param="maxOutputTokens", thinking=("budget",), thinking_budget_min=512,
           thinking_budget_max=24576,
           evidence="https://ai.google.dev/gemini-api/docs/thinking: 0 or 512-24576, off by default"),
    Family("google", "gemini-2.5-flash", r"gemini-2\.5-flash(?:-preview-\d{2}-\d{2})?",
           budget_param="maxOutputTokens", thinking=("budget",), thinks_by_default=True,
           thinking_budget_max=24576,
           evidence="https://ai.google.dev/gemini-api/docs/thinking: 0-24576, on by default"),
    Family("google", "gemini-2.0 and earlier",
           r"gemini-(?:1\.5|2\.0)-(?:pro|flash|flash-lite|flash-8b)(?:-\d{3}|-latest|-exp)?",
           budget_param="maxOutputTokens",
           evidence="https://ai.google.dev/api/generate-content#generationconfig: temperature, "
                    "topP, seed, maxOutputTokens"),
    Family("google", "google " + CONSERVATIVE, r"", temperature=False, top_p=False, seed=False,
           budget_param="maxOutputTokens",
           evidence="a model this table does not name: no sampling parameter, seed or thinking "
                    "setting is sent"),
    # -- OpenAI-compatible servers (vLLM, Ollama, LM Studio) -------------------------------------
    Family("openai-compatible", "served model", r"", budget_param="max_tokens",
           evidence="vLLM/Ollama OpenAI-compatible servers accept the sampling parameters and "
                    "max_tokens"),
)

# Azure OpenAI serves OpenAI's models under deployment names; the rules are the model's.
TABLE_PROVIDER = {"azure": "openai"}


def family_of(provider: str, model: str) -> tuple[Family, bool]:
    """(family, known): the row whose pattern matches the whole name, or the vendor's last row,
    conservative, with ``known=False`` (any name is a served model of an OpenAI-compatible server)."""
    vendor = TABLE_PROVIDER.get(provider, provider)
    rows = [f for f in FAMILIES if f.provider == vendor]
    if vendor == "openai-compatible":
        return rows[0], True
    for f in rows[:-1]:
        if f.matches(model):
            return f, True
    return rows[-1], False
