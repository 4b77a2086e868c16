"""A result folder never writes outside itself through a link: folders travel as tar or zip,
which keep links, and one planted where the record store keeps a file of its own must not carry
a write to a file outside the folder."""

import pytest

from harness.errors import GestaltError
from harness.trials.records import RecordStore
from tests.test_records import good, other

OUTSIDE = "a file outside the result folder\n"


def planted(tmp_path, name: str):
    """A record store in ``tmp_path/folder`` whose ``name`` (beside its records) is a link to a
    file outside that folder; the store and the outside file."""
    store = RecordStore(tmp_path / "folder" / "records" / "t.jsonl")
    store.append([good(), other(7)])
    outside = tmp_path / "elsewhere.txt"
    outside.write_text(OUTSIDE)
    link = store.path.parent / name
    link.unlink(missing_ok=True)  # the records themselves, when they are the link
    link.symlink_to(outside)
    return store, outside


def test_a_tmp_link_is_replaced_not_written_through(tmp_path):
    """The rewrite's scratch file is the store's own: a link there is removed, and the records
    land in the folder as a plain file."""
    store, outside = planted(tmp_path, "t.tmp")
    with open(store.path, "a") as f:
        f.write('{"trial_id": "half')  # a torn last line: the repair rewrites the file
    assert [r["trial_id"] for r in store.repair()] == [good()["trial_id"], other(7)["trial_id"]]
    assert outside.read_text() == OUTSIDE
    assert not store.path.is_symlink() and len(store.read()) == 2
    assert not store.path.with_suffix(".tmp").exists()


@pytest.mark.parametrize("name", ["t.rejected", "t.jsonl"])
def test_an_appended_file_that_is_a_link_is_refused_in_one_line(tmp_path, name):
    """Files the store appends to (lines quarantined, the records themselves) are refused when
    they are links, naming the link; nothing is lost: the line to quarantine stays in place."""
    store, outside = planted(tmp_path, name)
    if name == "t.rejected":
        with open(store.path, "a") as f:
            f.write("not a record\n")
    before = store.path.read_bytes()
    with pytest.raises(GestaltError) as e:
        store.repair() if name == "t.rejected" else store.append([good()])
    line = str(e.value)
    assert str(store.path.parent / name) in line and str(outside) in line and "\n" not in line, line
    assert outside.read_text() == OUTSIDE
    assert store.path.read_bytes() == before


def test_a_lock_that_is_a_link_is_refused(tmp_path):
    """A lock file is created when missing: through a link, that would make a file outside."""
    store = RecordStore(tmp_path / "folder" / "t.jsonl")
    store.path.parent.mkdir()
    outside = tmp_path / "made-outside"
    store.path.with_name("t.jsonl.lock").symlink_to(outside)
    with pytest.raises(GestaltError) as e:
        store.append([good()])
    assert "t.jsonl.lock" in str(e.value)
    assert not outside.exists()
