"""Run one task for one model: resume from the record file, call the model only for what is missing
(a trial whose call failed is missing: it is sent again).

The adapter is built without weights first; its fingerprint alone decides which trials are
already done, so a complete rerun never loads the model. Pending trials are sharded across
processes; each process appends its own records as each batch finishes (padding items are run
for lock-step but never written), and every process then reads the complete file back.

An API model in one process (``max_in_flight``: :class:`harness.models.api.APIModel`) is not
handed batches: each trial is a call of its own, handed over while the model has room, its record
appended the moment its answer arrives. Its in-flight window stays full from the first trial to
the last, and a battery killed mid-way loses no answer it paid for (:func:`_as_answered`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from ..models.api_costs import BudgetReached
from ..models.base import Generation, ModelAdapter, ModelError, ModelSpec, fingerprint_hash
from ..models.device import (chunk_size, free_device_memory, hub_progress_bars, is_cuda, keep_cpu_heap,
                             prepares_beside)
from ..readouts.base import EmbeddingCache, Response
from ..readouts.parse import failed_call
from ..readouts.registry import get_readout
from ..stimuli.base import StimulusSet, prefetched
from ..stimuli.registry import TaskSpec
from .distributed import Dist
from .progress import heard, slow_step
from .records import RecordStore, cache_key, make_record, trial_id

if TYPE_CHECKING:
    from ..models.api_batch import BatchJob
    from ..models.api_costs import Charger

log = logging.getLogger(__name__)


class AdapterCallError(Exception):
    """A model call raised: the trial is recorded as ``null:api_error:<exception type>``."""


def _respond(readout: Any, adapter: CountingAdapter, batch: list[Any]) -> list[Response]:
    """The readout's responses to a batch; when it raises, each stimulus is answered alone and one
    that still raises is recorded as a null with the reason (``null:api_error:<kind>`` for a model
    call, ``null:parse_error`` for the readout), so one odd answer never aborts a battery. The
    exception's type is kept, its message is not (it may quote a request)."""
    if len(batch) > 1:  # one stimulus that raised is not sent again
        try:
            return readout.respond(adapter, batch)
        except Exception:  # noqa: BLE001 - isolated per stimulus below
            log.warning("%s: a batch of %d raised; answering its stimuli one by one",
                        readout.stimset.task_id, len(batch))
    out: list[Response] = []
    for stimulus in batch:
        try:
            out.extend(readout.respond(adapter, [stimulus]))
        except AdapterCallError as e:
            out.append(Response(None, parse_status=f"null:api_error:{e}", extras={"error": str(e)}))
        except Exception as e:  # noqa: BLE001
            out.append(Response(None, parse_status="null:parse_error",
                                extras={"error": f"parse_error: {type(e).__name__}"}))
        else:
            continue
        log.warning("%s %s: %s", readout.stimset.task_id, stimulus.stimulus_id, out[-1].parse_status)
    return out


class CountingAdapter:
    """Wraps an adapter, counting model calls (one per request: ``generate_many`` of n images is n
    requests), placing it on its device before the first; calls may come from several threads
    (an API model's trials are answered side by side).

    Anything else a readout asks of its model (a regressor's ``fit``) goes to the adapter itself,
    and fails as a call does."""

    def __init__(self, adapter: ModelAdapter, device: str | Callable[[], str]):
        self.adapter = adapter
        self._device = device  # a callable is asked on first use (`auto` imports torch to look)
        self.calls = 0
        self._placed = False
        self._lock = threading.Lock()

    @property
    def device(self) -> str:
        if callable(self._device):
            self._device = self._device()
        return self._device

    @property
    def placed_device(self) -> str | None:
        """The device the model was placed on; None before its first call (never asks ``auto``)."""
        return self.device if self._placed else None

    def _call(self, method: Callable[..., Any], *args: Any, requests: int = 1) -> Any:
        with self._lock:
            if not self._placed:
                if not is_cuda(self.device):
                    keep_cpu_heap()  # before the model's first tensors: its forward passes reuse memory
                self.adapter.to(self.device)
                self._placed = True
            self.calls += requests
        return _guarded(method, *args)

    def release(self) -> None:
        """The model's weights dropped when its battery ends, and where it ran on a GPU the
        memory they held freed, before the roster's next model loads."""
        self.adapter.release()
        if self._placed:
            free_device_memory(self.device)

    def embed(self, images: list[Image.Image]) -> np.ndarray:
        return self._call(self.adapter.embed, images)

    def predict(self, images: list[Image.Image]) -> np.ndarray:
        return self._call(self.adapter.predict, images)

    def generate(self, image: Image.Image, prompt: str, settings: dict[str, Any]) -> Generation:
        return self._call(self.adapter.generate, image, prompt, settings)

    def generate_many(self, images: list[Image.Image], prompts: list[str],
                      settings: dict[str, Any]) -> list[Generation]:
        return self._call(self.adapter.generate_many, images, prompts, settings, requests=len(images))

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.adapter, name)
        # a regressor's training or Grad-CAM runs the model as its calls do (a missing device, out of memory)
        return functools.partial(_guarded, attr) if inspect.ismethod(attr) else attr


