"""Readout registry: name -> "module:Class", imported on use."""

from __future__ import annotations

import importlib

READOUTS: dict[str, str] = {
    "prototype": "harness.readouts.probes:PrototypeProbe",
}


def get_readout(name: str):
    try:
        module, cls = READOUTS[name].split(":")
    except KeyError:
        raise KeyError(f"unknown readout {name!r}; known: {', '.join(sorted(READOUTS))}") from None
    return getattr(importlib.import_module(module), cls)
