"""The shape bias of Geirhos et al. (2019) on cue-conflict images, with its human reference.

On the conflict images (shape class != texture class; the non-conflict ones are left out, as in
the paper), each answer is the shape class, the texture class or another class:

- ``shape_bias = n_shape / (n_shape + n_texture)``: among the conflict trials answered with the
  shape or the texture class, the share answered with the shape class (1: always shape, 0:
  always texture). Its interval resamples the images; per shape class in ``extra['per_class']``.
- ``shape_share``, ``texture_share``, ``other_share``: the three answers' shares of all parseable
  conflict trials (``shape_share`` is the accuracy against the shape class).
- ``human_shape_bias``: each observer's shape bias (``extra['observers']``), their mean with
  one interval resampling images and a two-level one resampling images and observers (crossed:
  each draw takes one set of images for every drawn observer), and their range. Per shape class
  the human value pools the observers' trials.

Trial-by-trial agreement uses :func:`harness.scores.agreement.score_classification_vs_observers`
with correctness = naming the shape class (model-vs-human's convention on cue-conflict): B
against the observers' modal answer, kappa against the panel, their ceilings. Its ``accuracy`` is
``shape_share`` and is not repeated.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..stimuli.base import ObserverPanel, StimulusSet
from .agreement import observer_indices, parseable, score_classification_vs_observers
from .bootstrap import percentile_ci, resample_indices
from .record import Score
from .tasks import Bootstrap

ONE_LEVEL = "percentile bootstrap over images"
TWO_LEVEL = "two-level percentile bootstrap: images x observers (crossed)"


def ratio(s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """s / (s + t) elementwise; NaN where there is no shape or texture answer."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s + t > 0, s / np.maximum(s + t, 1), np.nan)


