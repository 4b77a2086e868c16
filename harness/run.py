"""Run a recipe: plan, check everything that can fail before any run starts, then one battery per model.

Order of work (docs/design.md, "Stages"): (1) expand the recipe into a plan; (2) preflight:
build and verify every task's stimuli from sources, build every (model, task) readout with its
settings, resolve every model name and local weights file, so a bad recipe, a missing or
tampered data file, a bad readout setting or an unknown model stops here with one line naming
the culprit and no MLflow run exists; (3) per model: an MLflow run, trials (resumed from
records), scores through the task's scoring family, figures, artifacts.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__
from .errors import GestaltError
from .models.base import ModelSpec
from .models.registry import adapter_class, build_adapter
from .readouts.base import Readout, UnknownReadoutOption
from .readouts.registry import get_readout
from .recipes import Recipe, RecipeError
from .reports.figures import battery_figures, close
from .scores.record import Score
from .scores.tasks import get_family
from .sources import Sources
from .stimuli.base import StimulusSet
from .stimuli.registry import TaskSpec, expand, get_task
from .tracking.mlflow_run import BatteryRun, tracking_uri
from .trials.distributed import Dist
from .trials.records import RecordStore, per_stimulus
from .trials.runner import CountingAdapter, run_task


class PlanError(GestaltError):
    """A model cannot answer a task (no readout for its capabilities)."""


@dataclass
class Planned:
    model: ModelSpec
    tasks: list[tuple[TaskSpec, str]]  # (task, readout name)
    readouts: dict[str, Readout] = field(default_factory=dict)  # task id -> built in preflight


@dataclass
class BatteryResult:
    model_id: str
    run_id: str
    scores: dict[str, list[Score]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    model_calls: int = 0
    new_trials: int = 0


def model_specs(recipe: Recipe) -> list[ModelSpec]:
    return [ModelSpec(id=m.id, source=m.source, name=m.name, weights=m.weights, revision=m.revision,
                      family=m.family, batch_size=m.batch_size, dtype=m.dtype,
                      options={**m.options, **({"generation": m.generation} if m.generation else {})})
            for m in recipe.models]


def plan(recipe: Recipe) -> list[Planned]:
    tasks = [get_task(t) for t in expand(recipe.tasks)]
    out = []
    for entry, spec in zip(recipe.models, model_specs(recipe)):
        caps = adapter_class(spec.source).capabilities
        pairs = []
        for task in tasks:
            readout = entry.readouts.get(task.task_id) or next(
                (task.readouts[c] for c in ("embed", "generate", "predict") if c in caps and c in task.readouts),
                None)
            if readout is None:
                raise PlanError(f"model {spec.id!r} ({'/'.join(sorted(caps))}) cannot answer "
                                f"{task.task_id} (readouts: {task.readouts})")
            pairs.append((task, readout))
        out.append(Planned(spec, pairs))
    return out


def readout_options(recipe: Recipe, spec: ModelSpec, task: TaskSpec) -> dict[str, Any]:
    """Generation settings of the model, with per-task settings under task_options.<task>.readout."""
    return {**spec.options.get("generation", {}), **recipe.readout_options(task.task_id)}


def build_stimsets(recipe: Recipe, sources: Sources, task_ids: list[str]) -> dict[str, StimulusSet]:
    """Each task's stimuli with its builder options; a value the builder refuses (a range that
    depends on the data, a folder that is not there) names the recipe's task_options line."""
    sets = {}
    for tid in task_ids:
        try:
            sets[tid] = get_task(tid).build(sources, seed=recipe.seed, **recipe.builder_options(tid))
        except (ValueError, FileNotFoundError) as e:
            if isinstance(e, GestaltError):
                raise
            raise RecipeError(f"{recipe.where('task_options', tid)}: task_options.{tid}: {e}") from None
    return sets


