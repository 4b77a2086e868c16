"""CHART-6 (Verma, Mukherjee, Potts, Kreiss & Fan 2025): six data-visualization literacy tests.

One task per test: ``literacy.chart.{ggr,vlat,calvi,holf,holf_multi,chartqa_human}``. An item is a
chart image + the original question (+ options) + the answer, with its graph type and its common
task category (value identification / arithmetic computation / statistical inference; the paper's
Table 1 maps each test's own categories onto these).

Sources and their caveats (see each folder's SOURCE.md):

- GGR (13), VLAT (53), HOLF (384): the Fan lab's item files (``questions.csv``), images included.
  Task categories follow Table 1 from each file's own category; this agrees with the lab's
  CogSci-2025 table for all 66 items but GGR item 13 ("level_3" here, value identification there).
- CALVI (60): reVISit images; the question text is the Fan-lab wording ``question_cogsci2025``, the
  one the lab's human sample saw (T15 reads "Apr to Aug" there and "Apr to Jul" in reVISit; its
  answer is the same under both). CALVI has no original task categories or graph types in any
  source here, so both come from the CogSci-2025 item tables, which already use the common names.
- HOLF-Multi (216) and ChartQA-Human (125) are incomplete here. ChartQA-Human's items are
  ``chartqa-human/experiments.csv``; its images are read from a ChartQA checkout
  (``chartqa_root``, or $GESTALT_CHARTQA_ROOT: the folder holding ``ChartQA Dataset/``). HOLF-Multi
  and the human responses for ChartQA-Human are in CHART-6's OSF release, whose layout could not
  be seen from here; the builders read it as ``osf_root`` (or $GESTALT_CHART6_OSF) arranged as
  ``holf-multi/questions.csv`` (HOLF's columns), ``holf-multi/images/<image_file>``,
  ``holf-multi/responses.csv`` and ``chartqa-human/responses.csv`` (columns ``participant_id,
  question, image_file, response``). Without them the task is returned with ``unavailable`` set.
  ChartQA-Human's ``generated_source`` column is unreliable (SOURCE.md) and is not used.
  The paper uses ChartQA-Human's numeric items only: 31 of these 125 answers are not numbers
  ("Yes", "UK", "2015/16", ...). The default ``items='numeric'`` keeps the 94 whose answer is a
  number (read from the answers: the file's ``q_type`` column is inverted); ``items='all'`` keeps
  all 125, the text answers scored by ChartQA's own convention, exact match after normalisation.

Human reference (``StimulusSet.human``; per-item proportion correct also as ``human_target``):

- GGR, VLAT, CALVI: default sample ``cogsci2025`` (Verma & Fan 2025; ~85 people per item), the only
  one with per-participant 0/1 data, so it also gives the split-half noise ceiling. Its GGR is the
  lab's multiple-choice conversion of the numeric items. ``human_sample='cogsci2024_math_2_1'`` or
  ``'cogsci2024_math_3'`` selects a CogSci-2024 group instead (GGR/VLAT; per-item only, GGR item 9
  has no row there, so no ceiling). None of these is CHART-6's own sample (that is on OSF).
- HOLF: the davinci-2023 raw trials (542 people, 10-15 per item), scored by the same 5% relaxed
  rule as models (the paper applies one standard to both). HOLF's second human source, the
  CogSci-2024 per-item median normalised errors, is a different sample and measure (its r with
  these trials is 0.49-0.59, SOURCE.md) and cannot give proportion correct, so it is not used.

``human`` is a :class:`~harness.stimuli.base.LiteracyItems`: ``sample``, ``item_ids`` (stimulus
order), ``prop_correct`` (NaN where an item has no human data); with per-participant data also
``participants``, ``participant_correct`` (participants x items, 1/0, NaN where a person did not
see the item) and ``n_responses``. GGR's default sample answered a multiple-choice conversion of
its 9 numeric items while models answer them open-ended, so it carries ``format_mismatch`` and the
human-relative scores say so; ChartQA-Human keeps its 94 numeric items by default (``items``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image

from ..sources import DataError, Sources
from ..sources.store import file_sha256
from .base import LiteracyItems, Prompt, ResponseSpace, Stimulus, StimulusSet
from ..options import PathOption
from .registry import NoOptions, TaskOptions

VERSION = "1"
TEST_VERSIONS = {"chartqa_human": "2"}  # 2: the 94 numeric items by default
GGR_FORMAT_MISMATCH = (
    "format-mismatched: the cogsci2025 humans answered a multiple-choice conversion of GGR's 9 "
    "numeric items, models answer them open-ended (as in the paper); the numeric-format groups "
    "are human_sample=cogsci2024_math_2_1 / cogsci2024_math_3 (per item only, no ceiling)")
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


# -- shared helpers ------------------------------------------------------------------------------

def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _graph_type(label: str, where: str) -> str:
    try:
        return GRAPH_TYPES[label.strip().lower()]
    except KeyError:
        raise DataError(f"{where}: unknown chart type {label!r}") from None


def _task_category(test: str, label: str, where: str) -> str:
    try:
        return TASK_CATEGORIES[test][label.strip().lower()]
    except KeyError:
        raise DataError(f"{where}: unknown task category {label!r} for {test}") from None


def _item(test: ChartTest, stimulus_id: str, *, question: str, answer: Any, options: list[str],
          image: Path, sha256: str, graph_type: str, chart_type: str,
          task_category: str | None, task_category_source: str | None,
          **meta: Any) -> Stimulus:
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


def _human(stimuli: list[Stimulus], sample: str, prop: dict[str, float] | None = None,
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


def _no_human(stimuli: list[Stimulus]) -> LiteracyItems:
    """No human data for these items (a release not mounted): every proportion NaN."""
    return LiteracyItems(sample="", item_ids=tuple(s.stimulus_id for s in stimuli),
                         prop_correct=np.full(len(stimuli), np.nan))


def _stimset(test: ChartTest, stimuli: list[Stimulus], human: LiteracyItems, seed: int,
             human_ref_id: str | None, unavailable: str | None = None) -> StimulusSet:
    return StimulusSet(task_id=test.task_id, version=TEST_VERSIONS.get(test.key, VERSION),
                       response_space=test.response_space,
                       stimuli=stimuli, human_ref_id=human_ref_id, prompt=task_prompt(test),
                       human=human, seed=seed, unavailable=unavailable)


# -- CogSci-2025 sample (GGR, VLAT, CALVI) --------------------------------------------------------

COGSCI2025 = "viz-item-measures-cogsci2025"
COGSCI2024_GROUPS = {"cogsci2024_math_2_1": "Human/Math-2-1", "cogsci2024_math_3": "Human/Math-3"}


def _cogsci2025_table(sources: Sources, name: str) -> dict[str, dict[str, str]]:
    """A CogSci-2025 item table keyed by its ``question + image`` string."""
    rows = _read_csv(sources.path(COGSCI2025, f"dataframes/{name}"))
    return {r["question_image"]: r for r in rows}


def _cogsci2025_human(sources: Sources, stimuli: list[Stimulus], keys: dict[str, str],
                      format_mismatch: str | None = None) -> LiteracyItems:
    """``keys``: stimulus id -> the sample's ``question + image`` key."""
    items = _cogsci2025_table(sources, "test_item_level_data.csv")
    missing = [sid for sid, key in keys.items() if key not in items]
    if missing:
        raise DataError(f"{COGSCI2025}/dataframes/test_item_level_data.csv: no row for item "
                        f"{missing[0]} ({keys[missing[0]]!r})")
    by_key = {key: sid for sid, key in keys.items()}
    rows = []
    for r in _read_csv(sources.path(COGSCI2025, "dataframes/item_participant_level_data.csv")):
        sid = by_key.get(r["category"])
        if sid is not None:
            rows.append((r["participant_id"], sid, float(r["is_correct"])))
    prop = {sid: float(items[key]["is_correct"]) for sid, key in keys.items()}
    return _human(stimuli, "cogsci2025", prop, rows, format_mismatch)


