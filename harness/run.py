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
import hashlib
import json
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .version import __version__
from .errors import DiskUnavailable, GestaltError, ProcessLost, TrackingUnavailable, disk_unavailable, unwritable_folder
from .exit_status import Exit
from .models.api_costs import (USAGE_METRICS, Budget, BudgetReached, Price, battery_usage, cost_usd,
                               estimate_input_tokens, price_of, spend, task_usage)
from .models.base import CAPABILITIES, ModelAdapter, ModelError, ModelSpec, NotReady, fingerprint_hash
from .models.device import cpu_heap_wanted, long_lived_frozen
from .models.loader_options import OptionRefused
from .models.hub_cache import hub_session, hub_unused, not_cached, read_cache_only
from .models.memory import Fit, adapter_fit
from .models.registry import make_adapter
from .models.weights import check_checkpoint
from .readouts.base import Readout, SplitTooSmall, UnknownReadoutOption
from .readouts.parse import FAILED_CALL, failed_call
from .readouts.registry import get_readout
from .recipes import Recipe, RecipeError, check_device, did_you_mean
from .reports.terminal import BatteryResult, answer_lines, incomplete_line, summary_table
from .scores.ranking import primary_items
from .scores.record import Score
from .scores.tasks import get_family
from .sources import Sources
from .stimuli.base import StimulusSet
from .stimuli.hashcache import prime as prime_hashes
from .stimuli.registry import BATTERIES, TaskSpec, expand, get_task
from .tracking.batteries import (
    BATTERY_FOLDER,
    BATTERY_KEY,
    RESCORED,
    Prior,
    battery_folder_id,
    find_battery,
    logged_intervals,
    logged_records,
    up_to_date_without_mlflow,
)
from .tracking.metrics import RUN_TOTALS
from .tracking.mlflow_run import BatteryRun
from .tracking.store import (
    check_tracking_server,
    open_store,
    outage_budget,
    shown_uri,
    sqlite_path,
    tracking_lost,
    tracking_uri,
)
from .trials.distributed import RESUME, Dist, Interrupted, file_lock, interrupts_as_exceptions
from .trials.progress import heard, slow_step
from .trials.records import RecordStore, per_stimulus
from .trials.runner import CountingAdapter, count_cached, run_task, trial_keys

# what harness/cli.py, the Python API and the tests import from the run, each from the room that holds it
__all__ = ["BatteryResult", "answer_lines", "incomplete_line", "summary_table"]


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


WEIGHT_FILES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


def check_weights(recipe: Recipe) -> None:
    """A ``weights`` value that names a file (a path or a weights suffix) must be a checkpoint
    now (its header read), not when the battery loads the model inside its MLflow run."""
    for i, m in enumerate(recipe.models):
        w = m.weights
        if w and not w.startswith("pypi:") and ("/" in w or w.endswith(WEIGHT_FILES)):
            where = f"{recipe.where('models', i, 'weights')}: models.{i}.weights"
            path = Path(w).expanduser()
            if not path.exists():
                raise RecipeError(f"{where}: {w}: no such file")
            try:
                check_checkpoint(path)
            except ModelError as e:
                raise RecipeError(f"{where}: {e}") from None


def refuse_option(recipe: Recipe, e: ModelError) -> None:
    """A setting of a model entry that its loader refuses or never reads is bad input at its
    recipe line (exit 2), not a model this machine lacks."""
    if isinstance(e, OptionRefused):
        place: tuple[str | int, ...] = ("models", next(i for i, m in enumerate(recipe.models) if m.id == e.model_id),
                                        *e.key)
        raise RecipeError(f"{recipe.where(*place)}: {'.'.join(map(str, place))}: {e.what}") from None


def preflight(recipe: Recipe, *, list_missing: bool = False, run_code: bool = True
              ) -> tuple[list[Planned], dict[str, StimulusSet], Sources]:
    """Everything that can fail before a run. Models that cannot be resolved (an API key not set,
    hub weights not in the cache when the hub is not used, weights too big for the device) are all
    named together, in one error; with ``list_missing`` (a dry run, and a run that leaves out what
    cannot run yet) they are marked ``missing`` instead, for the plan to show them all;
    ``not_ready`` where only a fix on this machine is missing. Without ``run_code`` (a dry run),
    no code the recipe names runs (:func:`plan`). Where the hub is not used (:func:`hub_unused`),
    the hub clients read the cache only from here on (until the run's :func:`hub_session` ends)."""
    cpu_heap_wanted()  # a typo in $GESTALT_CPU_HEAP stops the run here, not at its first trial
    check_weights(recipe)
    planned = plan(recipe, run_code=run_code)
    sources = Sources(root=recipe.data.root, mirror=recipe.data.mirror)
    stimsets = build_stimsets(recipe, sources, expand(recipe.tasks))
    prime_hashes(stimsets.values())  # a rerun reads them: no stimulus drawn or PNG-encoded again
    build_readouts(recipe, planned, stimsets)
    if no_hub := hub_unused(p.model for p in planned):
        read_cache_only()
    for p in planned:
        try:
            if no_hub and (absent := not_cached(p.adapter, no_hub)):
                raise NotReady(f"model {p.model.id!r}: {absent}")
            p.adapter.check()  # resolves the name (and offline weights) without loading them
        except ModelError as e:
            refuse_option(recipe, e)
            p.missing, p.not_ready = str(e), isinstance(e, NotReady)
            continue
        p.fit = adapter_fit(p.adapter)  # weights that cannot fit are left out before any model loads
        if p.fit is not None and (refused := p.fit.refusal(p.model.id)):
            p.missing, p.not_ready = refused, True  # on a device with more memory it runs
            continue
        for task_id, readout in p.readouts.items():  # settings the model cannot take:
            if dropped := readout.preflight(p.adapter):  # refused, or dropped and logged
                p.settings_dropped[task_id] = dropped
    missing = [p.missing for p in planned if p.missing]
    if missing and not list_missing:
        raise ModelError("; ".join(missing))
    return planned, stimsets, sources


