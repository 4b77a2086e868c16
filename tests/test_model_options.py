"""Every option is typed before anything runs: a model source's ``options`` are a pydantic model
(the adapter class's ``Options``), checked at recipe load like a task's options, and integers are
strict everywhere (no ``true``, ``"40"`` or ``40.0`` read as a number). A wrong option stops
``--dry-run`` with exit 2 and one line naming file:line:key, never a traceback at training time."""

import pytest

from harness.models.base import ModelError, ModelSpec
from harness.models.registry import BUILT_IN, adapter_class
from harness.recipes import RecipeError, load_recipe
from tests.conftest import REPO
from tests.test_cli_guesses import fails

BARS = (REPO / "recipes" / "bars-quick.yaml").read_text()
COLNET_OPTIONS = "options: {pixel_conv: [8], column_channels: 32, width: 64, depth: 4, hidden: 128,"


def bars_recipe(tmp_path, old: str, new: str):
    """The recipe with its last ``old`` (the header's comments show options too) made ``new``."""
    head, tail = BARS.rsplit(old, 1)
    path = tmp_path / "bars.yaml"
    path.write_text(head + new + tail)
    return path


def line_of(path, text: str) -> int:
    return max(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("old, new, key", [
    ("patience: 3}", 'patience: "x"}', "patience"),
    ("pixel_conv: [8]", "pixel_conv: [-1]", "pixel_conv.0"),
    ("hidden: 128", "hidden: abc", "hidden"),
    ("depth: 4", "depth: -2147483648", "depth"),
    ("max_epochs: 10", "max_epochs: true", "max_epochs"),
    ("max_epochs: 10", "max_epochs: 10.0", "max_epochs"),
    ("lr: 1.0e-3", 'lr: "1e-3"', "lr"),
    ("lr: 1.0e-3", "lr: .nan", "lr"),
    ("optimizer: adamw", "optimizer: adam", "optimizer"),
    ("patience: 3}", "patience: 3, pateince: 4}", "pateince"),
])
def test_a_bad_cnn_option_stops_the_dry_run_naming_file_line_and_key(tmp_path, capsys, old, new, key):
    path = bars_recipe(tmp_path, old, new)
    err = fails(["recipe", str(path), "--dry-run"], capsys)
    assert err.startswith(f"gestalt: error: {path}:{line_of(path, new)}: models.0.options.{key}: "), err


def test_an_unknown_option_names_the_closest_one(tmp_path):
    path = bars_recipe(tmp_path, "patience: 3}", "patience: 3, pateince: 4}")
    with pytest.raises(RecipeError, match="unknown key; did you mean patience"):
        load_recipe(path)


@pytest.mark.parametrize("value", ["true", '"40"', "40.0", "'٤٠'"])
def test_task_option_integers_are_integers(tmp_path, value):
    """`n_test: true` ran 1 trial; "40" and 40.0 ran 40."""
    path = bars_recipe(tmp_path, "n_test: 1000", f"n_test: {value}")
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert str(e.value).startswith(f"{path}:{line_of(path, 'n_test')}: task_options.ratio.chart.grape_type1.n_test: ")


@pytest.mark.parametrize("value", ["yes", "1", '"true"'])
def test_task_option_booleans_are_booleans(tmp_path, value):
    path = bars_recipe(tmp_path, "readout: {gradcam: true}", f"readout: {{gradcam: {value}}}")
    with pytest.raises(RecipeError, match="grape_type1.readout.gradcam: "):
        load_recipe(path)


def test_a_command_line_option_is_checked_as_the_file_is(tmp_path):
    path = tmp_path / "bars.yaml"
    path.write_text(BARS)
    with pytest.raises(RecipeError, match=r"^command line: models\.0\.options\.depth: "):
        load_recipe(path, {"models.0.options.depth": "-1"})
    assert load_recipe(path, {"models.0.options.depth": "2"}).models[0].options["depth"] == 2


@pytest.mark.parametrize("source", sorted(BUILT_IN))
def test_every_built_in_source_declares_its_options(source):
    """A source's options are its adapter class's ``Options`` model: unknown keys refused."""
    options = adapter_class(source).Options
    assert options.model_config.get("strict") is True
    assert options.model_config.get("extra") == ("allow" if source == "python" else "forbid")


@pytest.mark.parametrize("source, options, key", [
    ("timm", {"init_seed": "1"}, "init_seed"),
    ("timm", {"max_batch_size": 0}, "max_batch_size"),
    ("open_clip", {"nope": 1}, "nope"),
    ("hf", {"pooling": "max"}, "pooling"),
    ("hf-vlm", {"max_batch_size": True}, "max_batch_size"),
    ("api", {"concurrency": 0}, "concurrency"),
    ("api", {"timeout_s": "60"}, "timeout_s"),
    ("api", {"batch": "yes"}, "batch"),
    ("decisions", {"images": "x", "experiments": [{"name": "y"}]}, "experiments.0.images"),
    ("cnn", {"kfold": 1.5}, "kfold"),
])
def test_a_model_built_from_a_spec_checks_its_options_too(source, options, key):
    """The Python API builds adapters from specs that no recipe checked."""
    spec = ModelSpec(id="m", source=source, name="x", options=options)
    with pytest.raises(ModelError, match=rf"model 'm': options\.{key}: "):
        adapter_class(source)(spec)


def test_python_source_options_are_the_callables_own(tmp_path):
    """The user's callable takes whatever keyword arguments it declares: its own to check."""
    path = tmp_path / "r.yaml"
    path.write_text(BARS.replace("source: cnn\n    name: colnet", "source: python\n    name: my.mod:build")
                    .replace(COLNET_OPTIONS, "options: {anything: [1, 2], hidden: abc,"))
    assert load_recipe(path).models[0].options["hidden"] == "abc"