def _cogsci2024_human(sources: Sources, test: str, stimuli: list[Stimulus],
                      sample: str) -> LiteracyItems:
    group = COGSCI2024_GROUPS[sample]
    rows = _read_csv(sources.path(test, f"human/cogsci2024_accuracy_scatter_df_{test}.csv"))
    by_key = {(r["question"], r["image_file"]): float(r["a_in_b"]) for r in rows if r["agentType"] == group}
    prop = {s.stimulus_id: by_key[(s.meta["question"], s.meta["image_file"])] for s in stimuli
            if (s.meta["question"], s.meta["image_file"]) in by_key}
    return _human(stimuli, sample, prop)


def _check_sample(test: ChartTest, sample: str, allowed: tuple[str, ...]) -> None:
    if sample not in allowed:
        raise ValueError(f"{test.task_id}: unknown human_sample {sample!r}; choose from {allowed}")


# -- GGR and VLAT (the lab's questions.csv) -------------------------------------------------------

def _lab_items(sources: Sources, test: ChartTest) -> list[Stimulus]:
    rel = "questions.csv"
    rows = _read_csv(sources.path(test.key, rel))
    if len(rows) != test.n_items:
        raise DataError(f"{test.key}/{rel}: {len(rows)} items, expected {test.n_items}")
    stimuli = []
    for row in rows:
        where = f"{test.key}/{rel} item {row['image_file']}"
        mc = row["text_input_type"] == "multiple_choice_question"
        # "Skip" is a response button people had, not an answer; the lab never offered it to models.
        options = [row[f"mc{k}"] for k in range(1, 5)
                   if mc and row[f"mc{k}"] and row[f"mc{k}"] != "Skip"]
        image_rel = f"images/{row['image_file']}"
        stimuli.append(_item(
            test, f"{test.key}_{Path(row['image_file']).stem.removeprefix(test.key + '_')}",
            question=row["question"],
            answer=row["correct_answer"], options=options, image=sources.path(test.key, image_rel),
            sha256=sources.sha256(test.key, image_rel),
            graph_type=_graph_type(row["chart_type"], where), chart_type=row["chart_type"],
            task_category=_task_category(test.key, row["task_category"], where),
            task_category_source=row["task_category"], image_file=row["image_file"],
        ))
    return stimuli


