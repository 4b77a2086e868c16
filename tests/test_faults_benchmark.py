"""benchmarks/faults.py: its counting, each row counting a fault planted of its kind, one scenario
run through its own code path, and the table docs/reliability.md shows, which must be what the
data file gives."""

import itertools
import random
import re
import subprocess
import sys

import pytest
import yaml

from benchmarks import faults
from benchmarks.faults import (SCENARIOS, Tally, _ids, _load_each, _new_key, _simulated_full_disk, copy_rerun,
                               full_disk, kill_mid_run, kill_store_creation, main, mutated_recipes, read,
                               records_rewritten, table, tracking_restart, two_processes)
from tests import lifecycle as life
from tests.conftest import MIRROR, REPO
from tests.fake_vendor_server import FakeVendorServer
from tests.reliability.test_recipe_mutator import SMALL
from tests.test_result_folder import run


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


def _answers_change_after(calls: int):
    """The fake model's answer from its ``calls``-th request on: another animal than it named
    for the uninterrupted run each scenario makes first, so a faulted run's scores differ."""
    asked, answer = itertools.count(), life.answer
    return lambda prompt: answer(prompt) if next(asked) < calls else "It is a knife."


@pytest.mark.parametrize("scenario,models", [(two_processes, 2), (full_disk, 1), (kill_mid_run, 1)])
def test_scores_other_than_an_uninterrupted_runs_are_silent_changes(tmp_path, monkeypatch, scenario, models):
    monkeypatch.setattr(life, "answer", _answers_change_after(life.TRIALS * models))
    t = scenario(1, random.Random(0), tmp_path)
    assert t.silent_changes == models, t


def test_a_store_left_half_made_by_a_kill_is_counted(tmp_path, monkeypatch):
    # a store written in place rather than made whole or not at all: a kill mid-write leaves
    # mlflow.db torn, its header and no more, where the rerun opens it
    def half_made(path, folder, wait):
        (folder / "mlflow.db").write_bytes(b"SQLite format 3\0" + bytes(84))

    monkeypatch.setattr(life, "kill_while_the_store_is_made", half_made)
    t = kill_store_creation(1, random.Random(0), tmp_path)
    assert t.unexpected == 1, t


def test_a_run_that_gives_up_on_a_tracking_server_back_in_3_s_is_counted(tmp_path, monkeypatch):
    # a harness that does not wait out a lost server: the run ends 1 instead of finishing
    start = life.start
    monkeypatch.setattr(life, "start", lambda path, *args: start(path, "--tracking.outage_budget_s=1"))
    t = tracking_restart(1, random.Random(0), tmp_path)
    assert t.unexpected == 1 and t.exit_codes == {1}, t


def test_rewritten_records_scored_without_a_refusal_are_a_silent_change(tmp_path, monkeypatch):
    # a harness that takes the rewritten records as they are, as --rescore does
    monkeypatch.setattr(faults, "run", lambda folder, cache, *args: run(folder, cache, "--rescore"))
    t = records_rewritten(1, random.Random(0), tmp_path)
    assert t.silent_changes == 1 and t.unexpected == 1 and t.exit_codes == {0}, t


def test_deleted_records_are_refused_and_asked_again_only_with_rescore(tmp_path):
    t = copy_rerun(1, random.Random(0), tmp_path)
    assert (t.tries, t.lost, t.duplicated, t.tracebacks, t.silent_changes, t.unexpected) == (1, 0, 0, 0, 0, 0), t
    assert t.exit_codes == {0, 2}


def test_deleted_records_asked_again_without_a_word_are_a_silent_change(tmp_path, monkeypatch):
    # the harness as it was: every rerun re-asks the records gone, as --rescore does
    monkeypatch.setattr(faults, "run", lambda folder, cache, *args: run(folder, cache, "--rescore"))
    t = copy_rerun(1, random.Random(0), tmp_path)
    assert t.silent_changes == 1 and t.unexpected == 1, t


def test_a_mutation_that_puts_a_key_where_none_belongs_is_refused_naming_it(tmp_path):
    t = mutated_recipes(1, random.Random(0), tmp_path)
    assert (t.tracebacks, t.silent_changes, t.unexpected) == (0, 0, 0), t


def test_a_misplaced_key_that_loads_is_a_silent_change(tmp_path, monkeypatch):
    # a loader that takes any recipe, whatever keys it holds
    monkeypatch.setattr("harness.recipes.load_recipe", lambda path: None)
    t = mutated_recipes(1, random.Random(0), tmp_path)
    assert t.silent_changes > 0, t


def test_a_mutation_that_loads_and_breaks_the_dry_run_is_counted(tmp_path, monkeypatch):
    def breaks(*args, **kwargs):
        raise KeyError("a mutation the loader let through")

    monkeypatch.setattr("harness.run.describe_plan", breaks)
    # the source data where the dry run looks for it, so a mutation that loads reaches the plan
    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    t = mutated_recipes(1, random.Random(0), tmp_path)
    assert t.tracebacks > 0, t


def test_an_item_gone_from_a_list_moves_no_key_into_the_next():
    base = yaml.safe_dump({"models": [{"id": "a"}, {"id": "b", "options": {}}]})
    assert _new_key(base, yaml.safe_dump({"models": [{"id": "b", "options": {}}]}).encode()) is None
    assert _new_key(base, yaml.safe_dump({"models": [{"id": "a", "options": {}}, {"id": "b"}]}).encode()) \
        == "models.0.options"


# the harness with a fault planted in its runner: the first records it would write raise, once work began
_FAILS_ONCE_WORK_BEGAN = """
import sys

from harness.cli import main
from harness.trials.records import RecordStore


def fails(self, records):
    raise RuntimeError("planted: records cannot be written")


RecordStore.append = fails
main(sys.argv[1:])
"""


def test_a_mutation_that_plans_and_fails_once_work_began_is_counted(tmp_path, monkeypatch):
    script = tmp_path / "gestalt_planted.py"
    script.write_text(_FAILS_ONCE_WORK_BEGAN)

    def planted(folder, path):
        return subprocess.run([sys.executable, str(script), "recipe", str(path)], env=life.env(), cwd=folder,
                              capture_output=True, text=True, errors="replace", timeout=600)

    monkeypatch.setattr(faults, "_recipe_in", planted)
    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))  # so that the small recipe's mutations plan
    t = mutated_recipes(1, random.Random(0), tmp_path)
    ran = int(re.fullmatch(r" \((\d+) ran\)", t.note).group(1))
    assert ran > 0 and t.tracebacks >= ran and t.unexpected >= ran, t
