"""Reasoning is never parsed as the answer: an open VLM's ``<think>...</think>`` block, and the
vendors' reasoning fields, are kept in the record but removed before the paper's rule (the first
integer, number or label) applies."""

from __future__ import annotations

import pytest

from harness.readouts.parse import parse_integer, parse_label, parse_number, without_reasoning


@pytest.mark.parametrize("text,answer", [
    ("<think>Shape 1 is round, 2 is round... so 3.</think>\nThe odd one out is 2", "\nThe odd one out is 2"),
    ("<think>1? 3?</think><think>no, 2</think> 2", " 2"),
    ("<THINK>\n1 or 3\n</THINK>2", "2"),
    ("<thinking>1 then 3</thinking>Answer: 2", "Answer: 2"),
    # the opening tag sits in the chat template, so only the closing one is generated
    ("Counting: 1, 2, 3, 4.\n</think>\n\n5", "\n\n5"),
    # cut off while thinking: no answer at all
    ("<think>1, 2, 3 and then", ""),
    ("No reasoning here: 3", "No reasoning here: 3"),
])
def test_reasoning_blocks_are_removed(text, answer):
    assert without_reasoning(text) == answer


def test_the_papers_rules_read_the_answer_not_the_reasoning():
    thought = "<think>Image 1 has 4 sides, image 3 has 4 sides; 2 has 3.</think>The odd one out is 2."
    assert parse_integer(thought, [1, 2, 3]).value == 2
    assert parse_number("<think>maybe 10% or 90%</think>About 45%").value == 45
    assert parse_label("<think>a dog? a cat?</think>It is a horse.", ["cat", "dog", "horse"]).value == "horse"
    assert parse_integer("<think>1, 2, 3", [1, 2, 3]).status == "null:empty"
