"""Trial records: built, validated against the shipped JSON Schema, appended to JSONL as they happen.

A record file holds each trial of one (model, task) once under each cache key it was run with.
Appends are whole lines under an exclusive lock, so several worker processes can share one file;
a line torn by a SIGKILL is cut off on the next open, losing only the trial that was in flight;
duplicates are dropped and a line that is not a record is quarantined, never a traceback. Each
record carries the checksum of its content (:func:`record_checksum`): a line changed after it was
written no longer matches it and is quarantined like any line that is not a record (records written
before the checksum existed have none and are read as they are). A run uses the records whose key
is one of its trials' (:meth:`RecordStore.of`); the others stay in the file for the run whose
trials they are (a smaller ``n_test``, another prompt, the weights before an update), so coming
back to it computes and buys nothing again. Versions before this moved them to
``<task>.stale.jsonl``; they are read from there and folded back. A trial whose call failed (not
an answer: :func:`harness.readouts.parse.failed_call`) is moved to ``<task>.failed.jsonl`` when a
rerun sends it again. No file of the store is written through a link (result folders travel as tar
or zip, which keep links): its scratch file is made anew, and an append to a link is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import GestaltError, naming_file
from ..version import __version__
from ..readouts.parse import failed_call
from ..stimuli.registry import TASK_ID_PATTERN
from .distributed import file_lock, open_own

log = logging.getLogger("harness")


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


@lru_cache(maxsize=1)
def _verdict():
    """The schema compiled to Python (fastjsonschema): the verdict on every record written and
    read; jsonschema, several times slower (``benchmarks/records.py``), explains a rejection.
    The schema uses no keyword draft 7 lacks, so it is compiled as draft 7, the newest that
    fastjsonschema knows (tests/test_records.py checks that the two agree)."""
    import fastjsonschema

    return fastjsonschema.compile({**schema(), "$schema": "http://json-schema.org/draft-07/schema#"})


def validate(record: dict) -> dict:
    import fastjsonschema

    try:
        _verdict()(record)
        return record
    except fastjsonschema.JsonSchemaValueException:
        pass
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


CHECKSUM = "checksum"


def record_checksum(record: dict) -> str:
    """sha256 of the record's content (every field but the checksum itself), as JSON with sorted
    keys: the same for the record written, read back, or logged as the run's artifact."""
    body = {k: v for k, v in record.items() if k != CHECKSUM}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def altered(record: dict) -> bool:
    """The record carries a checksum its content no longer matches: changed after it was written."""
    return CHECKSUM in record and record[CHECKSUM] != record_checksum(record)


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
    record[CHECKSUM] = record_checksum(record)
    return validate(record)


@dataclass
class Drift:
    """A record file against the one its battery's finished run scored."""

    changed: list[str]  # trial ids whose record says something else now
    missing: dict[str, str]  # trial id -> stimulus id of each scored record the file no longer holds


@dataclass
class _Scan:
    """What a record file holds: valid records (each (trial, cache key) once), and what is not."""

    records: list[dict] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)  # {"line", "reason", "text"}
    duplicates: int = 0
    torn: bool = False
    zeroed: int = 0  # NUL bytes where lines were: blocks a crash or a failing disk left as zeros
    size: int = 0  # bytes in the file

    @property
    def clean(self) -> bool:
        return not (self.rejected or self.duplicates or self.torn or self.zeroed)


def _parse_line(raw: bytes) -> tuple[dict | None, str]:
    """A record, or None and why the line is not one."""
    nuls = raw.count(b"\0")
    if nuls:  # JSON writes a NUL as \u0000: raw NULs are a damaged disk block, not a record
        return None, f"{nuls} NUL bytes (zeroed on disk)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"not JSON ({e.msg})"
    if not isinstance(value, dict):
        return None, f"JSON {type(value).__name__}, not a record object"
    try:
        validate(value)
    except RecordError as e:
        return None, str(e)
    if altered(value):
        return None, f"trial {value['trial_id']}: content does not match its checksum (changed after it was written)"
    return value, ""


