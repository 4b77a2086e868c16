"""CHART-6 answer extraction and administration: realistic answers, prompts, settings, extractor."""

import pytest

from harness.models.base import Generation, ModelAdapter
from harness.readouts.chart6 import PAPER_MODELS, Chart6Readout, decoding_grid, paper_model
from harness.readouts.extract import (CONTINUOUS_EXTRACTION, LLMExtractor, excise_prompt, extract,
                                      extract_choice, extract_number, extract_text)
from harness.stimuli import chart6
from harness.stimuli.chart6_multiple_choice import build_ggr
from harness.stimuli.registry import TASKS

GGR_10 = ["Crosicol", "Hertinol", "They are equal", "Can't say"]
CALVI_T42 = ["A", "B", "C", "Cannot be inferred / inadequate information"]
CALVI_N2 = ["It was higher on Jan 08 than Jan 07.", "It increased from Jan 11 to Jan 15.",
            "All of the days had more than 25 accidents.", "It decreased from Jan 03 to Jan 07."]
VLAT_1 = ["$57.36", "$47.82", "$50.24", "$39.72"]
VLAT_41 = ["1 to 1", "1 to 2", "1 to 3", "1 to 4"]
VLAT_37 = ["$4.4 - $6.2", "$4.6 - $5.9", "$4.6 - $6.0", "$4.6 - $6.1"]

CHOICE_CASES = [
    ("B) 45", ["15", "30", "45", "60"], "45"),
    ("The answer is C. Hertinol", GGR_10, "Hertinol"),
    ("they are equal.", GGR_10, "They are equal"),
    ("Can\u2019t say", GGR_10, "Can't say"),
    ("Hertinol", GGR_10, "Hertinol"),
    ("A", CALVI_T42, "A"),
    ("Cannot be inferred / inadequate information.", CALVI_T42,
     "Cannot be inferred / inadequate information"),
    ("It increased from Jan 11 to Jan 15", CALVI_N2, "It increased from Jan 11 to Jan 15."),
    ("1 to 1", VLAT_41, "1 to 1"),
    ("$4.6 - $6.0", VLAT_37, "$4.6 - $6.0"),
    ("TRUE", ["TRUE", "FALSE"], "TRUE"),
    ("False.", ["TRUE", "FALSE"], "FALSE"),
    ("$50.24", VLAT_1, "$50.24"),
    ("50.24 dollars", VLAT_1, "$50.24"),  # a single number naming one single-number option
    ("About 25%", ["15%", "25%", "33%", "50%"], "25%"),
]
CHOICE_NULLS = [
    ("Hertinol or Crosicol", GGR_10, "null:multiple_options"),
    ("Choices: Crosicol, Hertinol, They are equal, Can't say.", GGR_10, "null:multiple_options"),
    ("C", GGR_10, "null:no_option"),  # the prompt lists no letters
    ("The ratio is 1 to 10", VLAT_41, "null:no_option"),  # "1 to 1" is not inside "1 to 10"
    ("2.5", ["2", "3"], "null:no_option"),  # "2" is not inside "2.5"
    ("About 35%", ["15%", "25%", "33%", "50%"], "null:no_option"),
    ("", GGR_10, "null:empty"),
    (None, GGR_10, "null:empty"),
]
NUMBER_CASES = [
    ("$3.27", 3.27), ("4cm", 4), ("About 35%", 35), ("1,234.5", 1234.5), ("-3.2", -3.2),
    ("35. The answer is 35.", 35), ("The answer is thirty-five percent.", 35),
    ("Approximately 4.87 stars", 4.87), ("1.5 million", 1.5),
]
NUMBER_NULLS = [
    ("between 30 and 40", "null:multiple_numbers"), ("30-40", "null:multiple_numbers"),
    ("In 2015 it was 35%", "null:multiple_numbers"), ("2015/16", "null:multiple_numbers"),
    ("I don't know", "null:no_number"), ("", "null:empty"), (None, "null:empty"),
]


@pytest.mark.parametrize("text,options,expected", CHOICE_CASES)
def test_choice_extraction(text, options, expected):
    parsed = extract_choice(text, options)
    assert (parsed.value, parsed.status) == (expected, "ok")


