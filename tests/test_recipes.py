"""Strict recipes: unknown keys and bad values name file, line and key; extends and overrides."""

import pytest

from harness.recipes import RecipeError, load_recipe
from harness.stimuli.registry import expand
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
    with pytest.raises(RecipeError, match=r"r\.yaml:\d+:\d+: not valid YAML"):
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


# -- task variants (BASE:VARIANT) and task_options keys ------------------------------------------

HAEHN = "ratio.chart.haehn_type1"
TINY = {"n_train": 30, "n_val": 10, "n_test": 20}


def test_task_variant_is_the_base_task_under_its_own_id():
    from harness.stimuli.registry import TASKS, UnknownTask, base_task_id, expand, get_task

    spec = get_task(f"{HAEHN}:step_a")
    base = TASKS[HAEHN]
    assert spec.task_id == f"{HAEHN}:step_a" and base.task_id == HAEHN  # the registry is unchanged
    assert (spec.builder, spec.readouts, spec.scoring, spec.battery, spec.defaults) == \
        (base.builder, base.readouts, base.scoring, base.battery, base.defaults)
    assert (spec.principle, spec.track) == ("ratio", "chart")
    assert get_task(HAEHN) is base and base_task_id(f"{HAEHN}:Step-2_b") == HAEHN
    assert expand([f"{HAEHN}:step_a", HAEHN, f"{HAEHN}:step_a", f"{HAEHN}:step-b"]) == \
        [f"{HAEHN}:step_a", HAEHN, f"{HAEHN}:step-b"]
    assert expand(["bars", f"{HAEHN}:x"])[-1] == f"{HAEHN}:x"
    for bad in ("ratio.chart.haehn_type9:step_a", f"{HAEHN}:", f"{HAEHN}:a.b", f"{HAEHN}:a:b",
                f"{HAEHN}:a b", "bars:x"):
        with pytest.raises(UnknownTask, match="unknown task"):
            expand([bad])


def test_variant_stimuli_carry_the_variant_id_and_hash_apart(sources):
    from harness.stimuli.registry import get_task

    base = get_task(HAEHN).build(sources, **TINY)
    variant = get_task(f"{HAEHN}:step_a").build(sources, **TINY)
    assert base.task_id == HAEHN and variant.task_id == f"{HAEHN}:step_a"
    assert [s.sha256 for s in variant.stimuli] == [s.sha256 for s in base.stimuli]  # same charts
    assert variant.sha256 != base.sha256
    assert get_task(f"{HAEHN}:step_a").build(sources, **TINY).sha256 == variant.sha256
    assert get_task(HAEHN).build(sources, **TINY).task_id == HAEHN  # the base set is not renamed


VARIANTS = f"""\
name: variants
models:
  - id: m1
    source: timm
    name: test_vit
tasks: [{HAEHN}, "{HAEHN}:step_a", "{HAEHN}:step-b"]
task_options:
  {HAEHN}: {{n_train: 30}}
  {HAEHN}:step_a: {{values: cleveland-mcgill-20}}
"""


def test_dotted_overrides_resolve_task_ids_with_dots_and_colons(tmp_path):
    p = write(tmp_path, "v.yaml", VARIANTS)
    r = load_recipe(p, {f"task_options.{HAEHN}:step_a.values": "random",
                        f"task_options.{HAEHN}.n_train": "50",
                        f"task_options.{HAEHN}.n_val": "7",
                        f"task_options.{HAEHN}:step_b.marked": "adjacent",  # fire reads '-' as '_'
                        "seed": "3"})
    assert r.task_options == {HAEHN: {"n_train": 50, "n_val": 7},
                              f"{HAEHN}:step_a": {"values": "random"},
                              f"{HAEHN}:step-b": {"marked": "adjacent"}}
    # a whole entry, and a task that the same command line adds
    r = load_recipe(p, {f"task_options.{HAEHN}:c": '{"values": "random", "marked": "adjacent"}',
                        "tasks": f"[{HAEHN}, '{HAEHN}:c']", "task_options": "{}"})
    assert r.tasks == [HAEHN, f"{HAEHN}:c"]
    assert r.task_options == {f"{HAEHN}:c": {"values": "random", "marked": "adjacent"}}
    # battery names expand: any of the battery's tasks takes options
    r = load_recipe(p, {"tasks": "[bars]", "task_options": "{}",
                        "task_options.ratio.chart.grape_type3.n_test": "5"})
    assert r.task_options == {"ratio.chart.grape_type3": {"n_test": 5}}
    with pytest.raises(RecipeError, match=rf"override task_options\.ratio\.chart\.haehn_typ1\.values: "
                                          rf"names no task of the recipe \(tasks: {HAEHN}, "):
        load_recipe(p, {"task_options.ratio.chart.haehn_typ1.values": "random"})