def _build_lab_mc(sources: Sources, key: str, seed: int, human_sample: str) -> StimulusSet:
    test = TESTS[key]
    _check_sample(test, human_sample, ("cogsci2025", *COGSCI2024_GROUPS))
    stimuli = _lab_items(sources, test)
    if human_sample == "cogsci2025":
        mismatch = GGR_FORMAT_MISMATCH if key == "ggr" else None
        human = _cogsci2025_human(sources, stimuli, format_mismatch=mismatch, keys={
            s.stimulus_id: f"{s.meta['question']} + {s.meta['image_file']}" for s in stimuli})
    else:
        human = _cogsci2024_human(sources, key, stimuli, human_sample)
    return _stimset(test, stimuli, human, seed, f"{human_sample}.{key}")


class LabOptions(TaskOptions):
    human_sample: str = "cogsci2025"  # GGR/VLAT also take the COGSCI2024_GROUPS


def build_ggr(sources: Sources, seed: int = 0, human_sample: str = "cogsci2025") -> StimulusSet:
    return _build_lab_mc(sources, "ggr", seed, human_sample)


def build_vlat(sources: Sources, seed: int = 0, human_sample: str = "cogsci2025") -> StimulusSet:
    return _build_lab_mc(sources, "vlat", seed, human_sample)


