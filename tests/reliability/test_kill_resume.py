"""Reliability campaign: SIGKILL a `gestalt recipe` at random points, then let it finish.

The number of kills comes from GESTALT_RELIABILITY_KILLS (3 by default, 20 in the scheduled run,
docs/reliability.md), their times from GESTALT_RELIABILITY_SEED. A kill can land anywhere: during
start-up and preflight, mid-trial, while MLflow logs. After the last one the recipe runs to the end
and must match an uninterrupted run: every trial recorded once, byte-identical scores, one run for
the battery (each killed run continued, none left RUNNING)."""

import json
import os
import random
import time

import pytest

from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer

KILLS = int(os.environ.get("GESTALT_RELIABILITY_KILLS", "3"))
SEED = int(os.environ.get("GESTALT_RELIABILITY_SEED", "0"))


def scores(folder, run) -> dict:
    """intervals.json as the run logged it (the score table, with intervals)."""
    from harness.tracking.batteries import logged_intervals
    from harness.tracking.store import open_store

    open_store(f"sqlite:///{folder}/mlflow.db", "life")
    return logged_intervals(run.info.run_id)


@pytest.mark.slow
def test_kill_at_random_points_then_resume(tmp_path):
    rng = random.Random(SEED)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    reference.mkdir()
    killed.mkdir()
    with FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.03) as server:
        t0 = time.time()
        done = life.gestalt(life.api_recipe(reference, server.url, batch_size=2))
        duration = time.time() - t0
        assert done.returncode == 0, done.stderr[-2000:]
        path = life.api_recipe(killed, server.url, batch_size=2)
        runs_after_kill = []
        for _ in range(KILLS):
            proc = life.start(path)
            time.sleep(rng.uniform(0, duration))
            proc.kill()
            proc.communicate()
            runs_after_kill.append({r.info.run_id for r in life.runs(killed)})
        final = life.gestalt(path)
    assert final.returncode == 0, final.stderr[-2000:]
    runs = life.runs(killed)
    ids = [r["trial_id"] for r in life.record_lines(killed)]
    duplicates = len(ids) - len(set(ids))
    final_ids = {r.info.run_id for r in runs}
    resumed = sum(1 for before in runs_after_kill if before <= final_ids)
    running = sum(r.info.status == "RUNNING" for r in runs)
    (ref_run,) = life.runs(reference)
    identical = len(runs) == 1 and (json.dumps(scores(killed, runs[0]), sort_keys=True)
                                    == json.dumps(scores(reference, ref_run), sort_keys=True))
    print(f"\n{KILLS} kills: {resumed} resumed, {duplicates} duplicate trials, "
          f"scores {'identical' if identical else 'DIFFERENT'}, {running} runs left RUNNING "
          f"({len(runs)} run(s) for 1 battery, seed {SEED})")
    assert len(ids) == life.TRIALS and duplicates == 0
    assert resumed == KILLS and len(runs) == 1 and running == 0
    assert identical
