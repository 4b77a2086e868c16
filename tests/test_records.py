"""Trial records: schema validation, torn-line repair, records of other settings kept in the file."""

import json

import pytest

from harness.trials.records import Drift, RecordError, RecordStore, schema, validate


def good(**kw):
    rec = {
        "trial_id": "closure.nat.silhouette|silh_cat6|m|rep0", "task_id": "closure.nat.silhouette",
        "principle": "closure", "track": "nat", "stimulus_id": "silh_cat6", "manipulated_value": None,
        "model": "m", "model_family": "supervised", "readout": "prototype", "response_space": "label",
        "response": "cat", "ground_truth": "cat", "correct": True, "human_ref_id": "h", "raw_output": None,
        "rep": 0, "n_reps": 1, "prompt_id": None, "prompt_hash": None,
        "run_meta": {"model_version": "v", "seed": 0, "run_id": "r"}, "parse_status": "ok",
        "option_order": None, "stimulus_sha256": "a" * 64, "latency_s": 0.1, "harness_version": "0.1.0",
        "cache_key": "b" * 64,
    }
    rec.update(kw)
    return rec


def test_schema_is_shipped_and_valid_record_passes():
    assert schema()["title"] == "gestalt TrialRecord"
    assert validate(good())["response"] == "cat"


@pytest.mark.parametrize("change,field", [
    ({"response_space": "text"}, "response_space"),
    ({"rep": -1}, "rep"),
    ({"surprise": 1}, "record"),
    ({"parse_status": "null:no_label"}, "response"),  # a null trial must have response null
    ({"trial_id": "no-pipes"}, "trial_id"),
])
def test_invalid_records_name_trial_and_field(change, field):
    with pytest.raises(RecordError, match=r"trial .*"):
        validate(good(**change))


VALUES = [None, True, False, 0, 1, -1, 2.5, -0.5, float("nan"), "", "x", "ok", "null:refusal", "a" * 64,
          "closure.nat.silhouette", "closure.nat.silhouette|s|m|rep0", [], [1, 2, 3], ["x"], {}, {"a": 1}]


def mutations():
    """Records one change away from valid: every field (and a nested one) set to a value of each
    JSON type, or left out, plus a key the schema does not know."""
    base = good()
    for key in [*base, "surprise", "usage", "extras"]:
        for value in VALUES:
            yield {**base, key: value}
        yield {k: v for k, v in base.items() if k != key}
    for key in ("model_version", "seed", "run_id", "other"):
        for value in VALUES:
            yield {**base, "run_meta": {**base["run_meta"], key: value}}
    for value in VALUES:  # a null trial with something in response or correct
        yield {**base, "parse_status": "null:parse_error", "response": value, "correct": None}
        yield {**base, "parse_status": "null:parse_error", "response": None, "correct": value}
        yield {**base, "usage": {"input_tokens": value}}


def test_the_fast_verdict_agrees_with_jsonschema():
    import fastjsonschema

    from harness.trials.records import _validator, _verdict

    checked = valid = 0
    for record in mutations():
        try:
            _verdict()(record)
            fast = True
        except fastjsonschema.JsonSchemaValueException:
            fast = False
        assert fast == _validator().is_valid(record), record
        checked, valid = checked + 1, valid + fast
    assert checked > 700 and 0 < valid < checked  # both verdicts were reached, many times


def test_null_trial_is_valid_with_null_response():
    validate(good(parse_status="null:refusal", response=None, correct=None, raw_output="I can't"))


