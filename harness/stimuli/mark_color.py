"""``similarity.chart.mark_color``: odd-one-out over the Tableau-10 mark colours (Demiralp et al. 2014).

Stimuli: all C(10,3) = 120 triplets {i<j<k} of the 10 palette colours of the perceptual-kernels
colour experiments (``palette_tableau10.csv``), all in the test split.

Marks: each colour is one part image, a filled square colour chip of ``MARK_SIDE`` = 112 px
centred on a white ``TILE`` = 224 px square, no outline. That is the study's own colour stimulus
(``color10`` in its ``shared/stim.js`` draws an SVG rect filled with the palette colour). Encoders
embed the three part images (``Stimulus.part_sources``, montage order); prompt models see the
numbered montage 1-2-3 (harness.stimuli.montage) in a seeded order recorded as ``option_order``
that puts the kernel target at each position exactly 40 times (montage.balanced_orders), so the
position-guessing floor is 1/3 for every seed.

Human references (both in montage positions 1/2/3):
- ``human_target`` (= ``ground_truth``, the paper's target): the mark outside the
  minimum-dissimilarity pair of the triplet-discrimination kernel ``data/kernels/color-td.txt``.
  The minimum pair is unique in all 120 triplets (smallest gap 0.00074); a tie would be a
  DataError rather than an arbitrary choice.
- second reference ``human.targets['majority']``: the majority of the 20 subjects' raw
  odd-one-out votes, read from ``data/raw/color-td.txt`` (layout in the release's SOURCE.md:
  line = subject, triplets 8-127 = the 120 test triplets in lexicographic order, palette indices
  offset by +4, third element = the colour picked as most different). 6 triplets have a tied
  majority; a tie goes to the lowest palette index (montage.majority), and
  ``human.majority_tied`` and each stimulus' ``meta['majority_tied_colors']`` record it.

``human`` is an :class:`~harness.stimuli.base.OddOneOutVotes`; its ``votes`` (120 x 3, montage
order) give the scorer the human individual-agreement reference, its leave-one-subject-out form
(each subject answered every triplet once) and the split-half consistency of the majority; its
``raters``/``choices`` (the 20 subjects crossed with the 120 triplets) let the intervals resample
subjects with all their answers.
"""

from __future__ import annotations

import csv
from functools import partial
from itertools import combinations

import numpy as np
from PIL import Image, ImageDraw

from ..sources import DataError, Sources
from .base import Prompt, Stimulus, StimulusSet
from .montage import (
    balanced_orders,
    majority,
    montage_of,
    odd_one_out_votes,
    position_of,
    to_positions,
    vote_counts,
)

TASK_ID = "similarity.chart.mark_color"
VERSION = "2"  # 2: target positions balanced 40/40/40
RELEASE = "perceptual-kernels"
PALETTE_FILE = "palette_tableau10.csv"
KERNEL_FILE = "data/kernels/color-td.txt"
RAW_FILE = "data/raw/color-td.txt"
N_COLORS = 10
TILE = 224
MARK_SIDE = 112
# Raw file layout (SOURCE.md): 138 stored triplets per subject; 8-127 are the test triplets.
RAW_TRIPLETS = 138
TEST_SLICE = slice(8, 128)
RAW_OFFSET = 4

PROMPT = Prompt(
    prompt_id=f"{TASK_ID}.v{VERSION}",
    text=(
        "Three colored chart marks are shown, numbered 1, 2 and 3. Which one is the odd one out "
        "(least similar in color to the other two)? Answer 1, 2, or 3."
    ),
)

TRIPLETS: tuple[tuple[int, int, int], ...] = tuple(combinations(range(N_COLORS), 3))


def read_palette(sources: Sources) -> list[str]:
    path = sources.path(RELEASE, PALETTE_FILE)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if [int(r["index"]) for r in rows] != list(range(N_COLORS)):
        raise DataError(f"{path}: expected indices 0..{N_COLORS - 1} in order")
    return [r["hex"] for r in rows]


def read_kernel(sources: Sources) -> np.ndarray:
    path = sources.path(RELEASE, KERNEL_FILE)
    k = np.loadtxt(path, delimiter=",")
    if k.shape != (N_COLORS, N_COLORS) or not np.allclose(k, k.T):
        raise DataError(f"{path}: expected a symmetric {N_COLORS}x{N_COLORS} matrix, got {k.shape}")
    return k


