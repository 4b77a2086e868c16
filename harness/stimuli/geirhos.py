"""The 16-class experiments of Geirhos et al. (2019): filled silhouettes, edges and cue-conflict.

One construction for all three: the same 16 entry-level classes, 10 observers per experiment,
one CSV per observer in the schema ``subj,session,trial,rt,object_response,category,condition,
imagename`` (``object_response`` ``na`` where no answer came within the presentation window), and
a 16-way forced choice. An :class:`Experiment` names what differs (release, folders, prompt); the
readers and the human reference are shared:

- ``human_target`` (h_i, the B target) is the per-image modal response over the observers who
  answered; ``na`` does not vote. A tie goes to the true class when it is among the tied modes
  (then the true class is itself a modal human answer), else to the alphabetically first tied
  label, so the remaining cases stay deterministic.
- ``human`` is an :class:`~harness.stimuli.base.ObserverPanel` over the scored images; ``na``
  counts as incorrect (a missed response is not a correct recognition; model-vs-human's
  error-consistency convention).
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..sources import DataError, Sources
from .base import ObserverPanel, Prompt, Split, Stimulus, StimulusSet
from .registry import TaskOptions

CLASSES = ("airplane", "bear", "bicycle", "bird", "boat", "bottle", "car", "cat", "chair", "clock",
           "dog", "elephant", "keyboard", "knife", "oven", "truck")
N_OBSERVERS = 10
NO_RESPONSE = "na"
TRAIN_IMAGES = range(1, 6)
TEST_IMAGES = range(6, 11)
SPLIT = "this harness's split: images 1-5 probe-train, 6-10 test (not the paper's, which is unknown)"
ALL_IMAGES = "all {n} images scored (images: all): no probe-train split, for readouts that train nothing"


def choice_prompt(task_id: str, version: str, what: str) -> Prompt:
    """The 16-way choice, worded as the observers' task: name the object among the 16 labels."""
    return Prompt(prompt_id=f"{task_id}.v{version}",
                  text=f"What object is shown in this {what}? Choose exactly one: "
                       f"{', '.join(CLASSES)}.")


class Options(TaskOptions):
    """``images``: ``split`` (1-5 probe-train, 6-10 test) or ``all`` (every image scored, for
    readouts that train nothing: published decisions, a classifier's own labels)."""

    images: Literal["split", "all"] = "split"


@dataclass(frozen=True)
class Experiment:
    """One experiment of the texture-vs-shape repository with 10 images per class."""

    task_id: str
    version: str
    release: str
    raw_data: str  # the experiment's name: raw-data/<name>/<name>_subject-XX_session_1.csv
    folder: str  # the images: <folder>/<class>/<class><n>.png
    stimulus_prefix: str
    human_ref_id: str
    prompt: Prompt
    # the paper's observer ranges (on a split this harness cannot identify), shown beside its own
    paper_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)

    def observer_file(self, subject: int) -> str:
        return f"raw-data/{self.raw_data}/{self.raw_data}_subject-{subject:02d}_session_1.csv"


def image_of(imagename: str) -> str:
    """A trial's image as the stimulus folder names it: ``0001_edg_s01_0_oven_00_oven10.png`` ->
    ``oven10``, ``..._bird3-bird2.png`` -> ``bird3-bird2``."""
    return imagename.rsplit("_", 1)[-1].removesuffix(".png")


def read_observer_trials(sources: Sources, release: str,
                         files: Iterable[str]) -> dict[str, dict[str, tuple[str, str]]]:
    """observer id -> {image -> (response, category)}; ``na`` where no response."""
    trials: dict[str, dict[str, tuple[str, str]]] = {}
    for relpath in files:
        path = sources.path(release, relpath)
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        answers: dict[str, tuple[str, str]] = {}
        for row in rows:
            image = image_of(row["imagename"])
            if image in answers:
                raise DataError(f"{path}: image {image!r} appears twice")
            if row["object_response"] not in CLASSES + (NO_RESPONSE,):
                raise DataError(f"{path}: unknown response {row['object_response']!r} for {image}")
            answers[image] = (row["object_response"], row["category"])
        trials[rows[0]["subj"]] = answers
    return trials


def modal_response(responses: list[str], true_class: str) -> str:
    votes = Counter(r for r in responses if r != NO_RESPONSE)
    top = max(votes.values())
    modes = sorted(label for label, n in votes.items() if n == top)
    return true_class if true_class in modes else modes[0]


def observer_panel(test: list[Stimulus], observers: list[str], split: str,
                   paper_ranges: dict[str, tuple[float, float]] | None = None) -> ObserverPanel:
    """The panel over the scored stimuli, from each stimulus' ``meta['observer_responses']``."""
    answers = np.array([s.meta["observer_responses"] for s in test], dtype=object)
    truth = np.array([s.ground_truth for s in test], dtype=object)
    return ObserverPanel(observers=tuple(observers), correct=(answers == truth[:, None]).T,
                         responses=answers, n_classes=len(CLASSES), split=split,
                         missing=NO_RESPONSE, paper_ranges=dict(paper_ranges or {}))


def build_experiment(exp: Experiment, sources: Sources, seed: int,
                     images: Literal["split", "all"]) -> StimulusSet:
    trials = read_observer_trials(sources, exp.release,
                                  (exp.observer_file(j) for j in range(1, N_OBSERVERS + 1)))
    observers = sorted(trials)
    splits: tuple[tuple[Split, range], ...] = (("train", TRAIN_IMAGES), ("test", TEST_IMAGES)) \
        if images == "split" else (("test", range(1, 11)),)
    stimuli: list[Stimulus] = []
    for split, numbers in splits:
        for cls in CLASSES:
            for n in numbers:
                relpath = f"{exp.folder}/{cls}/{cls}{n}.png"
                responses = [trials[o][f"{cls}{n}"][0] for o in observers]
                stimuli.append(Stimulus(
                    stimulus_id=f"{exp.stimulus_prefix}_{cls}{n}",
                    split=split,
                    ground_truth=cls,
                    image_source=sources.path(exp.release, relpath),
                    file_sha256=sources.sha256(exp.release, relpath),
                    human_target=modal_response(responses, cls),
                    meta={"image": f"{cls}{n}", "observer_responses": responses},
                ))
    test = [s for s in stimuli if s.split == "test"]
    split_text = SPLIT if images == "split" else ALL_IMAGES.format(n=len(test))
    return StimulusSet(
        task_id=exp.task_id,
        version=exp.version,
        response_space="label",
        stimuli=stimuli,
        human_ref_id=exp.human_ref_id,
        prompt=exp.prompt,
        options=CLASSES,
        human=observer_panel(test, observers, split_text, exp.paper_ranges),
        seed=seed,
    )