def _guarded(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return method(*args, **kwargs)
    except Exception as e:  # recorded per trial by _respond, never a crash of the battery
        raise AdapterCallError(type(e).__name__) from e


class _Unprepared:
    """A readout whose preparing failed in its model (a probe's train split embedded, a regressor
    trained): each of its trials is that failed call, which the next run makes again."""

    def __init__(self, readout: Any, error: AdapterCallError):
        self.readout, self.error = readout, error

    def respond(self, model: Any, batch: list[Any]) -> list[Response]:
        raise AdapterCallError(str(self.error)) from self.error.__cause__

    def __getattr__(self, name: str) -> Any:
        return getattr(self.readout, name)


@dataclass
class TaskResult:
    task_id: str
    records: list[dict]
    new_trials: int
    model_calls: int
    readout: str
    unavailable: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)  # files to log (a trained checkpoint)


def trial_keys(task_id: str, stimset: StimulusSet, model_id: str, readout: Any,
               fingerprint: str) -> dict[str, str]:
    """trial id -> cache key of every test trial (stimulus x repetition) of a task for one model."""
    prompt_hash = stimset.prompt.hash if (stimset.prompt and readout.uses_prompt) else None
    settings = readout.settings
    return {trial_id(task_id, s.stimulus_id, model_id, rep):
            cache_key(fingerprint, s.sha256, prompt_hash, settings, rep)
            for s in stimset.test for rep in range(readout.n_reps)}


def count_cached(store: RecordStore, keys: dict[str, str]) -> int:
    """How many of ``keys``' trials have a record with their cache key that a rerun keeps: a failed
    call is sent again, so it is not counted (read only, nothing repaired)."""
    if not store.path.exists():
        return 0
    return sum(not failed_call(r["parse_status"], r.get("extras")) for r in store.of(keys).values())


def run_task(task: TaskSpec, stimset: StimulusSet, model_spec: ModelSpec, adapter: CountingAdapter,
             store: RecordStore, *, readout_name: str, readout_options: dict[str, Any], seed: int,
             run_id: str, dist: Dist, progress: bool = True,
             echo: Callable[[str], None] = log.info,
             charge: Charger | None = None) -> TaskResult:
    if stimset.unavailable:
        return TaskResult(task.task_id, [], 0, 0, readout_name, unavailable=stimset.unavailable)
    visible = progress and dist.is_main  # bars and step lines: the main process's, when asked
    with slow_step(f"{model_spec.id} {task.task_id}: drawing the stimuli", visible):
        readout_cls = get_readout(readout_name)
        readout = readout_cls(stimset, **readout_options)
        readout.dist = dist
        n_reps = readout.n_reps  # a readout may multiply repetitions (every montage permutation x n_reps)
        settings = readout.settings
        trials = [(s, rep) for s in stimset.test for rep in range(n_reps)]
        fingerprint = fingerprint_hash(adapter.fingerprint)
        keys = trial_keys(task.task_id, stimset, model_spec.id, readout, fingerprint)
    readout.embeddings = EmbeddingCache(store.path.with_suffix(".probe-train.npz"), fingerprint)

    pending = _pending(task.task_id, model_spec.id, trials, keys, store, dist, echo)
    calls_before = adapter.calls
    new = 0
    if pending and charge is not None:
        charge([])  # a budget already spent (in earlier runs too) sends nothing
    if pending:
        with hub_progress_bars(visible):  # a model loads inside, on first use
            with slow_step(f"{model_spec.id} {task.task_id}: loading the model, preparing the readout", visible):
                readout = _prepared(readout, adapter)
            new = _run_pending(_Trials(task, stimset, model_spec, readout, readout_name, keys, seed, run_id,
                                   adapter.model_version),
                           adapter, pending, store, dist, echo, charge, visible)
    dist.barrier()
    done = store.of(keys)
    ordered = [done[trial_id(task.task_id, s.stimulus_id, model_spec.id, rep)] for s, rep in trials
               if trial_id(task.task_id, s.stimulus_id, model_spec.id, rep) in done]
    if len(ordered) != len(trials):
        raise RuntimeError(f"{store.path}: {len(trials) - len(ordered)} trials missing after the run")
    return TaskResult(task.task_id, ordered, sum(dist.gather([new])),
                      sum(dist.gather([adapter.calls - calls_before])), readout_name, settings=settings,
                      artifacts=readout.artifacts(adapter))


