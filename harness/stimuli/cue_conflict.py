"""``shape.nat.cue_conflict``: Geirhos et al. (2019) cue-conflict images and the shape bias.

Style-transfer images with the shape of one class and the texture of another
(``<shape class>/<shape><i>-<texture><j>.png``, 1,280 in all, 80 of them without a conflict:
shape class = texture class), shown to 10 observers in a 16-way choice. The headline is the
shape bias (:mod:`harness.scores.shape_bias`).

Splits: the conflict images are the test split (1,200 with the full set); the non-conflict images
(80) are the probe-train split, so a probe is fit on images whose shape and texture agree and never
sees a conflict image. The paper leaves non-conflict images out of the shape bias; here they are
not scored at all.

The full set is 136 MB: a mirror may hold part of it (``../shared/sources`` holds 230: the first
10 file names of each shape folder and the 80 non-conflict images). Without a mirror, and unless
``--offline``, the release is pulled by URL at the pinned commit and each file sha256-checked
(:mod:`harness.sources.store`); otherwise the task runs on the images present, and its ``note``
(the dry run) and every score's method say how many that is.

Human reference (:mod:`harness.stimuli.geirhos`): per image the 10 observers' answers, the modal
answer as ``human_target``, and the panel with correctness = naming the shape class (the
convention of model-vs-human's error consistency on cue-conflict).
"""

from __future__ import annotations

import re

from ..sources import DataError, Sources
from ..sources.store import get_release
from .base import Stimulus, StimulusSet
from .geirhos import (
    CLASSES,
    N_OBSERVERS,
    choice_prompt,
    modal_response,
    observer_panel,
    read_observer_trials,
)

TASK_ID = "shape.nat.cue_conflict"
VERSION = "1"
RELEASE = "geirhos-edges-cue-conflict"
FOLDER = "stimuli/style-transfer-preprocessed-512/"
RAW_DATA = "style-transfer-512-nomask-experiment"
PROMPT = choice_prompt(TASK_ID, VERSION, "image")
NAME = re.compile(r"^(?P<shape>[a-z]+)\d+-(?P<texture>[a-z]+)\d+$")


def observer_file(subject: int) -> str:
    return f"raw-data/{RAW_DATA}/{RAW_DATA}_subject-{subject:02d}_session_1.csv"


def shape_and_texture(image: str) -> tuple[str, str]:
    """``airplane1-bicycle2`` -> (``airplane``, ``bicycle``)."""
    m = NAME.match(image)
    if m is None or m["shape"] not in CLASSES or m["texture"] not in CLASSES:
        raise DataError(f"{RELEASE}: cue-conflict image {image!r} is not <shape><i>-<texture><j>")
    return m["shape"], m["texture"]


def image_files(sources: Sources) -> tuple[list[str], int]:
    """The declared cue-conflict images that are here (sorted), and how many are declared."""
    declared = sorted(f for f in get_release(RELEASE).files if f.startswith(FOLDER))
    return [f for f in declared if sources.present(RELEASE, f)], len(declared)


def held(n_here: int, n_declared: int) -> str:
    """What the scores say about the images they were computed on."""
    if n_here == n_declared:
        return f"all {n_declared} cue-conflict images"
    return (f"{n_here} of the {n_declared} cue-conflict images (those present: the mirror holds "
            f"a subset, or downloads are off; `gestalt data pull {RELEASE}` without --mirror "
            f"and --offline fetches the rest)")


def build(sources: Sources, seed: int = 0) -> StimulusSet:
    trials = read_observer_trials(sources, RELEASE, (observer_file(j) for j in range(1, N_OBSERVERS + 1)))
    observers = sorted(trials)
    files, n_declared = image_files(sources)
    stimuli: list[Stimulus] = []
    for relpath in files:
        image = relpath.rsplit("/", 1)[-1].removesuffix(".png")
        shape, texture = shape_and_texture(image)
        answers = [trials[o].get(image) for o in observers]
        if any(a is None or a[1] != shape for a in answers):
            raise DataError(f"{RELEASE}: {image}: not answered by every observer with category {shape}")
        responses = [a[0] for a in answers if a is not None]
        stimuli.append(Stimulus(
            stimulus_id=f"cue_{image}",
            split="test" if shape != texture else "train",
            ground_truth=shape,
            image_source=sources.path(RELEASE, relpath),
            file_sha256=sources.sha256(RELEASE, relpath),
            human_target=modal_response(responses, shape),
            meta={"image": image, "shape": shape, "texture": texture,
                  "observer_responses": responses},
        ))
    test = [s for s in stimuli if s.split == "test"]
    n_train = len(stimuli) - len(test)
    split = (f"test: the {len(test)} conflict images; probe-train: the {n_train} non-conflict "
             f"images (shape class = texture class), so a probe never sees a conflict image; "
             f"{held(len(files), n_declared)}")
    return StimulusSet(
        task_id=TASK_ID,
        version=VERSION,
        response_space="label",
        stimuli=stimuli,
        human_ref_id="geirhos2019.cue_conflict",
        prompt=PROMPT,
        options=CLASSES,
        human=observer_panel(test, observers, split),
        seed=seed,
        note=None if len(files) == n_declared else held(len(files), n_declared),
    )
