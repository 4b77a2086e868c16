"""Whether a battery's finished run still holds: the key of everything that decides its trials and
scores, its record files' digest, the records changed or gone since it finished, and its result as
the run logged it (nothing recomputed)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .errors import GestaltError
from .models.base import fingerprint_hash
from .planning import Planned, readout_options
from .recipes import Recipe
from .reports.terminal import BatteryResult
from .scores.ranking import primary_items
from .scores.record import Score
from .stimuli.base import StimulusSet
from .tracking.batteries import Prior, logged_intervals, logged_records
from .trials.records import RecordStore, per_stimulus
from .trials.runner import trial_keys
from .version import __version__


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


def records_digest(stores: dict[str, RecordStore]) -> str:
    return hashlib.sha256("".join(f"{t}:{s.digest()}\n" for t, s in sorted(stores.items())).encode()).hexdigest()


def _shown(items: list[str]) -> str:
    return ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")


def changed_since_finished(model_id: str, prior: Prior, stores: dict[str, RecordStore], rescore: bool) -> str:
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


def logged_result(model_id: str, run_id: str, intervals: dict[str, Any] | None = None) -> BatteryResult:
    """The scores of an up-to-date battery, as its run logged them (nothing recomputed)."""
    result = BatteryResult(model_id, run_id, up_to_date=True)
    for task_id, entry in (logged_intervals(run_id) if intervals is None else intervals).items():
        if "unavailable" in entry:
            result.unavailable[task_id] = entry["unavailable"]
        else:
            result.scores[task_id] = [Score(**{k: v for k, v in s.items() if k != "null_rate"})
                                      for s in entry["scores"]]
    return result


def with_items(result: BatteryResult, p: Planned, stimsets: dict[str, StimulusSet],
                stores: dict[str, RecordStore]) -> BatteryResult:
    """An up-to-date battery's primary scores per stimulus, from the records its run scored: those
    of its trials' cache keys in the live record files, whose digest is the one the run logged
    (the files also keep other runs' trials)."""
    result.records_digest = records_digest(stores)
    fingerprint = fingerprint_hash(p.adapter.fingerprint)
    for task, _ in p.tasks:
        if task.task_id in result.scores:
            keys = trial_keys(task.task_id, stimsets[task.task_id], p.model.id, p.readouts[task.task_id], fingerprint)
            records = list(stores[task.task_id].of(keys).values())
            scored = records if task.all_reps else per_stimulus(records)
            result.items[task.task_id] = primary_items(task.scoring, result.scores[task.task_id], scored,
                                                       stimsets[task.task_id])
    return result