def missing_block(planned: list[Planned], stimsets: dict[str, StimulusSet]) -> list[str]:
    """What a dry run lists after the plan: every model that cannot run yet (those a run leaves
    out apart), and the tasks a run reports unavailable (their data not here), each reason once."""
    lines = []
    missing = [p.missing for p in planned if p.missing and not p.not_ready]
    if missing:
        lines += [f"missing before this recipe can run ({len(missing)}):", *(f"  {m}" for m in missing)]
    lines += left_out_lines([p for p in planned if p.not_ready])
    unavailable = {t: s.unavailable for t, s in stimsets.items() if s.unavailable}
    if unavailable:
        lines += ["tasks a run reports unavailable (it goes on without them):",
                  *(f"  {t}: {why}" for t, why in unavailable.items())]
    return lines


def runnable(planned: list[Planned]) -> tuple[list[Planned], list[Planned]]:
    """The models a run runs, and those it leaves out: they cannot run here yet (no API key, hub
    weights not in the cache when the hub is not used, weights too big for the device), each
    named with its fix. A model missing for any other reason (a wrong
    entry) is bad input: then every missing model is named, in one error, and nothing runs."""
    if any(p.missing and not p.not_ready for p in planned):
        raise ModelError("; ".join(p.missing for p in planned if p.missing))
    return [p for p in planned if not p.missing], [p for p in planned if p.missing]


def left_out_lines(left: list[Planned]) -> list[str]:
    """What a run says before any work of the models it leaves out, and a dry run after the plan."""
    if not left:
        return []
    return [f"left out until fixed ({len(left)}; the rest run, then a rerun adds their batteries):",
            *(f"  {p.missing}" for p in left)]


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


def api_extractor(readout: Readout | None) -> Any:
    """A readout's answer extractor where it is an API model (CHART-6's LLM extractor), else None."""
    from .models.api import APIModel

    if readout is None or readout.options.get("extractor") != "llm":
        return None
    model = readout.extractor().model  # type: ignore[attr-defined]
    return model if isinstance(model, APIModel) else None


def paid_models(p: Planned, task_id: str) -> tuple[Any, Any]:
    """The API models a task of the battery pays for: its model and its answer extractor (None
    where either is not an API model)."""
    from .models.api import APIModel

    return (p.adapter if isinstance(p.adapter, APIModel) else None), api_extractor(p.readouts.get(task_id))


def task_prices(p: Planned, task_id: str) -> tuple[Price | None, Price | None]:
    """The table's prices of a task's paid calls: its model's and its answer extractor's."""
    return tuple(None if m is None else price_of(m.provider, m.capability_model)  # type: ignore[return-value]
                 for m in paid_models(p, task_id))


def battery_totals(p: Planned) -> tuple[str, ...]:
    """The run-level metrics of the model's battery run: its model calls, and what its API
    calls (an answer extractor's included) used and cost."""
    paid = any(m is not None for t, _ in p.tasks for m in paid_models(p, t.task_id))
    return RUN_TOTALS + (USAGE_METRICS if paid else ())


def check_budget(recipe: Recipe, planned: list[Planned]) -> None:
    """``budget_usd`` is counted at the price table's prices: every API model must have one,
    answer extractors included."""
    if recipe.budget_usd is None:
        return
    for p in planned:
        for task, _ in p.tasks:
            for role, m in zip(("model", "answer extractor"), paid_models(p, task.task_id)):
                if m is not None and price_of(m.provider, m.capability_model) is None:
                    raise RecipeError(f"{recipe.where('budget_usd')}: budget_usd: {role} of model "
                                      f"{p.model.id!r} ({m.provider}/{m.capability_model}) has no price in "
                                      f"harness/models/prices.csv; add its row or remove budget_usd")


def output_budget(api: Any, options: dict[str, Any]) -> int:
    """The output tokens an API call may bill: the model's ``max_tokens``, else the readout's
    ``max_new_tokens``."""
    return int(api.options.get("max_tokens") or options.get("max_new_tokens", 40))


