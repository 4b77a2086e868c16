"""Weights that are not a checkpoint stop the plan: preflight opens a local checkpoint's header
(not its tensors) and refuses an empty value, a folder or a file torch cannot load, naming the
recipe's line; an empty command-line value is an error, not a switch to random weights."""

from __future__ import annotations

import json
import struct

import pytest

from harness.recipes import RecipeError, load_recipe
from harness.run import check_weights
from tests.test_recipes import BASE, write


def _with_weights(tmp_path, weights: str):
    return write(tmp_path, "r.yaml", BASE.replace("weights: random", f"weights: {json.dumps(weights)}"))


@pytest.mark.parametrize("case", ["empty", "folder", "text", "truncated-zip", "bad-safetensors"])
def test_weights_that_are_not_a_checkpoint_are_refused_with_the_recipe_line(tmp_path, case):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    files = {"text": ("notes.pt", b"these are not weights\n"),
             "truncated-zip": ("cut.pth", b"PK\x03\x04" + b"\x00" * 40),
             "bad-safetensors": ("w.safetensors", struct.pack("<Q", 10**12) + b"{}")}
    if case == "empty":
        weights = ""
    elif case == "folder":
        weights = str(folder)
    else:
        name, data = files[case]
        (folder / name).write_bytes(data)
        weights = str(folder / name)
    with pytest.raises(RecipeError) as refused:
        check_weights(load_recipe(_with_weights(tmp_path, weights)))
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'r.yaml'}:6: models.0.weights: "), message
    assert "\n" not in message and ("random" in message if case == "empty" else "not a checkpoint" in message)


def test_checkpoints_torch_and_safetensors_write_pass(tmp_path):
    import torch
    from safetensors.torch import save_file

    tensors = {"w": torch.zeros(2, 2)}
    torch.save(tensors, tmp_path / "a.pt")
    save_file(tensors, str(tmp_path / "b.safetensors"))
    for name in ("a.pt", "b.safetensors"):
        check_weights(load_recipe(_with_weights(tmp_path, str(tmp_path / name))))


def test_an_empty_weights_override_is_an_error_not_random_weights(tmp_path):
    with pytest.raises(RecipeError, match=r"models\.0\.weights.*empty"):
        load_recipe(write(tmp_path, "r.yaml", BASE), {"models.0.weights": ""})


def test_an_explicit_readout_the_model_cannot_serve_is_refused_at_plan(tmp_path):
    """A prompt readout forced on an embed-only encoder: refused with the recipe's line before
    any MLflow run exists, as a default readout the model cannot serve already is."""
    from harness.run import plan

    text = BASE.replace("    weights: random", "    weights: random\n    readouts:\n"
                                                "      closure.nat.silhouette: prompt_label")
    recipe = load_recipe(write(tmp_path, "r.yaml", text))
    with pytest.raises(RecipeError) as refused:
        plan(recipe)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'r.yaml'}:8: models.0.readouts.closure.nat.silhouette: "), message
    assert "prompt_label" in message and "generate" in message and "embed" in message


def _mobilenet_checkpoints(tmp_path, fmt: str) -> dict:
    """A checkpoint that fits timm's mobilenetv2_100 and one with a layer renamed and one missing."""
    import timm
    import torch
    from safetensors.torch import save_file

    state = timm.create_model("mobilenetv2_100", pretrained=False).state_dict()
    moved = dict(state)
    moved["head.weight"] = moved.pop("classifier.weight")
    del moved["conv_head.weight"]
    paths = {}
    for name, tensors in (("fits", state), ("moved", moved)):
        paths[name] = tmp_path / f"{name}.{'pt' if fmt == 'torch' else 'safetensors'}"
        if fmt == "torch":
            torch.save(tensors, paths[name])
        else:
            save_file(tensors, str(paths[name]))
    return paths


MOBILENET = {"id": "mine", "source": "timm", "name": "mobilenetv2_100", "family": "supervised"}


@pytest.mark.parametrize("fmt", ["torch", "safetensors"])
def test_a_checkpoint_whose_keys_do_not_fit_the_model_fails_its_check(tmp_path, fmt):
    """The check compares the checkpoint's key names (read from its header) with the
    architecture's (built on the meta device), in one line; the fitting checkpoint passes."""
    from harness.models.base import ModelError, ModelSpec
    from harness.models.registry import make_adapter

    paths = _mobilenet_checkpoints(tmp_path, fmt)
    make_adapter(ModelSpec(**MOBILENET, weights=str(paths["fits"]))).check()
    with pytest.raises(ModelError) as refused:
        make_adapter(ModelSpec(**MOBILENET, weights=str(paths["moved"]))).check()
    message = str(refused.value)
    assert "\n" not in message and str(paths["moved"]) in message, message
    assert "2 of its" in message and "(conv_head.weight, classifier.weight)" in message
    assert "1 unexpected (head.weight)" in message


def test_a_checkpoint_that_does_not_fit_exits_2_before_any_run(tmp_path):
    from tests.test_end_to_end import gestalt, runs, write_recipe

    paths = _mobilenet_checkpoints(tmp_path, "torch")
    done = gestalt("recipe", str(write_recipe(tmp_path, [dict(MOBILENET, weights=str(paths["moved"]))])))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and str(paths["moved"]) in lines[0], done.stderr
    assert runs(tmp_path) == [] and not (tmp_path / "out").exists()


def test_reading_checkpoint_keys_loads_no_tensor(tmp_path):
    """The keys come from the pickle alone: a checkpoint whose tensor data is gone still names
    them, so the check costs the header, not the weights."""
    import zipfile

    import torch

    from harness.models.weights import checkpoint_keys

    torch.save({"a.weight": torch.zeros(1000, 1000), "a.bias": torch.zeros(3)}, tmp_path / "w.pt")
    with zipfile.ZipFile(tmp_path / "w.pt") as z, zipfile.ZipFile(tmp_path / "stripped.pt", "w") as out:
        for item in z.infolist():
            if "/data/" not in item.filename:
                out.writestr(item, z.read(item))
    assert checkpoint_keys(tmp_path / "stripped.pt") == ["a.weight", "a.bias"]
    torch.save({"a.weight": torch.zeros(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert checkpoint_keys(tmp_path / "legacy.pt") == ["a.weight"]
    torch.save({"state_dict": {"a.weight": torch.zeros(2)}}, tmp_path / "wrapped.pt")
    assert checkpoint_keys(tmp_path / "wrapped.pt") == ["state_dict"]