def test_task_options_key_naming_no_task_is_an_error_with_its_line(tmp_path):
    typo = VARIANTS.replace(f"  {HAEHN}:step_a:", f"  {HAEHN}:stepa:")
    p = write(tmp_path, "t.yaml", typo)
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}:9: task_options.{HAEHN}:stepa: not a task of this recipe")
    assert f"(tasks: {HAEHN}, {HAEHN}:step_a, {HAEHN}:step-b)" in msg
    with pytest.raises(RecipeError, match=rf"^command line: task_options\.{HAEHN}x: not a task"):
        load_recipe(write(tmp_path, "ok.yaml", VARIANTS), {"task_options": f'{{"{HAEHN}x": {{}}}}'})
    # `--tasks=[...]` runs a subset: the other tasks' options stay, unused; a typo still fails
    ok = write(tmp_path, "ok.yaml", VARIANTS)
    r = load_recipe(ok, {"tasks": f"['{HAEHN}:step_a']"})
    assert r.tasks == [f"{HAEHN}:step_a"] and HAEHN in r.task_options
    with pytest.raises(RecipeError, match=rf"{p}:9: task_options\.{HAEHN}:stepa: not a task"):
        load_recipe(p, {"tasks": f"['{HAEHN}:step_a']"})
    with pytest.raises(RecipeError, match="names no task of the recipe"):
        load_recipe(ok, {"tasks": f"['{HAEHN}:step_a']", "task_options.ratio.chart.haehn_typ1": "{}"})
    # so does a per-model readout override for a task the recipe does not run
    bad = VARIANTS.replace("    name: test_vit\n",
                           "    name: test_vit\n    readouts: {closure.nat.silhouette: prototype}\n")
    with pytest.raises(RecipeError, match=r"r\.yaml:6: models\.0\.readouts\.closure\.nat\.silhouette: not a task"):
        load_recipe(write(tmp_path, "r.yaml", bad))
    # an unknown task in tasks names its line too
    bad = VARIANTS.replace(f'"{HAEHN}:step-b"', "closure.nat.silhuette")
    with pytest.raises(RecipeError, match=r"b\.yaml:6: tasks\.2: unknown task 'closure\.nat\.silhuette'"):
        load_recipe(write(tmp_path, "b.yaml", bad))


