"""Typed contracts at the stage boundaries and bad recipe input stopping before any run exists:
one line naming file:line and key, exit status 2."""

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from tests.conftest import MIRROR

SILHOUETTE = "closure.nat.silhouette"
SERIES = "similarity.chart.series_count"
TINY_VIT = {"id": "tiny-vit", "source": "timm", "name": "test_vit", "weights": "random", "batch_size": 40}


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any attempt to resolve or load a model fails the test: errors must come first. (Planning
    makes each adapter, which loads nothing, to learn its capabilities.)"""
    import harness.models.registry
    import harness.planning

    def refuse(*a, **k):
        raise AssertionError("a model was resolved or loaded before the bad input was reported")

    real = harness.planning.make_adapter

    def guarded(spec):
        adapter = real(spec)
        adapter.check = adapter.to = adapter.embed = adapter.generate = adapter.predict = refuse
        return adapter

    monkeypatch.setattr(harness.models.registry, "build_adapter", refuse)
    monkeypatch.setattr(harness.planning, "make_adapter", guarded)


def fails(args, capsys) -> str:
    """Run the CLI, expect exit 2 with exactly one line on stderr; return it."""
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def recipe_text(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = f"""name: t
models:
  - {{id: m, source: timm, name: test_vit, weights: random}}
tasks: [{SILHOUETTE}, {SERIES}]
data: {{mirror: {MIRROR}}}
tracking: {{enabled: false}}
"""


# -- 1. task options typed by the builder ------------------------------------------------------

@pytest.mark.parametrize("options, line, key, what", [
    (f"  {SILHOUETTE}: {{n_tset: 5}}", 8, f"task_options.{SILHOUETTE}.n_tset", "unknown key"),
    (f"  {SERIES}:\n    n_test: many", 9, f"task_options.{SERIES}.n_test", "valid integer"),
    (f"  {SERIES}:\n    k_values: [0, 4]", 9, f"task_options.{SERIES}.k_values.0", "greater than or equal to 1"),
])
def test_bad_task_option_exits_2_with_file_line_before_any_model(tmp_path, capsys, no_model_loads,
                                                                  options, line, key, what):
    path = recipe_text(tmp_path, BASE + "task_options:\n" + options + "\n")
    for args in (["recipe", str(path)], ["recipe", str(path), "--dry-run"]):
        err = fails(args, capsys)
        assert err.startswith(f"gestalt: error: {path}:{line}: {key}: "), err
        assert what in err


def test_every_builder_declares_its_options_as_its_signature():
    """The Options model of each task is its builder's keyword arguments, names and defaults."""
    import inspect

    from harness.lazy import resolve
    from harness.stimuli.registry import TASKS

    for spec in TASKS.values():
        params = {k: p.default for k, p in inspect.signature(resolve(spec.builder)).parameters.items()
                  if k not in ("sources", "seed")}
        fields = {k: f.default for k, f in spec.options_model().model_fields.items()}
        assert params == fields, spec.task_id


def test_builder_value_checks_name_the_recipe_line(tmp_path, capsys, no_model_loads):
    """A value only the builder can judge (THINGS n_triplets above the data's 1,000) still stops
    in preflight, naming the task_options line."""
    path = recipe_text(tmp_path, BASE.replace(SERIES, "similarity.nat.things")
                       + "task_options:\n  similarity.nat.things: {n_triplets: 5000}\n")
    err = fails(["recipe", str(path), "--dry-run"], capsys)
    assert f"{path}:8: task_options.similarity.nat.things: " in err and "n_triplets" in err


# -- readout settings: their own key, typed, checked at load and in preflight --------------------

