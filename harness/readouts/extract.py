"""CHART-6 answer extraction: rule-based by default, the paper's LLM extractor as an option.

The paper's validity criteria (section 2.1): a multiple-choice response is valid when it is an
exact match to one of the options; a numerical response is valid when it contains a single
floating-point value, strings around it ("$" in "$3.27", "cm" in "4cm") removed. The rules here
apply those criteria to the model's own text, after removing its reasoning (``<think>`` blocks, as
:func:`harness.readouts.parse.without_reasoning`) and cutting an echoed prompt (LLaVA-1.5 often
repeats its input; the paper excised it too):

- **choice**: the options mentioned in the response, both sides normalised (case, quotes,
  thousands separators, spacing, final full stop: :func:`harness.stimuli.chart6.normalise_text`),
  matched on character boundaries ("1 to 1" is not inside "1 to 10"; "2" is not inside "2.5");
  a mention inside a longer mentioned option does not count. Exactly one option -> that option; several ->
  ``null:multiple_options``. None -> if the response holds exactly one number and exactly one
  single-number option has that value ("50.24 dollars" for "$50.24"), that option, else
  ``null:no_option``. A bare letter ("B") names an option only where the option *is* that letter
  (CALVI's "A"/"B"/"C"): the paper's prompts list choices without letters.
- **numeric**: the numbers in the response (digits with sign, thousands separators and decimals,
  or number words, as :func:`harness.readouts.parse.numbers` finds them); exactly one distinct
  value -> it ("35. The answer is 35." is one value); none -> ``null:no_number``; two or more ->
  ``null:multiple_numbers`` ("between 30 and 40" is not a single value); one beyond the
  floating-point range ("9" x 400) -> ``null:out_of_range``. Scale words are not
  applied: "1.5 million" is 1.5, as the paper's stripping of units does.
- **text** (ChartQA's non-numeric answers): the first non-empty line, normalised; empty ->
  ``null:empty``.

Invalid responses are ``Parsed(None, 'null:<why>')``: recorded, counted, never raised.

The LLM extractor (:class:`LLMExtractor`, the paper's appendix A.2) sends the paper's Table 5
template (question, choices, model response) to any adapter with ``generate`` and applies the rules
above to its reply, so "valid" means the same thing under both extractors. The paper used GPT-4
with max_tokens 2000, top-p 1.0 and temperature 1.0 (:data:`EXTRACTOR_SETTINGS`). It sees no image:
the adapter is called with ``image=None``. GGR's numeric items use the continuous template.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from ..stimuli.chart6 import normalise_text as normalise
from .parse import OK, AnswerRule, Parsed, after_marker, null, numbers, without_reasoning

# -- normalisation and prompt echoes -------------------------------------------------------------

_LEAD_MARKERS = re.compile(r"^(?:(?:answer|assistant|extracted answer)\s*:\s*)+", re.IGNORECASE)


def excise_prompt(text: str, prompt: str) -> str:
    """The model's answer without its reasoning (:func:`~harness.readouts.parse.without_reasoning`),
    an echo of its prompt and a leading "Answer:" marker.

    The echo is found case-insensitively with any whitespace between its words, with or without
    the ``<image>`` placeholder; the answer is what follows its last occurrence (line breaks kept).
    """
    text = without_reasoning(text)
    for variant in (prompt, prompt.replace("<image>", "")):
        words = variant.split()
        if not words:
            continue
        echo = re.compile(r"\s+".join(map(re.escape, words)), re.IGNORECASE)
        last = None
        for last in echo.finditer(text):  # noqa: B007 (the last match)
            pass
        if last is not None:
            text = text[last.end():]
            break
    return _LEAD_MARKERS.sub("", text.strip()).strip()


# -- rules ---------------------------------------------------------------------------------------

def _mentions(text: str, option: str) -> list[tuple[int, int]]:
    """Spans of ``option`` in ``text`` (both normalised), bounded by non-alphanumerics; a digit
    boundary also excludes a decimal continuation ("2" in "2.5", "5" in "1.5")."""
    pattern = re.compile(rf"(?<![a-z0-9])(?<!\d\.){re.escape(option)}(?![a-z0-9])(?!\.\d)")
    return [m.span() for m in pattern.finditer(text)]


def _single_value(text: str) -> float | None:
    values = {n.value for n in numbers(text)}
    return values.pop() if len(values) == 1 else None


def extract_choice(text: str | None, options: Sequence[str]) -> Parsed:
    """Exactly one of ``options`` (returned as the option string itself)."""
    if not options:
        raise ValueError("extract_choice needs the item's options")
    if text is None or not text.strip():
        return null("empty")
    response = normalise(text)
    spans = {opt: _mentions(response, normalise(opt)) for opt in options}
    every = [(a, b, opt) for opt, found in spans.items() for a, b in found]
    mentioned = {opt for a, b, opt in every
                 if not any(c <= a and b <= d and (d - c) > (b - a) for c, d, _ in every)}
    if len(mentioned) == 1:
        return Parsed(mentioned.pop(), OK)
    if len(mentioned) > 1:
        return null("multiple_options")
    value = _single_value(response)
    if value is not None:
        by_value = [opt for opt in options if _single_value(normalise(opt)) == value]
        if len(by_value) == 1:
            return Parsed(by_value[0], OK)
    return null("no_option")


def extract_number(text: str | None) -> Parsed:
    """A single number, units, currency and percent signs ignored."""
    if text is None or not text.strip():
        return null("empty")
    values = list(dict.fromkeys(n.value for n in numbers(normalise(text))))
    if not values:
        return null("no_number")
    if len(values) > 1:
        return null("multiple_numbers")
    value = values[0]
    try:
        as_float = float(value)
    except OverflowError:  # a 400-digit "number" is no floating-point value (the paper's criterion)
        return null("out_of_range")
    if not math.isfinite(as_float):
        return null("out_of_range")
    return Parsed(int(value) if as_float.is_integer() else value, OK)


def extract_text(text: str | None) -> Parsed:
    """A short text answer: the first non-empty line, normalised."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    if not lines:
        return null("empty")
    return Parsed(normalise(lines[0]), OK)


