"""Every repair of a record file is said, in one line naming the file: a torn last line and a
duplicated line as much as a line that is not a record."""

from harness.trials.records import RecordStore
from tests.test_records import good, other


def _said(caplog, store) -> list[str]:
    return [r.getMessage() for r in caplog.records if str(store.path) in r.getMessage()]


def test_a_torn_last_line_is_cut_with_a_word(tmp_path, caplog):
    store = RecordStore(tmp_path / "t.jsonl")
    store.append([good()])
    with open(store.path, "a") as f:
        f.write('{"trial_id": "half')  # what SIGKILL mid-write leaves
    store.repair()
    (line,) = _said(caplog, store)
    assert "torn last line" in line and "runs again" in line, line


def test_duplicated_lines_are_dropped_with_a_word(tmp_path, caplog):
    store = RecordStore(tmp_path / "r.jsonl")
    recs = [good(), other(7)]
    store.append(recs)
    store.append(recs)
    store.completed({r["trial_id"]: r["cache_key"] for r in recs})
    (line,) = _said(caplog, store)
    assert "2 duplicated line(s)" in line, line


def _sealed(rec: dict) -> dict:
    from harness.trials.records import record_checksum

    return {**rec, "checksum": record_checksum(rec)}


def test_a_record_changed_after_it_was_written_is_not_trusted(tmp_path, caplog):
    """A line rewritten as a valid record with another answer no longer matches its checksum:
    quarantined like any line that is not a record, naming the trial; its trial runs again."""
    store = RecordStore(tmp_path / "c.jsonl")
    a, b = _sealed(good()), _sealed(other(7))
    store.append([a, b])
    store.path.write_text(store.path.read_text().replace('"response": "cat"', '"response": "dog"', 1))
    assert [r["trial_id"] for r in store.read()] == [b["trial_id"]]
    caplog.clear()
    done = store.completed({r["trial_id"]: r["cache_key"] for r in (a, b)})
    assert list(done) == [b["trial_id"]]
    (line,) = _said(caplog, store)
    assert a["trial_id"] in line and "does not match its checksum" in line, line


def test_records_without_a_checksum_are_read_as_before(tmp_path):
    """A store written before records carried checksums is not broken by the upgrade."""
    store = RecordStore(tmp_path / "old.jsonl")
    old = [good(), other(7)]
    assert "checksum" not in old[0]
    store.append(old)
    assert store.completed({r["trial_id"]: r["cache_key"] for r in old}) == {r["trial_id"]: r for r in old}
    assert not store.rejected_path.exists()


def test_a_zeroed_file_is_called_zeroed_not_a_torn_line(tmp_path, caplog):
    store = RecordStore(tmp_path / "z.jsonl")
    store.append([good(), other(7)])
    size = store.path.stat().st_size
    store.path.write_bytes(b"\0" * size)  # what a crash before the disk wrote the blocks leaves
    assert store.repair() == []
    (line,) = _said(caplog, store)
    assert "zeroed" in line and f"all {size} bytes are NUL" in line and "torn" not in line, line


def test_zeroed_lines_after_records_are_dropped_and_said(tmp_path, caplog):
    store = RecordStore(tmp_path / "z.jsonl")
    store.append([good()])
    with open(store.path, "ab") as f:
        f.write(b"\0" * 4096)
    assert [r["trial_id"] for r in store.repair()] == [good()["trial_id"]]
    (line,) = _said(caplog, store)
    assert "4096 NUL bytes" in line and "torn" not in line, line


def test_a_file_cut_short_after_its_run_finished_is_called_truncated(tmp_path, caplog):
    """A cut tail that loses records a finished run scored is a truncated file, not the trial in
    flight when a process stopped."""
    store = RecordStore(tmp_path / "t.jsonl")
    recs = [_sealed(other(n)) for n in range(10)]
    store.append(recs)
    data = store.path.read_bytes()
    store.path.write_bytes(data[: len(data) // 2 + 7])  # mid-line
    store.scored = {r["trial_id"] for r in recs}
    kept = store.repair()
    (line,) = _said(caplog, store)
    assert "truncated" in line and f"{10 - len(kept)} of the 10 records" in line and "torn" not in line, line
