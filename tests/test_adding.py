"""docs/adding.md, followed as written: its code blocks headed by a file name become those files
(in a temporary folder the harness packages also import from), its blocks headed "<file>: in
<TABLE>" become entries of that table, and the recipe it shows runs and scores the new model on
the new task. A page that names a table or a field the code no longer has fails here."""

import inspect
import re

import pytest
import yaml

import harness
import harness.models
import harness.stimuli
from harness.lazy import resolve
from harness.models import registry as model_registry
from harness.stimuli import registry as task_registry
from tests.conftest import REPO

PAGE = REPO / "docs" / "adding.md"
BLOCK = re.compile(r"^( *)```(\w+)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
HEAD = re.compile(r"^# (\S+?)(?:: in (\w+))?$")


def blocks() -> list[tuple[str, str | None, str]]:
    """(path, table or None, code) of each block headed by ``# path`` or ``# path: in TABLE``."""
    out = []
    for indent, _, body in BLOCK.findall(PAGE.read_text()):
        lines = [line[len(indent):] for line in body.splitlines()]
        head = HEAD.match(lines[0]) if lines else None
        if head:
            out.append((head.group(1), head.group(2), "\n".join(lines[1:]) + "\n"))
    return out


def test_the_page_shows_every_step_of_the_example():
    heads = [(path, table) for path, table, _ in blocks()]
    assert heads == [("harness/stimuli/dot_count.py", None), ("harness/stimuli/registry.py", "TASKS"),
                     ("harness/models/dot_counter.py", None), ("harness/models/registry.py", "BUILT_IN"),
                     ("recipes/toy.yaml", None)]


def test_a_task_a_source_and_a_battery_added_as_the_page_says(tmp_path, monkeypatch):
    tables = {("harness/stimuli/registry.py", "TASKS"): task_registry,
              ("harness/models/registry.py", "BUILT_IN"): model_registry}
    packages = {"harness/stimuli": harness.stimuli, "harness/models": harness.models}
    recipe = None
    for path, table, code in blocks():
        if table is not None:
            module = tables[(path, table)]
            assert isinstance(getattr(module, table), dict), f"{path} has no table {table}"
            if table == "TASKS":  # a TaskSpec expression, evaluated where the table is declared
                spec = eval(code.strip().rstrip(","), vars(module))
                monkeypatch.setitem(module.TASKS, spec.task_id, spec)
                monkeypatch.setitem(module.BATTERIES, spec.battery,
                                    [*module.BATTERIES.get(spec.battery, []), spec.task_id])
            else:  # a "name": "module:Class" line
                for name, target in eval("{" + code + "}").items():
                    monkeypatch.setitem(module.BUILT_IN, name, target)
                module.sources.cache_clear()
        elif path.startswith("recipes/"):
            recipe = yaml.safe_load(code)
        else:
            folder, name = path.rsplit("/", 1)
            assert not (REPO / path).exists(), f"the example's {path} is a real module of the harness"
            (tmp_path / folder).mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(code)
            monkeypatch.setattr(packages[folder], "__path__", [*packages[folder].__path__, str(tmp_path / folder)])
    try:
        task = task_registry.get_task("similarity.toy.dot_count")
        assert task_registry.expand(["toy"]) == [task.task_id]
        # the contract the page names: the Options fields are the build function's keyword arguments
        fields = {k: f.default for k, f in task.options_model().model_fields.items()}
        params = {k: p.default for k, p in inspect.signature(resolve(task.builder)).parameters.items()
                  if k not in ("sources", "seed")}
        assert fields == params == {"n_test": 40}
        source = model_registry.sources()["dot_counter"]
        assert source.origin == "built-in" and model_registry.adapter_class("dot_counter").__name__ == "DotCounter"

        assert recipe is not None
        scores, run_ids = harness.evaluate(
            **recipe, output_dir=str(tmp_path / "out"),
            tracking={"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "adding"})
    finally:
        model_registry.sources.cache_clear()
    assert set(run_ids) == {"counter"}
    by_name = scores.set_index("name")
    # the counter reads every image right, as the page says
    assert by_name.loc["accuracy", "value"] == pytest.approx(1.0)
    assert by_name.loc["accuracy", "n"] == 40
    assert [by_name.loc[f"a_k0{k}", "value"] for k in (1, 2, 3, 4)] == [1.0] * 4
    assert by_name.loc["capacity", "extra"]["censored"] == "above"  # a(k) never falls to 0.5