def call_bound_usd(p: Planned, task_id: str, stimset: StimulusSet) -> float:
    """The most one of the task's model calls costs at the table's price (0 where the model is not
    a priced API model): its input tokens by the vendor's image rule and its whole output budget.
    A call that timed out is counted at it, and each call in flight can take a run this far past
    ``budget_usd``."""
    api, _ = paid_models(p, task_id)
    readout = p.readouts.get(task_id)
    price = None if api is None else price_of(api.provider, api.capability_model)
    if price is None or readout is None or not stimset.test:
        return 0.0
    tokens_in = estimate_input_tokens(api.provider, api.capability_model, stimset.test[0].image.size,
                                      stimset.prompt.text if stimset.prompt else "")
    return cost_usd(price, {"input_tokens": tokens_in, "output_tokens": output_budget(api, readout.options),
                            "batch": int(bool(api.options.get("batch")))})


def record_stores(recipe: Recipe, p: Planned) -> dict[str, RecordStore]:
    """Each task's record file of the model's battery."""
    return {t.task_id: RecordStore(recipe.out_dir / p.model.id / "records" / f"{t.task_id}.jsonl")
            for t, _ in p.tasks}


def spent_so_far(recipe: Recipe, planned: list[Planned], stimsets: dict[str, StimulusSet]) -> float:
    """What the recipe's batteries have spent in all runs so far, read from their records (set-aside
    failed and stale attempts included), at the table's prices; timed-out calls at their bound."""
    total = 0.0
    for p in planned:
        for task_id, store in record_stores(recipe, p).items():
            if any(m is not None for m in paid_models(p, task_id)):
                total += spend(store.attempts(), *task_prices(p, task_id),
                               timed_out_usd=call_bound_usd(p, task_id, stimsets[task_id]))
    return total


def verify_api_models(planned: list[Planned]) -> list[Planned]:
    """Each API model's key and name, asked of its vendor with one request that generates nothing,
    before any battery, whatever ``--offline`` says (it is about source data): a model whose key
    is refused, whose vendor does not answer or does not know it is left out with that reason, as
    one without a key is, and the rest run. Returns those left out."""
    api = sys.modules.get("harness.models.api")  # loaded with any API adapter: else none to check
    if api is None:  # (and httpx2, asyncio not imported for nothing)
        return []
    refused = []
    for p in planned:
        if isinstance(p.adapter, api.APIModel):
            try:
                p.adapter.verify()
            except ModelError as e:
                p.missing, p.not_ready = str(e), True
                refused.append(p)
    return refused


def describe_plan(recipe: Recipe, planned: list[Planned], stimsets: dict[str, StimulusSet]) -> str:
    lines = [f"recipe {recipe.name} (sha256 {recipe.sha256[:12]}), seed {recipe.seed}, "
             f"{recipe.runtime.processes} process(es), output {recipe.out_dir}"]
    from .models.api import APIModel
    from .models.api_costs import Job, estimate_line, expected_output_tokens

    total_calls = total_cached = total_pending = 0
    for p in planned:
        lines.append(f"model {p.model.id} [{p.model.ref} weights={p.model.weights}]"
                     + (" NOT READY (listed below)" if p.missing else ""))
        if p.fit is not None:
            lines.append(f"  {p.fit.line()}")
        if p.unbuilt:
            lines.append(f"  {p.unbuilt}")
        api = p.adapter if isinstance(p.adapter, APIModel) else None
        jobs = []  # an API model's calls to run per task
        extracting: dict[str, tuple[Any, list]] = {}  # the same, of each API answer extractor
        for task, readout in p.tasks:
            s = stimsets[task.task_id]
            if s.unavailable:
                lines.append(f"  {task.task_id}: unavailable (listed below)")
                continue
            # a readout may multiply repetitions (every montage permutation x n_reps)
            n_reps = p.readouts[task.task_id].n_reps
            trials = len(s.test) * n_reps
            calls = trials if "generate" in p.adapter.capabilities else 0
            total_calls += calls
            lines.append(f"  {task.task_id}: readout {readout}, {len(s.test)} test x {n_reps} rep(s)"
                         f" = {trials} trials, probe-train {len(s.train)}"
                         + (f", {calls} generate calls" if calls else ""))
            if s.note:
                lines.append(f"    note: {s.note}")
            if p.missing and api is None:  # its fingerprint (and cached trials) is known once it resolves;
                continue  # an API model's needs no key, so its calls, tokens and cost are estimated
            keys = trial_keys(task.task_id, s, p.model.id, p.readouts[task.task_id],
                              fingerprint_hash(p.adapter.fingerprint))
            store = RecordStore(recipe.out_dir / p.model.id / "records" / f"{task.task_id}.jsonl")
            cached = count_cached(store, keys)
            total_cached, total_pending = total_cached + cached, total_pending + len(keys) - cached
            lines.append(f"    trials cached {cached}, to run {len(keys) - cached}")
            options = p.readouts[task.task_id].options
            answer_budget = output_budget(api, options) if api else int(options.get("max_new_tokens", 40))
            if api is not None and s.test:
                answered = [r for r in store.read() if keys.get(r["trial_id"]) == r.get("cache_key")] \
                    if store.path.exists() else []
                jobs.append(Job(len(keys) - cached, s.test[0].image.size, s.prompt.text if s.prompt else "",
                                answer_budget, expected_output_tokens(answered, [x.ground_truth for x in s.test],
                                                                      api.expected_thinking(answer_budget))))
            extractor = api_extractor(p.readouts[task.task_id])
            if extractor is not None and s.test:  # one text-only call per trial, the answer in its prompt
                from .readouts.extract import EXTRACTOR_SETTINGS, extraction_prompt

                meta = s.test[0].meta
                prompt = extraction_prompt(str(meta.get("question", "")), "x" * 4 * answer_budget,
                                           meta.get("options") or ())
                settings = options.get("extractor_settings") or EXTRACTOR_SETTINGS
                budget = int(extractor.options.get("max_tokens") or settings.get("max_new_tokens", 40))
                extracting.setdefault(extractor.spec.id, (extractor, []))[1].append(
                    Job(len(keys) - cached, None, prompt, budget,
                        expected_output_tokens([], [s.test[0].ground_truth], extractor.expected_thinking(budget))))
        if api is not None and jobs:
            if api.options.get("batch"):
                lines.append(f"  batch mode: each task's pending calls go to the {api.provider} batch "
                             f"interface as one batch (answers within 24 h), at batch prices")
            lines.append(estimate_line(api.provider, api.capability_model, jobs, batch=bool(api.options.get("batch"))))
        for extractor, ex_jobs in extracting.values():
            lines.append(f"  answer extractor {extractor.spec.id} ({extractor.provider}/{extractor.capability_model}),"
                         f" one call per trial, each answer at its output budget:")
            lines.append(estimate_line(extractor.provider, extractor.capability_model, ex_jobs))
    lines.append(f"total generate/API calls if nothing is cached: {total_calls}")
    lines.append(f"total trials cached {total_cached}, to run {total_pending}")
    if recipe.budget_usd is not None:  # what a run would start from, read from the same records
        lines.append(Budget(recipe.budget_usd, spent_so_far(recipe, planned, stimsets)).line())
    return "\n".join(lines)


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


