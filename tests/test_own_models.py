"""Your own model: the adapter contract, ``source: python`` (examples/ through a recipe),
``trust_remote_code`` refused unless the entry allows it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.models.base import ModelAdapter, ModelError, ModelSpec, fingerprint_hash
from harness.models.registry import (
    BUILT_IN,
    adapter_class,
    build_adapter,
    make_adapter,
    sources,
)
from harness.recipes import RecipeError, load_recipe
from tests.conftest import MIRROR, REPO

TASK = "closure.nat.silhouette"


def write_recipe(tmp_path: Path, models, name="own", **extra) -> Path:
    recipe = {"name": name, "models": models, "tasks": [TASK],
              "bootstrap": {"n_boot": 100, "n_boot_kappa": 100},
              "runtime": {"device": "cpu", "progress": False}, "data": {"mirror": str(MIRROR)},
              "tracking": {"enabled": False}, "output_dir": str(tmp_path / "out"), **extra}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def python_spec(name, **options):
    return ModelSpec(id="mine", source="python", name=name, options=options)


# -- the contract ---------------------------------------------------------------------------------

def test_every_source_implements_the_contract_and_the_schema_lists_the_registry(tmp_path):
    for source in BUILT_IN:
        assert issubclass(adapter_class(source), ModelAdapter), source
    with pytest.raises(RecipeError) as e:
        load_recipe(write_recipe(tmp_path, [{"id": "m", "source": "nope", "name": "x"}]))
    # the recipe schema's list is the registry's, new sources included
    assert "models.0.source" in str(e.value) and all(s in str(e.value) for s in sources())


def test_python_source_through_a_recipe_runs_both_examples(tmp_path):
    from harness.run import run_recipe

    models = yaml.safe_load((REPO / "examples/own-model.yaml").read_text())["models"]
    for m in models:  # the recipe names the examples relative to the repository root
        m["name"] = str(REPO / m["name"])
    results = {r.model_id: r for r in run_recipe(load_recipe(write_recipe(tmp_path, models)))}
    assert results["tiny-net"].new_trials == results["shape-rule"].new_trials == 80
    net = [json.loads(x) for x in (tmp_path / "out/tiny-net/records" / f"{TASK}.jsonl").open()]
    rule = [json.loads(x) for x in (tmp_path / "out/shape-rule/records" / f"{TASK}.jsonl").open()]
    assert {r["readout"] for r in net} == {"prototype"} and {r["readout"] for r in rule} == {"prompt_label"}
    # the rule's texts are parsed like a VLM's: "The answer is: dog." -> dog
    assert {r["response"] for r in rule} <= {"car", "bottle", "dog"} and all(r["parse_status"] == "ok" for r in rule)
    assert {s.name for s in results["tiny-net"].scores[TASK]} >= {"accuracy", "kappa"}
    rerun = run_recipe(load_recipe(write_recipe(tmp_path, models)))
    assert [r.model_calls for r in rerun] == [0, 0]  # the fingerprint keys the cache


def test_a_task_the_model_never_answers_readably_leaves_its_battery_finished(tmp_path):
    """The shape rule names objects; asked for a montage position on mark_color it never answers
    one. That task's 120 trials are null, its scores say none was answered, its figures are
    drawn, and the silhouettes' scores and the run are as if it had not been there."""
    from mlflow import MlflowClient

    from harness.run import run_recipe

    rule = {"id": "shape-rule", "source": "python", "name": str(REPO / "examples/rule_based.py") + ":build"}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = write_recipe(tmp_path, [rule], tasks=[TASK, "similarity.chart.mark_color"],
                        tracking={"uri": uri, "experiment": "own"})
    [result] = run_recipe(load_recipe(path), echo=lambda *_: None)
    assert not result.failed
    color = {s.name: s for s in result.scores["similarity.chart.mark_color"]}
    assert (color["B"].n, color["B"].nulls) == (0, 120) and color["B"].to_dict()["value"] is None
    assert {s.name: s.n for s in result.scores[TASK]}["kappa"] == 80
    run = MlflowClient(uri).get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["similarity.chart.mark_color/null_rate"] == 1.0
    figures = [a.path for a in MlflowClient(uri).list_artifacts(result.run_id, "figures")]
    assert "figures/similarity.chart.mark_color.agreement.png" in figures, figures
    # the report's table: no value, and had the nulls been scored, B could be anything
    from harness.reports.report import load_runs, score_rows

    rows = score_rows(load_runs(uri, "own"), [TASK, "similarity.chart.mark_color"])
    [b] = [r for r in rows if (r["task"], r["score"]) == ("similarity.chart.mark_color", "B")]
    assert (b["value"], b["full_low"], b["full_high"], b["nulls"]) == (None, 0.0, 1.0, 120)


