"""The recipe's own settings (seed, output_dir, runtime, data, tracking, budget_usd, a model's
tasks and trust_remote_code) are typed as strictly as task and model options and bounded where a
value would fail later: a wrong one stops ``gestalt recipe --dry-run`` with exit 2 and one line
naming file:line:key, never a traceback once work has begun, nor a changed meaning (YAML's
``true`` as a $1 budget, ``"false"`` as tracking on, ``tasks: []`` as a model that runs nothing)."""

import os
import subprocess
import sys

import pytest

from harness.models.device import gpu_driver_present
from harness.recipes import RecipeError, check_device, load_recipe
from tests.conftest import REPO

MODEL = "{id: m, source: timm, name: test_vit, weights: random"


def recipe(tmp_path, top: str = "", model: str = ""):
    """A one-model recipe with ``top`` (a line, or lines, of top-level settings) and ``model``
    (more keys of the model entry); the file and the line that holds the mutation."""
    path = tmp_path / "r.yaml"
    lines = ["name: t", "models:", f"  - {MODEL}{', ' + model if model else ''}}}",
             "tasks: [closure.nat.silhouette]", top]
    path.write_text("\n".join(lines) + "\n")
    return path, (3 if model else 5)


LONG_DIGITS = "9" * 5001  # past Python's 4,300-digit limit on reading an integer

BAD = [  # (top-level line, model keys, the key the message names)
    ("budget_usd: true", "", "budget_usd"),
    ('budget_usd: "5"', "", "budget_usd"),
    ("budget_usd: .inf", "", "budget_usd"),
    ("budget_usd: 0", "", "budget_usd"),
    (f"seed: {LONG_DIGITS}", "", "seed"),
    ("seed: 4294967296", "", "seed"),
    ("seed: true", "", "seed"),
    ("runtime: {progress: 'yes'}", "", "runtime.progress"),
    ("runtime: {progress: yes}", "", "runtime.progress"),
    ("runtime: {progress: 1}", "", "runtime.progress"),
    ("runtime: {device: mps}", "", "runtime.device"),
    ("runtime: {device: 'cuda:3'}", "", "runtime.device"),
    ("tracking: {enabled: 'false'}", "", "tracking.enabled"),
    ("tracking: {experiment: ''}", "", "tracking.experiment"),
    ("tracking: {experiment: '   '}", "", "tracking.experiment"),
    (f"tracking: {{experiment: {'x' * 600}}}", "", "tracking.experiment"),
    ("tracking: {uri: 'bogus://x'}", "", "tracking.uri"),
    ("tracking: {uri: ''}", "", "tracking.uri"),
    ("tracking: {uri: \"mlruns\\0x\"}", "", "tracking.uri"),
    ("output_dir: ''", "", "output_dir"),
    (f"output_dir: {'x' * 5000}", "", "output_dir"),
    (f"output_dir: out/{'x' * 300}/y", "", "output_dir"),
    ('output_dir: "out\\0x"', "", "output_dir"),
    ("output_dir: /dev/null", "", "output_dir"),
    ("output_dir: /dev/null/sub", "", "output_dir"),
    ('data: {mirror: "a\\0b"}', "", "data.mirror"),
    ("data: {root: ''}", "", "data.root"),
    ("", "tasks: []", "models.0.tasks"),
    ("", "trust_remote_code: 'yes'", "models.0.trust_remote_code"),
    ("", "trust_remote_code: yes", "models.0.trust_remote_code"),
    ("", "trust_remote_code: 1", "models.0.trust_remote_code"),
]


@pytest.mark.parametrize("top, model, key", BAD)
def test_a_bad_setting_is_refused_at_load_naming_file_line_and_key(tmp_path, top, model, key):
    path, line = recipe(tmp_path, top, model)
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert str(e.value).startswith(f"{path}:{line}: {key}: "), str(e.value)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400, str(e.value)


def gestalt(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    env.pop("GESTALT_DEVICE", None)
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          check=False, cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("top, model, key", [b for b in BAD if "mirror" not in b[0]][::3])
def test_a_bad_setting_stops_the_dry_run_with_one_line(tmp_path, top, model, key):
    path, line = recipe(tmp_path, top, model)
    done = gestalt("recipe", str(path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert err.startswith(f"gestalt: error: {path}:{line}: {key}: ") and "\n" not in err, err
    assert done.stdout == ""


@pytest.mark.parametrize("top, model", [
    ("budget_usd: 5", ""),
    ("budget_usd: 0.25", ""),
    ("seed: 4294967295", ""),
    ("runtime: {progress: false, device: cpu}", ""),
    ("tracking: {enabled: false, experiment: " + "x" * 500 + "}", ""),
    ("tracking: {uri: 'sqlite:///mlflow.db'}", ""),
    ("tracking: {uri: 'file:///tmp/mlruns'}", ""),
    ("tracking: {uri: 'http://localhost:5000'}", ""),
    ("tracking: {uri: 'postgresql://u:p@db/mlflow'}", ""),
    ("tracking: {uri: databricks}", ""),
    ("tracking: {uri: ./mlruns}", ""),
    ("output_dir: out/here", ""),
    ("output_dir: /tmp", ""),
    ("", "tasks: [closure.nat.silhouette], trust_remote_code: true"),
])
def test_good_settings_still_load(tmp_path, top, model):
    path, _ = recipe(tmp_path, top, model)
    load_recipe(path)


def test_command_line_settings_are_read_as_yaml_then_checked(tmp_path):
    path, _ = recipe(tmp_path)
    r = load_recipe(path, {"tracking.enabled": "false", "runtime.progress": "false", "budget_usd": "2"})
    assert (r.tracking.enabled, r.runtime.progress, r.budget_usd) == (False, False, 2)
    with pytest.raises(RecipeError, match=r"^command line: runtime\.progress: "):
        load_recipe(path, {"runtime.progress": "yes"})
    with pytest.raises(RecipeError, match=r"^command line: output_dir: "):
        load_recipe(path, {"output_dir": "/dev/null"})


@pytest.mark.skipif(gpu_driver_present(), reason="this machine has a GPU driver")
def test_a_device_this_machine_lacks_is_one_line_naming_the_devices_it_has(tmp_path, monkeypatch):
    monkeypatch.delenv("GESTALT_DEVICE", raising=False)
    path, line = recipe(tmp_path, "runtime: {device: cuda}")
    r = load_recipe(path)  # a recipe for a GPU machine still loads here (data pull, scores)
    with pytest.raises(RecipeError, match=rf"^{path}:{line}: runtime\.device: cuda, .*devices here: cpu"):
        check_device(r)
    check_device(load_recipe(path, {"runtime.device": "cpu"}))
    monkeypatch.setenv("GESTALT_DEVICE", "cpu")  # the launcher's device stays in charge
    check_device(r)



@pytest.mark.skipif(gpu_driver_present(), reason="this machine has a GPU driver")
def test_the_dry_run_refuses_a_device_this_machine_lacks(tmp_path):
    """`runtime.device: cuda` on a machine without a GPU: one line at the dry run, exit 2, where a
    run used to record every trial as an unparseable answer."""
    path, line = recipe(tmp_path, "runtime: {device: cuda}")
    done = gestalt("recipe", str(path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert err.startswith(f"gestalt: error: {path}:{line}: runtime.device: cuda") and "\n" not in err, err
    assert "devices here: cpu" in err