def extract(text: str | None, response_format: str, options: Sequence[str] = (),
            rule: AnswerRule = "paper") -> Parsed:
    """Dispatch on the item's response format: 'choice', 'numeric' or 'text', on the text without
    its reasoning (a reasoning model's, or a reasoning extractor's, thoughts name other values).
    ``rule`` "final" (a deviation from the paper): the rules on the text after the last "answer:"
    marker, else the last option, number or line of the response."""
    if response_format not in ("choice", "numeric", "text"):
        raise ValueError(f"unknown response format {response_format!r}")
    text = None if text is None else without_reasoning(text)
    if rule == "final" and text is not None:
        tail = after_marker(text)
        if tail is None:
            return _last(text, response_format, options)
        text = tail
    if response_format == "choice":
        return extract_choice(text, options)
    if response_format == "numeric":
        return extract_number(text)
    return extract_text(text)


def _last(text: str, response_format: str, options: Sequence[str]) -> Parsed:
    """``answer_rule: final`` without a marker: the option mentioned last, the last number, the
    last non-empty line."""
    if response_format == "choice":
        response = normalise(text)
        ends = {opt: spans[-1][1] for opt in options if (spans := _mentions(response, normalise(opt)))}
        if ends:
            return Parsed(max(ends, key=lambda opt: (ends[opt], len(opt))), OK)
        found = list(numbers(response))
        return extract_choice(found[-1].text, options) if found else null("no_option")
    if response_format == "numeric":
        found = list(numbers(normalise(text)))
        return extract_number(found[-1].text) if found else null("no_number")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return extract_text(lines[-1] if lines else "")


# -- the paper's LLM extractor (Table 5) ---------------------------------------------------------

EXTRACTION_PREAMBLE = ("Please read the following example. Then extract the answer from the model "
                       "response and type it at the end of the prompt.")
CONTINUOUS_EXTRACTION = (
    EXTRACTION_PREAMBLE + " Hint: Please answer the question requiring a floating-point number with "
    "two decimal places and provide the final value, e.g., 1.23, 1.34, 1.45, at the end. "
    "Question: {question} Model response: {response} Extracted answer:"
)
MC_EXTRACTION = (
    EXTRACTION_PREAMBLE + " Hint: Please answer the question and provide the correct option. "
    "Question: {question} Choices: {choices}. Model response: {response} Extracted answer:"
)
EXTRACTOR_SETTINGS: dict[str, Any] = {"max_new_tokens": 2000, "temperature": 1.0, "top_p": 1.0}


def extraction_prompt(question: str, response: str, choices: Sequence[str] = ()) -> str:
    """Table 5: the multiple-choice template for items with options, else the continuous one."""
    if choices:
        return MC_EXTRACTION.format(question=question, choices=", ".join(choices), response=response)
    return CONTINUOUS_EXTRACTION.format(question=question, response=response)


class LLMExtractor:
    """Extraction by a language model: ``extractor(question, response, choices) -> Generation``."""

    def __init__(self, model, settings: dict[str, Any] | None = None):
        if "generate" not in getattr(model, "capabilities", ()):
            raise ValueError(f"LLM extractor needs a model with 'generate'; {model!r} has "
                             f"{sorted(getattr(model, 'capabilities', ()))}")
        self.model = model
        self.settings = dict(EXTRACTOR_SETTINGS if settings is None else settings)

    def __call__(self, question: str, response: str, choices: Sequence[str] = ()):
        return self.model.generate(None, extraction_prompt(question, response, choices), self.settings)