def test_readout_settings_live_under_readout_and_are_checked_before_any_run(tmp_path, capsys, monkeypatch):
    from harness.recipes import RecipeError, load_recipe
    from harness.run import preflight

    monkeypatch.setattr("harness.tracking.mlflow_run.BatteryRun.__enter__",
                        lambda self: pytest.fail("an MLflow run started"))
    text = BASE + f"task_options:\n  {SERIES}:\n    n_test: 20\n    readout: {{alpha: 2.0}}\n"
    path = recipe_text(tmp_path, text)
    with pytest.raises(RecipeError, match=rf"{path}:10: task_options.{SERIES}.readout.alpha: unknown key; "
                                          r"did you mean alphas\?"):
        load_recipe(path)  # at load, as the task's own options are: before any model or data
    err = fails(["recipe", str(path), "--dry-run"], capsys)
    assert err.startswith(f"gestalt: error: {path}:10: task_options.{SERIES}.readout.alpha: "), err
    bad_type = recipe_text(tmp_path, text.replace("alpha: 2.0", "folds: many"), "bad.yaml")
    with pytest.raises(RecipeError, match=rf"bad.yaml:10: task_options.{SERIES}.readout.folds: .*integer"):
        load_recipe(bad_type)
    # a setting the task's readout takes plans, and the built readouts are kept for the run
    good = recipe_text(tmp_path, text.replace("alpha: 2.0", "folds: 3"), "good.yaml")
    recipe = load_recipe(good)
    assert recipe.builder_options(SERIES) == {"n_test": 20}
    assert recipe.readout_options(SERIES) == {"folds": 3}
    planned, _, _ = preflight(recipe)
    assert set(planned[0].readouts) == {SILHOUETTE, SERIES}
    assert planned[0].readouts[SERIES].folds == 3


def test_misspelt_generation_key_stops_in_preflight(tmp_path, capsys, monkeypatch):
    """`temprature` today only changes the cache key (every trial reruns); now it names the line."""
    text = BASE.replace("{id: m, source: timm, name: test_vit, weights: random}",
                        "{id: m, source: api, name: openai/x, generation: {temprature: 0.2}}")
    path = recipe_text(tmp_path, text.replace(f", {SERIES}", ""))
    err = fails(["recipe", str(path), "--dry-run"], capsys)
    assert err.startswith(f"gestalt: error: {path}:3: models.0.generation.temprature: "), err


def test_unknown_readout_negative_seed_missing_weights_and_image_root(tmp_path, capsys, no_model_loads):
    cases = [
        (BASE.replace("weights: random}", f"weights: random, readouts: {{{SERIES}: ridgee}}}}"),
         3, "models.0.readouts." + SERIES, "unknown readout 'ridgee'"),
        (BASE + "seed: -1\n", 7, "seed", "greater than or equal to 0"),
        (BASE.replace("weights: random", f"weights: {tmp_path}/nope.pt"), 3, "models.0.weights", "no such file"),
        (BASE.replace(SERIES, "similarity.nat.things")
         + f"task_options:\n  similarity.nat.things: {{image_root: {tmp_path}/none}}\n",
         8, "task_options.similarity.nat.things.image_root", "not a folder"),
    ]
    for text, line, key, what in cases:
        path = recipe_text(tmp_path, text)
        err = fails(["recipe", str(path), "--dry-run"], capsys)
        assert err.startswith(f"gestalt: error: {path}:{line}: {key}"), err
        assert what in err, err


# -- 2. scoring families and one Bootstrap -------------------------------------------------------

def test_bar_chart_scores_follow_n_boot(sources):
    from harness.scores.tasks import Bootstrap, get_family
    from harness.stimuli.registry import get_task

    task = get_task("ratio.chart.haehn_type1")
    stimset = task.build(sources, n_train=0, n_val=0, n_test=40)
    rng = np.random.default_rng(0)
    records = [{"stimulus_id": s.stimulus_id, "response": float(s.ground_truth) * rng.uniform(0.7, 1.3),
                "ground_truth": float(s.ground_truth), "parse_status": "ok", "manipulated_value": None,
                "raw_output": None} for s in stimset.test]
    family = get_family(task.scoring)
    few = {s.name: s for s in family.score(records, stimset, Bootstrap(n_boot=100, seed=0))}
    many = {s.name: s for s in family.score(records, stimset, Bootstrap(n_boot=3000, seed=0))}
    assert few["mlae"].value == many["mlae"].value
    assert (few["mlae"].ci_low, few["mlae"].ci_high) != (many["mlae"].ci_low, many["mlae"].ci_high)
    assert "3000 draws" in many["mlae"].method