class RecordStore:
    """The JSONL file of one (model, task).

    Every change (append, repair, moving bad lines aside, folding stale ones back) holds
    ``<file>.lock``, so a rewrite can never drop a line another process is appending. Reading
    tolerates anything: a line that is not a valid record is skipped on read and quarantined on
    the next repair (moved to ``<task>.rejected`` with its line number), so its trial is computed
    again.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        # the trials a finished run scored from this file (set by the caller that knows): a cut
        # tail that loses some of them is a truncated file, not the trial in flight when a process stopped
        self.scored: set[str] = set()

    @property
    def rejected_path(self) -> Path:
        return self.path.with_suffix(".rejected")

    def _lock(self):
        return file_lock(self.path.with_name(self.path.name + ".lock"))

    def _scan(self) -> _Scan:
        scan = _Scan()
        if not self.path.exists():
            return scan
        seen: set[tuple[str, str]] = set()
        data = self.path.read_bytes()
        scan.size = len(data)
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        elif lines and lines[-1].strip(b"\0"):
            lines.pop()  # torn tail: the trial in flight when a process was killed, or a file cut short
            scan.torn = True
        for lineno, raw in enumerate(lines, 1):
            if raw and not raw.strip(b"\0"):
                scan.zeroed += len(raw)  # nothing of a record left to quarantine
                continue
            rec, why = _parse_line(raw)
            if rec is None:
                scan.rejected.append({"line": lineno, "reason": why,
                                      "text": raw.decode("utf-8", "surrogateescape")})
                continue
            ident = (rec["trial_id"], rec["cache_key"])
            if ident in seen:
                scan.duplicates += 1  # e.g. written by two processes before trials were claimed
                continue
            seen.add(ident)
            scan.records.append(rec)
        return scan

    def read(self) -> list[dict]:
        """The valid records, each (trial, cache key) once, in file order, then those an earlier
        version moved aside to ``<task>.stale.jsonl`` that the file lacks (bad lines are left for
        ``repair``)."""
        scan = self._scan()
        if scan.rejected:
            log.warning("%s: skipped %d line(s) that are not a valid record (line %s: %s)", self.path,
                        len(scan.rejected), scan.rejected[0]["line"], scan.rejected[0]["reason"])
        return scan.records + _absent(scan.records, RecordStore(self.stale_path)._scan().records)

    def of(self, keys: dict[str, str]) -> dict[str, dict]:
        """trial id -> record of each of ``keys``' trials recorded with its cache key (read only,
        nothing repaired): a run's own records, whatever else the file keeps."""
        done: dict[str, dict] = {}
        for rec in self.read():
            if keys.get(rec["trial_id"]) == rec["cache_key"]:
                done.setdefault(rec["trial_id"], rec)
        return done

    def repair(self) -> list[dict]:
        """Cut a torn tail, drop duplicates, quarantine lines that are not records; the valid
        records, each once."""
        with self._lock():
            scan = self._scan()
            if not scan.clean:
                self._quarantine(scan)
                self._rewrite(scan.records)
        return scan.records

    def _quarantine(self, scan: _Scan) -> None:
        """Say each repair the rewrite of ``scan`` makes; lines that are not records move to the
        rejected file."""
        if scan.zeroed and scan.zeroed == scan.size:
            log.warning("%s: zeroed: all %d bytes are NUL (the file's blocks were lost, e.g. by a crash before "
                        "the disk wrote them); its trials run again", self.path, scan.size)
        elif scan.zeroed:
            log.warning("%s: dropped %d NUL bytes where lines were (blocks zeroed on disk); their trials run again",
                        self.path, scan.zeroed)
        lost = sorted(self.scored - {r["trial_id"] for r in scan.records})
        if scan.torn and lost:
            log.warning("%s: truncated: the file ends mid-line and %d of the %d records the finished run scored "
                        "are gone (cut short after it was written: a copy, a restore, a full disk); their trials "
                        "run again", self.path, len(lost), len(self.scored))
        elif scan.torn:
            log.warning("%s: cut a torn last line (the trial in flight when a process stopped); it runs again",
                        self.path)
        if scan.duplicates:
            log.warning("%s: dropped %d duplicated line(s); each trial is kept once", self.path, scan.duplicates)
        rejected = scan.rejected
        if not rejected:
            return
        with _appending(self.rejected_path) as f:
            f.writelines(json.dumps(r) + "\n" for r in rejected)
        shown = ", ".join(str(r["line"]) for r in rejected[:5]) + (" ..." if len(rejected) > 5 else "")
        log.warning("%s: %d line(s) not a valid record (line %s: %s) moved to %s; their trials run again",
                    self.path, len(rejected), shown, rejected[0]["reason"], self.rejected_path)

    def completed(self, expected_keys: dict[str, str]) -> dict[str, dict]:
        """trial_id -> record for trials already done with the expected cache key.

        The file is repaired first, and the records an earlier version moved aside to the stale
        file are folded back; records with another key stay in the file for the run they belong to.
        """
        with self._lock():
            scan = self._scan()
            aside = RecordStore(self.stale_path)
            kept = aside._scan() if aside.path.exists() else None
            back = [] if kept is None else _absent(scan.records, kept.records)
            if back or not scan.clean:
                self._quarantine(scan)
                self._rewrite(scan.records + back)  # before the stale file loses them: a crash keeps both
            if kept is not None:
                aside._quarantine(kept)  # its lines that are not records go to <task>.stale.rejected
                # what stays aside: earlier answers of trials recorded again (each a call made)
                folded = {id(r) for r in back}
                if rest := [r for r in kept.records if id(r) not in folded]:
                    aside._rewrite(rest)
                else:
                    aside.path.unlink()
                if back:
                    log.info("%s: %d record(s) kept in %s are back in the file", self.path, len(back),
                             aside.path.name)
            done: dict[str, dict] = {}
            for rec in scan.records + back:
                if expected_keys.get(rec["trial_id"]) == rec["cache_key"]:
                    done.setdefault(rec["trial_id"], rec)
        return done

    @property
    def stale_path(self) -> Path:
        return self.path.with_suffix(".stale.jsonl")

    @property
    def failed_path(self) -> Path:
        return self.path.with_suffix(".failed.jsonl")

    def set_aside_failed(self, expected_keys: dict[str, str]) -> int:
        """Move the current trials whose call failed (:func:`failed_call`) to ``<task>.failed.jsonl``,
        so they count as not done and are sent again; how many. The attempts stay on disk there."""
        with self._lock():
            scan = self._scan()
            failed = [r for r in scan.records if expected_keys.get(r["trial_id"]) == r["cache_key"]
                      and failed_call(r["parse_status"], r.get("extras"))]
            if failed:
                with _appending(self.failed_path) as f:
                    f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in failed)
                gone = {id(r) for r in failed}
                self._quarantine(scan)
                self._rewrite(r for r in scan.records if id(r) not in gone)
        return len(failed)

    def attempts(self) -> list[dict]:
        """Every record of the task's calls made so far: the file's, the failed attempts set aside
        and what an earlier version moved aside as stale (each was a call, paid where the model is)."""
        return [r for path in (self.path, self.failed_path, self.stale_path)
                for r in RecordStore(path)._scan().records]

    def _rewrite(self, records: Iterable[dict]) -> None:
        tmp = self.path.with_suffix(".tmp")
        # the store's own scratch file, made anew: whatever is there (a leftover, or a link that
        # would carry the write out of the folder) is removed, never written through
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        with naming_file(tmp), open(tmp, "x") as f:
            f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def append(self, records: list[dict]) -> None:
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
        with self._lock(), naming_file(self.path), _appending(self.path) as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())

    def drift_from(self, logged: bytes) -> Drift:
        """How the store differs from ``logged`` (the records a finished run scored), record by
        (trial, cache key): records rewritten or changed after they were written (checksums of
        content, so records without a checksum compare too), and records gone (lines deleted, a
        partial backup restored, a file cut short or made unreadable). Records of other runs'
        trials are neither; those an earlier version moved aside count as present. ``scored`` is
        set to the logged trials."""
        before = _content_checksums(logged)
        self.scored = {tid for tid, _ in before}
        # the file's line wins over one moved aside: it is the one a run reads
        now = _content_checksums(b"\n".join(p.read_bytes() for p in (self.stale_path, self.path) if p.exists()))
        return Drift(changed=[tid for (tid, key), (c, _) in now.items()
                              if (tid, key) in before and c != before[tid, key][0]],
                     missing={tid: stimulus for (tid, key), (_, stimulus) in before.items() if (tid, key) not in now})

    def digest(self) -> str:
        """sha256 of the file as it is (empty string's hash when absent): the up-to-date check
        compares it with the digest logged when the battery finished."""
        data = self.path.read_bytes() if self.path.exists() else b""
        return hashlib.sha256(data).hexdigest()


