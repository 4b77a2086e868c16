"""Registries name their entries as "module:attribute" and import them only when used, so that
listing tasks or printing ``gestalt --help`` never imports torch."""

from __future__ import annotations

import importlib
from typing import Any


def resolve(target: str) -> Any:
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def lookup(table: dict[str, str], name: str, what: str, error: type[Exception] = KeyError) -> Any:
    """The object registered under ``name``; an unknown name lists the known ones."""
    if name not in table:
        raise error(f"unknown {what} {name!r}; known: {', '.join(sorted(table))}")
    return resolve(table[name])
