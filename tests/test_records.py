"""Trial records: schema validation, torn-line repair, stale records moved aside."""

import json

import pytest

from harness.trials.records import RecordError, RecordStore, schema, validate


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


def test_null_trial_is_valid_with_null_response():
    validate(good(parse_status="null:refusal", response=None, correct=None, raw_output="I can't"))


def test_torn_tail_is_cut_and_stale_records_moved_aside(tmp_path):
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
    assert [json.loads(x)["trial_id"] for x in store.path.read_text().splitlines()] == [a["trial_id"]]
    stale = tmp_path / "t.stale.jsonl"
    assert json.loads(stale.read_text())["trial_id"] == b["trial_id"]


def test_corrupt_line_is_an_error_naming_file_and_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(good()) + "\nnot json\n")
    with pytest.raises(RecordError, match=r"r\.jsonl:2"):
        RecordStore(p).read()
