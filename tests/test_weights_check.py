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
