"""The task registry: one line per task, pointing at the module that builds its stimuli.

A task declares what it shows (its builder), which readout answers it for each model
capability, and which metric family scores it. Builders are imported only when a task is used,
so listing tasks stays instant.

A task id is ``principle.track.name`` (lower case); ``BASE:VARIANT`` (VARIANT of letters,
digits, ``_`` and ``-``) is the registered task BASE under its own id: a recipe can run one task
several times, each with its own ``task_options`` entry, and records, scores, metric names and
figures carry the variant id. :data:`TASK_ID` is the one definition of that form (the trial
record schema reads it from here). Adding a task: docs/adding.md.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ConfigDict, ValidationError

from ..errors import GestaltError, plain
from ..lazy import resolve
from ..options import Options
from .base import StimulusSet

TASK_ID_PATTERN = r"^[a-z_]+\.[a-z_]+\.[a-z0-9_]+(:[A-Za-z0-9_-]+)?$"
TASK_ID = re.compile(TASK_ID_PATTERN)


class BadTaskId(GestaltError, ValueError):
    """A task id not of the form principle.track.name[:VARIANT]."""


class BadTaskOptions(GestaltError, ValueError):
    """Options a task's builder does not take, or a value it refuses."""


class TaskOptions(Options):
    """A builder's options (``task_options.<task>`` of a recipe, without ``readout``): each
    builder module declares a subclass above its build function; unknown keys are refused and
    values are strict (:mod:`harness.options`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)


class NoOptions(TaskOptions):
    """A builder that takes no options."""


@dataclass(frozen=True)
class TaskSpec:
    task_id: str
    builder: str  # "module:function" returning a StimulusSet from (sources, seed, **options)
    options: str  # "module:Class", the builder's TaskOptions subclass
    readouts: dict[str, str]  # capability -> readout name (see harness.readouts.registry)
    scoring: str  # metric family in harness.scores.tasks
    battery: str
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)
    # named variants' builder options (``BASE:NAME`` runs with defaults + variants[NAME])
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    # scorers of tasks whose protocol scores every presentation (CHART-6: per-item proportion
    # correct, test-retest) get all repetitions; the others get one aggregated record per stimulus
    all_reps: bool = False

    def __post_init__(self) -> None:
        if not TASK_ID.match(self.task_id):
            raise BadTaskId(f"task id {self.task_id!r} is not principle.track.name[:VARIANT] "
                            f"(lower-case letters, digits and _; pattern {TASK_ID_PATTERN})")

    @property
    def principle(self) -> str:
        return self.task_id.split(".")[0]

    @property
    def track(self) -> str:
        return self.task_id.split(".")[1]

    def check_options(self, options: dict[str, Any]) -> TaskOptions:
        """The builder's options over the task's defaults; pydantic's ValidationError on an
        unknown key or a bad value (the recipe loader reports it with file:line)."""
        return self.options_model().model_validate({**self.defaults, **options})

    def options_model(self) -> type[TaskOptions]:
        return resolve(self.options)

    def build(self, sources, seed: int = 0, **options: Any) -> StimulusSet:
        fn: Callable[..., StimulusSet] = resolve(self.builder)
        try:
            checked = self.check_options(options)
        except ValidationError as e:  # a recipe's options were checked at load, with their lines
            err = e.errors()[0]
            raise BadTaskOptions(f"{self.task_id}: option {'.'.join(map(str, err['loc']))}: "
                                 f"{'unknown' if err['type'] == 'extra_forbidden' else plain(err['msg'])}") from None
        stimset = fn(sources, seed=seed, **dict(checked))
        # a variant's stimuli carry its id (and so hash apart from the base task's); a copy, so a
        # builder that caches its sets never sees the id change
        return stimset if stimset.task_id == self.task_id else replace(stimset, task_id=self.task_id)


TASKS: dict[str, TaskSpec] = {
    spec.task_id: spec
    for spec in [
        TaskSpec(
            task_id="closure.nat.silhouette",
            builder="harness.stimuli.silhouette:build",
            options="harness.stimuli.silhouette:Options",
            readouts={"embed": "prototype", "generate": "prompt_label"},
            scoring="classification_vs_observers",
            battery="gestalt",
            description="Geirhos filled silhouettes, 16-way; images 1-5 probe-train, 6-10 test (80); "
                        "images: all scores the 160",
        ),
        TaskSpec(
            task_id="similarity.chart.mark_color",
            builder="harness.stimuli.mark_color:build",
            options="harness.stimuli.registry:NoOptions",
            readouts={"embed": "odd_one_out", "generate": "prompt_choice"},
            scoring="odd_one_out",
            battery="gestalt",
            description="Tableau-10 mark-colour odd-one-out, all 120 triplets; color-td kernel target",
        ),
        TaskSpec(
            task_id="similarity.chart.series_count",
            builder="harness.stimuli.series_count:build",
            options="harness.stimuli.series_count:Options",
            readouts={"embed": "ridge", "generate": "prompt_count"},
            scoring="capacity",
            battery="gestalt",
            description="Colour-series counting, k=1..20; 200 test (10 per k), 200 probe-train; "
                        "6-12 capacity band (variant :paper40 = the paper's 40 test)",
            variants={"paper40": {"design": "paper40"}},
        ),
        TaskSpec(
            task_id="similarity.nat.things",
            builder="harness.stimuli.things:build",
            options="harness.stimuli.things:Options",
            readouts={"embed": "odd_one_out", "generate": "prompt_choice"},
            scoring="odd_one_out",
            battery="gestalt",
            description="THINGS object odd-one-out, 500 of the 1,000 noise-ceiling triplets (images from OSF)",
            defaults={"n_triplets": 500},
        ),
        TaskSpec(
            task_id="closure.nat.edges",
            builder="harness.stimuli.edges:build",
            options="harness.stimuli.edges:Options",
            readouts={"embed": "prototype", "generate": "prompt_label"},
            scoring="classification_vs_observers",
            battery="texture_vs_shape",
            description="Geirhos edge drawings, 16-way; images 1-5 probe-train, 6-10 test (80); "
                        "images: all scores the 160",
        ),
        TaskSpec(
            task_id="shape.nat.cue_conflict",
            builder="harness.stimuli.cue_conflict:build",
            options="harness.stimuli.registry:NoOptions",
            readouts={"embed": "prototype", "generate": "prompt_label"},
            scoring="shape_bias",
            battery="texture_vs_shape",
            description="Geirhos cue-conflict, shape bias; 1,200 conflict test, 80 non-conflict "
                        "probe-train (the images present: 150 + 80 in the mirror)",
        ),
        *(
            TaskSpec(
                task_id=f"literacy.chart.{test}",
                builder=f"harness.stimuli.chart6_{assessment}:build_{test}",
                options=f"harness.stimuli.chart6_{assessment}:{options}",
                readouts={"generate": "chart6"},
                scoring="chart6",
                battery="chart6",
                all_reps=True,
                description=f"CHART-6 {description}",
            )
            for test, assessment, options, description in (
                ("ggr", "multiple_choice", "LabOptions",
                 "GGR graph literacy, 13 items (9 numeric, 4 multiple choice), exact match"),
                ("vlat", "multiple_choice", "LabOptions", "VLAT, 53 multiple-choice items on 12 chart types"),
                ("calvi", "multiple_choice", "LabOptions", "CALVI, 60 multiple-choice items, 45 on misleading charts"),
                ("holf", "continuous", "HolfOptions",
                 "HOLF, 384 numeric items on 64 bar charts, relaxed accuracy (within 5%)"),
                ("holf_multi", "continuous", "HolfMultiOptions",
                 "HOLF-Multi, 216 numeric items on bar/line/scatter charts (data from OSF)"),
                ("chartqa_human", "continuous", "ChartQAOptions",
                 "ChartQA-Human, 125 ChartQA test items, relaxed accuracy (images from ChartQA)"),
            )
        ),
        *(
            TaskSpec(
                task_id=f"ratio.chart.{gen}_type{t}",
                builder=f"harness.stimuli.bars.tasks:build_{gen}",
                options=f"harness.stimuli.bars.tasks:{gen.capitalize()}Options",
                readouts={"predict": "regression", "embed": "ridge", "generate": "prompt_number"},
                scoring="mlae_vs_humans",
                battery="bars",
                description=(f"Cleveland-McGill position-length type {t}, smaller/larger marked bar; "
                             + ("GRAPE 150x150 standard charts, IID + 9 OOD perturbations"
                                if gen == "grape" else "Haehn 100x100 binary, label-disjoint splits")),
                defaults={"chart_type": t},
            )
            for gen in ("grape", "haehn") for t in range(1, 6)
        ),
    ]
}

BATTERIES: dict[str, list[str]] = {}
for _spec in TASKS.values():
    BATTERIES.setdefault(_spec.battery, []).append(_spec.task_id)
# Geirhos et al. (2019)'s stimulus sets together: the silhouettes (also in the Gestalt battery)
# with the edges and the cue-conflict images
BATTERIES["texture_vs_shape"].insert(0, "closure.nat.silhouette")


class UnknownTask(GestaltError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it one readable line
        return self.args[0]


VARIANT = re.compile(r"^(?P<base>[^:]+):(?P<variant>[A-Za-z0-9_-]+)$")


def base_task_id(task_id: str) -> str:
    """The registered task a task id names: ``BASE`` for ``BASE:VARIANT``, else the id itself."""
    m = VARIANT.match(task_id)
    return m["base"] if m else task_id


def get_task(task_id: str) -> TaskSpec:
    """The task of a registered id, or for ``BASE:VARIANT`` task BASE with the variant id."""
    spec = TASKS.get(base_task_id(task_id))
    if spec is None:
        guess = difflib.get_close_matches(base_task_id(task_id), [*TASKS, *BATTERIES], n=1, cutoff=0.5)
        raise UnknownTask(
            f"unknown task {task_id!r}{f'; did you mean {guess[0]}?' if guess else ''}; "
            f"known tasks: {', '.join(sorted(TASKS))} "
            "(a variant is BASE:NAME, NAME of letters, digits, _ and -)"
        )
    if spec.task_id == task_id:
        return spec
    variant = spec.variants.get(task_id.split(":", 1)[1], {})
    return replace(spec, task_id=task_id, defaults={**spec.defaults, **variant})


def expand(names: list[str]) -> list[str]:
    """Task ids from a mix of task ids (variants ``BASE:VARIANT`` too) and battery names, in order,
    without repeats."""
    out: list[str] = []
    for name in names:
        for tid in BATTERIES.get(name, [name]):
            get_task(tid)
            if tid not in out:
                out.append(tid)
    return out
