"""Model sources: ``source`` name -> adapter class ("module:Class"), imported on use.

Adding a model family is one adapter file plus one line here, or, without touching gestalt, an
entry point in the ``gestalt.models`` group of any installed distribution
(``[project.entry-points."gestalt.models"] mysource = "my_pkg.adapters:MyAdapter"``). An adapter
class takes a :class:`ModelSpec` and implements the contract of :mod:`harness.models.base`.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from functools import cache

from ..lazy import resolve
from .base import ModelAdapter, ModelError, ModelSpec, check_remote_code

ENTRY_POINT_GROUP = "gestalt.models"

BUILT_IN: dict[str, str] = {
    "timm": "harness.models.encoders:TimmEncoder",
    "open_clip": "harness.models.encoders:OpenClipEncoder",
    "hf": "harness.models.encoders:HFVisionEncoder",
    "hf-vlm": "harness.models.hf_vlm:HFVLM",
    "api": "harness.models.api:APIModel",
    "cnn": "harness.models.regressors:CNNRegressor",
    "python": "harness.models.python_source:PythonModel",
    "decisions": "harness.models.decisions:DecisionsModel",
}


@dataclass(frozen=True)
class Source:
    name: str
    target: str  # "module:Class"
    origin: str  # "built-in" or "plugin <distribution> <version>"


@cache
def sources() -> dict[str, Source]:
    """Every model source: the built-in ones, then those plugins register (a plugin cannot
    replace a built-in name)."""
    out = {name: Source(name, target, "built-in") for name, target in BUILT_IN.items()}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        origin = f"plugin {dist.name} {dist.version}" if dist is not None else "plugin"
        if ep.name in out:
            raise ModelError(f"{origin}: entry point {ENTRY_POINT_GROUP}:{ep.name} clashes with "
                             f"the {out[ep.name].origin} source {ep.name!r}")
        out[ep.name] = Source(ep.name, ep.value, origin)
    return out


def adapter_class(source: str) -> type[ModelAdapter]:
    known = sources()
    if source not in known:
        raise ModelError(f"unknown model source {source!r}; known: {', '.join(sorted(known))}")
    where = f"model source {source!r} ({known[source].origin}): {known[source].target}"
    try:
        cls = resolve(known[source].target)
    except (ImportError, AttributeError) as e:
        raise ModelError(f"{where}: cannot import: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, ModelAdapter)):
        raise ModelError(f"{where}: not a subclass of harness.models.base.ModelAdapter")
    return cls


def make_adapter(spec: ModelSpec) -> ModelAdapter:
    """The adapter for a spec, weights not loaded; its capabilities are known from here on."""
    check_remote_code(spec)
    adapter = adapter_class(spec.source)(spec)
    if not adapter.capabilities:
        raise ModelError(f"model {spec.id!r} ({spec.ref}) has no capability: it needs one of "
                         f"embed, generate or predict")
    return adapter


def build_adapter(spec: ModelSpec) -> ModelAdapter:
    """:func:`make_adapter`, then ``check()``: the name resolves (offline weights are there)."""
    adapter = make_adapter(spec)
    adapter.check()  # raises ModelError naming the model when it cannot exist
    return adapter
