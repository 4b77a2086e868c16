"""`gestalt recipe` runs whatever can run: a model that cannot run here yet (no API key, hub
weights not in the offline cache) is named with its fix before
any work, left out, and named again at the end; the rest run, and the run exits 3 (partly ran).
A rerun once it can run adds exactly its battery to the experiment. `--models` and `--tasks`
select from the recipe."""

from __future__ import annotations

import pytest
import yaml

from harness.cli import main
from harness.exit_status import Exit
from tests import lifecycle as life
from tests.conftest import MIRROR
from tests.fake_vendor_server import FakeVendorServer

LATE_KEY = "GESTALT_LATE_TEST_KEY"  # the second vendor's key, unset until the rerun


def two_vendor_recipe(folder, url: str, **keys) -> object:
    """The lifecycle battery (silhouettes, fake vendor) on two API models: one whose key is set,
    one whose key ($GESTALT_LATE_TEST_KEY) is not."""
    path = life.api_recipe(folder, url)
    recipe = yaml.safe_load(path.read_text())
    late = {**recipe["models"][0], "id": "late-api",
            "options": {**recipe["models"][0]["options"], "api_key_env": LATE_KEY}}
    recipe["models"].append(late)
    recipe.update(keys)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


@pytest.fixture
def server():
    with FakeVendorServer(key=life.KEY, answer=life.answer) as s:
        yield s


def test_a_missing_key_leaves_its_model_out_and_a_rerun_with_it_adds_exactly_its_battery(
        tmp_path, server, monkeypatch):
    monkeypatch.delenv(LATE_KEY, raising=False)
    path = two_vendor_recipe(tmp_path, server.url)
    code, out, err = life.cli(path)
    assert code == Exit.PARTLY_RAN == 3, (out, err)
    # named with its fix before any work, and again at the end
    before = out[:out.index("fake-api:") if "fake-api:" in out else len(out)]
    assert f"model 'late-api': no API key; set the environment variable {LATE_KEY}" in out.splitlines()[1], out
    assert "left out" in before, out
    assert err.strip().splitlines()[-1].startswith("gestalt: incomplete: 1 model left out: late-api"), err
    assert LATE_KEY in err.strip().splitlines()[-1]
    assert "Traceback" not in err
    first = life.battery_runs(tmp_path)
    assert [r.info.status for r in first] == ["FINISHED"]
    assert life.battery_runs(tmp_path, "late-api") == []
    # the rerun with the key: the finished battery stays as it is, the missing one is added
    monkeypatch.setenv(LATE_KEY, life.KEY)
    code, out, err = life.cli(path)
    assert code == 0, (out, err)
    assert f"fake-api: up to date: run {first[0].info.run_id}" in out
    assert [r.info.run_id for r in life.battery_runs(tmp_path)] == [first[0].info.run_id]
    assert [r.info.status for r in life.battery_runs(tmp_path, "late-api")] == ["FINISHED"]


def test_a_bad_model_entry_still_stops_everything_with_exit_2(tmp_path, server, monkeypatch, capsys):
    """Leaving out is for what cannot run here yet; a model entry that is wrong stays bad input."""
    monkeypatch.delenv(LATE_KEY, raising=False)
    path = two_vendor_recipe(tmp_path, server.url)
    recipe = yaml.safe_load(path.read_text())
    recipe["models"][0]["options"]["concurrency"] = 0
    path.write_text(yaml.safe_dump(recipe))
    code, out, err = life.cli(path)
    assert code == 2, (out, err)
    # refused at recipe load, with file:line:key, before any model is resolved
    assert "life.yaml:" in err and "models.0.options.concurrency" in err and ">= 1" not in out, err
    assert life.battery_runs(tmp_path) == []


def test_the_dry_run_exits_as_the_run_would_and_prices_a_model_without_its_key(tmp_path, server, monkeypatch,
                                                                                capsys):
    monkeypatch.delenv(LATE_KEY, raising=False)
    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    path = two_vendor_recipe(tmp_path, server.url)
    recipe = yaml.safe_load(path.read_text())
    recipe["models"][1]["name"] = "openai/gpt-4o-mini"  # a model prices.csv prices
    del recipe["models"][1]["options"]["base_url"]
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(SystemExit) as e:
        main(["recipe", str(path), "--dry-run"])
    out, err = capsys.readouterr()
    assert e.value.code == Exit.PARTLY_RAN, (out, err)
    late = out[out.index("model late-api"):out.index("total generate")]
    assert f"  estimated: {life.TRIALS} calls, ~" in late and "input tokens" in late, late
    assert "~$" in late and "gpt-4o-mini prices" in late, late
    assert "left out" in out[out.index("--- before it runs ---"):]
    assert err.strip().startswith("gestalt: incomplete: 1 model left out: late-api"), err
    assert life.battery_runs(tmp_path) == []


