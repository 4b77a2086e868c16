"""`device: auto` on a machine without a GPU (this one, and the image without --gpus): the CPU,
with one line saying so, once; torch is asked only where a GPU driver is installed."""

import logging

import pytest
import torch

from harness.models import device
from harness.trials import distributed


def test_auto_picks_the_cpu_and_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(device, "GPU_DRIVER_FILES", (__file__,))  # a driver torch does not see
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("GESTALT_DEVICE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    distributed._auto_device.cache_clear()
    with caplog.at_level(logging.INFO, logger="harness"):
        assert distributed.Dist().device == "cpu"
        assert distributed.Dist().device == "cpu"
    said = [r.getMessage() for r in caplog.records if "device auto" in r.getMessage()]
    assert said == ["device auto: no CUDA GPU visible to torch; running on the CPU"]
    distributed._auto_device.cache_clear()


def test_without_a_gpu_driver_auto_is_the_cpu_and_torch_is_not_asked(monkeypatch, caplog):
    monkeypatch.setattr(device, "GPU_DRIVER_FILES", ("/nonexistent/nvidiactl",))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("torch asked without a GPU driver"))
    monkeypatch.delenv("GESTALT_DEVICE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    distributed._auto_device.cache_clear()
    with caplog.at_level(logging.INFO, logger="harness"):
        assert distributed.Dist().device == "cpu"
    assert [r.getMessage() for r in caplog.records if "device auto" in r.getMessage()] == [
        "device auto: no GPU driver on this machine; running on the CPU"]
    distributed._auto_device.cache_clear()


def test_auto_picks_the_gpu_when_torch_sees_one(monkeypatch):
    monkeypatch.setattr(device, "GPU_DRIVER_FILES", (__file__,))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("GESTALT_DEVICE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    distributed._auto_device.cache_clear()
    assert distributed.Dist().device == "cuda"
    distributed._auto_device.cache_clear()


def test_the_recipes_device_places_the_models_where_torch_sees_a_gpu(monkeypatch, tmp_path):
    """`runtime.device: cpu` is obeyed in a single process (it was only passed to launched ones),
    $GESTALT_DEVICE still wins, and the process's environment is left as it was."""
    import os

    from harness import run
    from harness.recipes import Recipe

    monkeypatch.setattr(device, "GPU_DRIVER_FILES", (__file__,))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("GESTALT_DEVICE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    distributed._auto_device.cache_clear()
    seen = []
    monkeypatch.setattr(run, "_run_recipe", lambda *a: seen.append(distributed.Dist().device) or [])

    def recipe(device):
        return Recipe.model_validate({"name": "d", "tasks": ["closure.nat.silhouette"],
                                      "models": [{"id": "m", "source": "timm", "name": "resnet18"}],
                                      "runtime": {"device": device}, "output_dir": str(tmp_path)})

    run.run_recipe(recipe("cpu"))
    run.run_recipe(recipe("auto"))
    monkeypatch.setenv("GESTALT_DEVICE", "cuda")
    run.run_recipe(recipe("cpu"))
    assert seen == ["cpu", "cuda", "cuda"]
    assert os.environ["GESTALT_DEVICE"] == "cuda"
    monkeypatch.delenv("GESTALT_DEVICE")
    run.run_recipe(recipe("cpu"))
    assert "GESTALT_DEVICE" not in os.environ
    distributed._auto_device.cache_clear()