@pytest.mark.parametrize("path", sorted((REPO / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_loads_and_plans(path):
    from harness.readouts.registry import get_readout
    from harness.run import plan

    recipe = load_recipe(path)
    planned = plan(recipe)
    assert [p.model.id for p in planned] == [m.id for m in recipe.models]
    for p, entry in zip(planned, recipe.models):
        own = None if entry.tasks is None else expand(entry.tasks)  # a model's share of the tasks
        assert [task.task_id for task, _ in p.tasks] == [t for t in expand(recipe.tasks) if own is None or t in own]
        for _, readout in p.tasks:
            get_readout(readout)  # raises for an unknown readout


def test_a_model_answers_only_its_own_tasks_and_they_must_be_the_recipes(tmp_path):
    from harness.run import plan

    text = ("name: t\nmodels:\n  - {id: a, source: timm, name: resnet18}\n"
            "  - {id: b, source: timm, name: resnet18, tasks: [similarity.chart.mark_color]}\n"
            "tasks: [gestalt]\n")
    planned = plan(load_recipe(write(tmp_path, "own.yaml", text)))
    assert [len(p.tasks) for p in planned] == [4, 1] and planned[1].tasks[0][0].task_id == "similarity.chart.mark_color"
    bad = text.replace("tasks: [similarity.chart.mark_color]", "tasks: [closure.nat.edges]")
    with pytest.raises(RecipeError,
                       match=r"own\.yaml:4: models\.1\.tasks\.0: closure\.nat\.edges is not a task of this recipe"):
        load_recipe(write(tmp_path, "own.yaml", bad))


@pytest.mark.parametrize("key, value", [("name", "r" * 300), ("name", "r" * 1_000_000), ("id", "m" * 300)])
def test_a_name_longer_than_a_folder_name_is_refused_with_its_line(tmp_path, key, value):
    """Recipe names and model ids name output folders: over 100 characters is refused at load
    (a file system takes 255 bytes a name), not by the run's first mkdir."""
    text = BASE.replace("name: base", f"name: {value}") if key == "name" else BASE.replace("id: m1", f"id: {value}")
    line = 1 if key == "name" else 3
    with pytest.raises(RecipeError, match=rf"r\.yaml:{line}: (models\.0\.)?{key}: .*at most 100 characters"):
        load_recipe(write(tmp_path, "r.yaml", text))


@pytest.mark.parametrize("task, option", [("similarity.chart.series_count", "n_train"),
                                          ("similarity.chart.series_count", "n_test"),
                                          ("ratio.chart.grape_type1", "n_train"),
                                          ("ratio.chart.haehn_type1", "n_test")])
def test_a_stimulus_count_no_run_could_finish_is_refused_with_its_line(tmp_path, task, option):
    text = BASE.replace("closure.nat.silhouette", task) + f"task_options:\n  {task}:\n    {option}: 1000000000\n"
    with pytest.raises(RecipeError, match=rf"r\.yaml:12: task_options\.{task}\.{option}: .*less than or equal"):
        load_recipe(write(tmp_path, "r.yaml", text))


@pytest.mark.parametrize("setting, value", [("seed", "true"), ("runtime.processes", "true"),
                                            ("bootstrap.n_boot", "true"), ("seed", "'٤٠'"),
                                            ("models.0.batch_size", "٤٠"), ("runtime.processes", "'2'")])
def test_integers_are_integers_not_booleans_text_or_other_digits(tmp_path, setting, value):
    """YAML's ``true`` is not 1 and ``٤٠`` (Arabic-Indic digits) is not 40: refused, naming the key."""
    with pytest.raises(RecipeError, match=rf"^command line: {setting.replace('.', '[.]')}: "):
        load_recipe(write(tmp_path, "r.yaml", BASE), {setting: value})


def test_the_bootstrap_section_is_what_every_scorer_receives_under_the_same_names(tmp_path):
    """One Bootstrap from recipe to scorer: no second class with other field names or defaults."""
    from harness.scores.tasks import Bootstrap

    recipe = load_recipe(write(tmp_path, "r.yaml", BASE + "bootstrap: {n_boot: 300, n_boot_kappa: 400, seed: 7}\n"))
    assert recipe.bootstrap == Bootstrap(n_boot=300, n_boot_kappa=400, seed=7)
    assert load_recipe(write(tmp_path, "d.yaml", BASE)).bootstrap == Bootstrap()
    with pytest.raises(ValueError, match="n_boot"):
        Bootstrap(n_boot=50)  # the recipe's floor holds for a scorer called from Python too


def test_a_model_spec_is_the_typed_entry_not_a_copy_of_some_fields(tmp_path):
    """Every field ModelSpec shares with a recipe's model entry arrives, by name and type."""
    import dataclasses

    from harness.models.base import ModelSpec

    text = BASE.replace("    weights: random\n", "    weights: random\n    family: f\n    dtype: bfloat16\n"
                        "    precision: auto\n    batch_size: auto\n    generation: {temperature: 0.5}\n"
                        "    options: {max_batch_size: 64}\n    trust_remote_code: true\n")
    entry = load_recipe(write(tmp_path, "r.yaml", text)).models[0]
    spec = entry.spec()
    for f in dataclasses.fields(ModelSpec):
        if f.name != "options":
            assert getattr(spec, f.name) == getattr(entry, f.name), f.name
    assert spec.options == {"max_batch_size": 64, "generation": {"temperature": 0.5}}
    assert (spec.dtype, spec.precision, spec.batch_size, spec.family) == ("bfloat16", "auto", "auto", "f")


def test_stylized_imagenet_networks_share_one_family():
    """Every network the published-CNNs recipe marks as trained on Stylized-ImageNet ("-60ep": 60
    epochs on it) is in the Stylized-ImageNet family, so figures coloured by family group them."""
    recipe = load_recipe(REPO / "recipes" / "published-cnns.yaml")
    stylized = [m for m in recipe.models if m.id.endswith("-60ep")]
    assert {m.id for m in stylized} >= {"resnet50-60ep", "alexnet-60ep", "vgg16-60ep"}
    assert {m.id: m.family for m in stylized} == {m.id: "cnn-stylized" for m in stylized}