@pytest.mark.parametrize("text,options,status", CHOICE_NULLS)
def test_choice_nulls(text, options, status):
    parsed = extract_choice(text, options)
    assert (parsed.value, parsed.status) == (None, status)


@pytest.mark.parametrize("text,expected", NUMBER_CASES)
def test_number_extraction(text, expected):
    parsed = extract_number(text)
    assert parsed.status == "ok" and parsed.value == pytest.approx(expected)


@pytest.mark.parametrize("text,status", NUMBER_NULLS)
def test_number_nulls(text, status):
    assert extract_number(text).status == status and extract_number(text).value is None


def test_text_extraction_and_dispatch():
    assert extract_text("United Kingdom.\nBecause the bar is longest").value == "united kingdom"
    assert extract_text(" \n ").status == "null:empty"
    assert extract("4cm", "numeric").value == 4
    assert extract("B) 45", "choice", ["45", "60"]).value == "45"
    with pytest.raises(ValueError):
        extract("x", "essay")


def test_excise_prompt():
    prompt = "USER: <image>\nQuestion: What is the value of X? Choices: 1, 2.\nASSISTANT:"
    assert excise_prompt("USER:  \nquestion: what is the value of x?  Choices: 1, 2. ASSISTANT: 2",
                         prompt) == "2"
    assert excise_prompt(prompt + " 2", prompt) == "2"
    assert excise_prompt("Answer: 45", "Question: q\nAnswer:") == "45"
    assert excise_prompt("Line one\nline two", "unrelated prompt") == "Line one\nline two"


# -- the administration --------------------------------------------------------------------------

class FakeModel(ModelAdapter):
    """A generate-capable adapter returning scripted texts, recording what it was sent."""

    capabilities = frozenset({"generate"})
    fingerprint = {"fake": "scripted"}

    def __init__(self, texts, error=None):
        self.texts = list(texts)
        self.error = error
        self.calls = []

    def generate(self, image, prompt, settings):
        self.calls.append((image, prompt, dict(settings)))
        if self.error:
            return Generation(text=None, error=self.error)
        return Generation(text=self.texts.pop(0), latency_s=0.01, usage={"output_tokens": 3})




def test_paper_prompt_for_gpt4v(vlat):
    """Table 3's multiple-choice template with Table 4's GPT-4V prefix and suffix."""
    readout = Chart6Readout(vlat, paper_model="GPT-4V")
    item = vlat.test[0]
    assert readout.item_prompt(item) == (
        "Question: The first part of this study consists of 53 multiple choice questions associated "
        "with visualizations, and you will be asked to choose the best answer for each question. You "
        "are required to provide an answer to the current question. Your answer must be one of the "
        "choices provided. Your answer must be one of the choices provided. What was the price of a "
        "barrel of oil in February 2015? Choices: $57.36, $47.82, $50.24, $39.72.\nAnswer:")
    reversed_order = Chart6Readout(vlat, paper_model="GPT-4V", choice_order="reversed")
    assert "Choices: $39.72, $50.24, $47.82, $57.36." in reversed_order.item_prompt(item)


def test_continuous_prompt_and_llava_prefix(holf):
    readout = Chart6Readout(holf, paper_model="llava-hf/llava-1.5-7b-hf")
    prompt = readout.item_prompt(holf.test[0])
    assert prompt.startswith("USER: \nYou will be presented with a series of data visualizations")
    assert prompt.endswith(" On average, what is the rating of Action movies?\nASSISTANT:")
    assert "<image>" not in prompt and "Choices" not in prompt


@pytest.mark.parametrize("name", list(PAPER_MODELS))
def test_table2_defaults(vlat, name):
    m = PAPER_MODELS[name]
    settings = Chart6Readout(vlat, paper_model=name).generation_settings(rep=3)
    assert settings == {"max_new_tokens": 270, "temperature": m.temperature, "top_p": m.top_p,
                        "seed": vlat.seed + 3, "exact": ["temperature", "top_p"]}


