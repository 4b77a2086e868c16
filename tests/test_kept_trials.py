"""A smaller run in the same output folder keeps the larger battery's trials: each trial is kept
under its cache key whichever run comes back, and each run scores exactly its own trials. The
battery is the series-count task (its first n stimuli are the same for any ``n_test``) answered
by the fake vendor, whose request count says what was bought."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer

TASK = "similarity.chart.series_count"
RECORDS = Path("out/fake-api/records") / f"{TASK}.jsonl"


@pytest.fixture
def server():
    with FakeVendorServer(key=life.KEY, answer=lambda prompt: "5") as s:
        yield s


def with_n_test(path: Path, n: int) -> Path:
    recipe = yaml.safe_load(path.read_text())
    recipe["tasks"] = [TASK]
    recipe["task_options"] = {TASK: {"n_test": n, "n_train": 0}}  # an API model needs no probe-train
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def scored(folder: Path, out: str) -> tuple[str, dict[str, int], int]:
    """The battery run the output names (continued, up to date or new), the n of each score it
    logged, and how many records it logged as the ones it scored."""
    from mlflow import MlflowClient

    (run,) = [r for r in life.battery_runs(folder) if r.info.run_id in out]
    root = Path(MlflowClient(f"sqlite:///{folder}/mlflow.db").get_run(run.info.run_id).info.artifact_uri[len("file://"):])
    intervals = json.loads((root / "intervals.json").read_text())[TASK]
    logged = (root / "records" / f"{TASK}.jsonl").read_text().splitlines()
    return run.info.run_id, {s["name"]: s["n"] for s in intervals["scores"]}, len(logged)


def test_a_smaller_run_keeps_the_larger_ones_trials_and_each_scores_its_own(tmp_path, server):
    path = with_n_test(life.api_recipe(tmp_path, server.url), 20)
    code, out, err = life.cli(path)
    assert code == 0, err[-2000:]
    first, n, logged = scored(tmp_path, out)
    assert len(server.requests) == 20 and n["accuracy"] == 20 and logged == 20

    code, out, err = life.cli(with_n_test(path, 12))
    assert code == 0, err[-2000:]
    assert "0 new trials" in out and len(server.requests) == 20  # the 12 were bought by the first run
    second, n, logged = scored(tmp_path, out)
    assert second != first and n["accuracy"] == 12 and logged == 12  # its own trials, not the kept ones
    assert not (tmp_path / RECORDS).with_suffix(".stale.jsonl").exists()

    code, out, err = life.cli(with_n_test(path, 20), "--dry-run")
    assert code == 0, err[-2000:]
    assert "trials cached 20, to run 0" in out

    code, out, err = life.cli(path)
    assert code == 0, err[-2000:]  # the kept trials are neither missing nor changed
    assert "0 new trials" in out and len(server.requests) == 20  # nothing bought again
    assert f"up to date: run {first}" in out  # the smaller run left the file as the first run scored it
    third, n, logged = scored(tmp_path, out)
    assert third == first and n["accuracy"] == 20 and logged == 20

    # the smaller battery again: up to date, its per-stimulus values over its 12 trials only
    from harness.recipes import load_recipe
    from harness.run import run_recipe

    os.environ[life.ENV_KEY] = life.KEY
    try:
        (result,) = run_recipe(load_recipe(with_n_test(path, 12)), echo=lambda *_: None)
    finally:
        del os.environ[life.ENV_KEY]
    assert result.up_to_date and result.new_trials == 0 and len(server.requests) == 20
    assert result.run_id == second and {s.name: s.n for s in result.scores[TASK]}["accuracy"] == 12
    items = result.items[TASK]
    assert items is not None and len(items.values) == 12


def test_a_kept_trial_deleted_after_the_run_that_scored_it_is_still_named(tmp_path, server):
    """Kept trials are guarded like any other: lines of the larger run deleted or rewritten while
    the smaller one was current are named when the larger one comes back (exit 2, nothing asked)."""
    from harness.trials.records import record_checksum

    path = with_n_test(life.api_recipe(tmp_path, server.url), 20)
    assert life.cli(path)[0] == 0
    assert life.cli(with_n_test(path, 12))[0] == 0
    records = tmp_path / RECORDS
    kept = [json.loads(x) for x in records.read_text().splitlines()]
    assert len(kept) == 20
    # two of the trials the smaller run does not use (series_test_012_k13 on)
    gone, edited = [r for r in kept if int(r["stimulus_id"].split("_")[2]) >= 12][:2]
    edited["response"] = 7
    edited["checksum"] = record_checksum(edited)  # a valid line: only the logged run knows better
    records.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept if r is not gone))
    code, _, err = life.cli(with_n_test(path, 20))
    assert code == 2 and len(server.requests) == 20
    (line,) = [x for x in err.splitlines() if "missing" in x]
    assert "1 of the 20 records" in line and gone["stimulus_id"] in line and "--rescore" in line, line
    assert "1 record(s) changed" in line and edited["trial_id"] in line, line


def test_gestalt_score_refuses_a_file_that_keeps_one_trial_under_two_keys(tmp_path, capsys):
    """Scored as one set, a trial's records of two settings would pass for two repetitions: one
    line naming the stimulus and the run's own records to score instead (exit 2)."""
    from harness.cli import main
    from tests.conftest import MIRROR
    from tests.test_records import good

    path = tmp_path / "closure.nat.silhouette.jsonl"
    a = good()
    path.write_text(json.dumps(a) + "\n" + json.dumps({**a, "cache_key": "c" * 64}) + "\n")
    with pytest.raises(SystemExit) as e:
        main(["score", str(path), "--mirror", str(MIRROR)])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "silh_cat6 rep 0: recorded under more than one cache key" in line
    assert "records/closure.nat.silhouette.jsonl" in line and "Traceback" not in line