def test_torn_tail_is_cut_and_records_of_another_key_kept(tmp_path):
    store = RecordStore(tmp_path / "t.jsonl")
    a = good()
    b = good(trial_id="closure.nat.silhouette|silh_cat7|m|rep0", stimulus_id="silh_cat7")
    store.append([a, b])
    with open(store.path, "a") as f:
        f.write('{"trial_id": "half')  # what SIGKILL mid-write leaves
    assert len(store.read()) == 2
    keys = {a["trial_id"]: a["cache_key"], b["trial_id"]: "c" * 64}  # b's key changed
    done = store.completed(keys)
    assert list(done) == [a["trial_id"]]
    # b stays for the run whose key it has, and the file holds no stale file beside it
    assert [json.loads(x)["trial_id"] for x in store.path.read_text().splitlines()] == [a["trial_id"], b["trial_id"]]
    assert not (tmp_path / "t.stale.jsonl").exists()
    b2 = good(trial_id=b["trial_id"], stimulus_id="silh_cat7", cache_key="c" * 64, response="dog", correct=False)
    store.append([b2])  # the trial under its new key, beside its record under the old one
    assert store.of(keys) == {a["trial_id"]: a, b["trial_id"]: b2}
    assert store.completed({b["trial_id"]: b["cache_key"]}) == {b["trial_id"]: b}  # the old setting again


def test_a_run_of_fewer_trials_neither_misses_nor_changes_the_others(tmp_path):
    """The drift of a finished run is of its own records, by (trial, cache key): records of other
    trials or other keys in the file are neither missing nor changed; its own records are."""
    store = RecordStore(tmp_path / "t.jsonl")
    a, b = good(), other(7)
    b_new = {**b, "cache_key": "c" * 64, "response": "dog", "correct": False}
    store.append([a, b, b_new])
    logged = (json.dumps(a) + "\n" + json.dumps(b_new) + "\n").encode()  # the run that scored a and b_new
    assert store.drift_from(logged) == Drift(changed=[], missing={})
    store.path.write_text(json.dumps(a) + "\n" + json.dumps(b) + "\n")  # b_new's line deleted
    drift = store.drift_from(logged)
    assert drift.missing == {b["trial_id"]: "silh_cat7"} and drift.changed == []
    edited = {**a, "response": "dog", "correct": False}
    store.path.write_text(json.dumps(edited) + "\n" + json.dumps(b_new) + "\n")
    assert store.drift_from(logged) == Drift(changed=[a["trial_id"]], missing={})


def test_records_an_earlier_version_moved_aside_are_folded_back(tmp_path, caplog):
    """``<task>.stale.jsonl`` (records moved aside by versions before the file kept every key): read
    as the store's, folded back into the file on the next run, losing nothing; an answer there of a
    trial recorded again with the same key stays aside, a call made that spending counts."""
    import logging

    store = RecordStore(tmp_path / "t.jsonl")
    a, b, c = good(), other(7), other(8)
    again = {**b, "response": "dog", "correct": False}  # b recorded again after it was moved aside
    store.append([a, again])
    stale = tmp_path / "t.stale.jsonl"
    stale.write_text("".join(json.dumps(r) + "\n" for r in (b, c)) + "not a record\n")
    keys = {r["trial_id"]: r["cache_key"] for r in (a, b, c)}
    assert store.of(keys) == {a["trial_id"]: a, b["trial_id"]: again, c["trial_id"]: c}
    logged = "".join(json.dumps(r) + "\n" for r in (a, c)).encode()
    assert store.drift_from(logged) == Drift(changed=[], missing={})  # c is kept, not missing
    assert len(store.attempts()) == 4  # every call made: a, b twice, c
    with caplog.at_level(logging.INFO, logger="harness"):
        assert store.completed(keys) == {a["trial_id"]: a, b["trial_id"]: again, c["trial_id"]: c}
    assert "1 record(s) kept in t.stale.jsonl are back in the file" in caplog.text
    assert [json.loads(x) for x in store.path.read_text().splitlines()] == [a, again, c]
    assert [json.loads(x) for x in stale.read_text().splitlines()] == [b]
    assert "not a record" in (tmp_path / "t.stale.rejected").read_text()
    assert len(store.attempts()) == 4
    store.path.write_text(json.dumps(a) + "\n")  # with nothing left aside, the stale file goes
    stale.write_text(json.dumps(c) + "\n")
    store.completed(keys)
    assert not stale.exists() and [json.loads(x) for x in store.path.read_text().splitlines()] == [a, c]


