"""Rule-based answer parsing (Gestalt paper, appendix B) and repetition aggregation (appendix D.4).

Rules, applied to the raw text a model returned once its reasoning is removed
(:func:`without_reasoning`: ``<think>...</think>`` blocks; the record keeps the raw text):

- **choices and counts**: the *first integer* in the response, spelled-out number words accepted
  ("One." -> 1), constrained to the option set: when the first integer is not an option the answer
  is null (``null:out_of_options``); later integers are not searched, because "the first integer"
  is the paper's rule and a later number is as often a restated option list as an answer.
  A first number with a fraction ("2.5") is ``null:not_integer``.
- **text labels**: the *first option mentioned*, case-insensitive, on word boundaries, first by
  position in the text (a longer option wins at the same position); a plain plural ("cats")
  mentions its label.
- **scalar answers** (bar-chart ratios): the first number, decimals and a trailing "%" allowed,
  within ``[lo, hi]`` (0-100 by default), else ``null:out_of_range``.

Anything else is ``response=None`` with a reason: ``null:empty``, ``null:no_integer``,
``null:no_number``, ``null:no_label``, ``null:out_of_options``, ``null:out_of_range``,
``null:not_integer``, or ``null:api_error:<code>`` when the model call itself failed.

``answer_rule: final`` (a readout option; the default ``paper`` is the rules above) reads the
answer where a model that reasons in its reply puts it: the text after the last "answer:" marker
(the rules above applied to it), else the *last* number or label mentioned. This is a deviation
from the papers, offered for such models and said in every score's method; it is never the default.

Number words: zero to ninety-nine and "(one|a) hundred". The word "one" used as a pronoun is not a
number: the Gestalt prompts say "the odd one out", and models echo it ("The odd one out is 3",
"the blue one"), so "one" is skipped when a determiner (the, which, this, each, a, ...) is among
the three words before it in the same clause (a verb like "is" or punctuation ends the look-back:
"The answer is one" is 1), or when "of"/"out" follows it. This is the only deviation from a
literal first-number-word rule.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

OK = "ok"
AnswerRule = Literal["paper", "final"]


@dataclass(frozen=True)
class Parsed:
    value: Any
    status: str  # "ok" or "null:<reason>"

    @property
    def ok(self) -> bool:
        return self.status == OK


def null(reason: str) -> Parsed:
    return Parsed(None, f"null:{reason}")


# Answers the vendor cut short: the model's own null reasons, not failed calls.
CUT_SHORT = ("truncated", "refusal", "safety")


def api_error_status(error: str) -> str:
    """The null reason for a Generation.error of the form '<code>: <detail>': ``null:truncated``,
    ``null:refusal`` or ``null:safety`` for an answer cut short, else ``null:api_error:<code>``."""
    code = error.split(":", 1)[0].strip() or "unknown"
    return f"null:{code}" if code in CUT_SHORT else f"{FAILED_CALL}{code}"


# A null whose call failed (auth, quota, rate limit after retries, server error, timeout,
# transport): the model never answered, so the trial is sent again by a rerun. Every other null
# (unparseable, refusal, truncated, safety) is the model's answer, final as the papers count it;
# so is a request the vendor rejects as such (400, 404, 413, 422: the same request fails the same
# way), one the capability table refuses, or an image a published decision file does not cover.
FAILED_CALL = "null:api_error:"
_REJECTED = re.compile(r"http_4\d\d|refused|request|no_decision")
_NOT_REJECTED = {"http_401", "http_402", "http_403", "http_408", "http_409", "http_429"}


def failed_call(parse_status: str, extras: dict[str, Any] | None = None) -> bool:
    """Whether a trial's null is a failed call rather than an answer; a CHART-6 answer whose
    extractor call failed counts as failed (``extras['extractor_error']``)."""
    if parse_status == "null:extractor_error":
        why = (extras or {}).get("extractor_error")
        return isinstance(why, str) and failed_call(api_error_status(why))
    if not parse_status.startswith(FAILED_CALL):
        return False
    code = parse_status[len(FAILED_CALL):]
    return code in _NOT_REJECTED or not _REJECTED.fullmatch(code)


# -- reasoning ---------------------------------------------------------------------------------

# Reasoning models write their thoughts before the answer (``<think>...</think>``; the opening tag
# is sometimes part of the chat template, so only ``</think>`` is generated). The thoughts name
# candidate answers, so the first-number rule would read one of them: they are removed first
# (the record's raw_output keeps them).
_REASONING_BLOCK = re.compile(r"<(think|thinking)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_REASONING_CLOSE = re.compile(r"</(?:think|thinking)>", re.IGNORECASE)
_REASONING_OPEN = re.compile(r"<(?:think|thinking)>", re.IGNORECASE)


def without_reasoning(text: str) -> str:
    """``text`` without its reasoning: closed blocks removed, everything up to a closing tag left
    without its opening one, and everything after an opening tag never closed (the model was cut
    off while thinking: no answer)."""
    text = _REASONING_BLOCK.sub("", text)
    closes = list(_REASONING_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opened = _REASONING_OPEN.search(text)
    return text[:opened.start()] if opened else text


# "Answer:", "**Answer**:", "Final answer:": the marker a reasoning reply puts its answer after.
_ANSWER_MARKER = re.compile(r"\banswer[\s*_]*:", re.IGNORECASE)


def after_marker(text: str) -> str | None:
    """The text after the last "answer:" marker, or None when there is none."""
    last = None
    for last in _ANSWER_MARKER.finditer(text):  # noqa: B007 (the last match)
        pass
    return None if last is None else text[last.end():]


# -- numbers in text ---------------------------------------------------------------------------

_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen"]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
WORD_VALUES: dict[str, int] = {
    **{w: i for i, w in enumerate(_UNITS)},
    **{w: 10 + i for i, w in enumerate(_TEENS)},
    **{w: 20 + 10 * i for i, w in enumerate(_TENS)},
}
_WORD = (
    r"(?:(?:one|a)\s+hundred"
    rf"|(?:{'|'.join(_TENS)})(?:[-\s](?:{'|'.join(_UNITS[1:])}))?"
    rf"|{'|'.join(_TEENS)}|{'|'.join(_UNITS)})"
)
# Digits: a sign only after a space or bracket (so "1-2" is 1, then 2), thousands groups, decimals.
_DIGITS = r"(?:(?<![\w-])-)?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
_NUMBER_RE = re.compile(rf"(?P<digits>{_DIGITS})|\b(?P<word>{_WORD})\b", re.IGNORECASE)

# "one" as a pronoun: a determiner among the (up to three) words just before it in the same clause
# ("the odd one", "which one", "the slightly darker one"), or "of"/"out" right after it.
_DETERMINERS = {"the", "this", "that", "these", "those", "which", "each", "every", "any", "no",
                "another", "other", "a", "an"}
_CLAUSE_BREAKS = {"is", "are", "was", "be", "say", "choose", "pick", "select", "answer"}
_PRONOUN_AFTER = {"of", "out"}


@dataclass(frozen=True)
class Number:
    start: int
    value: float | int  # an int when written without a fraction (exact at any length)
    text: str

    @property
    def is_integer(self) -> bool:
        if isinstance(self.value, int):
            return True
        return "." not in self.text if math.isinf(self.value) else self.value.is_integer()


# Python refuses int() of longer digit strings (sys.get_int_max_str_digits); such a number is
# kept as +-inf, which no option or range admits.
_MAX_INT_DIGITS = 4000


def _digits_value(text: str) -> float | int:
    plain = text.replace(",", "")
    if "." in plain:
        return float(plain)
    if len(plain) > _MAX_INT_DIGITS:
        return -math.inf if plain.startswith("-") else math.inf
    return int(plain)


def _canonical(piece: str) -> str:
    """The number word a case-insensitive regex match stands for: matched the same way the
    pattern was, so Unicode look-alikes that the match accepted ("ſix", "fıve", "FİVE") resolve
    instead of raising."""
    low = piece.lower()
    if low in WORD_VALUES or low == "hundred":
        return low
    return next(w for w in (*WORD_VALUES, "hundred", "a")
                if re.fullmatch(re.escape(w), piece, re.IGNORECASE))


def _word_value(word: str) -> int:
    w = [_canonical(x) for x in re.split(r"[-\s]+", word) if x]
    if w[-1] == "hundred":
        return 100
    return sum(WORD_VALUES[x] for x in w)


# The look-around for the pronoun "one" is one anchored match on each side (the look-back runs on
# the reversed text), so parsing stays linear however many "one"s a long answer holds.
_SEP = r"[\s*_`]*"  # what separates tokens: whitespace and markdown marks
_TOK = r"([a-z']+|[^\sa-z'*_`])"  # a word, or one punctuation mark
_NEXT_TOKEN = re.compile(_SEP + _TOK, re.IGNORECASE)
_LAST_TOKENS = re.compile(_SEP + _TOK + f"(?:{_SEP}{_TOK})?" * 2, re.IGNORECASE)


def _is_pronoun_one(text: str, reversed_text: str, m: re.Match) -> bool:
    if m.group("word").lower() != "one":  # no Unicode look-alike folds to o, n or e
        return False
    after = _NEXT_TOKEN.match(text, m.end())
    if after is not None and after.group(1).lower() in _PRONOUN_AFTER:
        return True
    before = _LAST_TOKENS.match(reversed_text, len(text) - m.start())
    for token in (t[::-1].lower() for t in (before.groups() if before else ()) if t):
        if token in _DETERMINERS:
            return True
        if token in _CLAUSE_BREAKS or not token[0].isalpha():
            return False
    return False


def numbers(text: str) -> Iterable[Number]:
    """Numbers in ``text`` in order of position: digits (with sign, thousands groups, decimals)
    and number words, skipping the pronoun "one"."""
    reversed_text = ""
    for m in _NUMBER_RE.finditer(text):
        if m.group("digits") is not None:
            yield Number(m.start(), _digits_value(m.group("digits")), m.group("digits"))
            continue
        if not reversed_text:
            reversed_text = text[::-1]
        if not _is_pronoun_one(text, reversed_text, m):
            yield Number(m.start(), _word_value(m.group("word")), m.group("word"))


def _first_number(text: str) -> Number | None:
    return next(iter(numbers(text)), None)


def _chosen_number(text: str, rule: AnswerRule) -> Number | None:
    """The paper's first number, or under ``final`` the first after the last marker, else the last."""
    if rule == "final":
        tail = after_marker(text)
        if tail is None:
            found = None
            for found in numbers(text):  # noqa: B007 (the last number)
                pass
            return found
        text = tail
    return _first_number(text)