def test_settings_and_options(vlat):
    assert paper_model("LLaVA1.5-Vicuna-13B").temperature == 0.4
    assert Chart6Readout(vlat).options["prefix"] == "" and Chart6Readout(vlat).n_reps == 10
    greedy = Chart6Readout(vlat, paper_model="GPT-4V", greedy=True).generation_settings(0)
    assert greedy["temperature"] == 0.0 and greedy["top_p"] is None
    own = Chart6Readout(vlat, paper_model="GPT-4V", temperature=0.7, n_reps=3)
    assert own.generation_settings(0)["temperature"] == 0.7 and own.n_reps == 3
    assert "n_reps" not in own.settings
    assert Chart6Readout(vlat, temperature=0.7).settings != Chart6Readout(vlat).settings
    for bad in ({"colour": 1}, {"choice_order": "random"}, {"extractor": "llm"},
                {"paper_model": "GPT-5"}, {"n_reps": 0}):
        with pytest.raises(ValueError):
            Chart6Readout(vlat, **bad)


def test_decoding_grid():
    grid = decoding_grid()
    assert len(grid) == 9 and len({tuple(sorted(g.items())) for g in grid}) == 9
    assert {g["temperature"] for g in grid if g["top_p"] == 1.0} == {0.2, 0.4, 0.6, 0.8, 1.0}
    assert {g["top_p"] for g in grid if g["temperature"] == 1.0} == {0.2, 0.4, 0.6, 0.8, 1.0}
    assert all((g in grid) for g in ({"temperature": 0.2, "top_p": 1.0}, {"temperature": 1.0, "top_p": 0.6}))


def test_respond_records_raw_and_extracted(vlat, holf):
    items = vlat.test[:3]
    model = FakeModel(["The answer is $50.24.", "December", "I am not sure, maybe $35 - $65 or $37.04 - $60.95"])
    readout = Chart6Readout(vlat, paper_model="GPT-4V")
    readout.rep = 2
    out = readout.respond(model, items)
    assert [r.response for r in out] == ["$50.24", "December", None]
    assert [r.parse_status for r in out] == ["ok", "ok", "null:multiple_options"]
    assert out[2].raw_output.startswith("I am not sure") and out[2].extras["valid"] is False
    assert [r.extras["correct"] for r in out] == [True, True, None]
    assert model.calls[0][2]["seed"] == vlat.seed + 2 and model.calls[0][0].mode == "RGB"
    # numeric, relaxed: 4.87 is the answer, within 5% is correct, two numbers are invalid
    item = holf.test[0]
    model = FakeModel(["About 5.0 stars", "5.2", "4.5 or 5", "USER: echo"])
    readout = Chart6Readout(holf)
    out = [readout.respond(model, [item])[0] for _ in range(3)]
    assert [r.response for r in out] == [5, 5.2, None]
    assert [r.extras["correct"] for r in out] == [True, False, None]
    assert out[2].parse_status == "null:multiple_numbers"


def test_generation_error_is_a_null(vlat):
    out = Chart6Readout(vlat).respond(FakeModel([], error="429: rate limited"), vlat.test[:1])
    assert out[0].response is None and out[0].parse_status == "null:api_error:429"
    assert out[0].extras["error"] == "429: rate limited"


def test_llm_extractor_table5(vlat, holf):
    extractor_model = FakeModel(["$47.82", "The extracted answer is 4.87"])
    extractor = LLMExtractor(extractor_model)
    extractor("What was the price?", "It is about 47.82", VLAT_1)
    image, prompt, settings = extractor_model.calls[0]
    assert image is None and settings == {"max_new_tokens": 2000, "temperature": 1.0, "top_p": 1.0}
    assert prompt == ("Please read the following example. Then extract the answer from the model "
                      "response and type it at the end of the prompt. Hint: Please answer the question "
                      "and provide the correct option. Question: What was the price? Choices: $57.36, "
                      "$47.82, $50.24, $39.72. Model response: It is about 47.82 Extracted answer:")
    extractor("Q?", "r")
    assert extractor_model.calls[1][1] == CONTINUOUS_EXTRACTION.format(question="Q?", response="r")
    with pytest.raises(ValueError):
        LLMExtractor(object())


