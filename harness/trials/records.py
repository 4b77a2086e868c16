"""Trial records: built, validated against the shipped JSON Schema, appended to JSONL as they happen.

A record file holds each trial of one (model, task) exactly once. Appends are whole lines under
an exclusive lock, so several worker processes can share one file; a line torn by a SIGKILL is
cut off on the next open, losing only the trial that was in flight. Records whose cache key no
longer matches (model, stimulus, prompt, settings or harness changed) are moved aside to
``<task>.stale.jsonl`` rather than mixed with fresh ones.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any
from collections.abc import Iterable

from .. import __version__
from ..errors import GestaltError
from ..stimuli.registry import TASK_ID_PATTERN


class RecordError(GestaltError, ValueError):
    """A record failed schema validation; the message names the trial and the field."""


@lru_cache(maxsize=1)
def schema() -> dict:
    out = json.loads(resources.files("harness.trials").joinpath("trial_record.schema.json").read_text())
    out["properties"]["task_id"]["pattern"] = TASK_ID_PATTERN  # one definition, checked at declaration
    return out


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    cls = jsonschema.validators.validator_for(schema())
    cls.check_schema(schema())
    return cls(schema())


def validate(record: dict) -> dict:
    errors = sorted(_validator().iter_errors(record), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.path) or "(record)"
        raise RecordError(f"trial {record.get('trial_id', '?')}: {where}: {e.message}")
    return record


def trial_id(task_id: str, stimulus_id: str, model_id: str, rep: int) -> str:
    return f"{task_id}|{stimulus_id}|{model_id}|rep{rep}"


def cache_key(model_fingerprint: str, stimulus_sha256: str, prompt_hash: str | None,
              settings: dict[str, Any], rep: int) -> str:
    """SPEC section 2: model fingerprint (weights + preprocessing), stimulus hash, prompt hash,
    generation/readout settings and harness version; the repetition index keeps reps distinct."""
    payload = json.dumps([model_fingerprint, stimulus_sha256, prompt_hash, settings, rep, __version__],
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def _json_safe(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return value


def make_record(*, task, stimset, stimulus, model_spec, model_version: str, readout: str, rep: int,
                n_reps: int, response, raw_output, parse_status: str, latency_s, seed: int, run_id: str,
                key: str, usage: dict | None = None, extras: dict | None = None,
                correct: bool | None = None, uses_prompt: bool = True) -> dict:
    """One validated record. ``correct`` defaults to exact equality with the ground truth, except
    for scalar answers, where correctness is a scoring decision (tolerances) and stays null
    unless the readout decides it."""
    response = _json_safe(response) if parse_status == "ok" else None
    truth = _json_safe(stimulus.ground_truth)
    if correct is None and response is not None and stimset.response_space != "scalar":
        correct = response == truth
    record = {
        "trial_id": trial_id(task.task_id, stimulus.stimulus_id, model_spec.id, rep),
        "task_id": task.task_id,
        "principle": task.principle,
        "track": task.track,
        "stimulus_id": stimulus.stimulus_id,
        "manipulated_value": _json_safe(stimulus.manipulated_value),
        "model": model_spec.id,
        "model_family": model_spec.family,
        "readout": readout,
        "response_space": stimset.response_space,
        "response": response,
        "ground_truth": truth,
        "correct": None if response is None or correct is None else bool(correct),
        "human_ref_id": stimset.human_ref_id,
        "raw_output": raw_output,
        "rep": rep,
        "n_reps": n_reps,
        # encoders never see the prompt: leave it out of their records
        "prompt_id": stimset.prompt.prompt_id if stimset.prompt and uses_prompt else None,
        "prompt_hash": stimset.prompt.hash if stimset.prompt and uses_prompt else None,
        "run_meta": {"model_version": model_version, "seed": seed, "run_id": run_id},
        "parse_status": parse_status,
        "option_order": list(stimulus.option_order) if stimulus.option_order is not None else None,
        "stimulus_sha256": stimulus.sha256,
        "latency_s": latency_s,
        "harness_version": __version__,
        "cache_key": key,
    }
    if usage:
        record["usage"] = {k: int(v) for k, v in usage.items()}
    if extras:
        record["extras"] = extras
    return validate(record)


class RecordStore:
    """The JSONL file of one (model, task)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def repair(self) -> None:
        """Cut a torn last line (the trial in flight when a process was killed)."""
        if not self.path.exists():
            return
        with open(self.path, "rb+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        with open(self.path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.endswith("\n"):
                    break  # torn tail, repaired on the next write
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise RecordError(f"{self.path}:{lineno}: not JSON ({e.msg})") from None
        return out

    def completed(self, expected_keys: dict[str, str]) -> dict[str, dict]:
        """trial_id -> record for trials already done with the expected cache key.

        Records with another key are moved to the stale file so the live file keeps each trial
        exactly once and only current trials.
        """
        self.repair()
        done: dict[str, dict] = {}
        stale: list[dict] = []
        for rec in self.read():
            tid = rec.get("trial_id")
            if expected_keys.get(tid) == rec.get("cache_key") and tid not in done:
                done[tid] = rec
            elif tid not in done:
                stale.append(rec)
        if stale:
            stale_path = self.path.with_suffix(".stale.jsonl")
            with open(stale_path, "a") as f:
                f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in stale)
            self._rewrite(done.values())
        return done

    def _rewrite(self, records: Iterable[dict]) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)
        os.replace(tmp, self.path)

    def append(self, records: list[dict]) -> None:
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
        with open(self.path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())


def per_stimulus(records: list[dict]) -> list[dict]:
    """One record per stimulus: repetitions combined as the paper does (majority vote for
    choices, counts and labels; mean for scalars; see ``aggregate_reps``). With one repetition
    this is the identity. The combined record keeps rep 0's fields, with ``rep`` = -1 marking
    an aggregate, and lists the per-rep responses in ``extras.rep_responses``."""
    from ..readouts.parse import aggregate_reps

    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r["stimulus_id"], []).append(r)
    out = []
    for recs in groups.values():
        if len(recs) == 1:
            out.append(recs[0])
            continue
        recs = sorted(recs, key=lambda r: r["rep"])
        agg = aggregate_reps([r["response"] for r in recs], recs[0]["response_space"])
        first = dict(recs[0])
        truth = first["ground_truth"]
        first.update(response=agg.value if agg.ok else None, parse_status=agg.status,
                     correct=(None if not agg.ok or first["response_space"] == "scalar"
                              else agg.value == truth),
                     extras={**(first.get("extras") or {}),
                             "rep_responses": [r["response"] for r in recs]})
        out.append(first)
    return out
