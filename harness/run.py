"""Run a recipe: its batteries, one per model in the recipe's order, and what happens when one ends.

Order of work (docs/design.md, "A run"): (1) the plan (``planning.py``); (2) the preflight
(``preflight.py``): every task's stimuli built and verified from sources, every (model, task)
readout built with its settings, every model name and local weights file resolved, so a bad
recipe, a missing or tampered data file, a bad readout setting or an unknown model stops there
with one line naming the culprit and no MLflow run exists; (3) here, per model: an MLflow run,
trials (resumed from records), scores through the task's scoring family, figures, artifacts, the
budget charged (``money.py``) and an up-to-date battery left as it is (``up_to_date.py``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from .dry_run import describe_plan, missing_block
from .errors import DiskUnavailable, ProcessLost, TrackingUnavailable, disk_unavailable, unwritable_folder
from .exit_status import Exit
from .models.api_costs import Budget, BudgetReached, Price, task_usage
from .models.base import fingerprint_hash
from .models.device import long_lived_frozen
from .models.hub_cache import hub_session
from .money import (Charge, battery_totals, call_bound_usd, check_budget, paid_models, run_totals, spent_so_far,
                    task_prices)
from .planning import (PlanError, Planned, build_stimsets, model_specs, parse_shard, plan, readout_options,
                       record_stores, select, shard_line, shard_of, where_lines)
from .preflight import check_weights, left_out_lines, preflight, runnable, verify_api_models
from .readouts.parse import FAILED_CALL, failed_call
from .recipes import Recipe, RecipeError, check_device
from .reports.terminal import BatteryResult, answer_lines, incomplete_line, summary_table
from .scores.ranking import primary_items
from .scores.tasks import get_family
from .stimuli.base import StimulusSet
from .stimuli.registry import TaskSpec
from .tracking.batteries import (BATTERY_FOLDER, BATTERY_KEY, RESCORED, Prior, battery_folder_id, find_battery,
                                 up_to_date_without_mlflow)
from .tracking.mlflow_run import BatteryRun
from .tracking.store import (check_tracking_server, open_store, outage_budget, shown_uri, sqlite_path, tracking_lost,
                             tracking_uri)
from .trials.distributed import RESUME, Dist, Interrupted, file_lock, interrupts_as_exceptions
from .trials.progress import heard, slow_step
from .trials.records import RecordStore, per_stimulus
from .trials.runner import CountingAdapter, TaskResult, run_task
from .up_to_date import battery_key, changed_since_finished, logged_result, records_digest, with_items
from .version import __version__

# the names harness/cli.py, the Python API, the tests and the benchmarks take from the run; the
# planning, preflight, money, dry run and terminal among them from the rooms that hold them
__all__ = ["BatteryResult", "PlanError", "Planned", "answer_lines", "battery_totals", "build_stimsets",
           "call_bound_usd", "check_budget", "check_weights", "describe_plan", "disk_faults", "incomplete_line",
           "missing_block", "model_specs", "parse_shard", "plan", "preflight", "readout_options", "recipe_device",
           "run_recipe", "select", "shard_line", "shard_of", "summary_table", "where_lines"]


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
                                                  records_digest(stores))
                if found is not None:
                    echo(f"{spec.id}: up to date: run {found[0]}")
                    return with_items(logged_result(spec.id, found[0], found[1]), p, stimsets, stores)
            folder_id, experiment_id = "", None
            if track:
                with slow_step(f"{spec.id}: finding its MLflow run", recipe.runtime.progress):
                    folder_id = battery_folder_id(folder)
                    experiment_id = open_store(uri, recipe.tracking.experiment)  # once: BatteryRun takes it
                    prior = find_battery(experiment_id, spec.id, key, records_digest(stores), folder_id,
                                         new_run=new_run)
                for closed in prior.closed:
                    echo(f"{spec.id}: run {closed} was abandoned by a killed process; marked FAILED")
            rescored = changed_since_finished(spec.id, prior, stores, rescore) if prior.finished else ""
            up_to_date = dist.gather([prior.run_id if prior.up_to_date else None])[0]
            if up_to_date:
                echo(f"{spec.id}: up to date: run {up_to_date}")
                return (with_items(logged_result(spec.id, up_to_date), p, stimsets, stores) if dist.is_main
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
                    result.records_digest = records_digest(stores)
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
    """The battery's tasks in order, each one's trials then (in the main process) its scores, and
    how the battery ended; a budget reached stops it at that task, its trials so far recorded."""
    spec = p.model
    result = BatteryResult(spec.id, run_id)
    if run is not None:
        run.log_params(_params(recipe, p, dist, adapter))
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
        if dist.is_main:
            intervals[task.task_id] = _task_scores(recipe, p, (task, readout), stimset, tr, store, run, result,
                                                   prices if paid else None, clock)
    result.model_calls = sum(dist.gather([adapter.calls - calls_before]))
    result.failed_calls = sum(failed_call(r["parse_status"], r.get("extras")) for r in answered)
    result.failed = stopped or _failure(answered)
    result.needs_change = result.failed is not None and _needs_change(answered, stopped)
    if run is not None:
        clock = time.perf_counter()
        with slow_step(f"{spec.id}: logging the battery to MLflow", recipe.runtime.progress and dist.is_main):
            run.log_metrics(run_totals(p, stores, run_id, result.model_calls))
            run.log_battery(intervals=intervals, recipe=recipe.resolved(), recipe_sha256=recipe.sha256,
                            stimulus_sets={t: s.sha256 for t, s in stimsets.items() if not s.unavailable})
        _lap(result.seconds["battery"], "tracking", clock)
    return result


def _params(recipe: Recipe, p: Planned, dist: Dist, adapter: CountingAdapter) -> dict[str, Any]:
    """The battery run's parameters: the model entry, its readouts, seeds, bootstrap and harness."""
    spec = p.model
    return {
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
    }