def _pending(task_id: str, model_id: str, trials: list[tuple[Any, int]], keys: dict[str, str],
             store: RecordStore, dist: Dist, echo: Callable[[str], None]) -> list[tuple[Any, int]]:
    """The trials without a record a rerun keeps: the main process first repairs the record file
    and sets its failed calls aside (a failed call is not an answer: it is sent again)."""
    if dist.is_main:
        store.completed(keys)  # repairs a torn tail, folds back records moved aside as stale
        if resent := store.set_aside_failed(keys):
            echo(f"{model_id} {task_id}: re-sending {resent} failed calls "
                 f"(earlier attempts kept in {store.failed_path.name})")
    dist.barrier()
    done = store.completed(keys) if dist.is_main else store.of(keys)
    return [(s, rep) for s, rep in trials if trial_id(task_id, s.stimulus_id, model_id, rep) not in done]


def _prepared(readout: Any, adapter: CountingAdapter) -> Any:
    """The readout prepared for the model (a probe fitted, a few-shot context built); one whose
    preparation a model call broke answers every trial with that call's failure."""
    readout.prepare_ahead = prepares_beside(adapter.device)
    try:
        readout.prepare(adapter)
    except AdapterCallError as e:
        return _Unprepared(readout, e)
    return readout


def _run_pending(trials: _Trials, adapter: CountingAdapter, pending: list[tuple[Any, int]], store: RecordStore,
             dist: Dist, echo: Callable[[str], None], charge: Charger | None, visible: bool) -> int:
    """Answers this process's share of the pending trials and appends their records: through the
    vendor's batch interface where the model asks for it, else a chunk at a time, or, for an API
    model in one process, each trial a call of its own. Returns the records it wrote."""
    model_spec = trials.model_spec
    from ..models.api_batch import batch_job  # httpx2 and asyncio: only with trials to send

    batch = batch_job(adapter.adapter, store.path, echo)
    model = adapter
    held: list[tuple[Any, int]] = []
    if batch is not None:
        pending, held = _through_batch(batch, trials, pending, dist, charge)
        model = CountingAdapter(batch.answerer(), adapter.device)
    mine = dist.shard(len(pending))
    bar = None
    if visible:
        from tqdm import tqdm

        bar = tqdm(total=len(pending), desc=f"{model_spec.id} {trials.task.task_id}", unit="trial", leave=False)
    # an API model answers each trial apart, as many at once as its window lets out; calls
    # charged per process together (several processes) keep the chunks in lock-step
    ceiling = getattr(adapter.adapter, "max_in_flight", None) if batch is None and dist.world == 1 else None
    if ceiling:  # a readout answers one repetition at a time
        mine = sorted(mine, key=lambda item: pending[item[0]][1])
    batch_size = chunk_size(model_spec)  # batch_size auto: the most the adapter may try
    chunks = [mine[start:start + batch_size] for start in range(0, len(mine), batch_size)]
    # each chunk's distinct stimuli, prepared a chunk ahead while the model answers the one
    # before (where that runs beside the model: models.device.prepares_beside)
    readout = trials.readout
    shown = prefetched((list({pending[i][0].stimulus_id: pending[i][0] for i, _ in chunk}.values())
                        for chunk in chunks), readout.reads if readout.prepare_ahead else None)
    handed = ([(pending[i], pad) for i, pad in chunk] for chunk in chunks)
    if ceiling:
        new = _as_answered(trials, model, handed, shown, store, charge, bar, ceiling)
    else:
        new = _in_chunks(trials, model, handed, shown, store, charge, bar, dist.world)
    if bar is not None:
        bar.close()
        heard()
    if batch is not None:
        adapter.calls += model.calls
        batch.finish()
        if held and charge is not None:
            charge.budget.held_back(len(held), len(pending) + len(held), charge.timed_out_usd)
    return new


