"""CHART-6 (Verma, Mukherjee, Potts, Kreiss & Fan 2025): six data-visualization literacy tests.

One task per test: ``literacy.chart.{ggr,vlat,calvi,holf,holf_multi,chartqa_human}``. An item is a
chart image + the original question (+ options) + the answer, with its graph type and its common
task category (value identification / arithmetic computation / statistical inference; the paper's
Table 1 maps each test's own categories onto these).

What the six tests share is here: their definitions, the paper's Table 1 (categories) and Table 3
(instructions), the scoring rule an answer is held to, and the assembly of items and human data.
Each test's sources are read by the module of its assessment (see each folder's SOURCE.md):

- :mod:`harness.stimuli.chart6_multiple_choice`: GGR, VLAT and CALVI, the Fan lab's item files,
  with the CogSci-2025 sample (or a CogSci-2024 group) as their people;
- :mod:`harness.stimuli.chart6_continuous`: HOLF, HOLF-Multi and ChartQA-Human, numeric answers,
  people's typed answers scored by the same rule as models'.

``human`` is a :class:`~harness.stimuli.base.LiteracyItems`: ``sample``, ``item_ids`` (stimulus
order), ``prop_correct`` (NaN where an item has no human data; also each stimulus's
``human_target``); with per-participant data also ``participants``, ``participant_correct``
(participants x items, 1/0, NaN where a person did not see the item) and ``n_responses``. GGR's
default sample answered a multiple-choice conversion of its 9 numeric items while models answer
them open-ended, so it carries ``format_mismatch`` and the human-relative scores say so;
ChartQA-Human keeps its 94 numeric items by default (``items``).
"""

from __future__ import annotations

import csv
import math
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..sources import DataError
from .base import LiteracyItems, Prompt, ResponseSpace, Stimulus, StimulusSet

VERSION = "1"
TEST_VERSIONS = {"chartqa_human": "2"}  # 2: the 94 numeric items by default
RELAXED_TOLERANCE = 0.05  # relaxed accuracy: within 5% of the answer (ChartQA's convention)

VALUE_IDENTIFICATION = "value_identification"
ARITHMETIC_COMPUTATION = "arithmetic_computation"
STATISTICAL_INFERENCE = "statistical_inference"

# The paper's Table 1, keyed by each test's own category names as its files spell them.
TASK_CATEGORIES: dict[str, dict[str, str]] = {
    "ggr": {"level_1": VALUE_IDENTIFICATION,  # read the data
            "level_2": ARITHMETIC_COMPUTATION,  # read between the data
            "level_3": STATISTICAL_INFERENCE},  # read beyond the data
    "vlat": {"retrieve_value": VALUE_IDENTIFICATION, "find_extremum": VALUE_IDENTIFICATION,
             "determine_range": VALUE_IDENTIFICATION, "make_comparisons": ARITHMETIC_COMPUTATION,
             "find_correlations_trends": STATISTICAL_INFERENCE,
             "characterize_distribution": STATISTICAL_INFERENCE,
             "find_anomolies": STATISTICAL_INFERENCE,  # sic, VLAT's file
             "find_clusters": STATISTICAL_INFERENCE},
    "holf": {"retrieve_value": VALUE_IDENTIFICATION, "make_comparisons": ARITHMETIC_COMPUTATION,
             "determine_range": ARITHMETIC_COMPUTATION},
    "holf_multi": {"retrieve_value": VALUE_IDENTIFICATION,
                   "make_comparisons": ARITHMETIC_COMPUTATION,
                   "predict_trend": STATISTICAL_INFERENCE},
    # CALVI: the CogSci-2025 table's common names; ChartQA-Human: none (Table 1).
    "calvi": {c.replace("_", " "): c for c in (VALUE_IDENTIFICATION, ARITHMETIC_COMPUTATION,
                                               STATISTICAL_INFERENCE)},
}

# Source chart-type labels (lower case) -> one graph-type vocabulary across tests (13 types,
# the paper's chi2(12) for agent x graph type). GGR's "Dot Plot" is an icon array.
GRAPH_TYPES: dict[str, str] = {
    "line chart": "line", "line": "line", "linechart": "line",
    "bar chart": "bar", "bar": "bar", "barchart": "bar",
    "stacked bar chart": "stacked_bar", "stacked bar": "stacked_bar",
    "100 % stacked bar chart": "stacked_bar_100", "100% stacked bar": "stacked_bar_100",
    "pie chart": "pie", "pie": "pie",
    "histogram": "histogram",
    "scatterplot": "scatter", "scatter": "scatter", "scatter plot": "scatter",
    "bubble chart": "bubble",
    "area chart": "area", "area": "area",
    "stacked area chart": "stacked_area", "stacked area": "stacked_area",
    "choropleth map": "map", "map": "map",
    "treemap": "treemap",
    "dot plot": "icon_array",
}


