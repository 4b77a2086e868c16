"""Reasoning is never parsed as the answer: an open VLM's ``<think>...</think>`` block, and the
vendors' reasoning fields, are kept in the record but removed before the paper's rule (the first
integer, number or label) applies."""

from __future__ import annotations

import pytest

from PIL import Image

from harness.models.base import Generation
from harness.readouts.extract import excise_prompt, extract
from harness.readouts.parse import parse_integer, parse_label, parse_number, without_reasoning
from harness.readouts.prompt import PromptChoice
from harness.scores.record import Score
from harness.scores.tasks import FINAL_RULE, Bootstrap, Family
from harness.stimuli.base import Prompt, Stimulus, StimulusSet


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


# -- answer_rule: final (a deviation from the papers, never the default) --------------------------

@pytest.mark.parametrize("text,options,answer", [
    # a reply that reasons aloud: the paper's first integer reads the reasoning, final the answer
    ("Shape 1 is round and 3 is round, so... Answer: 2", [1, 2, 3], 2),
    ("**Final answer**: 3. (Not 1.)", [1, 2, 3], 3),
    ("answer: 1, earlier I thought so. Answer: two", [1, 2, 3], 2),
    ("Looking at 1 and 3, the odd one is 2", [1, 2, 3], 2),  # no marker: the last number
    ("Answer: none of them", [1, 2, 3], None),  # after the marker only
])
def test_final_rule_reads_the_answer_after_the_last_marker_else_the_last_number(text, options, answer):
    assert parse_integer(text, options, "final").value == answer


def test_final_rule_for_numbers_and_labels():
    assert parse_integer("Shape 1 is round and 3 is round, so... Answer: 2", [1, 2, 3]).value == 1  # the paper's
    assert parse_number("Between 10% and 90%... Answer: 45%", rule="final").value == 45
    assert parse_number("First 10, then 30, finally 45", rule="final").value == 45
    assert parse_number("First 10, then 30, finally 45").value == 10  # the paper's rule
    labels = ["cat", "dog", "horse"]
    assert parse_label("A cat? A dog? Answer: horse, not a dog", labels, "final").value == "horse"
    assert parse_label("A cat? No, it's a dog", labels, "final").value == "dog"
    assert parse_label("A cat? No, it's a dog", labels).value == "cat"
    assert parse_integer("<think>Answer: 1</think>The odd one out is 3", [1, 2, 3], "final").value == 3


def _stimset() -> StimulusSet:
    return StimulusSet(
        task_id="similarity.chart.mark_color", version="1", response_space="choice",
        stimuli=[Stimulus(f"s{i}", "test", 2, Image.new("RGB", (8, 8), (i, 0, 0))) for i in range(2)],
        human_ref_id="x", prompt=Prompt("p.v1", "Which is the odd one out?"), options=(1, 2, 3))


class Replies:
    """A generating model that answers with fixed texts."""

    capabilities = frozenset({"generate"})

    def __init__(self, *texts: str):
        self.texts = texts

    def generate_many(self, images, prompts, settings):
        return [Generation(text=t) for t in self.texts[:len(images)]]


def test_answer_rule_is_a_readout_option_recorded_per_trial_and_named_in_the_method():
    stimset = _stimset()
    with pytest.raises(ValueError, match=r"mark_color: readout prompt_choice: answer_rule 'finl'.*did you mean final"):
        PromptChoice(stimset, answer_rule="finl")
    paper, final = PromptChoice(stimset), PromptChoice(stimset, answer_rule="final")
    assert paper.settings == PromptChoice(stimset, answer_rule="paper").settings != final.settings
    model = Replies("1 and 3 are alike; Answer: 2", "I see 3 marks. Answer: 2")
    assert [r.response for r in paper.respond(model, stimset.stimuli)] == [1, 3]
    responses = final.respond(model, stimset.stimuli)
    assert [r.response for r in responses] == [2, 2]
    assert all(r.extras["answer_rule"] == "final" for r in responses)
    assert "answer_rule" not in paper.respond(model, stimset.stimuli)[0].extras

    family = Family("fake", "tests.test_reasoning:one_score", ("x",))
    records = [{"extras": r.extras} for r in responses]
    (score,) = family.score(records, stimset, Bootstrap())
    assert score.method == "mean; answers read by answer_rule final: " + FINAL_RULE + ", not the paper's rule"
    (score,) = family.score([{"extras": {}}], stimset, Bootstrap())
    assert score.method == "mean"


def one_score(records, stimset, *, boot):
    return [Score("x", 1.0, None, None, len(records), 0, "mean", "1")]


def test_chart6_extraction_reads_the_answer_not_the_reasoning():
    assert extract("<think>maybe 3.5 or 4</think>The value is 5.", "numeric").value == 5
    assert extract("<think>A or B</think>B", "choice", ["A", "B", "C"]).value == "B"
    prompt = "Question: what is the value? Answer:"
    assert excise_prompt("<think>Question: what is the value? 3?</think>Answer: 4", prompt) == "4"