@contextlib.contextmanager
def recipe_device(recipe: Recipe) -> Iterator[None]:
    """The recipe's ``runtime.device`` for this process while the recipe runs: models are placed
    there and fingerprints (``precision: auto``) resolve against it. ``$GESTALT_DEVICE``, which
    ``accelerate`` launches and the user set, stays in charge where it is set. A device this
    machine lacks is one line here, before the dry run's plan or the first model."""
    check_device(recipe)
    if recipe.runtime.device == "auto" or "GESTALT_DEVICE" in os.environ:
        yield
        return
    os.environ["GESTALT_DEVICE"] = recipe.runtime.device
    try:
        yield
    finally:
        os.environ.pop("GESTALT_DEVICE", None)


@contextlib.contextmanager
def disk_faults(recipe: Recipe) -> Iterator[None]:
    """A full or read-only disk met in the block, however the library that met it raised or
    wrapped it (MLflow, SQLAlchemy, matplotlib), as one line: :class:`DiskUnavailable`. A
    database names no file: its folder is the store's (or the store, for a server)."""
    try:
        yield
    except DiskUnavailable:
        raise
    except Exception as e:
        uri = tracking_uri(recipe.tracking.uri)
        db = sqlite_path(uri)
        store = os.path.dirname(os.path.abspath(db)) if db else f"the tracking store {shown_uri(uri)}"
        if (unavailable := disk_unavailable(e, store)) is None:
            raise
        raise unavailable from None


def run_recipe(recipe: Recipe, *, echo: Callable[[str], None] = print, new_run: bool = False,
               shard: tuple[int, int] | None = None, leave_out: bool = False,
               rescore: bool = False) -> list[BatteryResult]:
    """The recipe's batteries. With ``leave_out`` (`gestalt recipe`), models that cannot run here
    yet are named before any work and run without; each is a result with ``left_out`` set, after
    the batteries. Without it, they stop the run before it starts, as bad input does."""
    def said(line: str) -> None:  # a line shown ends the silence that a slow step waits out
        echo(line)
        heard()

    heard()  # the command line itself was the last thing shown
    with recipe_device(recipe), disk_faults(recipe), hub_session():
        return _run_recipe(recipe, said, new_run, shard, leave_out, rescore)


