"""`gestalt recipe full.yaml` from any folder: bare names resolve to the recipes shipped as package
data, a local path wins, `gestalt recipes` lists them, the wheel carries them."""

import os
import subprocess
import sys
import zipfile

import pytest
import yaml

from harness.errors import GestaltError
from harness.shipped import resolve_recipe, shipped_recipes
from tests.conftest import REPO

RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


def gestalt(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, check=False,
                          cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("name", ["full.yaml", "full", "quick", "quick.yaml"])
def test_bare_name_resolves_to_the_shipped_recipe(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stem = name.removesuffix(".yaml")
    assert resolve_recipe(name).read_bytes() == (REPO / "recipes" / f"{stem}.yaml").read_bytes()


def test_a_local_path_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quick.yaml").write_text("name: mine\n")
    assert resolve_recipe("quick.yaml") == tmp_path.joinpath("quick.yaml").relative_to(tmp_path)
    assert resolve_recipe("recipes/quick.yaml").as_posix() == "recipes/quick.yaml"  # as given


def test_unknown_bare_name_is_one_line_with_the_shipped_names(tmp_path):
    done = gestalt("recipe", "fulll.yaml", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "fulll.yaml: recipe file not found" in done.stderr and "full, " in done.stderr
    with pytest.raises(GestaltError):
        resolve_recipe("fulll")


def test_recipe_runs_by_bare_name_from_another_folder(tmp_path):
    done = gestalt("recipe", "quick.yaml", "--dry-run", "--data.mirror", str(REPO.parent / "shared" / "sources"),
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "name: quick" in done.stdout


def test_gestalt_recipes_lists_every_shipped_recipe_with_its_description(tmp_path):
    done = gestalt("recipes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [p.stem for p in RECIPES]
    for line, path in zip(lines, RECIPES):
        assert line.endswith(yaml.safe_load(path.read_text())["description"]), line
    assert list(shipped_recipes()) == [p.stem for p in RECIPES]


def test_wheel_carries_the_recipes_as_package_data(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path), str(REPO)],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {f"harness/shipped_recipes/{p.name}" for p in RECIPES} <= names
