"""Strict recipes: unknown keys and bad values name file, line and key; extends and overrides."""

import pytest

from harness.recipes import RecipeError, load_recipe
from tests.conftest import REPO

BASE = """\
name: base
models:
  - id: m1
    source: timm
    name: test_vit
    weights: random
tasks: [closure.nat.silhouette]
runtime:
  processes: 1
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_quick_recipe_loads_and_hash_is_stable():
    a = load_recipe(REPO / "recipes/quick.yaml")
    b = load_recipe(REPO / "recipes/quick.yaml")
    assert a.sha256 == b.sha256 and len(a.models) == 3


def test_unknown_key_names_line_and_key(tmp_path):
    p = write(tmp_path, "r.yaml", BASE.replace("  processes: 1", "  processes: 1\n  procesess: 2"))
    with pytest.raises(RecipeError, match=r"r\.yaml:10: runtime\.procesess: unknown key"):
        load_recipe(p)


def test_mistyped_value_names_line(tmp_path):
    p = write(tmp_path, "r.yaml", BASE.replace("source: timm", "source: tim"))
    with pytest.raises(RecipeError, match=r"r\.yaml:4: models\.0\.source"):
        load_recipe(p)


def test_invalid_yaml_names_line(tmp_path):
    p = write(tmp_path, "r.yaml", BASE + "bad: [unclosed\n")
    with pytest.raises(RecipeError, match=r"r\.yaml:\d+: not valid YAML"):
        load_recipe(p)


def test_extends_deep_merges_and_overrides_apply_last(tmp_path):
    write(tmp_path, "base.yaml", BASE)
    child = write(tmp_path, "child.yaml", "extends: base.yaml\nname: child\nruntime:\n  progress: false\n")
    r = load_recipe(child, {"runtime.processes": "2", "models.0.batch_size": 4, "seed": "7"})
    assert r.name == "child" and r.runtime.processes == 2 and r.runtime.progress is False
    assert r.models[0].batch_size == 4 and r.seed == 7
    with pytest.raises(RecipeError, match="command line: runtime.processes"):
        load_recipe(child, {"runtime.processes": "two"})


def test_extends_cycle_and_missing_file(tmp_path):
    write(tmp_path, "a.yaml", "extends: b.yaml\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\n")
    with pytest.raises(RecipeError, match="cycle"):
        load_recipe(tmp_path / "a.yaml")
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path / "nope.yaml")


def test_duplicate_model_ids_and_revision_format(tmp_path):
    dup = BASE.replace("tasks:", "  - {id: m1, source: timm, name: test_vit}\ntasks:")
    with pytest.raises(RecipeError, match="appears twice"):
        load_recipe(write(tmp_path, "d.yaml", dup))
    rev = BASE.replace("weights: random", "weights: hub\n    revision: main")
    with pytest.raises(RecipeError, match="40-hex"):
        load_recipe(write(tmp_path, "v.yaml", rev))
