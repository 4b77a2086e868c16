"""Reliability campaign: answer fuzzing with hypothesis.

Three experiments over the answer parsers (parse_integer / parse_number / parse_label, and the
CHART-6 extraction rules): arbitrary Unicode answers; number words with Unicode case-folding
look-alikes (the long s, dotless and dotted i, the Kelvin sign, ...) that a case-insensitive match
accepts; long degenerate answers up to 1 MB. Every answer must become a value or a null reason
(never an exception), look-alikes must read as the word they stand for, and parsing time must grow
linearly. Each prints one summary line.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.readouts.extract import excise_prompt, extract
from harness.readouts.parse import WORD_VALUES, parse_integer, parse_label, parse_number
from harness.stimuli.silhouette import CLASSES

CHOICES = (1, 2, 3)
OPTIONS = ("$57.36", "$47.82", "1 to 10", "B")


def parse_all(text: str | None) -> list:
    out = [parse_integer(text, CHOICES), parse_integer(text), parse_number(text),
           parse_label(text, CLASSES), extract(text, "numeric"), extract(text, "choice", OPTIONS),
           extract(text, "text")]
    if text is not None:
        out.append(excise_prompt(text, "Which one is the odd one out?"))
    return out


def consistent(parsed) -> bool:
    if isinstance(parsed, str):
        return True
    return (parsed.status == "ok") == (parsed.value is not None) and (
        parsed.status == "ok" or parsed.status.startswith("null:"))


class Tally:
    def __init__(self):
        self.n = 0

    def add(self, k: int = 1) -> None:
        self.n += k


# -- 1. arbitrary Unicode -------------------------------------------------------------------------

def test_arbitrary_unicode_answers(capsys):
    tally = Tally()

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.one_of(st.none(), st.text(max_size=200),
                     st.text(alphabet=st.characters(codec="utf-8"), max_size=60)))
    def run(text):
        assert all(consistent(p) for p in parse_all(text))
        tally.add()

    run()
    with capsys.disabled():
        print(f"\nanswer fuzz, arbitrary Unicode: {tally.n} answers x 8 parsers, 0 exceptions, "
              f"every result a value or a null reason")


# -- 2. Unicode case-folding look-alikes --------------------------------------------------------

# Characters that Python's case-insensitive matching takes for an ASCII letter.
LOOK_ALIKES = {"s": "sſS", "i": "iıİI", "k": "kKK", "o": "oO", "n": "nN", "e": "eE", "t": "tT",
               "h": "hH", "r": "rR", "f": "fF", "v": "vV", "w": "wW", "u": "uU", "x": "xX", "g": "gG",
               "y": "yY", "l": "lL", "z": "zZ", "d": "dD", "a": "aA"}
WORDS = [w for w in WORD_VALUES if w != "zero"] + ["thirty-six", "forty two", "ninety-nine"]


def number_of(word: str) -> int:
    parts = word.replace("-", " ").split()
    return sum(WORD_VALUES[p] for p in parts)


@st.composite
def folded(draw):
    word = draw(st.sampled_from(WORDS))
    spelled = "".join(draw(st.sampled_from(LOOK_ALIKES.get(c, c))) for c in word)
    before = draw(st.sampled_from(["", "I count ", "Answer: ", "**", "There are "]))
    after = draw(st.sampled_from(["", ".", " marks", "!", "**"]))
    return word, before + spelled + after


def test_case_folded_number_words(capsys):
    tally, unusual = Tally(), Tally()

    @settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
    @given(folded())
    def run(case):
        word, text = case
        results = parse_all(text)
        assert all(consistent(p) for p in results)
        value = number_of(word)
        assert parse_integer(text).value == value, text  # a look-alike reads as its word
        assert parse_integer(text, CHOICES).status == ("ok" if value in CHOICES else "null:out_of_options")
        tally.add()
        unusual.add(any(ord(c) > 127 for c in text))

    run()
    with capsys.disabled():
        print(f"answer fuzz, Unicode case-folding: {tally.n} number words ({unusual.n} with non-ASCII "
              f"look-alikes such as 'ſix', 'fıve', 'FİVE'), 0 exceptions, every one read as its number")


# -- 3. long degenerate answers -----------------------------------------------------------------

UNITS = ["which one, ", "one ", "the odd one ", "9", "-", "1,", ",000", "1.", "**", "ſ", "İ", " ",
         "\n", "one-", "thirty-", "a hundred ", "$", "1 to 1", "cat ", "(", "0.5%"]


@pytest.mark.slow
def test_long_degenerate_answers(capsys):
    slowest: dict[str, float] = {}
    tally = Tally()

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(UNITS), st.sampled_from([1_000, 10_000, 100_000]))
    def run(unit, size):
        text = unit * (size // len(unit))
        assert all(consistent(p) for p in parse_all(text))
        tally.add()

    run()
    # 1 MB of each unit through the first-integer rule, timed: linear means about 10x of 100 KB.
    ratios = []
    for unit in UNITS:
        took = []
        for size in (100_000, 1_000_000):
            text = unit * (size // len(unit))
            t0 = time.perf_counter()
            assert consistent(parse_integer(text, CHOICES))
            took.append(time.perf_counter() - t0)
        slowest[unit] = took[1]
        ratios.append(took[1] / max(took[0], 0.02))  # below 20 ms, timer noise is the ratio
    worst = max(slowest, key=slowest.__getitem__)
    assert max(ratios) < 30, dict(zip(UNITS, ratios))  # quadratic would be ~100
    with capsys.disabled():
        print(f"answer fuzz, long degenerate answers: {tally.n} answers of 1-100 KB x 8 parsers and "
              f"{len(UNITS)} of 1 MB, 0 exceptions; slowest 1 MB parse {slowest[worst]:.2f} s ({worst!r}), "
              f"largest 10x-length time ratio {max(ratios):.1f}")