def test_readout_with_llm_extractor(vlat):
    extractor_model = FakeModel(["$47.82", "none of them"])
    readout = Chart6Readout(vlat, extractor="llm", extractor_model=extractor_model)
    model = FakeModel(["I think the second choice, 47.82 dollars, maybe 50", "no idea"])
    out = readout.respond(model, vlat.test[:1]) + readout.respond(model, vlat.test[:1])
    assert out[0].response == "$47.82" and out[0].extras["extracted"] == "$47.82"
    assert out[0].raw_output.startswith("I think") and out[0].extras["correct"] is False
    assert out[1].response is None and out[1].parse_status == "null:no_option"
    assert isinstance(readout.settings["extractor_model"], str)  # fingerprint hash, JSON-able


def test_readout_refuses_other_tasks(sources):
    with pytest.raises(ValueError, match="CHART-6"):
        Chart6Readout(TASKS["closure.nat.silhouette"].build(sources))


def test_item_scoring_rules(sources, holf):
    ggr = build_ggr(sources)
    numeric = next(s for s in ggr.test if s.meta["response_format"] == "numeric")
    assert chart6.is_correct(numeric, numeric.ground_truth)
    assert not chart6.is_correct(numeric, numeric.ground_truth * 1.01)  # GGR: exact
    item = holf.test[0]  # 4.87
    assert chart6.is_correct(item, 4.87 * 1.0499) and not chart6.is_correct(item, 4.87 * 1.0501)
    assert chart6.is_correct(item, 4.87 * 0.9501) and not chart6.is_correct(item, 4.87 * 0.9499)


def test_preflight_refuses_an_api_model_that_would_drop_the_papers_decoding(vlat, monkeypatch):
    # o3 takes neither temperature nor top_p (its vendor refuses them): GPT-4V's Table 2 temperature 0.2
    # cannot be honoured, so the run is refused before it starts, naming model and parameter.
    from harness.models.base import ModelError, ModelSpec
    from harness.models.registry import build_adapter

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    o3 = build_adapter(ModelSpec(id="o3", source="api", name="openai/o3", options={"max_tokens": 4000}))
    with pytest.raises(ModelError, match=r"'o3'.*temperature=0.2"):
        Chart6Readout(vlat, paper_model="GPT-4V").preflight(o3)
    # the neutral temperature/top_p 1.0 (a model the paper did not run) is dropped, and said so
    gpt5 = build_adapter(ModelSpec(id="g", source="api", name="openai/gpt-5.1",
                                   options={"reasoning_effort": "low", "max_tokens": 4000}))
    assert Chart6Readout(vlat).preflight(gpt5) == {"temperature": 1.0, "top_p": 1.0}
    # the extractor model is checked too (Opus 4.7 takes no temperature)
    readout = Chart6Readout(vlat, extractor="llm", extractor_model={
        "source": "api", "name": "anthropic/claude-opus-4-7"})
    assert readout.preflight(FakeModel([])) == {"extractor.temperature": 1.0}


def test_final_answer_rule_is_an_option_recorded_per_trial(vlat, holf):
    with pytest.raises(ValueError, match=r"answer_rule 'last'.*paper.*final"):
        Chart6Readout(vlat, answer_rule="last")
    assert Chart6Readout(vlat, answer_rule="paper").settings == Chart6Readout(vlat).settings
    assert Chart6Readout(vlat, answer_rule="final").settings != Chart6Readout(vlat).settings
    options = ["$50.24", "$35.00", "$60.95"]
    assert extract("$35.00 or $60.95? Answer: $50.24", "choice", options, "final").value == "$50.24"
    assert extract("$35.00 at first, but I settle on $60.95", "choice", options, "final").value == "$60.95"
    assert extract("$35.00 at first, but I settle on $60.95", "choice", options).status == "null:multiple_options"
    assert extract("4.5, no 5, so 4.87", "numeric", (), "final").value == 4.87
    item = holf.test[0]
    out = Chart6Readout(holf, answer_rule="final").respond(FakeModel(["4 or 5 stars; answer: 4.87"]), [item])[0]
    assert (out.response, out.extras["answer_rule"]) == (4.87, "final")
    assert "answer_rule" not in Chart6Readout(holf).respond(FakeModel(["4.87"]), [item])[0].extras
