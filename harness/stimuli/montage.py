"""What the odd-one-out tasks share: the numbered 1-2-3 montage, its position shuffle, vote majorities.

A triplet has a *canonical* order (palette indices i<j<k, THINGS concept indices a<b<c) in which
its human data are stored. The montage shows the three items in a seeded, shuffled order:
``option_order[p]`` is the canonical index (0, 1 or 2) of the item at montage position ``p + 1``.
Responses, human targets and ``Stimulus.part_sources`` are all in montage positions, numbered
1, 2, 3 as the prompt and the labels in the picture number them.

Montage layout: each part is scaled (aspect kept, LANCZOS) to fit a ``tile`` x ``tile`` square
and centred on white; the tiles sit in one row with ``gap`` px between them and a ``margin``
around, and the numbers 1, 2, 3 are printed in black, centred above their tiles, in Pillow's
bundled default FreeType font. Everything is deterministic for a given Pillow/FreeType build.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .base import ImageSource, OddOneOutVotes, _load

N_OPTIONS = 3
POSITIONS = (1, 2, 3)


def balanced_orders(targets: Sequence[int], rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Montage orders that put the targets (canonical indices) at positions 1/2/3 equally often.

    n // 3 targets go to each position and the n mod 3 left over to distinct, randomly chosen
    positions; which triplet gets which position, and the order of its other two items, are
    random. So the best position-only strategy scores ceil(n / 3) / n for every seed (1/3 for
    120 triplets), where independent shuffles leave it to the draw (0.417 with seed 0).
    """
    n = len(targets)
    extra = rng.choice(N_OPTIONS, size=n % N_OPTIONS, replace=False)
    slots = np.concatenate([np.repeat(np.arange(N_OPTIONS), n // N_OPTIONS), extra])
    slots = rng.permutation(slots)
    orders = []
    for target, slot in zip(targets, slots):
        others = [c for c in range(N_OPTIONS) if c != target]
        others = [others[i] for i in rng.permutation(2)]
        order = others[:slot] + [int(target)] + others[slot:]
        orders.append(tuple(int(c) for c in order))
    return orders


def odd_one_out_votes(stimulus_ids: Sequence[str],
                      canonical_answers: Sequence[Sequence[tuple[int, int]]],
                      orders: Sequence[Sequence[int]],
                      canonical_targets: dict[str, Sequence[int]]) -> OddOneOutVotes:
    """The odd-one-out human reference in montage positions, from canonical-order data.

    ``canonical_answers`` holds, per triplet, each rater's (rater index, canonical index of the
    item they picked); ``canonical_targets`` maps each reference name (the primary one first) to
    its targets as canonical indices; a majority's tie flag comes from the votes themselves.
    """
    width = max(len(a) for a in canonical_answers)
    raters = np.full((len(canonical_answers), width), -1, dtype=int)
    choices = np.zeros((len(canonical_answers), width), dtype=int)
    for t, (answers, order) in enumerate(zip(canonical_answers, orders)):
        for slot, (rater, picked) in enumerate(answers):
            raters[t, slot], choices[t, slot] = rater, position_of(picked, order)
    votes = np.stack([(choices == p).sum(axis=1) for p in POSITIONS], axis=1)
    targets = {name: np.array([position_of(int(t), o) for t, o in zip(ts, orders)], dtype=int)
               for name, ts in canonical_targets.items()}
    tied = (votes == votes.max(axis=1, keepdims=True)).sum(axis=1) > 1
    return OddOneOutVotes(stimulus_ids=tuple(stimulus_ids), votes=votes, targets=targets,
                          majority_tied=tied, raters=raters, choices=choices)


def vote_counts(answers: Sequence[tuple[int, int]]) -> list[int]:
    """Canonical-order odd-one-out vote counts of one triplet's (rater, picked index) answers."""
    return [sum(picked == k for _, picked in answers) for k in range(N_OPTIONS)]


def to_positions(canonical: Sequence, order: Sequence[int]) -> list:
    """Reorder per-item values from canonical order into montage order."""
    return [canonical[c] for c in order]


def position_of(canonical_index: int, order: Sequence[int]) -> int:
    """Montage position (1-based) of the item with the given canonical index."""
    return list(order).index(canonical_index) + 1


def majority(votes: Sequence[int]) -> tuple[int, list[int]]:
    """(majority index, all tied indices) of per-item odd-one-out votes in canonical order.

    A tie goes to the lowest canonical index (the lowest palette or concept index): a rule that
    does not depend on the seeded montage order, so targets stay fixed when the seed changes.
    """
    v = np.asarray(votes)
    tied = [int(i) for i in np.flatnonzero(v == v.max())]
    return tied[0], tied


def numbered_montage(parts: Sequence[Image.Image], tile: int = 224, gap: int = 32,
                     margin: int = 24, font_size: int = 40) -> Image.Image:
    """Parts side by side in montage order, numbered 1..n above each tile, on white."""
    font = ImageFont.load_default(size=font_size)
    label_h = font_size + 16
    width = 2 * margin + len(parts) * tile + (len(parts) - 1) * gap
    height = 2 * margin + label_h + tile
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    for p, part in enumerate(parts):
        x0 = margin + p * (tile + gap)
        y0 = margin + label_h
        fitted = _fit(part.convert("RGB"), tile)
        canvas.paste(fitted, (x0 + (tile - fitted.width) // 2, y0 + (tile - fitted.height) // 2))
        draw.text((x0 + tile // 2, margin + label_h // 2), str(p + 1), fill="black", font=font,
                  anchor="mm")
    return canvas


def montage_of(part_sources: Sequence[ImageSource], **layout) -> Image.Image:
    """Render the montage from the parts' sources (paths or render functions)."""
    return numbered_montage([_load(s) for s in part_sources], **layout)


def _fit(image: Image.Image, size: int) -> Image.Image:
    if image.width == size and image.height == size:
        return image
    scale = size / max(image.width, image.height)
    new = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(new, Image.Resampling.LANCZOS)