def test_one_trial_under_two_keys_is_not_scored_as_repetitions():
    """A live record file keeps each setting's records; scored as one set, a trial's two records
    would pass for two repetitions: refused, naming the trial and the run's own records."""
    from harness.trials.records import per_stimulus

    a = good()
    with pytest.raises(RecordError, match=r"silh_cat6 rep 0: recorded under more than one cache key.*"
                                          r"records/closure.nat.silhouette.jsonl"):
        per_stimulus([a, {**a, "cache_key": "c" * 64}])
    assert len(per_stimulus([a, {**a, "trial_id": a["trial_id"].replace("rep0", "rep1"), "rep": 1}])) == 1


def other(n: int) -> dict:
    return good(trial_id=f"closure.nat.silhouette|silh_cat{n}|m|rep0", stimulus_id=f"silh_cat{n}")


@pytest.mark.parametrize("bad", [b"[1, 2]", b"null", b"{}", b"42", b"not json",
                                 b'{"trial_id": "caf\xe9"}', b"\xff\xfe\x00"])
def test_a_line_that_is_not_a_record_is_quarantined_not_a_traceback(tmp_path, bad, caplog):
    path = tmp_path / "r.jsonl"
    a, b = good(), other(7)
    path.write_bytes(json.dumps(a).encode() + b"\n" + bad + b"\n" + json.dumps(b).encode() + b"\n")
    store = RecordStore(path)
    with caplog.at_level("WARNING", logger="harness"):
        assert [r["trial_id"] for r in store.read()] == [a["trial_id"], b["trial_id"]]
    assert [r.getMessage() for r in caplog.records] == [caplog.records[0].getMessage()]
    assert "skipped 1 line(s)" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="harness"):
        done = store.completed({a["trial_id"]: a["cache_key"], b["trial_id"]: b["cache_key"]})
    assert set(done) == {a["trial_id"], b["trial_id"]}  # nothing valid lost
    lines = path.read_bytes().splitlines()
    assert [json.loads(x)["trial_id"] for x in lines] == [a["trial_id"], b["trial_id"]]
    rejected = [json.loads(x) for x in store.rejected_path.read_text().splitlines()]
    assert [r["line"] for r in rejected] == [2]
    assert rejected[0]["text"].encode("utf-8", "surrogateescape") == bad  # kept byte for byte
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 1 and "r.jsonl" in told[0] and "line 2" in told[0] and "r.rejected" in told[0]


def test_duplicates_are_dropped_on_read_and_repaired_in_the_file(tmp_path):
    store = RecordStore(tmp_path / "r.jsonl")
    recs = [good(), other(7), other(8)]
    store.append(recs)
    store.append(recs)  # what two processes on one folder used to leave
    assert len(store.path.read_text().splitlines()) == 6
    assert [r["trial_id"] for r in store.read()] == [r["trial_id"] for r in recs]
    assert [r["trial_id"] for r in store.repair()] == [r["trial_id"] for r in recs]
    assert [json.loads(x) for x in store.path.read_text().splitlines()] == recs
    assert not store.rejected_path.exists()


def test_two_processes_appending_at_once_lose_no_line(tmp_path):
    import multiprocessing as mp

    path = tmp_path / "r.jsonl"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(path, start)) for start in (0, 1000)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    ids = [r["trial_id"] for r in RecordStore(path).repair()]
    assert len(ids) == 400 and len(set(ids)) == 400


def _append_many(path, start):
    store = RecordStore(path)
    for i in range(start, start + 200):
        store.append([other(i)])
        if i % 50 == 0:
            store.repair()  # a rewrite while the other process appends