def _run_recipe(recipe: Recipe, echo: Callable[[str], None], new_run: bool,
                shard: tuple[int, int] | None, leave_out: bool = False, rescore: bool = False
                ) -> list[BatteryResult]:
    if recipe.tracking.enabled:
        check_tracking_server(recipe.tracking.uri)
    planned_all = preflight(recipe, list_missing=leave_out)
    planned, stimsets, _ = planned_all
    if shard is not None:
        planned = shard_of(planned, shard)
        echo(shard_line(shard, planned, len(recipe.models)))
    planned, left = runnable(planned)
    check_budget(recipe, planned)
    if refused := verify_api_models(planned):
        planned, left = [p for p in planned if not p.missing], left + refused
    for line in left_out_lines(left):
        echo(line)
    for task_id in dict.fromkeys(t.task_id for p in planned for t, _ in p.tasks):
        if stimsets[task_id].unavailable:  # once per task: it is the same for every model
            echo(f"{task_id}: unavailable for every model: {stimsets[task_id].unavailable}")
    # after the checks of bad input (which leave no folder behind), before any trial: a folder
    # that cannot be made is the recipe's error, not a traceback
    try:
        recipe.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RecipeError(f"{recipe.where('output_dir')}: output_dir: {unwritable_folder(recipe.out_dir, e)}; "
                          f"choose another with --output_dir=DIR") from None
    dist = Dist()
    said = echo if dist.is_main else (lambda line: None)  # the recipe's budget is said once, whatever the processes
    budget = None
    if recipe.budget_usd is not None:  # every battery of the recipe, other shards' included
        everyone, _, _ = planned_all
        budget = Budget(recipe.budget_usd, spent_so_far(recipe, everyone, stimsets))
        said(budget.line())
    results = []
    try:
        with interrupts_as_exceptions(), outage_budget(recipe.tracking.outage_budget_s):
            for i, p in enumerate(planned):
                with long_lived_frozen() as after:
                    results.append(_run_battery(recipe, p, stimsets, dist, echo, new_run=new_run, rescore=rescore,
                                                budget=budget))
                    after.collect = i + 1 < len(planned) and results[-1].model_calls > 0
                if budget is not None and budget.reached and i + 1 < len(planned):
                    said(f"budget_usd {budget.limit_usd:g} spent: "
                         f"{', '.join(q.model.id for q in planned[i + 1:])} not started")
                    break
    except BaseException:
        dist.close(finished=False)
        raise
    dist.close()
    if budget is not None:
        said(budget.line())
    return results + [BatteryResult(p.model.id, "", left_out=p.missing) for p in left]


