"""Errors that name the fix that works: each message's suggestion is a command, flag or name that
runs; an output folder that cannot be made is one line; no message speaks PyYAML's or pydantic's
words instead of the recipe's."""

import re
import shlex

import pytest

from harness.cli import CLI, UsageError, check_command_line
from harness.recipes import RecipeError, load_recipe
from tests.conftest import REPO
from tests.test_contracts import BASE, SILHOUETTE, fails, recipe_text

QUICK = str(REPO / "recipes" / "quick.yaml")


def runs(command: str) -> None:
    """A suggested `gestalt ...` command passes the command-line check (flags and arguments)."""
    words = shlex.split(command.replace("RECIPE", QUICK).replace("DIR", "/tmp"))
    assert words[0] == "gestalt", command
    assert check_command_line(CLI(), words[1:]) is None, command


def test_the_missing_data_hint_names_each_commands_own_flag():
    from harness.sources.store import MIRROR_HINT

    commands = re.findall(r"`([^`]+)`", MIRROR_HINT)
    assert any("recipe" in c and "--data.mirror=DIR" in c for c in commands), MIRROR_HINT
    for command in commands:
        runs(command)
    with pytest.raises(UsageError, match="unknown flag --mirror"):  # why the recipe's is --data.mirror
        runs("gestalt recipe RECIPE --mirror DIR")


@pytest.mark.parametrize("where", ["file", "proc"])
def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path, capsys, where):
    path = recipe_text(tmp_path, BASE)
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "out" if where == "file" else "/proc/gestalt-out"
    err = fails(["recipe", str(path), f"--output_dir={out}"], capsys)
    assert err.startswith("gestalt: error: command line: output_dir: "), err
    assert (f"{tmp_path / 'afile'} is a file" in err if where == "file" else "cannot be made" in err), err
    assert "--output_dir=DIR" in err


def test_a_single_task_override_is_a_list_of_one(tmp_path):
    path = recipe_text(tmp_path, BASE)
    assert load_recipe(path, {"tasks": SILHOUETTE}).tasks == [SILHOUETTE]
    assert load_recipe(path, {"tasks": f"[{SILHOUETTE}]"}).tasks == [SILHOUETTE]
    assert check_command_line(CLI(), ["recipe", str(path), f"--tasks={SILHOUETTE}"]) is None


def test_a_misspelt_recipe_path_gets_the_closest_file(capsys):
    err = fails(["recipe", "recipes/quik.yaml"], capsys)
    assert err.endswith("did you mean recipes/quick.yaml?"), err
    assert (REPO / "recipes" / "quick.yaml").is_file()


def test_a_misspelt_timm_name_gets_the_closest_one(tmp_path):
    import harness.run as run
    from harness.models.base import ModelError

    path = recipe_text(tmp_path, BASE.replace("name: test_vit, weights: random", "name: mobilenetv2_1000"))
    wanted = r"timm has no architecture 'mobilenetv2_1000'; did you mean mobilenetv2_100\?"
    with pytest.raises(ModelError, match=wanted):
        run.preflight(load_recipe(path))


@pytest.mark.parametrize("argv", [["--hlep"], ["recipe", QUICK, "--hlep"]])
def test_a_misspelt_help_flag_gets_help(argv):
    with pytest.raises(UsageError, match=r"did you mean --help\?"):
        check_command_line(CLI(), argv)


def test_pydantic_value_error_prefix_does_not_leak(tmp_path):
    path = recipe_text(tmp_path, BASE.replace("weights: random", "weights: random, batch_size: many"))
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert "batch_size must be an integer" in str(e.value) and "Value error" not in str(e.value)


@pytest.mark.parametrize("text, words", [
    ("a: b: c\n", "a second ': ' on the line"),
    ("tasks:\n\t- x\n", "a tab: indent with spaces"),
    ("tasks: [a, b\n", "a '[' list not closed by ']'"),
    ('name: "x\n', "a quote opened and never closed"),
    ("runtime:\n  device: cpu\n seed: 1\n", "does not line up"),
])
def test_yaml_errors_in_the_recipes_words(tmp_path, text, words):
    path = recipe_text(tmp_path, text)
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    message = str(e.value)
    assert re.match(rf"{re.escape(str(path))}:\d+:\d+: not valid YAML: ", message), message
    assert words in message
    for pyyaml in ("mapping values", "block end", "stream", "scanning", "token", "flow sequence"):
        assert pyyaml not in message, message


def test_recipe_help_shows_an_example_that_runs_and_the_keys_users_override():
    text = check_command_line(CLI(), ["recipe", "--help"])
    example = re.search(r"Example: (gestalt recipe .+)", text).group(1)
    runs(example)
    for key in ("--tasks=", "--output_dir=", "--data.mirror=", "--tracking.uri=", "--tracking.experiment=",
                "--runtime.device=", "--seed="):
        assert key in text, key

