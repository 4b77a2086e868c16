"""A recipe's plan: each model's tasks with their readouts, the stimuli and readouts built with
the recipe's settings (a bad one named at its recipe line), what ``--models``, ``--tasks`` and
``--shard`` select of it, and where the run's records, figures and runs go."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import GestaltError
from .models.base import CAPABILITIES, ModelAdapter, ModelSpec
from .models.memory import Fit
from .models.registry import make_adapter
from .readouts.base import Readout, SplitTooSmall, UnknownReadoutOption
from .readouts.registry import get_readout
from .recipes import Recipe, RecipeError, did_you_mean
from .reports.terminal import BatteryResult
from .sources import Sources
from .stimuli.base import StimulusSet
from .stimuli.registry import BATTERIES, TaskSpec, expand, get_task
from .tracking.store import shown_uri, tracking_uri
from .trials.records import RecordStore


class PlanError(GestaltError):
    """A model cannot answer a task (no readout for its capabilities)."""


@dataclass
class Planned:
    model: ModelSpec
    tasks: list[tuple[TaskSpec, str]]  # (task, readout name)
    adapter: ModelAdapter  # built, not loaded (a python source is: its methods are its capabilities)
    readouts: dict[str, Readout] = field(default_factory=dict)  # task id -> built in preflight
    missing: str | None = None  # why the model cannot be resolved yet (a dry run lists it)
    not_ready: bool = False  # missing only until its fix (a key, fetched weights): a run leaves it out
    settings_dropped: dict[str, dict[str, Any]] = field(default_factory=dict)  # task -> {name: value}
    fit: Fit | None = None  # its weights' size against its device's memory (None: no weight files)
    # a dry run's word on a model whose building runs the recipe's code (source: python): not built,
    # so its adapter is the bare contract, and its readouts and cached trials are not known
    unbuilt: str | None = None


def model_specs(recipe: Recipe) -> list[ModelSpec]:
    return [m.spec() for m in recipe.models]


def plan(recipe: Recipe, *, run_code: bool = True) -> list[Planned]:
    """Each model's tasks with their readouts. Without ``run_code`` (a dry run), a model whose
    building would run code the recipe names (``source: python``) is not built: its name's shape
    is checked, its module is not imported."""
    tasks = [get_task(t) for t in expand(recipe.tasks)]
    out = []
    for i, (entry, spec) in enumerate(zip(recipe.models, model_specs(recipe))):
        own = None if entry.tasks is None else set(expand(entry.tasks))  # a model's share of the tasks
        if not run_code and spec.source == "python":
            from .models.python_source import check_name

            module, attr = check_name(spec)
            faced = [t.task_id for t in tasks if own is None or t.task_id in own]
            out.append(Planned(spec, [], ModelAdapter(spec), unbuilt=(
                f"not built: source: python runs {attr} of {module}, which a dry run does not; its readouts "
                f"and cached trials are known on a run ({len(faced)} task(s): {', '.join(faced)})")))
            continue
        adapter = make_adapter(spec)  # capabilities known, weights not loaded
        caps = adapter.capabilities
        pairs = []
        for task in tasks:
            if own is not None and task.task_id not in own:
                continue
            forced = entry.readouts.get(task.task_id)
            if forced is not None and (needs := get_readout(forced).capability) not in caps:
                raise RecipeError(f"{recipe.where('models', i, 'readouts', task.task_id)}: models.{i}.readouts."
                                  f"{task.task_id}: readout {forced!r} needs {needs}, which model {spec.id!r} "
                                  f"({'/'.join(sorted(caps))}) has not")
            readout = forced or next(
                (task.readouts[c] for c in CAPABILITIES if c in caps and c in task.readouts),
                None)
            if readout is None:
                raise PlanError(f"model {spec.id!r} ({'/'.join(sorted(caps))}) cannot answer "
                                f"{task.task_id} (readouts: {task.readouts})")
            pairs.append((task, readout))
        out.append(Planned(spec, pairs, adapter))
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
            except SplitTooSmall as e:
                place = ("task_options", task.task_id, "n_train")
                raise RecipeError(f"{recipe.where(*place)}: {'.'.join(map(str, place))}: {e}") from None
            except (ValueError, TypeError) as e:
                place = ("task_options", task.task_id, "readout") if own else ("models", i, "generation")
                raise RecipeError(f"{recipe.where(*place)}: {p.model.id} x {task.task_id}: {e}") from None


def record_stores(recipe: Recipe, p: Planned) -> dict[str, RecordStore]:
    """Each task's record file of the model's battery."""
    return {t.task_id: RecordStore(recipe.out_dir / p.model.id / "records" / f"{t.task_id}.jsonl")
            for t, _ in p.tasks}


def _names(value: str | list[str] | tuple[str, ...]) -> list[str]:
    """A command-line selection: a name, names separated by commas (fire reads ``a,b`` as a
    tuple) or a list ``[a, b]``."""
    items = value if isinstance(value, (list, tuple)) else str(value).strip().strip("[]").split(",")
    return [name for x in items if (name := str(x).strip())]


def _refuse_unknown(flag: str, names: list[str], known: list[str], kind: str, shown: list[str]) -> None:
    for name in names:
        if name not in known:
            raise PlanError(f"{flag}: {name} is not a {kind} of the recipe ({', '.join(shown)})"
                            + did_you_mean(name, known))


def select(recipe: Recipe, *, models: str | list[str] | tuple[str, ...] | None = None,
           tasks: str | list[str] | tuple[str, ...] | None = None) -> Recipe:
    """The recipe restricted to what ``--models`` and ``--tasks`` name: ids of its models; ids of
    its tasks or names of batteries it runs whole. The recipe's order stays; a name that is not
    the recipe's is refused with the closest one. A model whose own ``tasks:`` share holds none
    of the selected tasks is not run."""
    if models is None and tasks is None:
        return recipe
    kept = recipe.models
    if models is not None:
        ids = [m.id for m in recipe.models]
        chosen = _names(models)
        _refuse_unknown("--models", chosen, ids, "model", ids)
        kept = [m for m in kept if m.id in chosen]
    update: dict[str, Any] = {}
    if tasks is not None:
        have = expand(recipe.tasks)
        known = [*dict.fromkeys([*recipe.tasks, *have]),
                 *(b for b, ids in BATTERIES.items() if b not in recipe.tasks and set(ids) <= set(have))]
        update["tasks"] = _names(tasks)
        _refuse_unknown("--tasks", update["tasks"], known, "task", have)
        wanted = set(expand(update["tasks"]))
        kept = [m for m in kept if m.tasks is None or wanted & set(expand(m.tasks))]
    if not kept:
        raise PlanError(f"--models/--tasks: no model of the recipe answers {', '.join(update['tasks'])}")
    out = recipe.model_copy(update={**update, "models": kept})
    # the file's lines follow each kept model to its new place in the list
    place = {recipe.models.index(m): i for i, m in enumerate(kept)}
    lines: dict[tuple, str] = {}
    for key, line in recipe._lines.items():
        if key[:1] == ("models",) and len(key) > 1:
            if key[1] in place:
                lines["models", place[key[1]], *key[2:]] = line
        elif not (key[:1] == ("tasks",) and len(key) > 1 and "tasks" in update):  # the list is the command line's
            lines[key] = line
    out._lines = lines
    return out


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` with 0 <= I < N: this job's share of the roster (a SLURM array task, one job of a
    Kubernetes job set); I is 0-based like ``$SLURM_ARRAY_TASK_ID``."""
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise PlanError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if not 0 <= i < n:
        raise PlanError(f"--shard {text}: expected 0 <= I < N")
    return i, n