# -- selecting from the recipe on the command line ----------------------------------------------------

TASKS = ["closure.nat.silhouette", "similarity.chart.mark_color"]


def selection_recipe(tmp_path):
    text = {"name": "sel", "tasks": TASKS, "data": {"mirror": str(MIRROR)}, "tracking": {"enabled": False},
            "models": [{"id": m, "source": "timm", "name": "test_vit", "weights": "random"}
                       for m in ("vit-a", "vit-b", "vit-c")]}
    path = tmp_path / "sel.yaml"
    path.write_text(yaml.safe_dump(text, sort_keys=False))
    return path


def planned(out: str) -> tuple[list[str], list[str]]:
    models = [line.split()[1] for line in out.splitlines() if line.startswith("model ")]
    tasks = list(dict.fromkeys(line.split(":")[0].strip() for line in out.splitlines()
                               if line.startswith("  ") and ": readout " in line))
    return models, tasks


@pytest.mark.parametrize("flags, models, tasks", [
    (["--models=vit-b"], ["vit-b"], TASKS),                       # fire: a str
    (["--models=vit-a,vit-c"], ["vit-a", "vit-c"], TASKS),        # fire: a tuple
    (["--models", "vit-c,vit-a"], ["vit-a", "vit-c"], TASKS),     # the recipe's order
    (["--tasks=similarity.chart.mark_color"], ["vit-a", "vit-b", "vit-c"], TASKS[1:]),
    (["--tasks=[closure.nat.silhouette]", "--models=vit-a"], ["vit-a"], TASKS[:1]),
])
def test_models_and_tasks_select_from_the_recipe(tmp_path, capsys, flags, models, tasks):
    main(["recipe", str(selection_recipe(tmp_path)), "--dry-run", *flags])
    assert planned(capsys.readouterr().out) == (models, tasks)


@pytest.mark.parametrize("flag, message", [
    ("--models=vit-ax", "--models: vit-ax is not a model of the recipe (vit-a, vit-b, vit-c); did you mean vit-a?"),
    ("--models=vit-a,vitb", "--models: vitb is not a model of the recipe (vit-a, vit-b, vit-c); did you mean vit-b?"),
    ("--tasks=closure.nat.silhuette", "--tasks: closure.nat.silhuette is not a task of the recipe"),
    ("--tasks=texture_vs_shape", "--tasks: texture_vs_shape is not a task of the recipe"),
    ("--models=", "--models needs a value"),
])
def test_an_unknown_selection_is_refused_with_the_closest_name(tmp_path, capsys, flag, message):
    with pytest.raises(SystemExit) as e:
        main(["recipe", str(selection_recipe(tmp_path)), "--dry-run", flag])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "", out
    assert message in err, err
    if "silhuette" in flag:
        assert "did you mean closure.nat.silhouette?" in err, err


def test_a_battery_name_selects_its_tasks_and_a_model_with_no_selected_task_is_left_alone():
    from harness.recipes import Recipe
    from harness.run import select

    recipe = Recipe.model_validate({
        "name": "b", "tasks": ["gestalt", "texture_vs_shape"],
        "models": [{"id": "a", "source": "timm", "name": "test_vit"},
                   {"id": "cue", "source": "timm", "name": "test_vit", "tasks": ["shape.nat.cue_conflict"]}]})
    chosen = select(recipe, tasks="gestalt")
    assert chosen.tasks == ["gestalt"] and [m.id for m in chosen.models] == ["a"]
    chosen = select(recipe, tasks=("shape.nat.cue_conflict", "closure.nat.silhouette"))
    assert chosen.tasks == ["shape.nat.cue_conflict", "closure.nat.silhouette"]
    assert [m.id for m in chosen.models] == ["a", "cue"]
    assert select(recipe) is recipe
