"""Rule-based answer parsing (Gestalt paper, appendix B) and repetition aggregation (appendix D.4).

Rules, applied to the raw text a model returned:

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

Number words: zero to ninety-nine and "(one|a) hundred". The word "one" used as a pronoun is not a
number: the Gestalt prompts say "the odd one out", and models echo it ("The odd one out is 3",
"the blue one"), so "one" is skipped when a determiner (the, which, this, each, a, ...) is among
the three words before it in the same clause (a verb like "is" or punctuation ends the look-back:
"The answer is one" is 1), or when "of"/"out" follows it. This is the only deviation from a
literal first-number-word rule.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable, Sequence

OK = "ok"


@dataclass(frozen=True)
class Parsed:
    value: Any
    status: str  # "ok" or "null:<reason>"

    @property
    def ok(self) -> bool:
        return self.status == OK


def null(reason: str) -> Parsed:
    return Parsed(None, f"null:{reason}")


def api_error_status(error: str) -> str:
    """``null:api_error:<code>`` from a Generation.error of the form '<code>: <detail>'."""
    code = error.split(":", 1)[0].strip() or "unknown"
    return f"null:api_error:{code}"


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
_TOKEN_RE = re.compile(r"[a-z']+|[^\sa-z'*_`]")  # words, and punctuation except markdown marks


@dataclass(frozen=True)
class Number:
    start: int
    value: float
    text: str

    @property
    def is_integer(self) -> bool:
        return float(self.value).is_integer()


def _word_value(word: str) -> int:
    w = re.sub(r"[-\s]+", " ", word.lower()).split(" ")
    if w[-1] == "hundred":
        return 100
    return sum(WORD_VALUES[x] for x in w)


def _is_pronoun_one(text: str, m: re.Match) -> bool:
    if m.group("word").lower() != "one":
        return False
    after = _TOKEN_RE.findall(text[m.end():].lower())
    if after and after[0] in _PRONOUN_AFTER:
        return True
    for token in reversed(_TOKEN_RE.findall(text[:m.start()].lower())[-3:]):
        if token in _DETERMINERS:
            return True
        if token in _CLAUSE_BREAKS or not token[0].isalpha():
            return False
    return False


def numbers(text: str) -> Iterable[Number]:
    """Numbers in ``text`` in order of position: digits (with sign, thousands groups, decimals)
    and number words, skipping the pronoun "one"."""
    for m in _NUMBER_RE.finditer(text):
        if m.group("digits") is not None:
            yield Number(m.start(), float(m.group("digits").replace(",", "")), m.group("digits"))
        elif not _is_pronoun_one(text, m):
            yield Number(m.start(), float(_word_value(m.group("word"))), m.group("word"))


def _first_number(text: str) -> Number | None:
    return next(iter(numbers(text)), None)


# -- parsers -----------------------------------------------------------------------------------

def parse_integer(text: str | None, options: Sequence[int] | None = None) -> Parsed:
    """Choices and counts: the first integer in the response, constrained to ``options``
    (any integer when ``options`` is empty or None)."""
    if text is None or not text.strip():
        return null("empty")
    first = _first_number(text)
    if first is None:
        return null("no_integer")
    if not first.is_integer:
        return null("not_integer")
    value = int(first.value)
    if options and value not in set(int(o) for o in options):
        return null("out_of_options")
    return Parsed(value, OK)


def parse_number(text: str | None, lo: float = 0.0, hi: float = 100.0) -> Parsed:
    """Scalar answers: the first number (a trailing '%' is allowed), within ``[lo, hi]``."""
    if text is None or not text.strip():
        return null("empty")
    first = _first_number(text)
    if first is None:
        return null("no_number")
    if not lo <= first.value <= hi:
        return null("out_of_range")
    value = first.value
    return Parsed(int(value) if value.is_integer() else value, OK)


def _label_pattern(label: str) -> re.Pattern:
    words = r"\s+".join(re.escape(w) for w in label.split())
    return re.compile(rf"(?<!\w)({words})(?:e?s)?(?!\w)", re.IGNORECASE)


def parse_label(text: str | None, labels: Sequence[str]) -> Parsed:
    """Text labels: the first option mentioned (case-insensitive, word boundaries)."""
    if not labels:
        raise ValueError("parse_label needs a non-empty label set")
    if text is None or not text.strip():
        return null("empty")
    best: tuple[int, int, str] | None = None  # (start, -length, label)
    for label in labels:
        m = _label_pattern(label).search(text)
        if m is not None:
            cand = (m.start(), -len(label), label)
            if best is None or cand < best:
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
