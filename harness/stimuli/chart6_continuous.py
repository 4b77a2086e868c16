"""CHART-6's continuous tests: HOLF, HOLF-Multi and ChartQA-Human, numeric answers scored within 5%.

Sources and their caveats (see each folder's SOURCE.md):

- HOLF (384): the Fan lab's item file (``questions.csv``), images included; task categories follow
  Table 1 from the file's own category.
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

Human reference: HOLF's is the davinci-2023 raw trials (542 people, 10-15 per item), scored by the
same 5% relaxed rule as models (the paper applies one standard to both). HOLF's second human
source, the CogSci-2024 per-item median normalised errors, is a different sample and measure (its
r with these trials is 0.49-0.59, SOURCE.md) and cannot give proportion correct, so it is not
used. HOLF-Multi's and ChartQA-Human's are the OSF release's responses, where mounted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from PIL import Image

from ..options import PathOption
from ..sources import DataError, Sources
from ..sources.store import file_sha256
from .base import LiteracyItems, Stimulus, StimulusSet
from .chart6 import (TESTS, ChartTest, as_number, chart_item, chart_stimset, is_correct, literacy_items,
                     no_human_data, read_csv, to_graph_type, to_task_category)
from .registry import NoOptions, TaskOptions

# -- HOLF -----------------------------------------------------------------------------------------

DAVINCI_FILES = tuple(f"davinci2023/cogsci_receiver_prepped_test_data_{name}.csv"
                      for name in ("cogsci_2", "cogsci_3", "cogsci_4", "debugging"))


def _holf_style_item(test: ChartTest, sid: str, row: dict[str, str], image: Path, sha256: str,
                     where: str, **meta: Any) -> Stimulus:
    return chart_item(test, sid, question=row["question"], answer=row["correct_answer"], options=[],
                      image=image, sha256=sha256,
                      graph_type=to_graph_type(row["chart_type"], where), chart_type=row["chart_type"],
                      task_category=to_task_category(test.key, row["task_category"], where),
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
    return literacy_items(stimuli, sample, participant_rows=rows)


HolfOptions = NoOptions


def build_holf(sources: Sources, seed: int = 0) -> StimulusSet:
    test = TESTS["holf"]
    rows = read_csv(sources.path("holf", "questions.csv"))
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
        for r in read_csv(sources.path("holf", rel)):
            if r["eventType"] == "test":
                responses.append((r["gameID"], r["prompt"], r["graph_PNG"], r["response"]))
    human = _responses_human(stimuli, "davinci2023", responses, "holf/davinci2023")
    return chart_stimset(test, stimuli, human, seed, "davinci2023.holf")


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
    rows = read_csv(path)
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
        return chart_stimset(test, [], no_human_data([]), seed, None, unavailable=(
            f"HOLF-Multi ({test.n_items} items) is not in the sources mirror. Get it from "
            f"{OSF_WHERE}, arrange it as <root>/holf-multi/questions.csv (HOLF's columns), "
            f"<root>/holf-multi/images/<image_file> and optionally <root>/holf-multi/responses.csv, "
            f"then pass osf_root=<root> or set ${OSF_ENV}."))
    folder = root / "holf-multi"
    qpath = folder / "questions.csv"
    if not qpath.is_file():
        raise DataError(f"{qpath}: missing (osf_root={root})")
    rows = read_csv(qpath)
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
    return chart_stimset(test, stimuli, human or no_human_data(stimuli), seed,
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
    rows = read_csv(sources.path("chartqa-human", "experiments.csv"))
    if len(rows) != test.n_items:
        raise DataError(f"chartqa-human/experiments.csv: {len(rows)} items, expected {test.n_items}")
    if items not in ("numeric", "all"):
        raise ValueError(f"{test.task_id}: items must be 'numeric' or 'all', got {items!r}")
    keep = [k for k, row in enumerate(rows) if items == "all" or numeric_answer(row["correct_answer"])]
    root = _root(chartqa_root, CHARTQA_ENV)
    if root is None:
        return chart_stimset(test, [], no_human_data([]), seed, None, unavailable=(
            f"ChartQA-Human's {len({r['image_file'] for r in rows})} chart images are not in the "
            f"sources mirror. Clone github.com/vis-nlp/ChartQA (commit 3dab8e83b6ac559b847b7c6e2f24d1faa95a4507) "
            f"or fetch the files listed in chartqa-human/needed_images.txt, then pass "
            f"chartqa_root=<folder holding 'ChartQA Dataset/'> or set ${CHARTQA_ENV}."))
    stimuli = []
    for k in keep:
        row = rows[k]
        where = f"chartqa-human/experiments.csv row {k}"
        image, digest = _external_image(root / CHARTQA_IMAGES / row["image_file"], where)
        stimuli.append(chart_item(
            test, f"chartqa_{k:03d}", question=row["question"], answer=row["correct_answer"],
            options=[], image=image, sha256=digest,
            graph_type=_chartqa_graph_type(row["chart_type"], where), chart_type=row["chart_type"],
            task_category=None, task_category_source=None, image_file=row["image_file"],
            chart_source=row["chart_source"]))
    osf = _root(osf_root, OSF_ENV)
    rpath = osf / "chartqa-human" / "responses.csv" if osf is not None else None
    human = (_responses_human(stimuli, "chart6_osf", _read_responses(rpath), str(rpath))
             if rpath is not None and rpath.is_file() else None)
    return chart_stimset(test, stimuli, human or no_human_data(stimuli), seed,
                    "chart6_osf.chartqa_human" if human else None)