# -- CALVI ----------------------------------------------------------------------------------------

def build_calvi(sources: Sources, seed: int = 0, human_sample: str = "cogsci2025") -> StimulusSet:
    test = TESTS["calvi"]
    _check_sample(test, human_sample, ("cogsci2025",))
    rows = _read_csv(sources.path("calvi", "items.csv"))
    if len(rows) != test.n_items:
        raise DataError(f"calvi/items.csv: {len(rows)} items, expected {test.n_items}")
    graphs = _cogsci2025_table(sources, "graph_item_level_data.csv")
    tasks = _cogsci2025_table(sources, "task_item_level_data.csv")
    stimuli, keys, published = [], {}, {}
    for row in rows:
        sid = f"calvi_{row['item_id']}"
        key = f"{row['question_cogsci2025']} + {row['item_id']}.png"
        where = f"calvi item {row['item_id']}"
        if key not in graphs or key not in tasks:
            raise DataError(f"{COGSCI2025}: no graph/task row for {where} ({key!r})")
        chart_type, category = graphs[key]["category"], tasks[key]["category"]
        stimuli.append(_item(
            test, sid, question=row["question_cogsci2025"], answer=row["correct_label"],
            options=json.loads(row["options_json"]), image=sources.path("calvi", row["image_file"]),
            sha256=sources.sha256("calvi", row["image_file"]),
            graph_type=_graph_type(chart_type, where), chart_type=chart_type,
            task_category=_task_category("calvi", category, where), task_category_source=None,
            item_kind="misleading" if row["item_kind"] == "trick" else "standard",
        ))
        keys[sid] = key
        published[sid] = (float(row["human_prop_correct_cogsci2025"]),
                          int(row["human_n_responses_cogsci2025"]))
    human = _cogsci2025_human(sources, stimuli, keys)
    # items.csv carries the same sample, rounded to 4 places: a second check of the join.
    assert human.n_responses is not None  # the CogSci-2025 sample comes with per-participant rows
    for sid, p, n in zip(human.item_ids, human.prop_correct, human.n_responses):
        if abs(p - published[sid][0]) > 5e-5 or n != published[sid][1]:
            raise DataError(f"calvi/items.csv: {sid} human data ({published[sid]}) differ from "
                            f"{COGSCI2025} ({p:.4f}, {n})")
    return _stimset(test, stimuli, human, seed, "cogsci2025.calvi")


# -- HOLF -----------------------------------------------------------------------------------------

DAVINCI_FILES = tuple(f"davinci2023/cogsci_receiver_prepped_test_data_{name}.csv"
                      for name in ("cogsci_2", "cogsci_3", "cogsci_4", "debugging"))


def _holf_style_item(test: ChartTest, sid: str, row: dict[str, str], image: Path, sha256: str,
                     where: str, **meta: Any) -> Stimulus:
    return _item(test, sid, question=row["question"], answer=row["correct_answer"], options=[],
                 image=image, sha256=sha256,
                 graph_type=_graph_type(row["chart_type"], where), chart_type=row["chart_type"],
                 task_category=_task_category(test.key, row["task_category"], where),
                 task_category_source=row["task_category"], image_file=row["image_file"], **meta)


def _responses_human(stimuli: list[Stimulus], sample: str,
                     responses: list[tuple[str, str, str, str]], where: str) -> LiteracyItems:
    """Per-participant correctness of typed answers (participant, question, image_file, response),
    scored by the items' own rule, as for models."""
    by_key = {(s.meta["question"], s.meta["image_file"]): s for s in stimuli}
    rows = []
    for pid, question, image_file, response in responses:
        stim = by_key.get((question, image_file))
        if stim is None:
            raise DataError(f"{where}: response to an unknown item ({question!r}, {image_file!r})")
        rows.append((pid, stim.stimulus_id, float(is_correct(stim, response))))
    return _human(stimuli, sample, participant_rows=rows)


HolfOptions = NoOptions


