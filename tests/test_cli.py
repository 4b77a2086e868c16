"""The smaller commands: stimuli export, offline rescoring, data verify, task listing."""

import csv
import json
import os
import subprocess
import sys

from tests.conftest import MIRROR


def gestalt(*args):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))


def test_stimuli_export_writes_pngs_index_and_prompt(tmp_path):
    res = gestalt("stimuli", "closure.nat.silhouette", "--out", str(tmp_path), "--split", "test",
                  "--mirror", str(MIRROR))
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(open(tmp_path / "index.csv")))
    assert len(rows) == 80 and all((tmp_path / r["file"]).is_file() for r in rows)
    assert rows[0]["stimulus_id"] == "silh_airplane6" and rows[0]["ground_truth"] == "airplane"
    assert "black silhouette" in (tmp_path / "prompt.txt").read_text()


def test_score_rescores_records_offline(tmp_path):
    from harness.models.base import ModelSpec
    from harness.sources import Sources
    from harness.stimuli.registry import get_task
    from harness.trials.records import RecordStore, make_record

    task = get_task("closure.nat.silhouette")
    stimset = task.build(Sources(mirror=MIRROR))
    spec = ModelSpec(id="modal-human", source="timm", name="x")
    store = RecordStore(tmp_path / "r.jsonl")
    store.append([make_record(task=task, stimset=stimset, stimulus=s, model_spec=spec, model_version="v",
                              readout="prototype", rep=0, n_reps=1, response=s.human_target, raw_output=None,
                              parse_status="ok", latency_s=0.0, seed=0, run_id="r", key="0" * 64)
                  for s in stimset.test])
    res = gestalt("score", str(store.path), "--mirror", str(MIRROR))
    assert res.returncode == 0, res.stderr
    scores = {s["name"]: s for s in json.loads(res.stdout)}
    assert scores["B"]["value"] == 1.0 and scores["B"]["n"] == 80
    assert round(scores["kappa"]["ceiling"], 3) == 0.493


def test_verify_names_releases_and_unknown_is_an_error():
    ok = gestalt("data", "verify", "geirhos-silhouettes", "perceptual-kernels", "--mirror", str(MIRROR))
    assert ok.returncode == 0 and "geirhos-silhouettes: 176 files verified" in ok.stdout
    bad = gestalt("data", "verify", "nope", "--mirror", str(MIRROR))
    assert bad.returncode == 2 and "unknown release 'nope'" in bad.stderr


def test_tasks_lists_every_battery():
    out = gestalt("tasks").stdout
    for task in ("closure.nat.silhouette", "similarity.chart.mark_color", "literacy.chart.vlat"):
        assert task in out
