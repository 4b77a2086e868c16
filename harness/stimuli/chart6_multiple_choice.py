"""CHART-6's multiple-choice tests: GGR, VLAT and CALVI, with the Fan lab's human samples.

Sources and their caveats (see each folder's SOURCE.md):

- GGR (13), VLAT (53): the Fan lab's item files (``questions.csv``), images included. Task
  categories follow Table 1 from each file's own category; this agrees with the lab's CogSci-2025
  table for all 66 items but GGR item 13 ("level_3" here, value identification there).
- CALVI (60): reVISit images; the question text is the Fan-lab wording ``question_cogsci2025``, the
  one the lab's human sample saw (T15 reads "Apr to Aug" there and "Apr to Jul" in reVISit; its
  answer is the same under both). CALVI has no original task categories or graph types in any
  source here, so both come from the CogSci-2025 item tables, which already use the common names.

Human reference: default sample ``cogsci2025`` (Verma & Fan 2025; ~85 people per item), the only
one with per-participant 0/1 data, so it also gives the split-half noise ceiling. Its GGR is the
lab's multiple-choice conversion of the numeric items. ``human_sample='cogsci2024_math_2_1'`` or
``'cogsci2024_math_3'`` selects a CogSci-2024 group instead (GGR/VLAT; per-item only, GGR item 9
has no row there, so no ceiling). None of these is CHART-6's own sample (that is on OSF).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..sources import DataError, Sources
from .base import LiteracyItems, Stimulus, StimulusSet
from .chart6 import (TESTS, ChartTest, chart_item, chart_stimset, literacy_items, read_csv, to_graph_type,
                     to_task_category)
from .registry import TaskOptions

# -- CogSci samples (GGR, VLAT, CALVI) -----------------------------------------------------------

COGSCI2025 = "viz-item-measures-cogsci2025"
COGSCI2024_GROUPS = {"cogsci2024_math_2_1": "Human/Math-2-1", "cogsci2024_math_3": "Human/Math-3"}
GGR_FORMAT_MISMATCH = (
    "format-mismatched: the cogsci2025 humans answered a multiple-choice conversion of GGR's 9 "
    "numeric items, models answer them open-ended (as in the paper); the numeric-format groups "
    "are human_sample=cogsci2024_math_2_1 / cogsci2024_math_3 (per item only, no ceiling)")


def _cogsci2025_table(sources: Sources, name: str) -> dict[str, dict[str, str]]:
    """A CogSci-2025 item table keyed by its ``question + image`` string."""
    rows = read_csv(sources.path(COGSCI2025, f"dataframes/{name}"))
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
    for r in read_csv(sources.path(COGSCI2025, "dataframes/item_participant_level_data.csv")):
        sid = by_key.get(r["category"])
        if sid is not None:
            rows.append((r["participant_id"], sid, float(r["is_correct"])))
    prop = {sid: float(items[key]["is_correct"]) for sid, key in keys.items()}
    return literacy_items(stimuli, "cogsci2025", prop, rows, format_mismatch)


def _cogsci2024_human(sources: Sources, test: str, stimuli: list[Stimulus],
                      sample: str) -> LiteracyItems:
    group = COGSCI2024_GROUPS[sample]
    rows = read_csv(sources.path(test, f"human/cogsci2024_accuracy_scatter_df_{test}.csv"))
    by_key = {(r["question"], r["image_file"]): float(r["a_in_b"]) for r in rows if r["agentType"] == group}
    prop = {s.stimulus_id: by_key[(s.meta["question"], s.meta["image_file"])] for s in stimuli
            if (s.meta["question"], s.meta["image_file"]) in by_key}
    return literacy_items(stimuli, sample, prop)


def _check_sample(test: ChartTest, sample: str, allowed: tuple[str, ...]) -> None:
    if sample not in allowed:
        raise ValueError(f"{test.task_id}: unknown human_sample {sample!r}; choose from {allowed}")


# -- GGR and VLAT (the lab's questions.csv) -------------------------------------------------------

def _lab_items(sources: Sources, test: ChartTest) -> list[Stimulus]:
    rel = "questions.csv"
    rows = read_csv(sources.path(test.key, rel))
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
        stimuli.append(chart_item(
            test, f"{test.key}_{Path(row['image_file']).stem.removeprefix(test.key + '_')}",
            question=row["question"],
            answer=row["correct_answer"], options=options, image=sources.path(test.key, image_rel),
            sha256=sources.sha256(test.key, image_rel),
            graph_type=to_graph_type(row["chart_type"], where), chart_type=row["chart_type"],
            task_category=to_task_category(test.key, row["task_category"], where),
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
    return chart_stimset(test, stimuli, human, seed, f"{human_sample}.{key}")


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
    rows = read_csv(sources.path("calvi", "items.csv"))
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
        stimuli.append(chart_item(
            test, sid, question=row["question_cogsci2025"], answer=row["correct_label"],
            options=json.loads(row["options_json"]), image=sources.path("calvi", row["image_file"]),
            sha256=sources.sha256("calvi", row["image_file"]),
            graph_type=to_graph_type(chart_type, where), chart_type=chart_type,
            task_category=to_task_category("calvi", category, where), task_category_source=None,
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
    return chart_stimset(test, stimuli, human, seed, "cogsci2025.calvi")
