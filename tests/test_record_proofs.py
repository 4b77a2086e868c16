"""Records that prove themselves: a rerun that finds records changed or gone since their
battery's run finished names them and scores nothing, unless asked to (``--rescore``, tagged on
the run)."""

import json
import sqlite3
from contextlib import closing

import pytest
import yaml

from harness.trials.records import record_checksum
from tests.test_result_folder import RECIPE, RECORDS, run


def tags(db, key):
    with closing(sqlite3.connect(db)) as con:
        return [r[0] for r in con.execute("SELECT value FROM tags WHERE key = ?", (key,))]


@pytest.mark.slow
def rewrite_answers(records: list[dict]) -> list[str]:
    """Give each record another answer in a valid line with its checksum made anew (only the
    logged run knows better); their trial ids."""
    for rec in records:
        rec["response"] = "knife" if rec["response"] != "knife" else "bottle"
        rec["correct"] = rec["response"] == rec["ground_truth"]
        rec["checksum"] = record_checksum(rec)
    return [rec["trial_id"] for rec in records]


def test_records_rewritten_with_other_answers_are_named_not_rescored(tmp_path):
    folder, cache = tmp_path / "A", tmp_path / "cache"
    folder.mkdir()
    (folder / "recipe.yaml").write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    assert run(folder, cache).returncode == 0
    path = folder / RECORDS
    records = [json.loads(x) for x in path.read_text().splitlines()]
    changed = rewrite_answers(records[:10])
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    edited = path.read_bytes()
    refused = run(folder, cache)
    assert refused.returncode == 2, refused.stderr[-2000:]
    (line,) = [x for x in refused.stderr.splitlines() if "changed" in x]
    assert "10 record(s) changed" in line and changed[0] in line and "--rescore" in line, line
    assert path.read_bytes() == edited  # nothing scored, repaired or moved aside
    assert tags(folder / "mlflow.db", "gestalt.rescored") == []
    rescored = run(folder, cache, "--rescore")
    assert rescored.returncode == 0, rescored.stderr[-2000:]
    (tag,) = tags(folder / "mlflow.db", "gestalt.rescored")
    assert tag.startswith("10 changed record(s)") and changed[0] in tag


def test_record_lines_deleted_after_the_run_finished_are_named_not_asked_again(tmp_path):
    """Whole lines gone (a partial backup restored, a hand edit, a file cut at a line boundary):
    asking those trials again would score other answers of a model that samples, so the rerun
    names the file and what is missing, unless --rescore asks them again and tags the run."""
    folder, cache = tmp_path / "A", tmp_path / "cache"
    folder.mkdir()
    (folder / "recipe.yaml").write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    assert run(folder, cache).returncode == 0
    path = folder / RECORDS
    lines = path.read_text().splitlines(keepends=True)
    gone = [json.loads(x)["stimulus_id"] for x in lines[3:10]]
    path.write_text("".join(lines[:3] + lines[10:]))
    edited = path.read_bytes()
    refused = run(folder, cache)
    assert refused.returncode == 2, refused.stderr[-2000:]
    (line,) = [x for x in refused.stderr.splitlines() if "missing" in x]
    assert f"{RECORDS}: 7 of the {len(lines)} records" in line and gone[0] in line, line
    assert "--rescore" in line and "Traceback" not in refused.stderr, line
    assert path.read_bytes() == edited  # nothing asked again, scored, repaired or moved aside
    assert tags(folder / "mlflow.db", "gestalt.rescored") == []
    rescored = run(folder, cache, "--rescore")
    assert rescored.returncode == 0, rescored.stderr[-2000:]
    assert "7 new trials" in rescored.stdout
    (tag,) = tags(folder / "mlflow.db", "gestalt.rescored")
    assert tag.startswith(f"7 missing record(s) of {path.name} asked again") and gone[0] in tag, tag
    assert len(path.read_text().splitlines()) == len(lines)