def _content_checksums(data: bytes) -> dict[tuple[str, str], tuple[str, str]]:
    """(trial id, cache key) -> (:func:`record_checksum`, stimulus id) of every line that is a JSON
    object with a trial id, valid or not (a changed line is compared by what it says now)."""
    out = {}
    for raw in data.splitlines():
        with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
            rec = json.loads(raw)
            out[rec["trial_id"], str(rec.get("cache_key"))] = (record_checksum(rec), str(rec.get("stimulus_id", "?")))
    return out


def _absent(records: list[dict], others: list[dict]) -> list[dict]:
    """The records of ``others`` whose (trial, cache key) ``records`` lacks."""
    have = {(r["trial_id"], r["cache_key"]) for r in records}
    return [r for r in others if (r["trial_id"], r["cache_key"]) not in have]


def _appending(path: Path):
    """``path`` opened to append, created if absent, never through a link (:func:`open_own`)."""
    return os.fdopen(open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a")


def per_stimulus(records: list[dict]) -> list[dict]:
    """One record per stimulus: repetitions combined as the paper does (majority vote for
    choices, counts and labels; mean for scalars; see ``aggregate_reps``). With one repetition
    this is the identity. The combined record keeps rep 0's fields, with ``rep`` = -1 marking
    an aggregate, and lists the per-rep responses in ``extras.rep_responses``."""
    from ..readouts.parse import aggregate_reps

    groups: dict[str, list[dict]] = {}
    trials: set[tuple[str, int]] = set()
    for r in records:
        if (r["stimulus_id"], r["rep"]) in trials:  # a record file keeps every setting's: which is meant is unknown
            raise RecordError(f"stimulus {r['stimulus_id']} rep {r['rep']}: recorded under more than one cache key "
                              f"(the file keeps the trials of every setting run: model, prompt, options); score "
                              f"the records one run scored, its MLflow artifact records/{r.get('task_id')}.jsonl")
        trials.add((r["stimulus_id"], r["rep"]))
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