@dataclass(frozen=True)
class ChartTest:
    key: str
    name: str  # the paper's name
    n_items: int
    assessment: str  # "multiple-choice" | "continuous": which of the paper's prompt templates
    scoring: str  # "exact" | "relaxed"
    response_space: ResponseSpace

    @property
    def task_id(self) -> str:
        return f"literacy.chart.{self.key}"


TESTS: dict[str, ChartTest] = {t.key: t for t in [
    # GGR mixes 9 numeric and 4 MC items; the paper treats it as a multiple-choice test scored
    # by exact match, so its responses are labels (an option, or a number matched exactly).
    ChartTest("ggr", "GGR", 13, "multiple-choice", "exact", "label"),
    ChartTest("vlat", "VLAT", 53, "multiple-choice", "exact", "choice"),
    ChartTest("calvi", "CALVI", 60, "multiple-choice", "exact", "choice"),
    ChartTest("holf", "HOLF", 384, "continuous", "relaxed", "scalar"),
    ChartTest("holf_multi", "HOLF-Multi", 216, "continuous", "relaxed", "scalar"),
    ChartTest("chartqa_human", "ChartQA-Human", 125, "continuous", "relaxed", "scalar"),
]}

# The paper's Table 3 instructions. Each test's own file reproduces them: ggr/ and vlat/
# instructions.txt are the multiple-choice text with n = 13 and 53 (CALVI's file is not public;
# n = 60 by the same pattern), holf/instructions.txt is the continuous text.
MC_INSTRUCTIONS = (
    "The first part of this study consists of {n_items} multiple choice questions associated with "
    "visualizations, and you will be asked to choose the best answer for each question. You are "
    "required to provide an answer to the current question. Your answer must be one of the choices "
    "provided."
)
CONTINUOUS_INSTRUCTIONS = (
    "You will be presented with a series of data visualizations, each accompanied by a question. "
    "Your goal is to answer each question as accurately and as quickly as you are able. It is common "
    "for people to not be fully sure when answering these questions, but please do your best on each "
    "question, even if you have to make a guess."
)
MC_RESTRICTION = "Your answer must be one of the choices provided."


def instructions(test: ChartTest) -> str:
    if test.assessment == "multiple-choice":
        return MC_INSTRUCTIONS.format(n_items=test.n_items)
    return CONTINUOUS_INSTRUCTIONS


def item_body(question: str, choices: list[str]) -> str:
    """The item text after the instructions: the question unmodified, plus its choices if any."""
    if choices:
        return f"{MC_RESTRICTION} {question} Choices: {', '.join(choices)}."
    return question


def task_prompt(test: ChartTest) -> Prompt:
    """The versioned template; the per-item text fills ``{body}`` and the model's prefix/suffix."""
    return Prompt(prompt_id=f"{test.task_id}.v{VERSION}",
                  text="{prefix}" + instructions(test) + " {body}{suffix}")


# -- answers -------------------------------------------------------------------------------------