def build_readouts(recipe: Recipe, planned: list[Planned], stimsets: dict[str, StimulusSet]) -> None:
    """Every (model, task) readout with its settings, so that a misspelt or bad setting (a
    ``temprature`` that would otherwise only change the cache key) stops here, with the line of
    the recipe it came from."""
    for i, p in enumerate(planned):
        for task, name in p.tasks:
            stimset = stimsets[task.task_id]
            if stimset.unavailable:
                continue
            options = readout_options(recipe, p.model, task)
            own = recipe.readout_options(task.task_id)
            try:
                p.readouts[task.task_id] = get_readout(name)(stimset, **options)
            except UnknownReadoutOption as e:
                key = e.keys[0]
                place: tuple[str | int, ...] = (("task_options", task.task_id, "readout", key) if key in own
                                                 else ("models", i, "generation", key))
                raise RecipeError(f"{recipe.where(*place)}: {'.'.join(map(str, place))}: {e}") from None
            except (ValueError, TypeError) as e:
                place = ("task_options", task.task_id, "readout") if own else ("models", i, "generation")
                raise RecipeError(f"{recipe.where(*place)}: {p.model.id} x {task.task_id}: {e}") from None


WEIGHT_FILES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


def check_weights(recipe: Recipe) -> None:
    """A ``weights`` value that names a file (a path or a weights suffix) must exist now, not
    when the battery loads the model inside its MLflow run."""
    for i, m in enumerate(recipe.models):
        w = m.weights
        if w and not w.startswith("pypi:") and ("/" in w or w.endswith(WEIGHT_FILES)):
            if not Path(w).expanduser().exists():
                raise RecipeError(f"{recipe.where('models', i, 'weights')}: models.{i}.weights: "
                                  f"{w}: no such file")


def preflight(recipe: Recipe) -> tuple[list[Planned], dict[str, StimulusSet], Sources]:
    check_weights(recipe)
    planned = plan(recipe)
    sources = Sources(root=recipe.data.root, mirror=recipe.data.mirror)
    stimsets = build_stimsets(recipe, sources, expand(recipe.tasks))
    build_readouts(recipe, planned, stimsets)
    for p in planned:
        build_adapter(p.model)  # resolves the name (and offline weights) without loading them
    return planned, stimsets, sources


def describe_plan(recipe: Recipe, planned: list[Planned], stimsets: dict[str, StimulusSet]) -> str:
    lines = [f"recipe {recipe.name} (sha256 {recipe.sha256[:12]}), seed {recipe.seed}, "
             f"{recipe.runtime.processes} process(es), output {recipe.out_dir}"]
    total_calls = 0
    for p in planned:
        lines.append(f"model {p.model.id} [{p.model.ref} weights={p.model.weights}]")
        for task, readout in p.tasks:
            s = stimsets[task.task_id]
            if s.unavailable:
                lines.append(f"  {task.task_id}: UNAVAILABLE: {s.unavailable}")
                continue
            # a readout may multiply repetitions (every montage permutation x n_reps)
            n_reps = int(getattr(p.readouts[task.task_id], "n_reps", 1))
            trials = len(s.test) * n_reps
            calls = trials if adapter_class(p.model.source).capabilities & {"generate"} else 0
            total_calls += calls
            lines.append(f"  {task.task_id}: readout {readout}, {len(s.test)} test x {n_reps} rep(s)"
                         f" = {trials} trials, probe-train {len(s.train)}"
                         + (f", {calls} generate calls" if calls else ""))
    lines.append(f"total generate/API calls if nothing is cached: {total_calls}")
    return "\n".join(lines)


def run_recipe(recipe: Recipe, *, echo: Callable[[str], None] = print) -> list[BatteryResult]:
    planned, stimsets, _ = preflight(recipe)
    dist = Dist()
    results = []
    try:
        for p in planned:
            results.append(_run_battery(recipe, p, stimsets, dist, echo))
    finally:
        dist.close()
    return results