@pytest.mark.parametrize("task_id, options", [
    (SILHOUETTE, {}), ("similarity.chart.mark_color", {}), (SERIES, {}), ("literacy.chart.ggr", {}),
    ("ratio.chart.haehn_type1", {"n_train": 0, "n_val": 0, "n_test": 40})])
def test_a_task_where_every_answer_is_null_scores_as_nothing_answered(sources, task_id, options):
    """A prompt model that never gives a readable answer on one task (its other tasks may be fine):
    the task's scores count every trial as null and none answered, are strict JSON as
    intervals.json stores them, and scoring neither fails nor warns (numpy's empty-slice
    warnings would reach the user's console)."""
    import warnings

    from harness.scores.tasks import Bootstrap, get_family
    from harness.stimuli.registry import get_task

    task = get_task(task_id)
    stimset = task.build(sources, **options)
    records = [{"stimulus_id": s.stimulus_id, "trial_id": f"{task_id}:{s.stimulus_id}:m:0", "rep": 0,
                "ground_truth": s.ground_truth, "response": None, "parse_status": "null:no_answer",
                "correct": None, "raw_output": "I would rather not say.", "extras": None}
               for s in stimset.test]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores = get_family(task.scoring).score(records, stimset, Bootstrap(n_boot=100, n_boot_kappa=100))
    model = [s for s in scores if s.nulls]
    assert model and all((s.n, s.nulls) == (0, len(records)) for s in model)
    json.dumps([s.to_dict() for s in scores], allow_nan=False)
    # "nothing to score" is None in the live record as in intervals.json: one spelling, which the
    # figures, the summary table and the report all test for (NaN is not None)
    for s in scores:
        json.dumps(dataclasses.asdict(s), allow_nan=False)
    # had the nulls been scored, a proportion could be anything: its null bracket is 0 .. 1
    for s in model:
        for low in [k for k in s.extra if k.endswith("_full_low")]:
            assert (s.extra[low], s.extra[low.replace("_low", "_high")]) == (0.0, 1.0), (s.name, low)
    # the run's figures of the task are drawn, and so are the report's from the logged scores
    from harness.reports.battery import battery_figures
    from harness.reports.figures import close
    from harness.scores.record import Score

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for drawn in (scores, [Score(**{k: v for k, v in s.to_dict().items() if k != "null_rate"})
                               for s in scores]):
            close(battery_figures(task_id, records, drawn, stimset, "m"))


@pytest.mark.parametrize("task_id", [SILHOUETTE, "similarity.chart.mark_color"])
def test_the_figures_of_a_task_never_answered_place_no_model(sources, task_id):
    """Every model score of these tasks is undefined when no answer is readable: the per-run
    figures still draw the human references, and neither a point nor a legend entry for the model
    (an entry with nothing beside it reads as a point hidden somewhere)."""
    from harness.reports.battery import battery_figures
    from harness.reports.figures import close
    from harness.scores.tasks import Bootstrap, get_family
    from harness.stimuli.registry import get_task

    task = get_task(task_id)
    stimset = task.build(sources)
    records = [{"stimulus_id": s.stimulus_id, "trial_id": f"{task_id}:{s.stimulus_id}:m:0", "rep": 0,
                "ground_truth": s.ground_truth, "response": None, "parse_status": "null:no_answer",
                "correct": None, "raw_output": "no", "extras": None} for s in stimset.test]
    scores = get_family(task.scoring).score(records, stimset, Bootstrap(n_boot=100, n_boot_kappa=100))
    figs = battery_figures(task_id, records, scores, stimset, "silent-model")
    try:
        legends = {name: [t.get_text() for ax in fig.axes if ax.get_legend()
                          for t in ax.get_legend().get_texts()] for name, fig in figs.items()}
        assert any(legends.values())  # the human references are drawn and named
        assert not [(name, t) for name, texts in legends.items() for t in texts if "silent-model" in t]
    finally:
        close(figs)