def as_number(text: Any) -> float | None:
    try:
        value = float(str(text).strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2212": "-"})
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def normalise_text(text: str) -> str:
    """What does not distinguish two answers: case, curly quotes, Unicode forms, thousands
    separators, spacing and a final full stop."""
    text = unicodedata.normalize("NFKC", str(text)).translate(_QUOTES).lower()
    text = _THOUSANDS.sub("", text)
    return " ".join(text.split()).rstrip(".").strip()


def relaxed_match(value: float, answer: float, tolerance: float = RELAXED_TOLERANCE) -> bool:
    return abs(value - answer) <= tolerance * abs(answer)


def is_correct(stimulus: Stimulus, response: Any) -> bool:
    """The item's scoring rule applied to a valid (extracted) response.

    MC: the chosen option is the answer. Numeric: exact for GGR (its designers' rule), within 5%
    of the answer for HOLF, HOLF-Multi and ChartQA-Human. Text (ChartQA's non-numeric answers):
    equal after :func:`normalise_text`.
    """
    fmt = stimulus.meta["response_format"]
    truth = stimulus.ground_truth
    if fmt == "choice":
        return response == truth
    if fmt == "numeric":
        value = as_number(response)
        if value is None:
            return False
        return relaxed_match(value, truth) if stimulus.meta["scoring"] == "relaxed" else value == truth
    return normalise_text(response) == normalise_text(truth)


# -- items and human data --------------------------------------------------------------------------------

def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def to_graph_type(label: str, where: str) -> str:
    try:
        return GRAPH_TYPES[label.strip().lower()]
    except KeyError:
        raise DataError(f"{where}: unknown chart type {label!r}") from None


def to_task_category(test: str, label: str, where: str) -> str:
    try:
        return TASK_CATEGORIES[test][label.strip().lower()]
    except KeyError:
        raise DataError(f"{where}: unknown task category {label!r} for {test}") from None


def chart_item(test: ChartTest, stimulus_id: str, *, question: str, answer: Any, options: list[str],
               image: Path, sha256: str, graph_type: str, chart_type: str,
               task_category: str | None, task_category_source: str | None,
               **meta: Any) -> Stimulus:
    """One item: a multiple-choice answer must be one of its options; an answer without options
    is a number where it reads as one, else text."""
    if options:
        fmt = "choice"
        if answer not in options:
            raise DataError(f"{test.name} item {stimulus_id}: answer {answer!r} is not one of {options}")
    else:
        number = as_number(answer)
        fmt = "numeric" if number is not None else "text"
        answer = number if number is not None else answer
    return Stimulus(
        stimulus_id=stimulus_id, split="test", ground_truth=answer, image_source=image,
        file_sha256=sha256,
        meta={"test": test.key, "question": question, "options": options, "response_format": fmt,
              "scoring": test.scoring, "graph_type": graph_type, "chart_type": chart_type,
              "task_category": task_category, "task_category_source": task_category_source, **meta},
    )


def literacy_items(stimuli: list[Stimulus], sample: str, prop: dict[str, float] | None = None,
                   participant_rows: list[tuple[str, str, float]] | None = None,
                   format_mismatch: str | None = None) -> LiteracyItems:
    """Assemble ``human`` and set each stimulus's ``human_target``.

    ``prop`` are published per-item proportions; ``participant_rows`` (participant, stimulus id,
    correct 0/1) the raw data. With both, the proportions recomputed from the raw data must equal
    the published ones: the join of the two files is checked, not assumed.
    """
    ids = [s.stimulus_id for s in stimuli]
    participants: list[str] = []
    matrix = counts = None
    p = np.array([(prop or {}).get(i, np.nan) for i in ids], dtype=float)
    if participant_rows is not None:
        participants = sorted({r[0] for r in participant_rows})
        row = {pid: k for k, pid in enumerate(participants)}
        col = {sid: k for k, sid in enumerate(ids)}
        matrix = np.full((len(participants), len(ids)), np.nan)
        for pid, sid, correct in participant_rows:
            if not np.isnan(matrix[row[pid], col[sid]]):
                raise DataError(f"human sample {sample}: participant {pid} answered {sid} twice")
            matrix[row[pid], col[sid]] = correct
        counts = (~np.isnan(matrix)).sum(axis=0)
        recomputed = np.full(len(ids), np.nan)
        np.divide(np.nansum(matrix, axis=0), counts, out=recomputed, where=counts > 0)
        if prop is not None:
            bad = ~np.isclose(recomputed, p, atol=5e-5, equal_nan=True)
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise DataError(f"human sample {sample}: item {ids[k]} proportion correct "
                                f"{recomputed[k]:.4f} from participants != published {p[k]:.4f}")
        p = recomputed
    for s, value in zip(stimuli, p):
        s.human_target = None if np.isnan(value) else float(value)
    return LiteracyItems(sample=sample, item_ids=tuple(ids), prop_correct=p,
                         participants=tuple(participants), participant_correct=matrix,
                         n_responses=counts, format_mismatch=format_mismatch)


def no_human_data(stimuli: list[Stimulus]) -> LiteracyItems:
    """No human data for these items (a release not mounted): every proportion NaN."""
    return LiteracyItems(sample="", item_ids=tuple(s.stimulus_id for s in stimuli),
                         prop_correct=np.full(len(stimuli), np.nan))


def chart_stimset(test: ChartTest, stimuli: list[Stimulus], human: LiteracyItems, seed: int,
                  human_ref_id: str | None, unavailable: str | None = None) -> StimulusSet:
    return StimulusSet(task_id=test.task_id, version=TEST_VERSIONS.get(test.key, VERSION),
                       response_space=test.response_space,
                       stimuli=stimuli, human_ref_id=human_ref_id, prompt=task_prompt(test),
                       human=human, seed=seed, unavailable=unavailable)