def _through_batch(batch: BatchJob, trials: _Trials, pending: list[tuple[Any, int]], dist: Dist,
                   charge: Charger | None) -> tuple[list[tuple[Any, int]], list[tuple[Any, int]]]:
    """Submits the pending trials as one batch (a rerun: finds the batch submitted before) and waits
    for it to end. Returns the trials it answers and those held back: the ones the budget left does
    not cover, since a batch once submitted cannot be stopped."""
    model_spec, task_id = trials.model_spec, trials.task.task_id
    if dist.world > 1:
        raise ModelError(f"model {model_spec.id!r}: options.batch sends one batch per task from "
                         f"one process; run it with runtime.processes 1")
    held: list[tuple[Any, int]] = []
    if not batch.submitted:
        if charge is not None:
            held = pending[charge.budget.covers(len(pending), charge.timed_out_usd):]
            pending = pending[:len(pending) - len(held)]
        _collect(trials.readout, batch, [(s, rep, trial_id(task_id, s.stimulus_id, model_spec.id, rep))
                                         for s, rep in pending], chunk_size(model_spec))
        batch.submit()
    batch.wait()
    return pending, held


Handed = Iterable[list[tuple[tuple[Any, int], bool]]]  # chunks of ((stimulus, rep), padding)


@dataclass
class _Trials:
    """What the records of one model's trials of one task share."""

    task: TaskSpec
    stimset: StimulusSet
    model_spec: ModelSpec
    readout: Any
    readout_name: str
    keys: dict[str, str]
    seed: int
    run_id: str
    model_version: str

    def record(self, stimulus: Any, rep: int, r: Response, seconds: float) -> dict:
        """The trial's record; ``seconds``: its share of the call's time, where the model says none."""
        key = self.keys[trial_id(self.task.task_id, stimulus.stimulus_id, self.model_spec.id, rep)]
        return make_record(
            task=self.task, stimset=self.stimset, stimulus=stimulus, model_spec=self.model_spec,
            model_version=self.model_version, readout=self.readout_name, rep=rep, n_reps=self.readout.n_reps,
            response=r.response, raw_output=r.raw_output, parse_status=r.parse_status,
            latency_s=r.latency_s if r.latency_s is not None else round(seconds, 6),
            seed=self.seed, run_id=self.run_id, key=key, usage=r.usage, extras=r.extras or None,
            correct=r.extras.get("correct") if r.extras else None, uses_prompt=self.readout.uses_prompt)


def _in_chunks(trials: _Trials, model: CountingAdapter, chunks: Handed, shown: Iterable[list[Any]],
               store: RecordStore, charge: Charger | None, bar: Any, world: int) -> int:
    """The trials a chunk at a time, each repetition's in one call of the readout; a chunk's records
    are appended and charged once it is answered (padding items run, never written). Returns the
    records written."""
    readout, written = trials.readout, 0
    for chunk, ready in zip(chunks, shown):
        loaded = {s.stimulus_id: s for s in ready}
        by_rep: dict[int, list[tuple[Any, bool]]] = {}
        for (s, rep), pad in chunk:
            by_rep.setdefault(rep, []).append((s, pad))
        records = []
        for rep, items in by_rep.items():
            readout.rep = rep
            t0 = time.perf_counter()
            responses = _respond(readout, model, [loaded[s.stimulus_id] for s, _ in items])
            per_trial = (time.perf_counter() - t0) / len(items)
            answered = [trials.record(s, rep, r, per_trial) for (s, pad), r in zip(items, responses) if not pad]
            store.append(answered)
            records += answered
        written += len(records)
        if charge is not None:  # a spent budget stops here, the trials so far recorded
            charge(records)  # once a chunk: every process's chunk is charged together
        if bar is not None:
            bar.update(min(len(chunk) * world, bar.total - bar.n))
    return written


