"""``closure.nat.silhouette``: Geirhos et al. (2019) filled silhouettes, 16-way classification.

Split: images 1-5 of each class are probe-train, images 6-10 are test (80). This is this
harness's split (:data:`~harness.stimuli.geirhos.SPLIT`). Neither source repository defines one,
and the paper's cannot be identified: its observer ranges (pairwise kappa 0.150-0.812,
leave-one-out 0.313-0.616, accuracy 0.59-0.84) are not reproduced on images 6-10, 1-5, odd/even
or 10,000 seeded random splits. The scorer reports this split's ranges as human references to
compare with the paper's. ``images: all`` scores all 160 images instead, for readouts that train
nothing (published decisions, a classifier's own labels); a probe refuses it.

Human reference (from the 10 observers' 1,600 trials; :mod:`harness.stimuli.geirhos`): the modal
response as ``human_target`` (ties: 4 of 160 images, 2 in the test split), and the observer panel
with ``na`` counted incorrect (giving the 0.4925 mean pairwise kappa on images 6-10 that SPEC
section 3.1 quotes).
"""

from __future__ import annotations

from typing import Literal

from ..sources import Sources
from .base import StimulusSet
from .geirhos import CLASSES, Experiment, Options, build_experiment, choice_prompt, modal_response

TASK_ID = "closure.nat.silhouette"
VERSION = "2"  # 2: B floor = best constant answer; ranges and two-level intervals
PROMPT = choice_prompt(TASK_ID, VERSION, "black silhouette")
EXPERIMENT = Experiment(
    task_id=TASK_ID, version=VERSION, release="geirhos-silhouettes",
    raw_data="silhouette-filled-experiment", folder="stimuli/filled-silhouettes",
    stimulus_prefix="silh", human_ref_id="geirhos2019.silhouette", prompt=PROMPT,
    paper_ranges={"kappa_pairwise": (0.150, 0.812), "kappa_loo": (0.313, 0.616),
                  "accuracy": (0.59, 0.84)},
)

__all__ = ["CLASSES", "PROMPT", "Options", "build", "modal_response"]


def build(sources: Sources, seed: int = 0, images: Literal["split", "all"] = "split") -> StimulusSet:
    return build_experiment(EXPERIMENT, sources, seed, images)