def _task_scores(recipe: Recipe, p: Planned, pair: tuple[TaskSpec, str], stimset: StimulusSet, tr: TaskResult,
                 store: RecordStore, run: Any, result: BatteryResult, prices: tuple[Price | None, Price | None] | None,
                 clock: float) -> dict[str, Any]:
    """A task's scores with their bootstrap intervals into ``result``, and with a tracked battery
    its figures and MLflow logging; returns the task's entry of intervals.json (with ``prices``,
    those of its paid calls, their usage and cost)."""
    task, readout = pair
    scored = tr.records if task.all_reps else per_stimulus(tr.records)
    # one step: a task's end is silent for no more than SLOW_STEP_S, however its parts divide
    with slow_step(f"{p.model.id} {task.task_id}: scoring with bootstrap intervals"
                   + (", drawing figures, logging to MLflow" if run is not None else ""), recipe.runtime.progress):
        scores = get_family(task.scoring).score(scored, stimset, recipe.bootstrap)
        clock = _lap(result.seconds[task.task_id], "scores", clock)
        result.scores[task.task_id] = scores
        result.items[task.task_id] = primary_items(task.scoring, scores, scored, stimset)
        entry: dict[str, Any] = {"version": stimset.version, "readout": readout, "stimulus_set_sha256": stimset.sha256,
                                 "scores": [s.to_dict() for s in scores]}
        if (items := result.items[task.task_id]) is not None:  # the report ranks paired from them
            entry["primary_items"] = items.to_dict()
        if prices is not None:  # the task's calls as the vendors counted them, and their cost at the table's prices
            entry["usage"] = task_usage(tr.records, *prices)
        if run is not None:
            from .reports.battery import battery_figures  # matplotlib: only when figures are drawn

            history = p.adapter.history
            if history or tr.artifacts:
                run.log_training(task.task_id, list(history), tr.artifacts)
            figs = battery_figures(task.task_id, tr.records, scores, stimset, p.model.id)
            clock = _lap(result.seconds[task.task_id], "figures", clock)
            run.log_task(task.task_id, scores, tr.records, figs, store.path)
            _lap(result.seconds[task.task_id], "tracking", clock)
    return entry


def _lap(seconds: defaultdict[str, float], phase: str, since: float) -> float:
    now = time.perf_counter()
    seconds[phase] += now - since
    return now


