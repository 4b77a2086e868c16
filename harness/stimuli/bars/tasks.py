"""Task builders of the bar-chart ratio battery: ``ratio.chart.grape_type{1-5}`` and
``ratio.chart.haehn_type{1-5}``.

A set holds probe-train stimuli (split 'train', ``meta['subset']`` 'train' or 'val') and test
stimuli: the IID test charts (``manipulated_value`` None) and, for GRAPE, the OOD charts. An OOD
chart is an IID test chart with exactly one parameter changed to one level
(``manipulated_value`` = {"parameter", "level"}, ``meta['base_id']`` = its IID twin), as GRAPE's
user study perturbed the same charts; the first ``n_ood`` test charts are perturbed at every
level. Levels come from sources/grape/derived/perturbation_levels.csv (see grape.py).

Images are rendered lazily per stimulus (:class:`render.ChartImage`); whole splits render in
batches with :func:`render.render_stimuli`. Every random stream is
``SeedSequence([seed, chart_type, stream])``, so changing one split's size leaves the others
unchanged. Prompt models answer in percent (the prompt asks for 0-100); the scorer converts.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import numpy as np
from pydantic import Field

from ...sources import Sources
from ..base import Prompt, Split, Stimulus, StimulusSet
from .authors import authors_test_stimuli
from .colours import load_pools
from .grape import (
    LEVEL_FORMS,
    PARAMETERS,
    apply_mixture,
    apply_settings,
    check_type,
    mixture,
    perturbation_levels,
    sample_grape,
)
from .haehn import sample_haehn_splits
from .humans import human_references
from .render import ChartImage
from ...options import PathOption
from ..registry import TaskOptions

VERSION = "2"  # 2: renderer 2 (GRAPE's fonts and text origins), levels option
PROMPT = Prompt(
    prompt_id="ratio.chart.v1",
    text=("What percentage is the smaller of the two marked bars of the larger one? "
          "Answer with a number from 0 to 100."),
)
_STREAMS = {"train": 1, "val": 2, "test": 3, "augment": 4}


def task_id(generator: str, chart_type: int) -> str:
    return f"ratio.chart.{generator}_type{chart_type}"


def _rng(seed: int, chart_type: int, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, chart_type, stream]))


def _level_stream(parameter: str, level: Any) -> int:
    return 1000 + int(hashlib.sha256(f"{parameter}|{level}".encode()).hexdigest()[:8], 16)


def _stimuli(charts, tag: str, subset: str, split: Split, mask: bool, generator: str,
             manipulated=None, base_ids=None, meta: dict[str, Any] | None = None) -> list[Stimulus]:
    out = []
    for i, target in enumerate(charts.target.tolist()):
        m = {"generator": generator, "chart_type": charts.chart_type, "subset": subset, **(meta or {})}
        if base_ids is not None:
            m["base_id"] = base_ids[i]
        out.append(Stimulus(stimulus_id=f"{tag}-{subset}-{i:06d}", split=split, ground_truth=target,
                            image_source=ChartImage(charts, i, mask), manipulated_value=manipulated,
                            meta=m))
    return out


def _select_levels(levels, ood) -> list:
    """``ood``: "all", "none"/None, a list of parameters, or {parameter: [levels]}."""
    if ood in (None, "none", False):
        return []
    if ood == "all":
        return levels
    known = sorted(set(PARAMETERS.values()))
    wanted: dict[str, list[Any] | None] = ood if isinstance(ood, dict) else {p: None for p in ood}
    for p in wanted:
        if p not in known:
            raise ValueError(f"unknown OOD parameter {p!r}; known: {', '.join(known)}")
    out = [lv for lv in levels if lv.parameter in wanted
           and ((want := wanted[lv.parameter]) is None or lv.level in want)]
    for p, want in wanted.items():
        have = {lv.level for lv in levels if lv.parameter == p}
        missing = [] if want is None else [w for w in want if w not in have]
        if missing:
            raise ValueError(f"OOD parameter {p!r} has no level(s) {missing}; "
                             f"levels: {sorted(have, key=str)}")
    return out


MAX_ITEMS = 1_000_000  # charts a split may hold: over 10x the papers' largest (60,000 training charts)


class GrapeOptions(TaskOptions):
    chart_type: int = Field(1, ge=1, le=5)
    n_train: int = Field(5000, ge=0, le=MAX_ITEMS)
    n_val: int = Field(1000, ge=0, le=MAX_ITEMS)
    n_test: int = Field(1000, ge=1, le=MAX_ITEMS)
    # "all", "none", a list of parameters or {parameter: [levels]}
    ood: Literal["all", "none"] | None | list[str] | dict[str, list[Any] | None] = "all"
    n_ood: int = Field(100, ge=0, le=MAX_ITEMS)
    augment: str | None = None
    mask: bool = False
    levels: Literal["config", "paper"] = "config"
    authors_test: PathOption | None = None  # a test set rendered by the authors' generator


def build_grape(sources: Sources, seed: int = 0, *, chart_type: int = 1, n_train: int = 5000,
                n_val: int = 1000, n_test: int = 1000, ood: Any = "all", n_ood: int = 100,
                augment: str | None = None, mask: bool = False, levels: str = "config",
                authors_test: str | None = None) -> StimulusSet:
    """GRAPE standard charts of one type.

    ``levels``: the OOD levels, "config" (the released generator configs, GRAPE's own test
    sets and user study) or "paper" (the levels the paper's text describes; see
    grape.perturbation_levels for the differences). ``authors_test``: a folder holding a test set
    rendered by GRAPE's own generator (authors.py): its charts join the test split, scored beside
    gestalt's IID charts (the MLAE gap between both measures the generator difference).
    ``augment``: a GRAPE augmentation mixture (grape.MIX_NAMES, bar types) applied to train and
    val. ``mask``: images get the marked bars' segmentation mask as alpha (RGBA), GRAPE's
    mask variant for CNNs.
    """
    chart_type = check_type(chart_type)
    if levels not in LEVEL_FORMS:
        raise ValueError(f"levels must be one of {', '.join(LEVEL_FORMS)}, got {levels!r}")
    if n_ood > n_test:
        raise ValueError(f"n_ood ({n_ood}) cannot exceed n_test ({n_test}): OOD charts perturb test charts")
    if authors_test is not None and mask:
        raise ValueError("authors_test: the authors' rendered charts have no target mask; use mask: false")
    pools = load_pools(sources)
    tag = f"grape_type{chart_type}"
    members = mixture(sources, augment, chart_type) if augment else None
    stimuli: list[Stimulus] = []
    for subset, n in (("train", n_train), ("val", n_val)):
        charts = sample_grape(chart_type, n, _rng(seed, chart_type, _STREAMS[subset]), pools, "train")
        which = None
        if members:
            charts, which = apply_mixture(charts, members, _rng(seed, chart_type, _STREAMS["augment"]),
                                          f"augment {augment!r}")
        part = _stimuli(charts, tag, subset, "train", mask, "grape")
        for s, k in zip(part, which if which is not None else []):
            s.meta.update(augment=augment, augment_member=int(k))
        stimuli += part
    test = sample_grape(chart_type, n_test, _rng(seed, chart_type, _STREAMS["test"]), pools, "test")
    test_stimuli = _stimuli(test, tag, "test", "test", mask, "grape")
    stimuli += test_stimuli
    base = test.take(np.arange(n_ood))
    base_ids = [s.stimulus_id for s in test_stimuli[:n_ood]]
    for lv in _select_levels(perturbation_levels(sources, chart_type, levels), ood):
        rng = _rng(seed, chart_type, _level_stream(lv.parameter, lv.level))
        charts = apply_settings(base, lv.settings, rng, f"{lv.grape_parameter} {lv.testdata}")
        stimuli += _stimuli(charts, tag, f"ood-{lv.parameter}-{lv.level}", "test", mask, "grape",
                            manipulated={"parameter": lv.parameter, "level": lv.level},
                            base_ids=base_ids,
                            meta={"grape_settings": lv.settings, "grape_testdata": lv.testdata})
    if authors_test is not None:
        stimuli += authors_test_stimuli(authors_test, tag, chart_type)
    return StimulusSet(
        task_id=task_id("grape", chart_type), version=VERSION, response_space="scalar",
        stimuli=stimuli, human_ref_id="grape-user-study", prompt=PROMPT,
        human=human_references(sources, chart_type, "grape"),
        seed=seed)


class HaehnOptions(TaskOptions):
    chart_type: int = Field(1, ge=1, le=5)
    n_train: int = Field(5000, ge=0, le=MAX_ITEMS)
    n_val: int = Field(1000, ge=0, le=MAX_ITEMS)
    n_test: int = Field(1000, ge=1, le=MAX_ITEMS)
    noise: bool = False
    values: Literal["cleveland-mcgill", "cleveland-mcgill-20", "random"] = "cleveland-mcgill"
    marked: Literal["fixed", "adjacent"] = "fixed"


def build_haehn(sources: Sources, seed: int = 0, *, chart_type: int = 1, n_train: int = 5000,
                n_val: int = 1000, n_test: int = 1000, noise: bool = False,
                values: str = "cleveland-mcgill", marked: str = "fixed") -> StimulusSet:
    """Haehn et al.'s binary position-length stimuli of one type, label-disjoint splits.

    ``values`` ("cleveland-mcgill", "cleveland-mcgill-20", "random") and ``marked`` ("fixed",
    "adjacent"): GRAPE section IV-B's widened type-1 parameter space (see haehn.py)."""
    chart_type = check_type(chart_type)
    tag = f"haehn_type{chart_type}"
    splits = sample_haehn_splits(chart_type, {"train": n_train, "val": n_val, "test": n_test},
                                 _rng(seed, chart_type, 0), noise=noise, values=values, marked=marked)
    # only non-default options enter the meta, so default stimuli stay exactly as they were
    opts = {k: v for k, v, d in (("values", values, "cleveland-mcgill"), ("marked", marked, "fixed"))
            if v != d}
    stimuli = (_stimuli(splits["train"], tag, "train", "train", False, "haehn", meta=opts)
               + _stimuli(splits["val"], tag, "val", "train", False, "haehn", meta=opts)
               + _stimuli(splits["test"], tag, "test", "test", False, "haehn", meta=opts))
    return StimulusSet(
        task_id=task_id("haehn", chart_type), version=VERSION, response_space="scalar",
        stimuli=stimuli, human_ref_id="cleveland-mcgill-1984", prompt=PROMPT,
        # GRAPE's participants saw GRAPE's charts; Haehn's stimuli are compared with C&M, H&B
        human=human_references(sources, chart_type, "haehn"),
        seed=seed)

