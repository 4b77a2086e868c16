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
