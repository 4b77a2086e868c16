"""``similarity.nat.things``: THINGS object odd-one-out (Hebart et al. 2020 noise-ceiling triplets).

Human data: the 1,000 random triplets with ~20 responses each (14-25) of
``LukasMut-VICE/data/test_triplets.csv``. Its item numbers are 1-based indices in the *original*
MTurk concept order; ``sortindex`` maps them to THINGS order (``things = inverse(sortindex)[item
- 1]``, the release's SOURCE.md, "About the index order"), and ``things_concepts.tsv`` names the
concepts (``uniqueID``) in THINGS order. ``choice`` is the 1-based position of the odd one out in
the row as stored. Responses are pooled per unordered triplet, one per worker: 1,125 of the
20,000 rows repeat a worker already counted on that triplet and are left out (:func:`read_answers`),
leaving 13-25 workers per triplet. The canonical order is ascending THINGS index (a < b < c).

- ``human_target`` (= ``ground_truth``) is the majority choice in montage position; a tied majority
  (24 of the default 500 triplets) goes to the lowest concept index (montage.majority) and is
  flagged in ``human.majority_tied``.
- ``human`` (:class:`~harness.stimuli.base.OddOneOutVotes`, montage order) gives the scorer the
  human individual-agreement reference (0.679 on the default 500 triplets), its leave-one-worker-out
  form (0.645) and the split-half consistency of the majority; its ``raters`` (workers, crossed
  with the triplets they answered) let the intervals resample workers with all their answers.
  B's ceiling is the paper's cited 0.863 (harness.scores.odd_one_out), which these sources
  cannot give.

Option ``n_triplets`` (the paper scores 500): a seeded sample (stream ``[seed, 1]``) of the 1,000,
kept in canonical order; ``None`` keeps all. The montage orders (stream ``[seed, 0]``) balance the
target positions over the sampled triplets as exactly as n allows (167/167/166 of 500;
montage.balanced_orders).

Images are not in sources/. ``image_root`` (or ``$GESTALT_THINGS_IMAGES``) must be a folder in the
THINGS layout ``<uniqueID>/<file>.jpg``; each concept is shown by the first ``.jpg`` in its folder
by file name. Encoders embed those files (``part_sources``, montage order); prompt models see the
numbered montage in the default layout of harness.stimuli.montage (each photo fitted into a
224 px square), so a montage can be re-rendered from its parts in any order. Without an image
root the set still carries every target and the votes (the ceiling can be reported) and
``unavailable`` says where to get the images; asking such a stimulus for an image raises with
the same message. A given root missing a needed concept folder or image is an error naming it.
"""

from __future__ import annotations

import csv
import os
from collections import defaultdict
from functools import partial
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator

from ..sources import DataError, Sources
from .base import ImageSource, Prompt, Stimulus, StimulusSet
from .montage import (
    balanced_orders,
    majority,
    montage_of,
    odd_one_out_votes,
    position_of,
    to_positions,
    vote_counts,
)
from ..options import PathOption
from .registry import TaskOptions

TASK_ID = "similarity.nat.things"
VERSION = "3"  # 2: target positions balanced over the scored triplets; 3: one answer per worker
RELEASE = "things"
TRIPLETS_FILE = "LukasMut-VICE/data/test_triplets.csv"
SORTINDEX_FILE = "LukasMut-VICE/data/sortindex"
CONCEPTS_FILE = "thingsvision/data/files/things_concepts.tsv"
N_CONCEPTS = 1854
IMAGE_ENV = "GESTALT_THINGS_IMAGES"
UNAVAILABLE = (
    "THINGS object images are not in the source mirror: set the task option image_root or "
    f"${IMAGE_ENV} to a folder in THINGS layout <concept uniqueID>/<file>.jpg. The images come "
    "from the THINGS database on OSF (https://osf.io/jum2f/, see https://things-initiative.org)."
)

PROMPT = Prompt(
    prompt_id=f"{TASK_ID}.v{VERSION}",
    text=(
        "Three objects are shown, numbered 1, 2 and 3. Which one is the odd one out (least similar "
        "to the other two)? Answer 1, 2, or 3."
    ),
)


def read_concepts(sources: Sources) -> list[str]:
    """uniqueID per THINGS concept index 0..1853."""
    path = sources.path(RELEASE, CONCEPTS_FILE)
    with open(path, newline="", encoding="utf-8") as f:
        ids = [row["uniqueID"] for row in csv.DictReader(f, delimiter="\t")]
    if len(ids) != N_CONCEPTS:
        raise DataError(f"{path}: {len(ids)} concepts, expected {N_CONCEPTS}")
    return ids


def original_to_things(sources: Sources) -> np.ndarray:
    """Map a 0-based original (MTurk) index to its THINGS index: the inverse of ``sortindex``."""
    path = sources.path(RELEASE, SORTINDEX_FILE)
    sortindex = np.array([int(x) for x in path.read_text().split()])
    if sorted(sortindex.tolist()) != list(range(N_CONCEPTS)):
        raise DataError(f"{path}: not a permutation of 0..{N_CONCEPTS - 1}")
    inverse = np.empty(N_CONCEPTS, dtype=int)
    inverse[sortindex] = np.arange(N_CONCEPTS)
    return inverse


