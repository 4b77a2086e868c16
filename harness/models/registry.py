"""Model sources: ``source`` prefix -> adapter class ("module:Class"), imported on use.

Adding a model family is one adapter file plus one line here. An adapter class takes a
:class:`ModelSpec`, exposes ``fingerprint``/``model_version`` without loading weights, and loads
lazily on the first call of its capability method (or ``load()``).
"""

from __future__ import annotations

from ..lazy import lookup
from .base import ModelError, ModelSpec

SOURCES: dict[str, str] = {
    "timm": "harness.models.encoders:TimmEncoder",
    "open_clip": "harness.models.encoders:OpenClipEncoder",
    "hf": "harness.models.encoders:HFVisionEncoder",
    "hf-vlm": "harness.models.hf_vlm:HFVLM",
    "api": "harness.models.api:APIModel",
    "cnn": "harness.models.regressors:CNNRegressor",
}


def adapter_class(source: str):
    return lookup(SOURCES, source, "model source", ModelError)


def build_adapter(spec: ModelSpec):
    """The adapter for a spec (weights not loaded yet); validates that the name resolves."""
    cls = adapter_class(spec.source)
    adapter = cls(spec)
    adapter.check()  # raises ModelError naming the model when it cannot exist
    return adapter