def kernel_odd(kernel: np.ndarray, triplet: tuple[int, int, int]) -> int:
    """Canonical index (0-2) of the colour outside the minimum-dissimilarity pair."""
    pairs = list(combinations(range(3), 2))
    d = np.array([kernel[triplet[a], triplet[b]] for a, b in pairs])
    if np.sum(d == d.min()) > 1:
        raise DataError(f"{KERNEL_FILE}: tied minimum pair in triplet {triplet}")
    a, b = pairs[int(d.argmin())]
    return 3 - a - b


def read_answers(sources: Sources) -> list[list[tuple[int, int]]]:
    """Per test triplet (canonical order): each subject's (line index, canonical index of the
    colour picked as the odd one out). Every subject answered every triplet once."""
    path = sources.path(RELEASE, RAW_FILE)
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    answers: list[list[tuple[int, int]]] = [[] for _ in TRIPLETS]
    for line_no, line in enumerate(lines, start=1):
        values = [int(x) for x in line.strip().rstrip(",").split(",")]
        if len(values) != 3 * RAW_TRIPLETS:
            raise DataError(f"{path}: line {line_no} has {len(values)} values, "
                            f"expected {3 * RAW_TRIPLETS}")
        stored = np.array(values).reshape(RAW_TRIPLETS, 3)[TEST_SLICE] - RAW_OFFSET
        for t, (triplet, row) in enumerate(zip(TRIPLETS, stored)):
            if tuple(sorted(row)) != triplet:
                raise DataError(f"{path}: line {line_no}, test triplet {t} is {tuple(row)}, "
                                f"expected a permutation of {triplet}")
            answers[t].append((line_no - 1, triplet.index(int(row[2]))))
    return answers


def render_mark(hex_color: str) -> Image.Image:
    image = Image.new("RGB", (TILE, TILE), "white")
    lo = (TILE - MARK_SIDE) // 2
    ImageDraw.Draw(image).rectangle([lo, lo, lo + MARK_SIDE - 1, lo + MARK_SIDE - 1], fill=hex_color)
    return image


def stimulus_id(triplet: tuple[int, int, int]) -> str:
    return "mark_" + "".join(str(c) for c in triplet)


def build(sources: Sources, seed: int = 0) -> StimulusSet:
    palette = read_palette(sources)
    kernel = read_kernel(sources)
    answers = read_answers(sources)
    votes = np.array([vote_counts(a) for a in answers])
    kernel_targets = [kernel_odd(kernel, triplet) for triplet in TRIPLETS]
    majorities = [majority(v) for v in votes]
    orders = balanced_orders(kernel_targets, np.random.default_rng(seed))
    stimuli = []
    for triplet, v, order, k_odd, (m_odd, m_tied) in zip(TRIPLETS, votes, orders, kernel_targets,
                                                          majorities):
        colors = to_positions(triplet, order)
        parts = tuple(partial(render_mark, palette[c]) for c in colors)
        target = position_of(k_odd, order)
        stimuli.append(Stimulus(
            stimulus_id=stimulus_id(triplet),
            split="test",
            ground_truth=target,
            human_target=target,
            image_source=partial(montage_of, parts),
            part_sources=parts,
            option_order=order,
            meta={
                "colors": colors,
                "hex": [palette[c] for c in colors],
                "votes": to_positions(v.tolist(), order),
                "kernel_odd_color": triplet[k_odd],
                "majority_odd_color": triplet[m_odd],
                "majority_tied_colors": [triplet[c] for c in m_tied] if len(m_tied) > 1 else [],
                "majority_target": position_of(m_odd, order),
            },
        ))
    return StimulusSet(
        task_id=TASK_ID,
        version=VERSION,
        response_space="choice",
        stimuli=stimuli,
        human_ref_id="demiralp2014.color_td",
        prompt=PROMPT,
        options=(1, 2, 3),
        human=odd_one_out_votes([s.stimulus_id for s in stimuli], answers, orders,
                                {"kernel": kernel_targets, "majority": [m for m, _ in majorities]}),
        seed=seed,
    )
