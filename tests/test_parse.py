"""Answer parsing (Gestalt appendix B) and repetition aggregation (appendix D.4)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.readouts.parse import (WORD_VALUES, Parsed, aggregate_reps, api_error_status,
                                    parse_integer, parse_label, parse_number)
from harness.stimuli.silhouette import CLASSES

CHOICES = (1, 2, 3)

# Real-style answers: (text, expected value, expected status).
CHOICE_TABLE = [
    ("2", 2, "ok"),
    ("3.", 3, "ok"),
    ("One.", 1, "ok"),
    ("two", 2, "ok"),
    ("The answer is **2**", 2, "ok"),
    ("**Answer:** 3", 3, "ok"),
    ("I think 3, not 1", 3, "ok"),
    ("The odd one out is 3.", 3, "ok"),
    ("Which one is the odd one out? Mark number one.", 1, "ok"),
    ("Mark 2 is the odd one out because it is blue while 1 and 3 are red.", 2, "ok"),
    ("1. The first mark is red\n2. The second mark is red\n3. The third is blue", 1, "ok"),
    ("`3`", 3, "ok"),
    ("(2)", 2, "ok"),
    ("Hmm...3", 3, "ok"),
    ("Answer 1, 2, or 3.", 1, "ok"),  # an echoed option list is still the first integer
    ("4", None, "null:out_of_options"),
    ("The odd one out is 4, then 2.", None, "null:out_of_options"),  # only the first integer
    ("0", None, "null:out_of_options"),
    ("-1", None, "null:out_of_options"),
    ("2.5", None, "null:not_integer"),
    ("I'm sorry, but I can't determine which mark is different.", None, "null:no_integer"),
    ("The odd one out is the blue one.", None, "null:no_integer"),
    ("Which one? The slightly darker one, I think.", None, "null:no_integer"),
    ("The answer is one.", 1, "ok"),
    ("Odd one out: 3", 3, "ok"),
    ("", None, "null:empty"),
    ("   \n", None, "null:empty"),
    (None, None, "null:empty"),
]

COUNT_TABLE = [
    ("7", 7, "ok"),
    ("There are 12 distinct color series.", 12, "ok"),
    ("Eleven.", 11, "ok"),
    ("twenty-one", 21, "ok"),
    ("I count 8 groups (possibly 9).", 8, "ok"),
    ("The scatterplot has **6** series.", 6, "ok"),
    ("Approximately 7.5", None, "null:not_integer"),
    ("several", None, "null:no_integer"),
]

LABEL_TABLE = [
    ("airplane", "airplane", "ok"),
    ("Airplane.", "airplane", "ok"),
    ("**Cat**", "cat", "ok"),
    ("It looks like a dog, or maybe a cat.", "dog", "ok"),
    ("Not a cat: it is a dog.", "cat", "ok"),  # first mentioned, by rule
    ("The silhouette shows two bicycles.", "bicycle", "ok"),
    ("This is an elephant", "elephant", "ok"),
    ("A concatenated catalogue of boats", "boat", "ok"),  # word boundaries: no 'cat' inside words
    ("I cannot tell what object this is.", None, "null:no_label"),
    ("A horse.", None, "null:no_label"),
    ("", None, "null:empty"),
]

NUMBER_TABLE = [
    ("42", 42, "ok"),
    ("42%", 42, "ok"),
    ("About 37.5 %", 37.5, "ok"),
    ("The smaller bar is roughly 60 percent of the larger one.", 60, "ok"),
    ("fifty", 50, "ok"),
    ("one hundred percent", 100, "ok"),
    ("0", 0, "ok"),
    ("150%", None, "null:out_of_range"),
    ("-5", None, "null:out_of_range"),
    ("1,000", None, "null:out_of_range"),
    ("I can't estimate that.", None, "null:no_number"),
]


@pytest.mark.parametrize("text,value,status", CHOICE_TABLE)
def test_choice_table(text, value, status):
    p = parse_integer(text, CHOICES)
    assert (p.value, p.status) == (value, status)


@pytest.mark.parametrize("text,value,status", COUNT_TABLE)
def test_count_table(text, value, status):
    p = parse_integer(text, range(1, 31))
    assert (p.value, p.status) == (value, status)


@pytest.mark.parametrize("text,value,status", LABEL_TABLE)
def test_label_table(text, value, status):
    p = parse_label(text, CLASSES)
    assert (p.value, p.status) == (value, status)


@pytest.mark.parametrize("text,value,status", NUMBER_TABLE)
def test_number_table(text, value, status):
    p = parse_number(text)
    assert (p.value, p.status) == (value, status)


def test_longer_label_wins_at_the_same_position():
    assert parse_label("teddy bear", ["bear", "teddy bear", "teddy"]).value == "teddy bear"
    assert parse_label("a polar bear", ["bear", "polar bear"]).value == "polar bear"


def test_api_error_status():
    assert api_error_status("http_500: scripted 500 (after 7 attempts)") == "null:api_error:http_500"
    assert api_error_status("timeout: no response within 5 s") == "null:api_error:timeout"
    # answers the vendor cut short are the model's own nulls
    assert api_error_status("truncated: finish_reason length") == "null:truncated"
    assert api_error_status("refusal: I can't help") == "null:refusal"
    assert api_error_status("safety: finishReason SAFETY") == "null:safety"


# -- properties over generated answers ----------------------------------------------------------

# Filler words that are neither numbers nor silhouette labels (nor contain a label as a word).
FILLER = ["the", "mark", "is", "odd", "I", "think", "answer", "image", "shows", "colour", "clearly",
          "blue", "red", "looks", "like", "**", "-", "(", ")", ":", ",", ".", "!", "\n", "maybe",
          "probably", "object", "silhouette", "this", "picture", "black", "shape"]
filler = st.lists(st.sampled_from(FILLER), max_size=8).map(" ".join)
any_text = st.text(max_size=60)


@given(prefix=filler, k=st.sampled_from(CHOICES), suffix=any_text, as_word=st.booleans())
def test_first_integer_is_parsed(prefix, k, suffix, as_word):
    token = ["zero", "one", "two", "three"][k] if as_word else str(k)
    # "one" right after a determiner is a pronoun ("the one"); end the generated prefix a clause.
    prefix = prefix + " Answer:" if as_word else prefix
    p = parse_integer(f"{prefix} {token} {suffix}", CHOICES)
    assert (p.value, p.status) == (k, "ok")


@given(prefix=filler, n=st.integers(min_value=0, max_value=10**6), suffix=any_text)
def test_first_integer_outside_options_is_null(prefix, n, suffix):
    p = parse_integer(f"{prefix} {n} {suffix}", CHOICES)
    assert p.status == ("ok" if n in CHOICES else "null:out_of_options")


@given(text=filler)
def test_no_number_is_null(text):
    assert parse_integer(text, CHOICES).status in ("null:no_integer", "null:empty")
    assert parse_number(text).status in ("null:no_number", "null:empty")
    assert parse_label(text, CLASSES).status in ("null:no_label", "null:empty")


@given(prefix=filler, label=st.sampled_from(CLASSES), later=st.lists(st.sampled_from(CLASSES)),
       upper=st.booleans(), suffix=st.sampled_from(["", ".", "!", "**", "s", " maybe"]))
def test_first_label_mentioned(prefix, label, later, upper, suffix):
    word = label.upper() if upper else label
    text = f"{prefix} {word}{suffix} " + " ".join(later)
    assert parse_label(text, CLASSES).value == label


@given(prefix=filler, x=st.floats(min_value=0, max_value=100, allow_nan=False).map(lambda v: round(v, 2)),
       percent=st.booleans())
def test_number_round_trip(prefix, x, percent):
    p = parse_number(f"{prefix} {x:g}{'%' if percent else ''} of the larger bar")
    assert p.status == "ok" and p.value == pytest.approx(x)


@given(n=st.integers(min_value=0, max_value=99))
def test_number_words(n):
    words = {v: w for w, v in WORD_VALUES.items()}
    text = words[n] if n in words else f"{words[n - n % 10]}-{words[n % 10]}"
    assert parse_integer(f"I count {text}.").value == n


@settings(max_examples=300)
@given(text=st.one_of(any_text, st.none()))
def test_never_raises_and_status_matches_value(text):
    for p in (parse_integer(text, CHOICES), parse_integer(text), parse_number(text),
              parse_label(text, CLASSES)):
        assert (p.status == "ok") == (p.value is not None)
        assert p.status == "ok" or p.status.startswith("null:")


# -- repetitions -----------------------------------------------------------------------------

def test_majority_vote_and_tie_rule():
    assert aggregate_reps([2, 3, 2], "choice").value == 2
    assert aggregate_reps([3, 2, None, 2, 3], "choice").value == 3  # tie: value given first
    assert aggregate_reps([None, 7, 8, 8], "count").value == 8
    assert aggregate_reps(["cat", "dog", "dog"], "label").value == "dog"
    assert aggregate_reps([40, 50, None], "scalar").value == 45
    assert aggregate_reps([None, None], "choice").status == "null:all_reps_null"
    with pytest.raises(ValueError, match="response space"):
        aggregate_reps([1], "ranking")


@given(values=st.lists(st.one_of(st.none(), st.sampled_from(CHOICES)), min_size=1, max_size=12))
def test_majority_is_a_most_frequent_value(values):
    p = aggregate_reps(values, "choice")
    valid = [v for v in values if v is not None]
    if not valid:
        assert p.value is None
    else:
        assert valid.count(p.value) == max(valid.count(v) for v in valid)
        assert aggregate_reps([p.value], "choice").value == p.value  # one rep: identity


# -- odd answers never raise; parsing is linear ---------------------------------------------------

@pytest.mark.parametrize("text,value", [("ſix", 6), ("fıve", 5), ("FİVE", 5), ("thirty-ſix", 36),
                                        ("ſeven and ſix", 7), ("A HUNDRED", 100)])
def test_unicode_look_alike_number_words(text, value):
    # Case-insensitive matching accepts these look-alikes (ſ folds to s, ı/İ to i); main then
    # raised KeyError looking the matched text up.
    assert parse_integer(text) == Parsed(value, "ok")
    assert parse_integer(text, CHOICES).status == ("ok" if value in CHOICES else "null:out_of_options")
    assert parse_number(text, 0, 1000).value == value


def test_long_digit_strings_give_the_right_reason():
    # main read '9'*400 as float inf and called it not_integer
    assert parse_integer("9" * 400, CHOICES).status == "null:out_of_options"
    assert parse_integer("9" * 400).value == int("9" * 400)
    assert parse_integer("9" * 5000).status == "null:out_of_range"  # past Python's int() limit
    assert parse_number("9" * 400).status == "null:out_of_range"
    assert parse_integer("9" * 5000 + ".5").status == "null:not_integer"


@pytest.mark.timeout(120)
def test_parsing_is_linear_in_the_answer_length():
    # main re-tokenised the whole text for every "one": 55 KB of "which one, " took 20 s.
    def seconds(n: int) -> float:
        text = "which one, " * (n // 11)
        t0 = time.perf_counter()
        assert parse_integer(text, CHOICES).status == "null:no_integer"
        return time.perf_counter() - t0

    small, big = seconds(100_000), seconds(1_000_000)
    # 10x the text: about 10x the time when linear (100x when quadratic); the goal is a
    # 1 MB answer under 1 s, allowed 3x here for a loaded machine (benchmarks/parse_linear.py).
    assert big < 3.0 or big < 25 * small, (small, big)
