"""Readout registry: name -> "module:Class", imported on use."""

from __future__ import annotations

from ..lazy import lookup

READOUTS: dict[str, str] = {
    "prototype": "harness.readouts.probes:PrototypeProbe",
    "odd_one_out": "harness.readouts.odd_one_out:CosineOddOneOut",
    "ridge": "harness.readouts.ridge:RidgeProbe",
    "prompt_choice": "harness.readouts.prompt:PromptChoice",
    "prompt_count": "harness.readouts.prompt:PromptCount",
    "prompt_label": "harness.readouts.prompt:PromptLabel",
    "prompt_number": "harness.readouts.prompt:PromptNumber",
    "chart6": "harness.readouts.chart6:Chart6Readout",
    "regression": "harness.readouts.regression:RegressionReadout",
    "imagenet16": "harness.readouts.imagenet16:ImageNet16",
}


def get_readout(name: str):
    return lookup(READOUTS, name, "readout")
