"""benchmarks/faults.py: its counting, one scenario run through its own code path, and the table
docs/reliability.md shows, which must be what the data file gives."""

from benchmarks.faults import SCENARIOS, Tally, _ids, _load_each, _simulated_full_disk, main, read, table
from tests import lifecycle as life
from tests.conftest import REPO
from tests.fake_vendor_server import FakeVendorServer
from tests.reliability.test_recipe_mutator import SMALL


def test_the_docs_show_what_the_data_file_gives():
    assert table(read()) in (REPO / "docs" / "reliability.md").read_text(), \
        "run: python benchmarks/faults.py --table, paste into docs/reliability.md"


def test_the_data_file_has_a_measured_row_for_every_scenario():
    rows = read()
    assert [r["scenario"] for r in rows] == list(SCENARIOS)
    for r in rows:
        assert int(r["tries"]) > 0 and r["exit_codes"] and r["machine"] and r["date"], r


def test_a_missing_and_a_repeated_trial_are_counted():
    t = Tally()
    t.trials(["a", "b", "b"], expected=3)
    assert (t.lost, t.duplicated) == (1, 1)


def test_a_wrong_option_that_loads_is_a_silent_change_and_a_bad_recipe_a_refusal(tmp_path):
    t = _load_each(tmp_path, [(SMALL.encode(), "seed"), (b"name: [", None), (SMALL.encode(), None)])
    assert (t.tries, t.silent_changes, t.tracebacks, t.unexpected) == (3, 1, 0, 0)
    assert t.exit_codes == {0, 2}


def test_one_try_of_rewritten_records_is_refused_and_counted(tmp_path):
    out = tmp_path / "faults.csv"
    main(["--tries", "1", "--scenarios", "records-rewritten", "--csv", str(out)])
    (row,) = read(out)
    assert row["scenario"] == "records-rewritten" and row["tries"] == "1" and row["exit_codes"] == "2"
    assert [row[k] for k in ("lost", "duplicated", "tracebacks", "silent_changes", "unexpected")] == ["0"] * 5


def test_the_simulated_full_disk_is_one_line_then_a_rerun_finishes(tmp_path):
    """Where no tmpfs can be mounted, the disk scenario fails the record writes in-process."""
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        code, err, again = _simulated_full_disk(tmp_path, server.url)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "no space left on" in err, err
    assert again == 0 and sorted(_ids(tmp_path)) == sorted(set(_ids(tmp_path))) and len(_ids(tmp_path)) == life.TRIALS