def test_score_command_reproduces_the_runs_intervals(write_recipe, capsys):
    from harness.recipes import load_recipe
    from harness.run import run_recipe

    path = write_recipe([TINY_VIT], [SERIES], task_options={SERIES: {"n_test": 20, "n_train": 40}},
                        bootstrap={"n_boot": 150, "n_boot_kappa": 150, "seed": 7},
                        tracking={"enabled": False})
    recipe = load_recipe(path)
    [result] = run_recipe(recipe, echo=lambda s: None)
    capsys.readouterr()
    main(["score", str(recipe.out_dir / "tiny-vit" / "records" / f"{SERIES}.jsonl"), f"--recipe={path}",
          "--format=json"])
    rescored = json.loads(capsys.readouterr().out)
    ran = json.loads(json.dumps([s.to_dict() for s in result.scores[SERIES]]))  # as the command prints
    assert json.dumps(rescored, sort_keys=True) == json.dumps(ran, sort_keys=True)
    assert any("150 draws" in s["method"] for s in rescored)


def test_headline_scores_come_from_the_family():
    from harness.scores.record import Score
    from harness.scores.tasks import FAMILIES, family_of

    def score(name, value=0.5):
        return Score(name=name, value=value, ci_low=None, ci_high=None, n=1, nulls=0, method="", version="1")

    assert family_of(f"{SERIES}:variant") is FAMILIES["capacity"]
    assert family_of("gone.task.id") is None
    fam = FAMILIES["odd_one_out"]
    scores = [score("human_majority_agreement"), score("B_color_td"), score("B", None), score("B_x")]
    assert [s.name for s in fam.headline_scores(scores)] == ["B_color_td", "B", "B_x"]
    assert fam.primary_score(scores) is None  # B has no value
    assert FAMILIES["capacity"].primary_score([score("a_k03"), score("accuracy", 0.9)]).value == 0.9


def test_figures_are_chosen_by_family_not_by_prefix(monkeypatch):
    """A CHART-6-scored task outside the literacy.chart. prefix still gets the CHART-6 figures."""
    from dataclasses import replace

    import harness.reports.chart6_figures as c6
    import harness.reports.battery as battery
    from harness.stimuli.registry import TASKS

    monkeypatch.setattr(c6, "chart6_battery_figures", lambda *a: {"chart6": a[0]})
    monkeypatch.setitem(TASKS, "reading.nat.menus", replace(TASKS["literacy.chart.vlat"], task_id="reading.nat.menus"))
    assert battery.battery_figures("reading.nat.menus", [], [], None, "m") == {"chart6": "reading.nat.menus"}


# -- 4. task ids ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["proximity.dots", "Proximity.nat.dots", "a.b.c.d", "a.b.c:", "a.b.c:x y"])
def test_task_id_is_checked_when_declared(bad):
    from harness.stimuli.registry import BadTaskId, TaskSpec

    with pytest.raises(BadTaskId, match=re.escape(repr(bad))):
        TaskSpec(task_id=bad, builder="m:f", options="m:O", readouts={}, scoring="capacity",
                 battery="b", description="")


def test_record_schema_reads_the_registry_pattern():
    from harness.stimuli.registry import TASK_ID_PATTERN
    from harness.trials.records import schema

    assert schema()["properties"]["task_id"]["pattern"] == TASK_ID_PATTERN