def test_python_fingerprint_follows_options_weights_and_code(tmp_path):
    example = str(REPO / "examples/tiny_torch_net.py") + ":build"
    base = make_adapter(python_spec(example, width=8))
    assert base.capabilities == {"embed"}
    assert base.fingerprint["state_dict_sha256"] and base.fingerprint["options"] == {"width": 8}
    assert make_adapter(python_spec(example, width=8)).fingerprint == base.fingerprint
    other_options = make_adapter(python_spec(example, width=4)).fingerprint
    other_weights = make_adapter(python_spec(example, width=8, seed=1)).fingerprint
    assert other_weights["state_dict_sha256"] != base.fingerprint["state_dict_sha256"]
    copy = tmp_path / "tiny_torch_net.py"
    copy.write_text((REPO / "examples/tiny_torch_net.py").read_text() + "\n# edited\n")
    edited = make_adapter(python_spec(f"{copy}:build", width=8)).fingerprint
    assert edited["code_sha256"] != base.fingerprint["code_sha256"]
    hashes = {fingerprint_hash(fp) for fp in (base.fingerprint, other_options, other_weights, edited)}
    assert len(hashes) == 4
    # an object's own fingerprint replaces the default
    rule = make_adapter(python_spec(str(REPO / "examples/rule_based.py") + ":build"))
    assert rule.capabilities == {"generate"} and rule.fingerprint["fingerprint"]["rule"] == "aspect-ratio"


def test_a_released_python_model_is_built_again_and_a_live_one_is_kept():
    """When its battery ends the runner releases a model: an object the harness built from the
    callable is dropped (built again, answering alike, if called later); a live object handed to
    ``harness.evaluate`` belongs to its caller and stays."""
    import weakref

    import numpy as np
    from PIL import Image

    from harness.models.python_source import LIVE, LIVE_PREFIX

    images = [Image.new("RGB", (32, 32), (40 * i, 90, 200 - 40 * i)) for i in range(3)]
    built = make_adapter(python_spec(str(REPO / "examples/tiny_torch_net.py") + ":build", width=8))
    before = built.embed(images)
    first = weakref.ref(built.model)
    built.release()
    assert built.model is None and first() is None
    assert np.array_equal(built.to("cpu").embed(images), before)
    live = built.model
    LIVE[f"{LIVE_PREFIX}mine"] = live
    try:
        kept = make_adapter(python_spec(f"{LIVE_PREFIX}mine"))
        kept.release()
        assert kept.model is live
    finally:
        del LIVE[f"{LIVE_PREFIX}mine"]


def test_python_import_errors_name_the_module_or_callable(tmp_path):
    with pytest.raises(ModelError, match="cannot import module 'no_such_pkg.models'"):
        make_adapter(python_spec("no_such_pkg.models:build"))
    with pytest.raises(ModelError, match="has no callable 'nope'"):
        make_adapter(python_spec(str(REPO / "examples/rule_based.py") + ":nope"))
    with pytest.raises(ModelError, match="must be 'module:callable'"):
        make_adapter(python_spec("just_a_module"))
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_dependency\n")
    with pytest.raises(ModelError, match=r"cannot import module .*broken.py.*no_such_dependency"):
        make_adapter(python_spec(f"{broken}:build"))


def test_a_model_without_capability_is_refused_at_preflight(tmp_path):
    (tmp_path / "blank.py").write_text("class Blank:\n    pass\n\ndef build():\n    return Blank()\n")
    path = write_recipe(tmp_path, [{"id": "blank", "source": "python", "name": f"{tmp_path}/blank.py:build"}])
    out = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert out.returncode == 2 and not (tmp_path / "out").exists()
    assert out.stderr.strip().count("\n") == 0 and "'blank'" in out.stderr and "no capability" in out.stderr


# -- trust_remote_code -----------------------------------------------------------------------------

def test_trust_remote_code_is_refused_unless_the_entry_allows_it(tmp_path):
    kwargs = {"model_kwargs": {"trust_remote_code": True}}
    spec = ModelSpec(id="t", source="timm", name="test_vit", weights="random", options=kwargs)
    with pytest.raises(ModelError, match="set `trust_remote_code: true`"):
        build_adapter(spec)
    entry = {"id": "t", "source": "timm", "name": "test_vit", "weights": "random", "options": kwargs}
    with pytest.raises(ModelError, match="trust_remote_code"):
        from harness.run import preflight

        preflight(load_recipe(write_recipe(tmp_path, [entry])))
    recipe = load_recipe(write_recipe(tmp_path, [{**entry, "trust_remote_code": True}]))
    from harness.run import model_specs

    assert model_specs(recipe)[0].trust_remote_code is True
    make_adapter(model_specs(recipe)[0])  # allowed in so many words (timm's own check then refuses the key)


def test_gestalt_help_imports_neither_torch_nor_the_api():
    code = ("import sys, harness, harness.cli\n"
            "print(sorted(m for m in ('torch', 'pandas', 'mlflow', 'harness.evaluation') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert out.stdout.strip() == "[]", out.stderr


def test_examples_are_plain_python():
    """The examples import nothing from gestalt: any object with the methods is a model."""
    for path in (REPO / "examples").glob("*.py"):
        assert "harness" not in path.read_text(), path