def read_answers(sources: Sources) -> dict[tuple[int, int, int], list[tuple[int, int]]]:
    """Canonical triplet (THINGS indices a<b<c) -> each worker's (worker index, canonical index of
    the item picked as the odd one out), in file order.

    A worker's first response to a triplet is their answer; their later responses to the same
    triplet (1,125 of the 20,000 rows) are left out: a person counted twice
    would weigh double in the majority and be compared with themselves in the leave-one-out and
    split-half references. Worker indices number the file's worker codes in sorted order, so one
    worker's answers can be resampled together across triplets.
    """
    to_things = original_to_things(sources)
    path = sources.path(RELEASE, TRIPLETS_FILE)
    rows = []
    with open(path, newline="") as f:
        for row_no, row in enumerate(csv.reader(f, delimiter="\t"), start=1):
            try:
                items = [int(x) for x in row[:3]]
                choice = int(row[3])
                worker = row[4]
            except (ValueError, IndexError):
                raise DataError(f"{path}: row {row_no} is not 'item1 item2 item3 choice subject'") from None
            if choice not in (1, 2, 3) or not all(1 <= i <= N_CONCEPTS for i in items):
                raise DataError(f"{path}: row {row_no} has items {items}, choice {choice}")
            things = [int(to_things[i - 1]) for i in items]
            a, b, c = sorted(things)
            triplet = (a, b, c)
            if len(set(triplet)) != 3:
                raise DataError(f"{path}: row {row_no} repeats a concept: {items}")
            rows.append((triplet, worker, triplet.index(things[choice - 1])))
    workers = {w: k for k, w in enumerate(sorted({w for _, w, _ in rows}))}
    answers: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    seen = set()
    for triplet, worker, picked in rows:
        if (triplet, worker) not in seen:
            seen.add((triplet, worker))
            answers[triplet].append((workers[worker], picked))
    return dict(sorted(answers.items()))


def concept_image(root: Path, concept: str) -> Path:
    folder = root / concept
    files = sorted(folder.glob("*.jpg")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"{folder}: no .jpg image for THINGS concept {concept!r} "
                                f"(expected THINGS layout <root>/<concept>/<file>.jpg)")
    return files[0]


def _unavailable_image(message: str):
    raise FileNotFoundError(message)


class Options(TaskOptions):
    n_triplets: int | None = Field(None, ge=1, le=1_000_000)
    image_root: PathOption | None = None  # else $GESTALT_THINGS_IMAGES; without either, no images

    @field_validator("image_root")
    @classmethod
    def _a_folder(cls, v: Path | None) -> Path | None:
        if v is not None and not v.expanduser().is_dir():
            raise ValueError(f"{v}: THINGS image root is not a folder")
        return v


def build(sources: Sources, seed: int = 0, n_triplets: int | None = None,
          image_root: str | Path | None = None) -> StimulusSet:
    concepts = read_concepts(sources)
    all_answers = read_answers(sources)
    all_votes = {t: vote_counts(a) for t, a in all_answers.items()}
    triplets = list(all_votes)
    if n_triplets is not None:
        if not 1 <= n_triplets <= len(triplets):
            raise ValueError(f"{TASK_ID}: n_triplets must be in 1..{len(triplets)}, got {n_triplets}")
        keep = np.sort(np.random.default_rng([seed, 1]).choice(len(triplets), n_triplets,
                                                                replace=False))
        triplets = [triplets[i] for i in keep]
    majorities = [majority(all_votes[t]) for t in triplets]
    # balanced over the triplets actually scored, so the position floor is ceil(n/3)/n
    orders = balanced_orders([odd for odd, _ in majorities], np.random.default_rng([seed, 0]))

    root = image_root or os.environ.get(IMAGE_ENV) or None
    if root is not None:
        root = Path(root).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: THINGS image root is not a folder ({IMAGE_ENV} or "
                                    f"option image_root)")
    missing_image = partial(_unavailable_image, UNAVAILABLE)

    stimuli = []
    for triplet, order, (odd, tied) in zip(triplets, orders, majorities):
        v = all_votes[triplet]
        shown = to_positions(triplet, order)
        target = position_of(odd, order)
        parts: tuple[ImageSource, ...]
        if root is not None:
            parts = tuple(concept_image(root, concepts[c]) for c in shown)
            image = partial(montage_of, parts)
        else:
            parts, image = (missing_image,) * 3, missing_image
        stimuli.append(Stimulus(
            stimulus_id="things_" + "_".join(str(c) for c in triplet),
            split="test",
            ground_truth=target,
            human_target=target,
            image_source=image,
            part_sources=parts,
            option_order=order,
            meta={
                "concepts": [concepts[c] for c in shown],
                "things_index": shown,
                "votes": to_positions(v, order),
                "majority_tied_positions": ([position_of(c, order) for c in tied]
                                            if len(tied) > 1 else []),
            },
        ))
    return StimulusSet(
        task_id=TASK_ID,
        version=VERSION,
        response_space="choice",
        stimuli=stimuli,
        human_ref_id="hebart2020.things_noise_ceiling",
        prompt=PROMPT,
        options=(1, 2, 3),
        human=odd_one_out_votes([s.stimulus_id for s in stimuli], [all_answers[t] for t in triplets],
                                orders, {"majority": [odd for odd, _ in majorities]}),
        seed=seed,
        unavailable=None if root is not None else UNAVAILABLE,
    )