# -- parsers -----------------------------------------------------------------------------------

def parse_integer(text: str | None, options: Sequence[int] | None = None, rule: AnswerRule = "paper") -> Parsed:
    """Choices and counts: the first integer in the response (``rule``: see the module), constrained
    to ``options`` (any integer when ``options`` is empty or None)."""
    text = None if text is None else without_reasoning(text)
    if text is None or not text.strip():
        return null("empty")
    first = _chosen_number(text, rule)
    if first is None:
        return null("no_integer")
    if not first.is_integer:
        return null("not_integer")
    if isinstance(first.value, float) and not math.isfinite(first.value):  # beyond any count
        return null("out_of_options" if options else "out_of_range")
    value = int(first.value)
    if options and value not in {int(o) for o in options}:
        return null("out_of_options")
    return Parsed(value, OK)


def parse_number(text: str | None, lo: float = 0.0, hi: float = 100.0, rule: AnswerRule = "paper") -> Parsed:
    """Scalar answers: the first number (a trailing '%' is allowed; ``rule``: see the module),
    within ``[lo, hi]``."""
    text = None if text is None else without_reasoning(text)
    if text is None or not text.strip():
        return null("empty")
    first = _chosen_number(text, rule)
    if first is None:
        return null("no_number")
    if not lo <= first.value <= hi:
        return null("out_of_range")
    value = first.value
    return Parsed(int(value) if first.is_integer else value, OK)