def build_holf(sources: Sources, seed: int = 0) -> StimulusSet:
    test = TESTS["holf"]
    rows = _read_csv(sources.path("holf", "questions.csv"))
    if len(rows) != test.n_items:
        raise DataError(f"holf/questions.csv: {len(rows)} items, expected {test.n_items}")
    stimuli = []
    for k, row in enumerate(rows):
        image_rel = f"images/{row['dataset']}/{row['image_file']}"
        stimuli.append(_holf_style_item(
            test, f"holf_{k:03d}", row, sources.path("holf", image_rel),
            sources.sha256("holf", image_rel), f"holf/questions.csv row {k}",
            dataset=row["dataset"], min_label=float(row["min_label"]),
            max_label=float(row["max_label"])))
    responses = []
    for rel in DAVINCI_FILES:
        for r in _read_csv(sources.path("holf", rel)):
            if r["eventType"] == "test":
                responses.append((r["gameID"], r["prompt"], r["graph_PNG"], r["response"]))
    human = _responses_human(stimuli, "davinci2023", responses, "holf/davinci2023")
    return _stimset(test, stimuli, human, seed, "davinci2023.holf")


# -- HOLF-Multi and ChartQA-Human (outside the mirror) --------------------------------------------

OSF_ENV = "GESTALT_CHART6_OSF"
CHARTQA_ENV = "GESTALT_CHARTQA_ROOT"
CHARTQA_IMAGES = "ChartQA Dataset/test/png"
OSF_WHERE = ("CHART-6's OSF release (https://osf.io/e25mu/, view-only link in arXiv 2505.17202) "
             "or the Fan lab's S3 bucket (data-visualization-benchmark, folder holf2/)")


def _root(option: str | Path | None, env: str) -> Path | None:
    value = option if option is not None else os.environ.get(env)
    return Path(value).expanduser() if value else None


def _external_image(path: Path, where: str) -> tuple[Path, str]:
    """A file from outside the mirror: it must exist and be an image; its sha256 pins the bytes."""
    if not path.is_file():
        raise DataError(f"{where}: image {path} is missing")
    try:
        with Image.open(path) as im:
            im.verify()
    except Exception as e:  # PIL raises many types for a broken file
        raise DataError(f"{where}: {path} is not a readable image ({e})") from None
    return path, file_sha256(path)


def _read_responses(path: Path) -> list[tuple[str, str, str, str]]:
    rows = _read_csv(path)
    need = {"participant_id", "question", "image_file", "response"}
    if rows and not need <= set(rows[0]):
        raise DataError(f"{path}: needs columns {sorted(need)}, has {sorted(rows[0])}")
    return [(r["participant_id"], r["question"], r["image_file"], r["response"]) for r in rows]


class HolfMultiOptions(TaskOptions):
    osf_root: PathOption | None = None


def build_holf_multi(sources: Sources, seed: int = 0, osf_root: str | Path | None = None) -> StimulusSet:
    test = TESTS["holf_multi"]
    root = _root(osf_root, OSF_ENV)
    if root is None:
        return _stimset(test, [], _no_human([]), seed, None, unavailable=(
            f"HOLF-Multi ({test.n_items} items) is not in the sources mirror. Get it from "
            f"{OSF_WHERE}, arrange it as <root>/holf-multi/questions.csv (HOLF's columns), "
            f"<root>/holf-multi/images/<image_file> and optionally <root>/holf-multi/responses.csv, "
            f"then pass osf_root=<root> or set ${OSF_ENV}."))
    folder = root / "holf-multi"
    qpath = folder / "questions.csv"
    if not qpath.is_file():
        raise DataError(f"{qpath}: missing (osf_root={root})")
    rows = _read_csv(qpath)
    if len(rows) != test.n_items:
        raise DataError(f"{qpath}: {len(rows)} items, expected {test.n_items}")
    stimuli = []
    for k, row in enumerate(rows):
        where = f"{qpath} row {k}"
        image, digest = _external_image(folder / "images" / row["image_file"], where)
        stimuli.append(_holf_style_item(test, f"holf_multi_{k:03d}", row, image, digest, where))
    rpath = folder / "responses.csv"
    human = (_responses_human(stimuli, "chart6_osf", _read_responses(rpath), str(rpath))
             if rpath.is_file() else None)
    return _stimset(test, stimuli, human or _no_human(stimuli), seed,
                    "chart6_osf.holf_multi" if human else None)


