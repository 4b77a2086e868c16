"""The smaller commands: stimuli export, offline rescoring, data verify, task listing."""

import csv
import json
import re
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


def write_modal_human_records(path):
    """Records of a respondent who always gives the modal human answer (silhouettes test split)."""
    from harness.models.base import ModelSpec
    from harness.sources import Sources
    from harness.stimuli.registry import get_task
    from harness.trials.records import RecordStore, make_record

    task = get_task("closure.nat.silhouette")
    stimset = task.build(Sources(mirror=MIRROR))
    spec = ModelSpec(id="modal-human", source="timm", name="x")
    store = RecordStore(path)
    store.append([make_record(task=task, stimset=stimset, stimulus=s, model_spec=spec, model_version="v",
                              readout="prototype", rep=0, n_reps=1, response=s.human_target, raw_output=None,
                              parse_status="ok", latency_s=0.0, seed=0, run_id="r", key="0" * 64)
                  for s in stimset.test])
    return store.path


def test_score_rescores_records_offline(tmp_path):
    path = write_modal_human_records(tmp_path / "r.jsonl")
    res = gestalt("score", str(path), "--mirror", str(MIRROR), "--format", "json")
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


def one_line_error(res, *fragments):
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for fragment in fragments:
        assert fragment in res.stderr, res.stderr


def test_unknown_flag_registers_nothing(tmp_path):
    from mlflow import MlflowClient

    from tests.test_reports import log_battery_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id, _ = log_battery_run(uri, "cli", "resnet-a", "supervised", 0.4, tmp_path=tmp_path)
    res = gestalt("register", run_id, "--alais", "prod", "--uri", uri)
    one_line_error(res, "--alais", "did you mean --alias?")
    assert MlflowClient(uri).search_registered_models() == []


def test_unknown_flag_writes_nothing(tmp_path):
    res = subprocess.run([sys.executable, "-m", "harness.cli", "report", "--ot", "X"], capture_output=True,
                         text=True, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    one_line_error(res, "did you mean --out?")
    assert list(tmp_path.iterdir()) == []


def test_unknown_flag_prints_no_output_first(tmp_path):
    records = write_modal_human_records(tmp_path / "r.jsonl")
    one_line_error(gestalt("score", str(records), "--mirror", str(MIRROR), "--sed", "3"), "did you mean --seed?")
    one_line_error(gestalt("tasks", "--battery", "chart6"), "unknown flag --battery")


def test_misspelt_stimuli_flag_is_one_line_not_a_traceback(tmp_path):
    out = tmp_path / "D"
    res = gestalt("stimuli", "closure.nat.silhouette", "--out", str(out), "--splt", "test",
                  "--mirror", str(MIRROR))
    one_line_error(res, "did you mean --split?")
    assert not out.exists()


def test_misspelt_command_suggests_the_closest():
    one_line_error(gestalt("regster", "x"), "unknown command 'regster'", "did you mean register?")
    one_line_error(gestalt("data", "verfy"), "did you mean verify?")


def test_every_command_has_help_without_fire_noise():
    from harness.cli import CLI, _commands

    cli = CLI()
    commands = [[name] for name, member in _commands(cli).items() if callable(member)]
    commands += [[group, name] for group, member in _commands(cli).items() if not callable(member)
                 for name in _commands(member)]
    assert ["register"] in commands and ["data", "verify"] in commands
    for argv in [[], *commands]:
        res = gestalt(*argv, "--help")
        assert res.returncode == 0, (argv, res.stderr)
        assert res.stdout.startswith(f"usage: gestalt {' '.join(argv)}".rstrip()), (argv, res.stdout[:200])
        for noise in ("INFO: Showing help", "FIRE_METADATA", "NAME\n", "<class"):
            assert noise not in res.stdout + res.stderr, (argv, noise)
    assert re.search(r"--alias +str \| None", gestalt("register", "--help").stdout)


def test_version():
    from harness import __version__

    res = gestalt("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"gestalt {__version__}"


def test_score_missing_file_and_formats(tmp_path):
    one_line_error(gestalt("score", str(tmp_path / "MISSING.jsonl")), "MISSING.jsonl: records file not found")
    records = write_modal_human_records(tmp_path / "r.jsonl")
    table = gestalt("score", str(records), "--mirror", str(MIRROR)).stdout.splitlines()
    assert table[0].split()[:4] == ["name", "value", "ci_low", "ci_high"]
    assert next(line for line in table if line.startswith("B ")).split()[1] == "1.000"
    rows = list(csv.DictReader(gestalt("score", str(records), "--mirror", str(MIRROR), "--format", "csv")
                               .stdout.splitlines()))
    assert {r["name"]: float(r["value"]) for r in rows}["B"] == 1.0
    one_line_error(gestalt("score", str(records), "--format", "xml"), "table, json, csv")
