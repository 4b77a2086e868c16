"""benchmarks/ci_time.py reads pytest's own lines: its summary (seconds and counts by outcome)
and its slowest-durations report. The checks here are on the reading, never on a timing."""

import csv

import pytest

from benchmarks.ci_time import COLUMNS, append_csv, pytest_summary, row, slowest

LOG = """\
============================= slowest 50 durations =============================
430.12s call     tests/test_bars.py::test_bars_quick_trains
226.51s setup    tests/test_rehearsal.py::test_full[quick]
0.50s teardown tests/test_ui.py::test_ui_stops
1.25s call     tests/test_docs.py::test_readme_commands[.venv/bin/python -m pytest -q -ra]
=========================== short test summary info ============================
FAILED tests/test_a.py::test_x - AssertionError
==== 1530 passed, 2 skipped, 3 failed, 1 error, 4 deselected in 2387.12s (0:39:47) ====
"""


def test_the_summary_gives_pytests_seconds_and_counts():
    seconds, counts = pytest_summary(LOG)
    assert seconds == pytest.approx(2387.12)
    assert counts == {"passed": 1530, "skipped": 2, "failed": 3, "errors": 1, "deselected": 4}


def test_the_quiet_summary_line_is_read_too():
    # `pytest -q`, as the README runs it, drops the "=" frame
    assert pytest_summary("....\n12 passed, 1 warning in 3.50s\n") == (3.5, {"passed": 12})


def test_tests_run_count_failures_and_errors_but_not_skips():
    r = dict(zip(COLUMNS, row(LOG, 2600.4, 1, date="d", where="m")))
    assert (r["ci_s"], r["pytest_s"]) == ("2600", "2387")
    assert (r["tests_run"], r["passed"], r["failed"], r["ci_status"]) == (1534, 1530, 4, 1)


def test_a_log_without_pytests_summary_is_refused_in_words():
    with pytest.raises(ValueError, match="no pytest summary"):
        pytest_summary("Traceback (most recent call last):\n  ...\nOSError: no space left\n")


def test_the_slowest_are_read_in_order_with_their_phase_and_ids_kept_whole():
    rows = slowest(LOG)
    assert [s for s, _, _ in rows] == [430.12, 226.51, 1.25, 0.5]
    assert rows[1] == (226.51, "setup", "tests/test_rehearsal.py::test_full[quick]")
    assert rows[2][2] == "tests/test_docs.py::test_readme_commands[.venv/bin/python -m pytest -q -ra]"


def test_rows_append_under_one_header(tmp_path):
    path = tmp_path / "ci.csv"
    for status in (0, 1):
        append_csv(path, COLUMNS, [row(LOG, 100.0, status, date="d", where="m")])
    lines = list(csv.reader(path.open()))
    assert lines[0] == list(COLUMNS)
    assert [r[-1] for r in lines[1:]] == ["0", "1"]