def _run_battery(recipe: Recipe, p: Planned, stimsets: dict[str, StimulusSet], dist: Dist,
                 echo: Callable[[str], None]) -> BatteryResult:
    spec = p.model
    adapter = CountingAdapter(build_adapter(spec), dist.device)
    track = recipe.tracking.enabled and dist.is_main
    tags = {"gestalt.model": spec.id, "gestalt.recipe": recipe.name,
            "gestalt.recipe_sha256": recipe.sha256, "gestalt.family": spec.family, **recipe.tracking.tags}
    ctx = (BatteryRun(uri=tracking_uri(recipe.tracking.uri), experiment=recipe.tracking.experiment,
                      run_name=spec.id, tags=tags) if track else contextlib.nullcontext())
    with ctx as run:
        local_id = run.run_id if run is not None else f"{recipe.name}-{spec.id}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_id = dist.gather([local_id])[0]
        result = BatteryResult(spec.id, run_id)
        if run is not None:
            run.log_params({
                "model": spec.id, "model_ref": spec.ref, "weights": spec.weights,
                "weights_revision": spec.revision, "model_version": adapter.model_version,
                "model_family": spec.family, "dtype": spec.dtype, "batch_size": spec.batch_size,
                "readouts": ",".join(f"{t.task_id}={r}" for t, r in p.tasks),
                "seed": recipe.seed, "bootstrap_seed": recipe.bootstrap.seed,
                "n_boot": recipe.bootstrap.n_boot, "n_boot_kappa": recipe.bootstrap.n_boot_kappa,
                "bootstrap_method": recipe.bootstrap.method,
                "processes": dist.world, "harness_version": __version__, "recipe": recipe.name,
            })
        intervals: dict[str, Any] = {}
        for task, readout in p.tasks:
            stimset = stimsets[task.task_id]
            store = RecordStore(recipe.out_dir / spec.id / "records" / f"{task.task_id}.jsonl")
            tr = run_task(task, stimset, spec, adapter, store, readout_name=readout,
                          readout_options=readout_options(recipe, spec, task), seed=recipe.seed,
                          run_id=run_id, dist=dist, progress=recipe.runtime.progress)
            result.model_calls += tr.model_calls
            result.new_trials += tr.new_trials
            if tr.unavailable:
                result.unavailable[task.task_id] = tr.unavailable
                intervals[task.task_id] = {"unavailable": tr.unavailable}
                echo(f"{spec.id} {task.task_id}: unavailable: {tr.unavailable}")
                continue
            if not dist.is_main:
                continue
            scored = tr.records if task.all_reps else per_stimulus(tr.records)
            scores = get_family(task.scoring).score(scored, stimset, recipe.bootstrap.settings)
            result.scores[task.task_id] = scores
            intervals[task.task_id] = {"version": stimset.version, "readout": readout,
                                       "stimulus_set_sha256": stimset.sha256,
                                       "scores": [s.to_dict() for s in scores]}
            if run is not None:
                history = getattr(adapter.adapter, "history", None)
                if history or tr.artifacts:
                    run.log_training(task.task_id, history or [], tr.artifacts)
                figs = battery_figures(task.task_id, tr.records, scores, stimset, spec.id)
                run.log_task(task.task_id, scores, tr.records,
                             {f"{task.task_id}/model_calls": float(tr.model_calls)}, figs, store.path)
                close(figs)
        if run is not None:
            run.log_battery(intervals=intervals, recipe=recipe.resolved(), recipe_sha256=recipe.sha256,
                            stimulus_sets={t: s.sha256 for t, s in stimsets.items() if not s.unavailable})
    return result


def summary_table(results: list[BatteryResult]) -> str:
    """One line per model x task x headline score of its family: value [95% CI], floor,
    ceiling, nulls. Human references, per-level curves and breakdowns stay in intervals.json
    and the report."""
    def num(x):
        return "-" if x is None or x != x else f"{x:.3f}"

    rows = []
    for r in results:
        for task_id, scores in r.scores.items():
            for s in get_family(get_task(task_id).scoring).headline_scores(scores):
                ci = f" [{num(s.ci_low)}, {num(s.ci_high)}]" if s.ci_low is not None else ""
                rows.append((r.model_id, task_id, s.name, num(s.value) + ci, num(s.floor), num(s.ceiling),
                             f"{s.nulls}/{s.n + s.nulls}"))
        for task_id in r.unavailable:
            rows.append((r.model_id, task_id, "unavailable", "", "", "", ""))
    header = ("model", "task", "score", "value [95% CI]", "floor", "ceiling", "nulls")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(row):
        return "  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