def _as_answered(trials: _Trials, model: CountingAdapter, chunks: Handed, shown: Iterable[list[Any]],
                 store: RecordStore, charge: Charger | None, bar: Any, ceiling: int) -> int:
    """Each trial a call of its own, handed to the model while fewer than ``ceiling`` (the most it
    keeps in flight) are out, so its window alone decides how many go to the vendor and never
    drains at a chunk's end; each record is appended the moment its answer arrives, so a battery
    killed mid-way loses no answer it paid for. Under a budget a call is handed over only while
    the budget left covers it and every call out, each at its bound. Calls out when the battery
    stops (the budget, Ctrl-C) are waited for and recorded: they are paid for. The chunks are in
    repetition order: the readout answers one repetition at a time. Returns the records written."""
    readout, written = trials.readout, 0
    out: dict[Future, tuple[Any, int]] = {}

    def collect() -> None:
        nonlocal written
        done, _ = wait(out, return_when=FIRST_COMPLETED)
        for call in done:
            stimulus, rep = out.pop(call)
            record = trials.record(stimulus, rep, *call.result())
            store.append([record])
            written += 1
            if bar is not None:
                bar.update(1)
            if charge is not None:
                charge([record])

    with ThreadPoolExecutor(max_workers=ceiling, thread_name_prefix="gestalt-call") as pool:
        try:
            for chunk, ready in zip(chunks, shown):
                loaded = {s.stimulus_id: s for s in ready}
                for (s, rep), _ in chunk:
                    if rep != readout.rep:
                        while out:
                            collect()
                        readout.rep = rep
                    while out and (len(out) >= ceiling or not _covered(charge, len(out) + 1)):
                        collect()
                    if not _covered(charge, 1):
                        raise _uncovered(charge)
                    out[pool.submit(_answer, readout, model, loaded[s.stimulus_id])] = (s, rep)
            while out:
                collect()
        finally:
            while out:
                with contextlib.suppress(BudgetReached):  # spent, and said so already
                    collect()
    return written


def _answer(readout: Any, model: CountingAdapter, stimulus: Any) -> tuple[Response, float]:
    """One stimulus' response, and the seconds it took."""
    t0 = time.perf_counter()
    (response,) = _respond(readout, model, [stimulus])
    return response, time.perf_counter() - t0


def _covered(charge: Charger | None, calls: int) -> bool:
    """Whether the budget left covers ``calls`` calls at the most each may bill."""
    return charge is None or charge.budget.covers(calls, charge.timed_out_usd) == calls


def _uncovered(charge: Charger | None) -> BudgetReached:
    assert charge is not None
    b = charge.budget
    return BudgetReached(f"budget_usd {b.limit_usd:g} reached: the ${b.limit_usd - b.spent_usd:.4f} left covers no "
                         f"further call at up to ${charge.timed_out_usd:.4f} each (spent ${b.spent_usd:.4f} of "
                         f"${b.limit_usd:g}); records kept, a rerun with a larger budget continues")


def _collect(readout: Any, batch: BatchJob, pending: list[tuple[Any, int, str]], size: int) -> None:
    """The requests of the pending trials, built by the readout as it would send them, gathered
    into the batch (nothing is sent, nothing recorded)."""
    collector = batch.collector()
    for start in range(0, len(pending), size):
        by_rep: dict[int, list[tuple[Any, str]]] = {}
        for s, rep, tid in pending[start:start + size]:
            by_rep.setdefault(rep, []).append((s, tid))
        for rep, items in by_rep.items():
            readout.rep = rep
            batch.expect([tid for _, tid in items])
            _respond(readout, collector, [s for s, _ in items])