# -- the loader never gives a traceback --------------------------------------------------------------

@pytest.mark.parametrize("content, what", [
    (b"name: t\n\xff\xfe models: []\n", "not UTF-8"),
    (b"\x00\x01\x02binary", "binary file"),
    ("name: t\n" + "x:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(1100)), "nested"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested"),
    ("name: t\nname: u\n", "line 1"),
    ("seed: 012\n", "leading zero"),
])
def test_loader_refuses_bad_files_in_one_line(tmp_path, capsys, content, what):
    path = tmp_path / "r.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    err = fails(["recipe", str(path), "--dry-run"], capsys)
    assert err.startswith(f"gestalt: error: {path}") and what in err, err


@pytest.mark.timeout(60)  # main hangs here, growing past 2 GB
def test_alias_bomb_is_refused_quickly(tmp_path, capsys):
    lines = ["a0: [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    lines[0] = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"
    path = recipe_text(tmp_path, "\n".join(lines) + "\n")
    err = fails(["recipe", str(path)], capsys)
    assert "alias" in err


def test_extends_to_binary_or_nul_path(tmp_path, capsys):
    (tmp_path / "bin.yaml").write_bytes(bytes(range(256)))
    path = recipe_text(tmp_path, "extends: bin.yaml\nname: t\n")
    assert "binary file" in fails(["recipe", str(path)], capsys)
    path = recipe_text(tmp_path, 'extends: "a\\0b.yaml"\nname: t\n')
    assert f"{path}:1: extends: a path cannot hold a NUL" in fails(["recipe", str(path)], capsys)


def test_yaml_11_surprises_read_as_meant(tmp_path):
    from harness.recipes import RecipeError, load_recipe

    base = BASE.replace(f", {SERIES}", "")
    assert load_recipe(recipe_text(tmp_path, base + "description: no\n")).description == "no"
    # `yes` stays text, which a boolean setting refuses rather than reads as true
    with pytest.raises(RecipeError, match=r"r.yaml:\d+: runtime.progress: .*boolean"):
        load_recipe(recipe_text(tmp_path, base + "runtime: {progress: yes}\n"))
    with pytest.raises(RecipeError, match=r"r.yaml:3: models.0.batch_size: .*integer"):
        load_recipe(recipe_text(tmp_path, base.replace("weights: random", "weights: random, batch_size: 1:30")))
    assert load_recipe(recipe_text(tmp_path, base + "seed: 0o12\n")).seed == 10


@pytest.mark.parametrize("section, value", [("runtime", "{processes: 1000}"), ("bootstrap", "{n_boot: 100000000}")])
def test_upper_bounds(tmp_path, section, value):
    from harness.recipes import RecipeError, load_recipe

    with pytest.raises(RecipeError, match="less than or equal"):
        load_recipe(recipe_text(tmp_path, BASE + f"{section}: {value}\n"))
    models = "".join(f"  - {{id: m{i}, source: timm, name: test_vit}}\n" for i in range(300))
    with pytest.raises(RecipeError, match="models: List should have at most 256"):
        load_recipe(recipe_text(tmp_path, BASE.replace("  - {id: m, source: timm, name: test_vit, weights: random}\n",
                                                       models)))


def test_bad_yaml_in_a_command_line_override(tmp_path, capsys):
    path = recipe_text(tmp_path, BASE)
    err = fails(["recipe", str(path), "--task_options=not: [valid", "--dry-run"], capsys)
    assert err.startswith("gestalt: error: override task_options") and "not valid YAML" in err


def test_stimuli_command_refuses_a_bad_option_in_one_line(tmp_path, capsys):
    err = fails(["stimuli", SERIES, str(tmp_path / "out"), "--n_tset=5"], capsys)
    assert err == f"gestalt: error: stimuli {SERIES}: unknown flag --n-tset; did you mean --n-test?"
