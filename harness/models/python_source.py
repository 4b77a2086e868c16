"""``source: python``: a model behind the user's own code.

``name`` is ``"module:callable"`` (``my_pkg.models:build``) or ``"path/to/file.py:callable"``;
the callable is called with the entry's ``options`` as keyword arguments and returns an object
with any of ``embed(images)``, ``generate(image, prompt, settings)`` (a ``str`` or a
:class:`Generation`) and ``predict(images)``: the methods it has are its capabilities, and they
decide the readouts as for the built-in sources. ``to(device)`` is called before the first call
where the object has it.

The fingerprint (which keys the trial cache) changes when the model does: the callable's
qualified name, its options, the source files of the modules defining the callable and the
object's class, and a sha256 of the torch state dict where the object is (or holds) a torch
module, computed once when the model is built. An object's own ``fingerprint`` (a JSON-able dict
or a string) replaces all of that. The model is built at planning time (its capabilities decide
the readouts), so a cached rerun still calls the callable, but never the model. A dry run builds
nothing (:func:`check_name` is all it checks): a recipe naming ``os:system`` runs it on a run only.

``harness.evaluate`` hands live objects to the same adapter under names ``live:<model id>``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from PIL import Image

from .base import (
    CAPABILITIES,
    Generation,
    ModelAdapter,
    ModelError,
    ModelSpec,
    fingerprint_hash,
)

LIVE_PREFIX = "live:"
LIVE: dict[str, object] = {}  # "live:<id>" -> an object handed to harness.evaluate


@runtime_checkable
class Embeds(Protocol):
    def embed(self, images: list[Image.Image]) -> Any: ...


@runtime_checkable
class Generates(Protocol):
    def generate(self, image: Image.Image, prompt: str, settings: dict[str, Any]) -> Any: ...


@runtime_checkable
class Predicts(Protocol):
    def predict(self, images: list[Image.Image]) -> Any: ...


@runtime_checkable
class Placeable(Protocol):
    def to(self, device: str) -> Any: ...


@runtime_checkable
class Fingerprinted(Protocol):
    fingerprint: dict[str, Any] | str


CAPABILITY_PROTOCOLS: dict[str, type] = {"embed": Embeds, "generate": Generates, "predict": Predicts}


def capabilities_of(obj: object) -> frozenset[str]:
    return frozenset(c for c in CAPABILITIES if isinstance(obj, CAPABILITY_PROTOCOLS[c]))


def check_name(spec: ModelSpec) -> tuple[str, str]:
    """(module, callable) of ``spec.name``, its shape checked and a module file found, without
    importing anything: all a dry run may know of an entry whose building runs its code."""
    module_name, sep, attr = spec.name.rpartition(":")
    if not sep or not module_name or not attr:
        raise ModelError(f"model {spec.id!r}: python name {spec.name!r} must be 'module:callable' "
                         f"or 'path/to/file.py:callable'")
    if module_name.endswith(".py") and not Path(module_name).is_file():
        raise ModelError(f"model {spec.id!r}: module file {module_name} not found")
    return module_name, attr


def _import(spec: ModelSpec) -> tuple[Any, str]:
    """The callable named ``module:callable`` and the files it comes from."""
    module_name, attr = check_name(spec)
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            loader_spec = importlib.util.spec_from_file_location(f"gestalt_user.{path.stem}", path)
            if loader_spec is None or loader_spec.loader is None:
                raise ModelError(f"model {spec.id!r}: cannot import {module_name}")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[loader_spec.name] = module  # dataclasses and pickling look their module up
            loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ModelError:
        raise
    except Exception as e:  # any error in the user's module: name the module, keep the cause
        raise ModelError(f"model {spec.id!r}: cannot import module {module_name!r}: "
                         f"{type(e).__name__}: {e}") from e
    fn = vars(module).get(attr)
    if not callable(fn):
        raise ModelError(f"model {spec.id!r}: module {module_name!r} has no callable {attr!r}")
    return fn, module_name


def _source_digest(*objects: object) -> str:
    """sha256 over the source files of the modules defining ``objects`` (a module edited, a new
    fingerprint)."""
    h = hashlib.sha256()
    files = set()
    for obj in objects:
        try:
            path = inspect.getsourcefile(obj if inspect.isclass(obj) or inspect.isfunction(obj)
                                         else type(obj))
        except TypeError:  # built-in
            path = None
        if path:
            files.add(path)
    for path in sorted(files):
        h.update(Path(path).name.encode() + b"\0" + Path(path).read_bytes())
    return h.hexdigest()


def _state_dict_digest(obj: object) -> str | None:
    """sha256 of the state dict of ``obj`` or of the torch modules it holds; None without torch."""
    if "torch" not in sys.modules:  # no torch imported by the user's code: no torch parameters
        return None
    import torch

    if isinstance(obj, torch.nn.Module):
        modules = [obj]
    else:  # a plain object holding its networks as attributes
        held = sorted(getattr(obj, "__dict__", {}).items())
        modules = [v for _, v in held if isinstance(v, torch.nn.Module)]
    if not modules:
        return None
    h = hashlib.sha256()
    for module in modules:
        for key, tensor in module.state_dict().items():
            h.update(key.encode() + b"\0" + tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class PythonModel(ModelAdapter):
    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.options = {k: v for k, v in spec.options.items() if k != "generation"}
        self._build: Callable[[], object] | None = None  # None: a live object, the caller's to keep
        if spec.name.startswith(LIVE_PREFIX):
            if spec.name not in LIVE:
                raise ModelError(f"model {spec.id!r}: no live object {spec.name!r} in this process")
            self.model: object | None = LIVE[spec.name]
            origin: dict[str, Any] = {"class": f"{type(self.model).__module__}.{type(self.model).__qualname__}"}
            code = _source_digest(self.model)
        else:
            fn, module_name = _import(spec)
            self._build = lambda: fn(**self.options)
            self.model = self._built()
            origin = {"callable": f"{module_name}:{fn.__qualname__}"}
            code = _source_digest(fn, self.model)
        self.capabilities = capabilities_of(self.model)
        self._fingerprint: dict[str, Any]
        if isinstance(self.model, Fingerprinted):
            self._fingerprint = {"source": "python", "fingerprint": self.model.fingerprint}
        else:
            self._fingerprint = {"source": "python", **origin, "options": self.options,
                                 "code_sha256": code, "state_dict_sha256": _state_dict_digest(self.model)}

    def _built(self) -> object:
        assert self._build is not None
        try:
            return self._build()
        except Exception as e:
            raise ModelError(f"model {self.spec.id!r}: {self.spec.name}(**options) failed: "
                             f"{type(e).__name__}: {e}") from e

    @property
    def fingerprint(self) -> dict[str, Any]:
        return self._fingerprint

    def release(self) -> None:
        """The object built from the callable goes (built again if called later); a live object
        handed to ``harness.evaluate`` stays its owner's."""
        if self._build is not None:
            self.model = None

    def _object(self) -> object:
        if self.model is None:  # released: built again (the runner then places it with to())
            self.model = self._built()
        return self.model

    @property
    def model_version(self) -> str:
        return f"{self.spec.ref}#{fingerprint_hash(self._fingerprint)[:12]}"

    def to(self, device: str) -> PythonModel:
        self.device = device
        if isinstance(model := self._object(), Placeable):
            model.to(device)
        return self

    def embed(self, images: list[Image.Image]) -> np.ndarray:
        model = self._object()
        assert isinstance(model, Embeds)
        return np.asarray(model.embed(images), dtype=np.float32)

    def predict(self, images: list[Image.Image]) -> np.ndarray:
        model = self._object()
        assert isinstance(model, Predicts)
        return np.asarray(model.predict(images), dtype=float)

    def generate(self, image: Image.Image, prompt: str, settings: dict[str, Any]) -> Generation:
        model = self._object()
        assert isinstance(model, Generates)
        t0 = time.perf_counter()
        out = model.generate(image, prompt, settings)
        if isinstance(out, Generation):
            return out
        return Generation(text=None if out is None else str(out), latency_s=time.perf_counter() - t0)