def _chartqa_graph_type(chart_type: str, where: str) -> str:
    # experiments.csv names strata like "v_bar_two_var", "line_OWID", "pie_Statista".
    for token, graph in (("bar", "bar"), ("line", "line"), ("pie", "pie")):
        if token in chart_type.lower().split("_"):
            return graph
    raise DataError(f"{where}: unknown chart type {chart_type!r}")


def numeric_answer(answer: str) -> bool:
    """Whether an answer is a number; ChartQA-Human's own ``q_type`` column says the opposite
    ("non-numeric" on the numeric answers), so numeric-ness is read from the answers."""
    return as_number(answer) is not None


class ChartQAOptions(TaskOptions):
    chartqa_root: PathOption | None = None
    osf_root: PathOption | None = None
    items: Literal["numeric", "all"] = "numeric"


def build_chartqa_human(sources: Sources, seed: int = 0, chartqa_root: str | Path | None = None,
                        osf_root: str | Path | None = None,
                        items: Literal["numeric", "all"] = "numeric") -> StimulusSet:
    """``items='numeric'`` (default): the 94 items with a numeric answer, as the paper uses;
    ``'all'``: all 125 (the 31 text answers scored by exact match after normalisation)."""
    test = TESTS["chartqa_human"]
    rows = _read_csv(sources.path("chartqa-human", "experiments.csv"))
    if len(rows) != test.n_items:
        raise DataError(f"chartqa-human/experiments.csv: {len(rows)} items, expected {test.n_items}")
    if items not in ("numeric", "all"):
        raise ValueError(f"{test.task_id}: items must be 'numeric' or 'all', got {items!r}")
    keep = [k for k, row in enumerate(rows) if items == "all" or numeric_answer(row["correct_answer"])]
    root = _root(chartqa_root, CHARTQA_ENV)
    if root is None:
        return _stimset(test, [], _no_human([]), seed, None, unavailable=(
            f"ChartQA-Human's {len({r['image_file'] for r in rows})} chart images are not in the "
            f"sources mirror. Clone github.com/vis-nlp/ChartQA (commit 3dab8e83b6ac559b847b7c6e2f24d1faa95a4507) "
            f"or fetch the files listed in chartqa-human/needed_images.txt, then pass "
            f"chartqa_root=<folder holding 'ChartQA Dataset/'> or set ${CHARTQA_ENV}."))
    stimuli = []
    for k in keep:
        row = rows[k]
        where = f"chartqa-human/experiments.csv row {k}"
        image, digest = _external_image(root / CHARTQA_IMAGES / row["image_file"], where)
        stimuli.append(_item(
            test, f"chartqa_{k:03d}", question=row["question"], answer=row["correct_answer"],
            options=[], image=image, sha256=digest,
            graph_type=_chartqa_graph_type(row["chart_type"], where), chart_type=row["chart_type"],
            task_category=None, task_category_source=None, image_file=row["image_file"],
            chart_source=row["chart_source"]))
    osf = _root(osf_root, OSF_ENV)
    rpath = osf / "chartqa-human" / "responses.csv" if osf is not None else None
    human = (_responses_human(stimuli, "chart6_osf", _read_responses(rpath), str(rpath))
             if rpath is not None and rpath.is_file() else None)
    return _stimset(test, stimuli, human or _no_human(stimuli), seed,
                    "chart6_osf.chartqa_human" if human else None)
