"""`device: auto` on a machine without a GPU (this one, and the image without --gpus): the CPU,
with one line saying so, once."""

import logging

import torch

from harness.trials import distributed


def test_auto_picks_the_cpu_and_says_so_once(monkeypatch, caplog):
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


def test_auto_picks_the_gpu_when_torch_sees_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("GESTALT_DEVICE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    distributed._auto_device.cache_clear()
    assert distributed.Dist().device == "cuda"
    distributed._auto_device.cache_clear()
