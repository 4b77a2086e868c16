"""The stimulus stage's data types: what a task shows, what it expects, what people did.

A task builds a :class:`StimulusSet` deterministically from verified sources and a seed. Images
are produced lazily (a path to a verified file, or a render function), so a rerun that finds
every trial already done never decodes an image. Hashes are over the exact bytes a model sees.
"""

from __future__ import annotations

import hashlib
import io
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
from PIL import Image

ResponseSpace = Literal["choice", "count", "scalar", "label"]
Split = Literal["train", "test"]

ImageSource = Path | Callable[[], Image.Image] | Image.Image


def png_bytes(image: Image.Image) -> bytes:
    """Deterministic PNG encoding (no timestamps, fixed compression) used for hashing and export."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _load(source: ImageSource) -> Image.Image:
    if isinstance(source, Image.Image):
        return source
    if isinstance(source, Path):
        with Image.open(source) as im:
            return im.convert("RGB")
    return source()


@dataclass(frozen=True)
class Prompt:
    """A verbatim task prompt; its id names the task version, its hash pins the exact text."""

    prompt_id: str
    text: str

    @property
    def sha256(self) -> str:
        return sha256_bytes(self.text.encode("utf-8"))

    @property
    def hash(self) -> str:
        # The paper's records carry an 8-hex prefix ("prompt_hash": "be08cec2").
        return self.sha256[:8]


@dataclass
class Stimulus:
    """One item of a task.

    ``image`` is the human-facing picture (the silhouette, the numbered montage, the chart) that
    prompt models receive; ``parts`` are the component images an encoder embeds separately for
    odd-one-out tasks (empty otherwise). ``human_target`` is h_i, the human reference response.
    """

    stimulus_id: str
    split: Split
    ground_truth: Any
    image_source: ImageSource
    human_target: Any = None
    part_sources: tuple[ImageSource, ...] = ()
    option_order: tuple[int, ...] | None = None
    manipulated_value: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    file_sha256: str | None = None  # set when the image is a verified source file
    _sha256: str | None = field(default=None, init=False, repr=False)

    @property
    def image(self) -> Image.Image:
        return _load(self.image_source)

    @property
    def parts(self) -> list[Image.Image]:
        return [_load(p) for p in self.part_sources]

    def loaded(self, what: Literal["image", "parts"]) -> Stimulus:
        """A copy with its image (or its parts) decoded or rendered now, in memory; the hash is
        carried over, so the copy is the same stimulus to records and caches."""
        sha = self.sha256
        copy = replace(self, image_source=self.image) if what == "image" else \
            replace(self, part_sources=tuple(self.parts))
        copy._sha256 = sha
        return copy

    @property
    def sha256(self) -> str:
        """Hash of what a model can see (image and parts) plus the targets it is scored on."""
        if self._sha256 is None:
            h = hashlib.sha256()
            if self.file_sha256 is not None:
                h.update(self.file_sha256.encode())
            elif hasattr(self.image_source, "content_hash"):  # generated: named by its parameters
                h.update(self.image_source.content_hash().encode())
            else:
                h.update(png_bytes(self.image))
            for part in self.parts:
                h.update(png_bytes(part))
            h.update(
                json.dumps(
                    # item text is part of what a model sees (CHART-6 questions and options)
                    [self.stimulus_id, self.ground_truth, self.human_target, self.option_order,
                     self.manipulated_value, self.meta.get("question"), self.meta.get("options")],
                    sort_keys=True,
                    default=str,
                ).encode()
            )
            self._sha256 = h.hexdigest()
        return self._sha256


class HumanReference:
    """Base of the task-level human data a family's scorer and figures read by attribute.

    Each scoring family has its own frozen dataclass (observer panel, odd-one-out votes, capacity
    band, literacy items, MLAE references) built by the task; per-item targets stay on
    ``Stimulus.human_target``.
    """


@dataclass(frozen=True)
class ObserverPanel(HumanReference):
    """Classification against a panel of observers (``classification_vs_observers``).

    ``correct`` is observers x test items (True = the observer named the true class; a missing
    answer counts as incorrect); ``responses`` is test items x observers, ``missing`` where none.
    ``paper_ranges`` holds the observer ranges a paper reports (``accuracy``, ``kappa_pairwise``,
    ``kappa_loo``), shown beside the panel's own where there are any.
    """

    observers: tuple[str, ...]
    correct: np.ndarray
    responses: np.ndarray
    n_classes: int
    split: str
    missing: str = "na"
    paper_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def p(self) -> np.ndarray:
        """Per-item proportion of observers correct (the kappa target)."""
        return self.correct.mean(axis=0)


@dataclass(frozen=True)
class OddOneOutVotes(HumanReference):
    """Odd-one-out human data in test-split order and montage positions 1/2/3.

    ``votes`` (n x 3) counts the individual choices per position; ``targets`` maps each human
    reference (the primary one first) to its n target positions; ``majority_tied`` flags the
    items whose majority is tied. ``raters`` and ``choices`` (n x R, one column per answer slot)
    hold who answered each triplet (an index shared by all triplets, so a person's answers can be
    resampled together; -1 in an empty slot) and the position they chose (0 in an empty slot).
    Built by :func:`harness.stimuli.montage.odd_one_out_votes`.
    """

    stimulus_ids: tuple[str, ...]
    votes: np.ndarray
    targets: dict[str, np.ndarray]
    majority_tied: np.ndarray
    raters: np.ndarray
    choices: np.ndarray

    @property
    def primary(self) -> str:
        return next(iter(self.targets))


@dataclass(frozen=True)
class CapacityBand(HumanReference):
    """A published capacity range (no per-trial human data): where a(k) should fall below 0.5."""

    low: int
    high: int
    source: str


@dataclass(frozen=True)
class LiteracyItems(HumanReference):
    """A literacy test's human sample (CHART-6): per-item proportion correct, in stimulus order.

    ``prop_correct`` is NaN where an item has no human data (all NaN: no sample mounted, ``sample``
    empty). With per-participant data, ``participant_correct`` is participants x items (1/0, NaN
    where a person did not see the item). ``format_mismatch`` says why the sample answered in
    another format than models do (then the human-relative scores are marked), else None.
    """

    sample: str
    item_ids: tuple[str, ...]
    prop_correct: np.ndarray
    participants: tuple[str, ...] = ()
    participant_correct: np.ndarray | None = None
    n_responses: np.ndarray | None = None
    format_mismatch: str | None = None


H = TypeVar("H", bound=HumanReference)


@dataclass
class StimulusSet:
    """Everything one task needs downstream: stimuli, prompt, options and the human data.

    ``human`` is the task's :class:`HumanReference` (None where a task has none).
    """

    task_id: str
    version: str
    response_space: ResponseSpace
    stimuli: list[Stimulus]
    human_ref_id: str | None  # None: no human sample for this set (a release not mounted)
    prompt: Prompt | None = None
    options: tuple[Any, ...] = ()
    human: HumanReference | None = None  # the family's own dataclass
    seed: int = 0
    unavailable: str | None = None  # why the task cannot run here (missing images), else None
    note: str | None = None  # what a reader must know of the set as built here (a subset of images)

    def human_as(self, kind: type[H]) -> H:
        """The human reference, checked to be the scoring family's dataclass ``kind``."""
        if not isinstance(self.human, kind):
            raise TypeError(f"{self.task_id}: needs {kind.__name__} as its human reference, "
                            f"got {type(self.human).__name__}")
        return self.human

    def split(self, name: Split) -> list[Stimulus]:
        return [s for s in self.stimuli if s.split == name]

    @property
    def test(self) -> list[Stimulus]:
        return self.split("test")

    @property
    def train(self) -> list[Stimulus]:
        return self.split("train")

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([self.task_id, self.version, self.seed]).encode())
        for s in self.stimuli:
            h.update(s.split.encode())
            h.update(s.sha256.encode())
        return h.hexdigest()


def _loaded_batch(batch: list[Stimulus], what: Literal["image", "parts"]) -> list[Stimulus]:
    out = []
    for s in batch:
        try:
            out.append(s.loaded(what))
        except Exception:  # noqa: BLE001 - the readout meets the same error where it records it
            out.append(s)
    return out


def prefetched(batches: Iterable[list[Stimulus]],
               what: Literal["image", "parts"] | None) -> Iterator[list[Stimulus]]:
    """``batches`` with their images (or parts) prepared one batch ahead in a background thread,
    so decoding and rendering overlap the model's work on the batch before (torch releases the
    GIL in its kernels). ``what=None`` passes the batches through as they are (a readout that
    renders its own way). A stimulus that fails to load is passed unloaded: its readout then
    fails on it where it records the failure, one trial, as without prefetching."""
    if what is None:
        yield from batches
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gestalt-prefetch") as pool:
        pending = None
        for batch in batches:
            ahead = pool.submit(_loaded_batch, batch, what)
            if pending is not None:
                yield pending.result()
            pending = ahead
        if pending is not None:
            yield pending.result()


def by_id(stimuli: Sequence[Stimulus]) -> dict[str, Stimulus]:
    return {s.stimulus_id: s for s in stimuli}