def per_class(shape: np.ndarray, texture: np.ndarray, classes: np.ndarray,
              names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Shape class -> shape bias and its counts (``shape``/``texture`` over the last axis; an
    observers x items array pools the observers)."""
    out = {}
    for c in names:
        sel = classes == c
        s, t = int(shape[..., sel].sum()), int(texture[..., sel].sum())
        out[c] = {"shape_bias": s / (s + t) if s + t else None, "n_shape": s, "n_texture": t}
    return out


def human_shape_bias(panel: ObserverPanel, textures: np.ndarray, classes: np.ndarray,
                     names: tuple[str, ...], boot: Bootstrap, version: str, tail: str) -> Score:
    responses = np.asarray(panel.responses, dtype=object).T  # observers x items
    shape, texture = responses == classes[None], responses == textures[None]  # bool: the
    j_obs, n = shape.shape  # two-level draws index (draws, observers, images) of them
    each = ratio(shape.sum(axis=1), texture.sum(axis=1))
    items = resample_indices(n, boot.n_boot, boot.seed)  # (draws, n)
    one = np.nanmean(ratio(shape[:, items].sum(axis=-1), texture[:, items].sum(axis=-1)), axis=0)
    obs = observer_indices(j_obs, boot.n_boot, boot.seed)  # (draws, J): the same images for each
    pick = (obs[:, :, None], items[:, None, :])
    two = np.nanmean(ratio(shape[pick].sum(axis=-1), texture[pick].sum(axis=-1)), axis=1)
    answered = (responses != panel.missing).sum(axis=1)
    lo, hi = percentile_ci(one)
    lo2, hi2 = percentile_ci(two)
    return Score(
        name="human_shape_bias", value=float(np.nanmean(each)), ci_low=lo, ci_high=hi, n=n, nulls=0,
        version=version,
        method=(f"mean over {j_obs} observers of n_shape / (n_shape + n_texture) on the conflict "
                f"images; {ONE_LEVEL}, {boot.n_boot} draws; {TWO_LEVEL} in extra; range = min-max over "
                f"observers; per class: the observers' trials pooled; {tail}"),
        extra={"ci_low_two_level": lo2, "ci_high_two_level": hi2, "ci_method": ONE_LEVEL,
               "ci_two_level_method": TWO_LEVEL,
               "range_min": float(np.nanmin(each)), "range_max": float(np.nanmax(each)),
               "observers": {o: float(v) for o, v in zip(panel.observers, each)},
               "shape_share": float(np.mean(shape.sum(axis=1) / n)),
               "texture_share": float(np.mean(texture.sum(axis=1) / n)),
               "other_share": float(np.mean((answered - shape.sum(axis=1) - texture.sum(axis=1)) / n)),
               "per_class": per_class(shape, texture, classes, names)})


def score_shape_bias(records: list[dict], stimset: StimulusSet, *,
                     boot: Bootstrap = Bootstrap()) -> list[Score]:
    """Shape bias, the shares of shape, texture and other answers, the human reference, and the
    trial-by-trial agreement with the observers (B, kappa and their ceilings)."""
    panel = stimset.human_as(ObserverPanel)
    test = stimset.test
    index = {s.stimulus_id: i for i, s in enumerate(test)}
    agreement = score_classification_vs_observers(records, stimset, boot=boot)  # checks coverage
    ok, nulls = parseable(records)
    items = np.array([index[r["stimulus_id"]] for r in ok], dtype=int)
    classes = np.array([s.meta["shape"] for s in test], dtype=object)
    textures = np.array([s.meta["texture"] for s in test], dtype=object)
    if (classes == textures).any():
        raise ValueError(f"{stimset.task_id}: the shape bias is scored on conflict images only; "
                         f"{int((classes == textures).sum())} test images have shape = texture")
    response = np.array([r["response"] for r in ok], dtype=object)
    shape = (response == classes[items]).astype(float)
    texture = (response == textures[items]).astype(float)
    other = 1 - shape - texture
    n = len(ok)
    tail = panel.split
    human = human_shape_bias(panel, textures, classes, stimset.options, boot, stimset.version, tail)
    draws = resample_indices(n, boot.n_boot, boot.seed) if n else np.zeros((0, 0), int)

    def share(name: str, values: np.ndarray, what: str) -> Score:
        value = float(values.mean()) if n else None
        lo, hi = percentile_ci(values[draws].mean(axis=1)) if n else (None, None)
        return Score(name=name, value=value, ci_low=lo, ci_high=hi, n=n, nulls=nulls,
                     version=stimset.version,
                     method=f"share of parseable conflict trials answered with {what}; {ONE_LEVEL}, "
                            f"{boot.n_boot} draws; {tail}",
                     extra={"human": human.extra[name]})

    sb = float(ratio(shape.sum(), texture.sum()))
    lo, hi = percentile_ci(ratio(shape[draws].sum(axis=1), texture[draws].sum(axis=1))) if n else (None, None)
    bias = Score(
        name="shape_bias", value=sb, ci_low=lo, ci_high=hi, n=n, nulls=nulls, version=stimset.version,
        method=(f"n_shape / (n_shape + n_texture) over the conflict trials (Geirhos et al. 2019; "
                f"non-conflict images left out); {ONE_LEVEL}, {boot.n_boot} draws; {tail}"),
        extra={"n_shape": int(shape.sum()), "n_texture": int(texture.sum()), "n_other": int(other.sum()),
               "per_class": per_class(shape, texture, classes[items], stimset.options),
               "human_mean": human.value, "human_range": [human.extra["range_min"], human.extra["range_max"]]})
    return [
        bias,
        share("shape_share", shape, "the shape class (accuracy against the shape class)"),
        share("texture_share", texture, "the texture class"),
        share("other_share", other, "neither class"),
        human,
        # every score says which images it was computed on (a mirror may hold a subset)
        *(s if tail in s.method else replace(s, method=f"{s.method}; {tail}")
          for s in agreement if s.name != "accuracy"),
    ]
