"""The command line never guesses: a value-taking flag without its value, a misspelt recipe key,
override path, task id or recipe name each stop before anything is done, with one line that says
where the mistake is (file:line or the command line) and the closest known name."""

import os
import subprocess
import sys

import pytest

from harness.cli import main
from harness.exit_status import Exit
from tests.conftest import MIRROR, REPO
from tests.test_contracts import recipe_text as recipe

SILHOUETTE = "closure.nat.silhouette"


def fails(args, capsys) -> str:
    """The CLI in this process: exit 2, one line on stderr, nothing on stdout; that line."""
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "\n" not in err.strip() and "Traceback" not in err, (out, err)
    return err.strip()


BASE = f"""name: t
models:
  - {{id: m, source: timm, name: test_vit, weights: random}}
tasks: [{SILHOUETTE}]
data: {{mirror: {MIRROR}}}
tracking: {{enabled: false}}
"""


# -- a flag that takes a value, given none ---------------------------------------------------------

@pytest.mark.parametrize("argv, flag", [
    (["register", "RUN", "--alias"], "--alias"),
    (["register", "RUN", "--alias", "--uri", "sqlite:///x.db"], "--alias"),
    (["register", "RUN", "--alias="], "--alias"),
    (["report", "--out"], "--out"),
    (["score", "r.jsonl", "--seed"], "--seed"),
    (["recipe", "quick", "--shard"], "--shard"),
    (["recipe", "quick", "--runtime.processes"], "--runtime.processes"),
    (["stimuli", "similarity.chart.series_count", "--n_test", "--out", "D"], "--n_test"),
])
def test_a_value_flag_without_its_value_is_refused_naming_it(tmp_path, capsys, monkeypatch, argv, flag):
    """fire turns a bare flag into True: `register RUN --alias` set an alias named "True" and
    `report --out` wrote the report into ./True."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    err = fails(argv, capsys)
    assert f"{flag} needs a value" in err, err
    assert list(tmp_path.iterdir()) == []  # no store, no ./True


def test_a_bool_flag_needs_no_value(tmp_path, capsys):
    main(["recipe", str(recipe(tmp_path, BASE)), "--dry-run", "--new-run"])
    assert "model m" in capsys.readouterr().out


# -- did you mean ------------------------------------------------------------------------------------

def test_a_misspelt_recipe_key_names_its_line_and_the_closest_key(tmp_path, capsys):
    path = recipe(tmp_path, BASE + "bootstrap: {n_bot: 200}\n")
    err = fails(["recipe", str(path), "--dry-run"], capsys)
    assert err == f"gestalt: error: {path}:7: bootstrap.n_bot: unknown key; did you mean n_boot?", err
    path = recipe(tmp_path, BASE.replace("weights: random", "weights: random, batch_sise: 4"))
    err = fails(["recipe", str(path), "--dry-run"], capsys)
    assert f"{path}:3: models.0.batch_sise: unknown key; did you mean batch_size?" in err, err
    path = recipe(tmp_path, BASE + "seeed: 3\n")
    assert f"{path}:7: seeed: unknown key; did you mean seed?" in fails(["recipe", str(path), "--dry-run"], capsys)


@pytest.mark.parametrize("override, key, guess", [
    ("--runtime.procesess=2", "runtime.procesess", "did you mean processes?"),
    ("--runtim.processes=2", "runtim", "did you mean runtime?"),
    ("--bootstrap.n_bot=200", "bootstrap.n_bot", "did you mean n_boot?"),
])
def test_a_misspelt_override_is_blamed_on_the_command_line(tmp_path, capsys, override, key, guess):
    """Not on the recipe file it overrides (`--runtim.processes` was blamed on quick.yaml)."""
    path = recipe(tmp_path, BASE)
    err = fails(["recipe", str(path), override, "--dry-run"], capsys)
    assert err.startswith(f"gestalt: error: command line: {key}: unknown key"), err
    assert err.endswith(guess), err
    assert str(path) not in err


def test_a_misspelt_task_id_gets_the_closest_task(tmp_path, capsys):
    path = recipe(tmp_path, BASE.replace(SILHOUETTE, "closure.nat.silhuette"))
    err = fails(["recipe", str(path), "--dry-run"], capsys)
    assert err.startswith(f"gestalt: error: {path}:4: tasks.0: unknown task 'closure.nat.silhuette'; "
                          f"did you mean {SILHOUETTE}?"), err
    err = fails(["recipe", str(recipe(tmp_path, BASE)), "--dry-run", "--tasks=[closure.nat.silhuette]"], capsys)
    assert err.startswith("gestalt: error: --tasks: closure.nat.silhuette is not a task of the recipe"), err
    assert err.endswith(f"did you mean {SILHOUETTE}?"), err


def test_a_misspelt_readout_setting_gets_the_closest_setting(tmp_path, capsys):
    path = recipe(tmp_path, BASE.replace("{id: m, source: timm, name: test_vit, weights: random}",
                                         "{id: m, source: api, name: openai/x, generation: {temprature: 0.2}}"))
    err = fails(["recipe", str(path), "--dry-run"], capsys)
    assert err.startswith(f"gestalt: error: {path}:3: models.0.generation.temprature: "), err
    assert "did you mean temperature?" in err, err


def test_a_misspelt_recipe_name_gets_the_closest_shipped_one(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = fails(["recipe", "quik", "--dry-run"], capsys)
    assert "quik: recipe file not found here" in err and err.endswith("did you mean quick?"), err


def test_every_command_lists_offline_in_its_help(capsys):
    """--offline is taken by every command (main() reads it); `recipe --help` did not list it."""
    from harness.cli import CLI, _commands

    cli = CLI()
    commands = [[name] for name, member in _commands(cli).items() if callable(member)]
    commands += [[group, name] for group, member in _commands(cli).items() if not callable(member)
                 for name in _commands(member)]
    for argv in commands:
        main([*argv, "--help"])
        assert "  --offline" in capsys.readouterr().out, argv


# -- the design card's command plans without keys ----------------------------------------------------

API = "{id: gpt, source: api, name: openai/gpt-4o-mini}"
MISSING_WEIGHTS = "{id: lost, source: timm, name: test_vit, weights: /nowhere/lost.safetensors}"


def without_keys():
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}


def test_dry_run_prints_the_plan_then_every_missing_prerequisite(tmp_path):
    text = BASE.replace("  - {id: m", f"  - {API}\n  - {{id: claude, source: api, name: anthropic/claude-3-5-haiku}}\n"
                                      "  - {id: m")
    path = recipe(tmp_path, text)
    done = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path), "--dry-run"],
                          capture_output=True, text=True, env=dict(without_keys(), HF_HUB_OFFLINE="1"),
                          cwd=REPO)
    assert done.returncode == Exit.PARTLY_RAN, (done.stdout, done.stderr)  # as the run: m runs, 2 left out
    out = done.stdout
    # the whole plan, every model, before the block
    for model in ("model gpt", "model claude", "model m"):
        assert model in out, out
    block = out[out.index("left out until fixed (2;"):]
    assert out.index("model m") < out.index("left out until fixed")
    assert "OPENAI_API_KEY" in block and "ANTHROPIC_API_KEY" in block, block
    assert "model 'gpt'" in block and "model 'claude'" in block
    assert done.stderr.startswith("gestalt: incomplete: 2 models left out: gpt (no API key; "), done.stderr


def test_a_real_run_names_every_model_it_leaves_out_before_any_run_exists(tmp_path, capsys, monkeypatch):
    text = BASE.replace("tracking: {enabled: false}",
                        f"tracking: {{uri: 'sqlite:///{tmp_path}/mlflow.db', experiment: t}}")
    text = text.replace("  - {id: m, source: timm, name: test_vit, weights: random}",
                        f"  - {API}\n  - {API.replace('gpt', 'gpt2')}")
    for name in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(name)
    with pytest.raises(SystemExit) as e:
        main(["recipe", str(recipe(tmp_path, text))])
    out, err = capsys.readouterr()
    assert e.value.code == Exit.NOTHING_RAN  # every model left out
    assert out.splitlines()[:3] == [
        "left out until fixed (2; the rest run, then a rerun adds their batteries):",
        "  model 'gpt': no API key; set the environment variable OPENAI_API_KEY",
        "  model 'gpt2': no API key; set the environment variable OPENAI_API_KEY"], out
    assert err.startswith("gestalt: incomplete: 2 models left out: gpt (no API key; "), err

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    exp = mlflow.get_experiment_by_name("t")
    assert exp is None or mlflow.search_runs([exp.experiment_id], output_format="list") == []


def test_the_design_cards_dry_run_plans_every_model_without_keys(tmp_path):
    """`gestalt recipe full.yaml --dry-run` stopped at the first missing API key, with no plan."""
    import yaml

    from harness.shipped import resolve_recipe

    ids = [m["id"] for m in yaml.safe_load(resolve_recipe("full").read_text())["models"]]
    done = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", "full.yaml", "--dry-run",
                           f"--data.mirror={MIRROR.resolve()}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900,
                          env=dict(without_keys(), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO),
                                   HF_HOME=str(tmp_path / "hf")))
    assert done.returncode == Exit.NOTHING_RAN, done.stderr  # no key, an empty hub cache: every model left out
    planned = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("model ")]
    assert planned == ids
    block = done.stdout[done.stdout.index("--- before it runs ---"):]
    assert "OPENAI_API_KEY" in block and "ANTHROPIC_API_KEY" in block, block
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gestalt: incomplete: ") and "claude-opus-4.6 (no API key; set" in last, last


def test_the_dry_run_names_timm_hub_weights_not_in_the_cache(tmp_path):
    """A timm model with ``weights: hub`` whose files the Hugging Face cache lacks (an empty
    HF_HOME) is a missing prerequisite when nothing may be downloaded, as an hf model's is."""
    path = recipe(tmp_path, BASE.replace("weights: random", "weights: hub"))
    done = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path), "--dry-run"],
                          capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf")))
    assert done.returncode == Exit.NOTHING_RAN, (done.stdout, done.stderr)  # its only model left out
    block = done.stdout[done.stdout.index("left out until fixed"):]
    assert ("model 'm': timm/test_vit.r160_in1k is not in the local Hugging Face cache "
            f"{tmp_path / 'hf' / 'hub'}, ") in block, block
