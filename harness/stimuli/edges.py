"""``closure.nat.edges``: Geirhos et al. (2019) edge drawings, 16-way classification.

Closure from contours: 160 edge drawings of the silhouettes' 16 classes (10 each), 10 observers
(accuracy 0.61-0.96, networks 0.2-0.5). Built as ``closure.nat.silhouette`` in every respect
(:mod:`harness.stimuli.geirhos`): images 1-5 probe-train and 6-10 test, or ``images: all``; the
modal response as the B target; the observer panel, ``na`` counted incorrect. The paper reports
no observer ranges for the edges, so none are shown beside the panel's.
"""

from __future__ import annotations

from typing import Literal

from ..sources import Sources
from .base import StimulusSet
from .geirhos import Experiment, Options, build_experiment, choice_prompt

TASK_ID = "closure.nat.edges"
VERSION = "1"
PROMPT = choice_prompt(TASK_ID, VERSION, "line drawing")
EXPERIMENT = Experiment(
    task_id=TASK_ID, version=VERSION, release="geirhos-edges-cue-conflict",
    raw_data="edge-experiment", folder="stimuli/edges", stimulus_prefix="edge",
    human_ref_id="geirhos2019.edges", prompt=PROMPT,
)

__all__ = ["Options", "PROMPT", "build"]


def build(sources: Sources, seed: int = 0, images: Literal["split", "all"] = "split") -> StimulusSet:
    return build_experiment(EXPERIMENT, sources, seed, images)