def _label_pattern(label: str) -> re.Pattern:
    words = r"\s+".join(re.escape(w) for w in label.split())
    return re.compile(rf"(?<!\w)({words})(?:e?s)?(?!\w)", re.IGNORECASE)


def parse_label(text: str | None, labels: Sequence[str], rule: AnswerRule = "paper") -> Parsed:
    """Text labels: the first option mentioned (case-insensitive, word boundaries; ``rule``: see
    the module)."""
    if not labels:
        raise ValueError("parse_label needs a non-empty label set")
    text = None if text is None else without_reasoning(text)
    if text is None or not text.strip():
        return null("empty")
    last = False
    if rule == "final":
        tail = after_marker(text)
        text, last = (text, True) if tail is None else (tail, False)
    best: tuple[int, int, str] | None = None  # (start, -length, label), or (-end, -length, label) for the last
    for label in labels:
        if last:
            found = list(_label_pattern(label).finditer(text))
            cand = (-found[-1].end(), -len(label), label) if found else None
        else:
            m = _label_pattern(label).search(text)
            cand = (m.start(), -len(label), label) if m is not None else None
        if cand is not None and (best is None or cand < best):
            best = cand
    if best is None:
        return null("no_label")
    return Parsed(best[2], OK)


# -- repetitions -------------------------------------------------------------------------------

def aggregate_reps(values: Sequence[Any], response_space: str) -> Parsed:
    """One response from the parseable responses of an item's repetitions (nulls are ``None``).

    Choice, count and label answers: majority vote. A tie goes to the tied value given *first*
    (lowest repetition index): repetitions are exchangeable draws, so this is as fair as a coin
    and, unlike one, reproducible. Scalar answers: the mean. No parseable repetition:
    ``null:all_reps_null``. With one repetition (the paper's greedy protocol) this is the identity.
    """
    valid = [v for v in values if v is not None]
    if not valid:
        return null("all_reps_null")
    if response_space == "scalar":
        mean = sum(float(v) for v in valid) / len(valid)
        return Parsed(mean, OK)
    if response_space not in ("choice", "count", "label"):
        raise ValueError(f"unknown response space {response_space!r}")
    counts = Counter(valid)
    top = max(counts.values())
    return Parsed(next(v for v in valid if counts[v] == top), OK)