def battery_key(recipe: Recipe, p: Planned, stimsets: dict[str, StimulusSet], fingerprint: str) -> str:
    """Everything that decides a battery's trials and scores: the model entry and weights'
    fingerprint, each task's readout, options and stimulus-set hash, seeds, bootstrap, harness
    version. Equal keys and equal record files mean a rerun would reproduce the logged run."""
    entry = next(m for m in recipe.models if m.id == p.model.id)
    # a field added later leaves the key of an entry that keeps its default as it was (its run stays up to date)
    model = entry.model_dump(mode="json", exclude={"precision"} if entry.precision == "float32" else None)
    payload = {
        "harness": __version__, "recipe": recipe.name, "seed": recipe.seed, "model": model,
        "fingerprint": fingerprint, "bootstrap": recipe.bootstrap.model_dump(mode="json"),
        "tags": recipe.tracking.tags,
        "tasks": [[t.task_id, r, readout_options(recipe, p.model, t), recipe.task_options.get(t.task_id, {}),
                   stimsets[t.task_id].unavailable or stimsets[t.task_id].sha256] for t, r in p.tasks],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _records_digest(stores: dict[str, RecordStore]) -> str:
    return hashlib.sha256("".join(f"{t}:{s.digest()}\n" for t, s in sorted(stores.items())).encode()).hexdigest()


def _shown(items: list[str]) -> str:
    return ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")


def _changed_since_finished(model_id: str, prior: Prior, stores: dict[str, RecordStore], rescore: bool) -> str:
    """Records changed or gone since the battery's run finished (its logged records differ from
    the live ones): refused in one line naming them, unless ``rescore`` asks to score them as they
    are now (the trials of records gone asked again: a model that samples answers anew); then
    what the run's :data:`RESCORED` tag says."""
    changed: list[str] = []
    gone: list[tuple[RecordStore, dict[str, str]]] = []  # (file, trial id -> stimulus id)
    for store in stores.values():
        logged = logged_records(prior.run_id or "", store.path.name)
        if logged is not None:
            drift = store.drift_from(logged)
            changed += drift.changed
            if drift.missing:
                gone.append((store, drift.missing))
    if not changed and not gone:
        return ""
    def stimuli(missing: dict[str, str]) -> str:  # a stimulus once, however many repetitions are gone
        return _shown(list(dict.fromkeys(missing.values())))

    if not rescore:
        said = ([f"{len(changed)} record(s) changed since run {prior.run_id} finished ({_shown(changed)})"]
                if changed else [])
        said += [f"{store.path}: {len(missing)} of the {len(store.scored)} records run {prior.run_id} scored "
                 f"are missing (stimuli {stimuli(missing)})" for store, missing in gone]
        fix = "score them as they are now" + (", the missing trials asked again" if gone else "")
        raise GestaltError(f"{model_id}: {'; '.join(said)}: restore them, or rerun with --rescore to {fix}")
    tag = [f"{len(changed)} changed record(s): {_shown(changed)}"] if changed else []
    tag += [f"{len(missing)} missing record(s) of {store.path.name} asked again (stimuli {stimuli(missing)})"
            for store, missing in gone]
    return "; ".join(tag)


def _logged_result(model_id: str, run_id: str, intervals: dict[str, Any] | None = None) -> BatteryResult:
    """The scores of an up-to-date battery, as its run logged them (nothing recomputed)."""
    result = BatteryResult(model_id, run_id, up_to_date=True)
    for task_id, entry in (logged_intervals(run_id) if intervals is None else intervals).items():
        if "unavailable" in entry:
            result.unavailable[task_id] = entry["unavailable"]
        else:
            result.scores[task_id] = [Score(**{k: v for k, v in s.items() if k != "null_rate"})
                                      for s in entry["scores"]]
    return result


def _with_items(result: BatteryResult, p: Planned, stimsets: dict[str, StimulusSet],
                stores: dict[str, RecordStore]) -> BatteryResult:
    """An up-to-date battery's primary scores per stimulus, from the records its run scored: those
    of its trials' cache keys in the live record files, whose digest is the one the run logged
    (the files also keep other runs' trials)."""
    result.records_digest = _records_digest(stores)
    fingerprint = fingerprint_hash(p.adapter.fingerprint)
    for task, _ in p.tasks:
        if task.task_id in result.scores:
            keys = trial_keys(task.task_id, stimsets[task.task_id], p.model.id, p.readouts[task.task_id], fingerprint)
            records = list(stores[task.task_id].of(keys).values())
            scored = records if task.all_reps else per_stimulus(records)
            result.items[task.task_id] = primary_items(task.scoring, result.scores[task.task_id], scored,
                                                       stimsets[task.task_id])
    return result


def _failure(records: list[dict]) -> str | None:
    """Why the battery's run must end FAILED, or None: no trial has an answer, or some trial's
    call failed (dead key, quota, outage; a rerun sends those again, in the same run)."""
    def reasons(recs: list[dict]) -> str:
        return ", ".join(f"{k} x{n}" for k, n in Counter(r["parse_status"] for r in recs).most_common())

    failed = [r for r in records if failed_call(r["parse_status"], r.get("extras"))]
    api = sys.modules.get("harness.models.api")  # loaded with any API adapter: else no vendor refused
    if failed and api is not None and (money := api.out_of_money(failed)) is not None:
        # the model sent nothing after the vendor's refusal: the user's money, not the model, decides
        return f"{money} and rerun: the {len(failed)} calls not answered are sent again"
    if records and not any(r["parse_status"] == "ok" for r in records):
        why = f"every one of {len(records)} trials null ({reasons(records)})"
    elif failed:
        why = f"{len(failed)} of {len(records)} trials are failed calls ({reasons(failed)})"
    else:
        return None
    return why + (f"; a rerun sends the {len(failed)} failed calls again" if failed else "")


def _needs_change(records: list[dict], stopped: str | None) -> bool:
    """Whether a FAILED battery's rerun fails the same way unless something changes, so a scheduler
    must not requeue it: the recipe's budget is spent, the vendor refused the key, or the model
    answered and not one answer parsed (a rerun asks for the same answers again)."""
    api = sys.modules.get("harness.models.api")  # loaded with any API adapter: else no key was refused
    if stopped or (api is not None and any(r["parse_status"].startswith(FAILED_CALL) and
                                           r["parse_status"][len(FAILED_CALL):] in api.REFUSED_KEY
                                           for r in records)):
        return True
    answers = [r for r in records if not failed_call(r["parse_status"], r.get("extras"))]
    return bool(answers) and not any(r["parse_status"] == "ok" for r in answers)


def _run_battery(recipe: Recipe, p: Planned, stimsets: dict[str, StimulusSet], dist: Dist,
                 echo: Callable[[str], None], new_run: bool = False,
                 budget: Budget | None = None, rescore: bool = False) -> BatteryResult:
    """One battery under its folder's lock: a second process on the same output folder waits,
    then finds the trials done (each computed and written once) and the run up to date."""
    spec = p.model
    adapter = CountingAdapter(p.adapter, lambda: dist.device)  # resolved when a model is placed
    folder = recipe.out_dir / spec.id
    stores = record_stores(recipe, p)
    run_id: str | None = None
    track = recipe.tracking.enabled and dist.is_main
    uri = tracking_uri(recipe.tracking.uri)
    try:
        with file_lock(folder / ".battery.lock") if dist.is_main else contextlib.nullcontext():
            key = battery_key(recipe, p, stimsets, fingerprint_hash(adapter.fingerprint))
            prior = Prior()
            if track and not new_run and dist.world == 1:  # decided from the sqlite file: MLflow not imported
                found = up_to_date_without_mlflow(uri, recipe.tracking.experiment, spec.id, key,
                                                  _records_digest(stores))
                if found is not None:
                    echo(f"{spec.id}: up to date: run {found[0]}")
                    return _with_items(_logged_result(spec.id, found[0], found[1]), p, stimsets, stores)
            folder_id, experiment_id = "", None
            if track:
                with slow_step(f"{spec.id}: finding its MLflow run", recipe.runtime.progress):
                    folder_id = battery_folder_id(folder)
                    experiment_id = open_store(uri, recipe.tracking.experiment)  # once: BatteryRun takes it
                    prior = find_battery(experiment_id, spec.id, key, _records_digest(stores), folder_id,
                                         new_run=new_run)
                for closed in prior.closed:
                    echo(f"{spec.id}: run {closed} was abandoned by a killed process; marked FAILED")
            rescored = _changed_since_finished(spec.id, prior, stores, rescore) if prior.finished else ""
            up_to_date = dist.gather([prior.run_id if prior.up_to_date else None])[0]
            if up_to_date:
                echo(f"{spec.id}: up to date: run {up_to_date}")
                return (_with_items(_logged_result(spec.id, up_to_date), p, stimsets, stores) if dist.is_main
                        else BatteryResult(spec.id, up_to_date))
            if prior.run_id:
                echo(f"{spec.id}: continuing run {prior.run_id}")
            tags = {"gestalt.model": spec.id, "gestalt.recipe": recipe.name, "gestalt.recipe_sha256": recipe.sha256,
                    "gestalt.family": spec.family, BATTERY_KEY: key, BATTERY_FOLDER: folder_id,
                    **({RESCORED: rescored} if rescored else {}), **recipe.tracking.tags}
            ctx = (BatteryRun(uri=uri, experiment=recipe.tracking.experiment, run_name=spec.id, tags=tags,
                              tasks=[t.task_id for t, _ in p.tasks], totals=battery_totals(p),
                              resume=prior.run_id, experiment_id=experiment_id, device=lambda: adapter.placed_device)
                   if track else contextlib.nullcontext())
            with ctx as run:
                local_id = (run.run_id if run is not None
                            else f"{recipe.name}-{spec.id}-{time.strftime('%Y%m%d-%H%M%S')}")
                run_id = dist.gather([local_id])[0]
                result = _battery_trials(recipe, p, stimsets, dist, adapter, stores, run, run_id, echo, budget)
                if result.failed:
                    echo(f"{spec.id}: {result.failed}; run {run_id} marked FAILED")
                    if run is not None:
                        run.fail(result.failed, provisional=bool(result.scores))
                elif run is not None:
                    result.records_digest = _records_digest(stores)
                    run.finish(result.records_digest)
            return result
    except (KeyboardInterrupt, ProcessLost) as e:
        # the main process owns the MLflow run; another one's run id names the same run
        where = (f"{spec.id} not started" if not run_id else
                 f"run {run_id} of {spec.id}" + (" marked FAILED" if track else ""))
        if isinstance(e, ProcessLost):
            raise ProcessLost(f"{e}: {where}; {RESUME}") from e.__cause__
        raise Interrupted(f"{str(e) or 'interrupted (Ctrl-C)'}: {where}; {RESUME}",
                          exit_code=e.exit_code if isinstance(e, Interrupted) else Exit.INTERRUPTED) from None
    except Exception as e:
        why = tracking_lost(e) if track else None
        if why is None:
            raise
        where = f"run {run_id} of {spec.id}" if run_id else f"{spec.id} not started"
        raise TrackingUnavailable(f"tracking server {shown_uri(uri)} stopped answering ({why}; retried for "
                                  f"{recipe.tracking.outage_budget_s} s): {where}; {RESUME}") from None
    finally:
        adapter.release()  # one model in memory at a time: the roster's next one loads into its space


def _battery_trials(recipe: Recipe, p: Planned, stimsets: dict[str, StimulusSet], dist: Dist,
                    adapter: CountingAdapter, stores: dict[str, RecordStore], run: Any,
                    run_id: str, echo: Callable[[str], None], budget: Budget | None = None) -> BatteryResult:
    spec = p.model
    track = run is not None
    shown = recipe.runtime.progress and dist.is_main
    result = BatteryResult(spec.id, run_id)
    if track:
        run.log_params({
            "model": spec.id, "model_ref": spec.ref, "weights": spec.weights,
            "weights_revision": spec.revision, "model_version": adapter.model_version,
            "model_family": spec.family, "dtype": spec.dtype, "batch_size": spec.batch_size,
            # the autocast asked for; what `auto` resolves to is in the fingerprint (trials' cache keys)
            "precision": spec.precision,
            "readouts": ",".join(f"{t.task_id}={r}" for t, r in p.tasks),
            "seed": recipe.seed, "bootstrap_seed": recipe.bootstrap.seed,
            "n_boot": recipe.bootstrap.n_boot, "n_boot_kappa": recipe.bootstrap.n_boot_kappa,
            "bootstrap_method": recipe.bootstrap.method,
            "processes": dist.world, "harness_version": __version__, "recipe": recipe.name,
            "trust_remote_code": spec.trust_remote_code,
            **({"settings_dropped": p.settings_dropped} if p.settings_dropped else {}),
        })
    intervals: dict[str, Any] = {}
    answered: list[dict] = []
    calls_before = adapter.calls
    stopped = None  # why the budget stopped the battery
    for task, readout in p.tasks:
        stimset = stimsets[task.task_id]
        store = stores[task.task_id]
        clock = time.perf_counter()
        paid = any(m is not None for m in paid_models(p, task.task_id))
        prices = task_prices(p, task.task_id)  # check_budget refused a recipe whose paid models lack one
        charge = (Charge(budget, dist, prices, call_bound_usd(p, task.task_id, stimset))
                  if budget is not None and paid else None)
        try:
            tr = run_task(task, stimset, spec, adapter, store, readout_name=readout,
                          readout_options=readout_options(recipe, spec, task), seed=recipe.seed,
                          run_id=run_id, dist=dist, progress=recipe.runtime.progress, echo=echo,
                          charge=charge)
        except BudgetReached as e:  # the trials so far are recorded; a rerun continues
            assert charge is not None
            stopped = str(e)
            result.new_trials += sum(dist.gather([charge.records]))
            trials = len(stimset.test) * p.readouts[task.task_id].n_reps
            result.unscored[task.task_id] = (f"not scored: {len(store.read())} of {trials} trials, "
                                             f"stopped by budget_usd")
            break
        clock = _lap(result.seconds[task.task_id], "trials", clock)
        result.new_trials += tr.new_trials
        if tr.unavailable:
            result.unavailable[task.task_id] = tr.unavailable
            intervals[task.task_id] = {"unavailable": tr.unavailable}  # said once, before the batteries
            continue
        answered += tr.records
        if not dist.is_main:
            continue
        scored = tr.records if task.all_reps else per_stimulus(tr.records)
        # one step: a task's end is silent for no more than SLOW_STEP_S, however its parts divide
        with slow_step(f"{spec.id} {task.task_id}: scoring with bootstrap intervals"
                       + (", drawing figures, logging to MLflow" if track else ""), shown):
            scores = get_family(task.scoring).score(scored, stimset, recipe.bootstrap)
            clock = _lap(result.seconds[task.task_id], "scores", clock)
            result.scores[task.task_id] = scores
            result.items[task.task_id] = primary_items(task.scoring, scores, scored, stimset)
            intervals[task.task_id] = {"version": stimset.version, "readout": readout,
                                       "stimulus_set_sha256": stimset.sha256,
                                       "scores": [s.to_dict() for s in scores]}
            if (items := result.items[task.task_id]) is not None:  # the report ranks paired from them
                intervals[task.task_id]["primary_items"] = items.to_dict()
            if paid:  # the task's calls as the vendors counted them, and their cost at the table's prices
                intervals[task.task_id]["usage"] = task_usage(tr.records, *prices)
            if track:
                from .reports.battery import battery_figures  # matplotlib: only when figures are drawn

                history = p.adapter.history
                if history or tr.artifacts:
                    run.log_training(task.task_id, list(history), tr.artifacts)
                figs = battery_figures(task.task_id, tr.records, scores, stimset, spec.id)
                clock = _lap(result.seconds[task.task_id], "figures", clock)
                run.log_task(task.task_id, scores, tr.records, figs, store.path)
                _lap(result.seconds[task.task_id], "tracking", clock)
    result.model_calls = sum(dist.gather([adapter.calls - calls_before]))
    result.failed_calls = sum(failed_call(r["parse_status"], r.get("extras")) for r in answered)
    result.failed = stopped or _failure(answered)
    result.needs_change = result.failed is not None and _needs_change(answered, stopped)
    if track:
        clock = time.perf_counter()
        with slow_step(f"{spec.id}: logging the battery to MLflow", shown):
            run.log_metrics(run_totals(p, stores, run_id, result.model_calls))
            run.log_battery(intervals=intervals, recipe=recipe.resolved(), recipe_sha256=recipe.sha256,
                            stimulus_sets={t: s.sha256 for t, s in stimsets.items() if not s.unavailable})
        _lap(result.seconds["battery"], "tracking", clock)
    return result


@dataclass
class Charge:
    """A task's calls charged to the budget as their records are written: each record's cost in
    one process; with several, each chunk's, every process's together, so all processes stop at
    the same chunk. Calls that timed out count at ``timed_out_usd``; ``records`` counts this
    process's trials charged."""

    budget: Budget
    dist: Dist
    prices: tuple[Price | None, Price | None]
    timed_out_usd: float
    records: int = 0

    def __call__(self, records: list[dict]) -> None:
        self.records += len(records)
        usd = spend(records, *self.prices, timed_out_usd=self.timed_out_usd)
        rates = " and ".join(f"{p.model} prices of {p.date}" for p in self.prices if p is not None)
        self.budget.charge(sum(self.dist.gather([usd])), rates)


def run_totals(p: Planned, stores: dict[str, RecordStore], run_id: str, model_calls: int) -> dict[str, float]:
    """The battery run's totals, each of the run as a whole (every process and every invocation
    that continued it): an API model's ``model_calls``, tokens and cost counted from the records
    its calls left (answers, failed attempts set aside); another model's ``model_calls`` as
    counted by its processes."""
    from .models.api import APIModel

    usages, calls = [], 0
    for task, _ in p.tasks:
        if any(m is not None for m in paid_models(p, task.task_id)):
            made = [r for r in stores[task.task_id].attempts() if r["run_meta"]["run_id"] == run_id]
            calls += len(made)
            usages.append(task_usage(made, *task_prices(p, task.task_id)))
    if not usages:
        return {"model_calls": float(model_calls)}
    return {"model_calls": float(calls if isinstance(p.adapter, APIModel) else model_calls),
            **battery_usage(usages)}


def _lap(seconds: defaultdict[str, float], phase: str, since: float) -> float:
    now = time.perf_counter()
    seconds[phase] += now - since
    return now


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