def shard_of(planned: list[Planned], shard: tuple[int, int] | None) -> list[Planned]:
    """The model batteries job I of N runs: whole batteries, the recipe's models in order, dealt
    round-robin (deterministic, so N jobs cover the roster exactly once)."""
    if shard is None:
        return planned
    i, n = shard
    return [p for k, p in enumerate(planned) if k % n == i]


def shard_line(shard: tuple[int, int], share: list[Planned], n_models: int) -> str:
    """What a job's run and its dry run print first: its share of the roster, or none."""
    return (f"shard {shard[0]}/{shard[1]}: {', '.join(p.model.id for p in share) or 'no model'} "
            f"(of {n_models} models)")


def where_lines(recipe: Recipe, results: list[BatteryResult]) -> list[str]:
    """The run's last lines: where its records, figures, report and MLflow runs are."""
    lines = [f"records  {recipe.out_dir}/<model>/records/<task>.jsonl"]
    if not recipe.tracking.enabled:
        return lines + ["figures  none: drawn with tracking only (tracking.enabled is false)",
                        "report   none: `gestalt report` reads the MLflow runs (tracking is off)",
                        "MLflow   off (tracking.enabled: false)"]
    uri = tracking_uri(recipe.tracking.uri)
    flag = f" --uri {shown_uri(uri)}" if recipe.tracking.uri else ""
    exp = recipe.tracking.experiment
    runs = ", ".join(f"{r.model_id} {r.run_id}" for r in results if not r.left_out)
    return lines + [f"figures  figures/*.png in each model's MLflow run ({runs})",
                    f"report   gestalt report --experiment {exp} --out {recipe.out_dir}/report{flag}",
                    f"MLflow   {shown_uri(uri)}, experiment {exp}: `gestalt ui{flag}` prints the runs "
                    f"table's address"]

