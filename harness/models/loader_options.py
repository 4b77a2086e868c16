"""A model entry's pass-through settings, tried at preflight on what the library builds without weights.

timm's and transformers' ``model_kwargs``, hf-vlm's ``processor_kwargs``, ``attn_implementation``
and ``device_map`` go to a library that reads them only when the model loads, at its first trial,
inside the battery's MLflow run. Here each is tried before any run exists: the architecture is
built on torch's meta device (no memory, no initialisation; on the CPU where a model cannot be
built on meta), the config read from its config.json, the processor (small files) run on one blank
image. A key the library refuses, or takes and ignores, is an :class:`OptionRefused` naming it,
which preflight reports at the recipe's line (exit 2). Each answer is remembered per library build,
model files and settings (:class:`~harness.memo.Memo`), so a rerun imports no library for it.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..memo import Memo
from .base import ModelError

# a refusal: the key path under the option (empty: the whole option) and what the library said
Refusal = tuple[tuple[str, ...], str] | None

# accelerate's placements by name; any other string is a torch device (cpu, cuda, cuda:1)
PLACEMENTS = ("auto", "balanced", "balanced_low_0", "sequential")
# keys that from_pretrained reads itself beyond its signature's, which neither the config nor the
# model class takes (transformers' modeling_utils pops them from its kwargs)
FROM_PRETRAINED_ONLY = frozenset({"subfolder", "variant", "key_mapping", "quantization_config", "use_kernels",
                                  "max_memory", "offload_folder", "offload_buffers", "gguf_file"})


class OptionRefused(ModelError):
    """A setting of a model entry that its loader refuses or never reads; ``key`` is its path in
    the entry (``("options", "model_kwargs", "bogus_kw")``), which preflight turns into the
    recipe's file:line."""

    def __init__(self, model_id: str, key: tuple[str, ...], what: str):
        self.model_id, self.key, self.what = model_id, key, what
        super().__init__(f"model {model_id!r}: {'.'.join(key)}: {what}")


def dist_stamp(dist: str) -> str:
    """A distribution's version and the time its metadata was written (a reinstall of the same
    version, an editable checkout's reinstall, changes it)."""
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return f"{dist}==absent"
    where = getattr(d, "_path", None)
    try:
        stamp = Path(where).stat().st_mtime_ns if where is not None else "?"
    except OSError:
        stamp = "?"
    return f"{dist}=={d.version}@{stamp}"


def local_digest(path: Path) -> str:
    """Content digest of a local model dir without reading weights: small files' bytes, and the
    names and sizes of large ones (weight shards)."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path).as_posix()
        size = f.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        if size <= 1 << 20:
            h.update(f.read_bytes())
    return h.hexdigest()


def remembered(parts: list[str], compute: Callable[[], Refusal]) -> Refusal:
    """``compute()``, or its answer kept under ``parts`` (everything it depends on)."""
    key = "|".join(parts)
    memo = Memo("loader_options")
    kept = memo.get(key)
    if isinstance(kept, dict) and "refused" in kept:
        return None if kept["refused"] is None else (tuple(kept["refused"][0]), str(kept["refused"][1]))
    found = compute()
    memo.set(key, {"refused": None if found is None else [list(found[0]), found[1]]})
    memo.save()
    return found


def said(e: BaseException) -> str:
    """The library's error in one line."""
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]


def refusal(e: BaseException, keys: dict[str, Any], who: str) -> Refusal:
    """The key the library's error names (an unexpected keyword, a field), else the only key
    given, else the whole option."""
    named = re.search(r"(?:keyword argument|field) '(\w+)'", str(e))
    key = named.group(1) if named and named.group(1) in keys else (next(iter(keys)) if len(keys) == 1 else None)
    return (() if key is None else (key,)), f"{who} refuses it ({said(e)})"


def tried(build: Callable[[dict[str, Any]], Any], kwargs: dict[str, Any], who: str,
          fallback: Callable[[dict[str, Any]], Any] | None = None) -> Refusal:
    """Build with ``kwargs``; where that fails but the build without them succeeds, they are
    what the library refuses. Where neither builds (the model cannot be built on meta), the
    ``fallback`` build decides, or nothing can be said before the load."""
    try:
        build(kwargs)
        return None
    except Exception as e:  # noqa: BLE001 - whatever the library raises on them is its refusal
        error = e
    try:
        build({})
    except Exception:  # noqa: BLE001 - the build fails without them too: it says nothing of them
        if fallback is None:
            return None
        try:
            fallback(kwargs)
            return None
        except Exception as e:  # noqa: BLE001
            error = e
    return refusal(error, kwargs, who)


# -- timm -----------------------------------------------------------------------------------------

def timm_refusal(name: str, kwargs: dict[str, Any]) -> Refusal:
    """``model_kwargs`` of ``timm.create_model(name)``, tried on the architecture (none: nothing to try)."""
    if not kwargs:
        return None

    def build(device: str) -> Callable[[dict[str, Any]], Any]:
        def create(kw: dict[str, Any]) -> Any:
            import timm
            import torch

            with torch.device(device), torch.no_grad():
                return timm.create_model(name, pretrained=False, **kw)
        return create

    return remembered([dist_stamp("timm"), "timm", name, json.dumps(kwargs, sort_keys=True, default=str)],
                      lambda: tried(build("meta"), kwargs, f"timm {name}", build("cpu")))


# -- transformers ---------------------------------------------------------------------------------

def _meta_model(folder: Path, auto: str, kwargs: dict[str, Any], trust: bool) -> Any:
    """The model ``auto.from_pretrained(folder, **kwargs)`` builds, on the meta device: the config
    from config.json with the keys it takes, the others to the model class as from_pretrained
    passes them."""
    import inspect

    import torch
    import transformers

    loader = set(inspect.signature(transformers.PreTrainedModel.from_pretrained).parameters) | FROM_PRETRAINED_ONLY
    model_kw = {k: v for k, v in kwargs.items() if k == "attn_implementation"}
    config, unused = transformers.AutoConfig.from_pretrained(
        folder, return_unused_kwargs=True, trust_remote_code=trust,
        **{k: v for k, v in kwargs.items() if k not in loader and k not in model_kw})
    with torch.device("meta"):
        return getattr(transformers, auto).from_config(config, trust_remote_code=trust, **unused, **model_kw)


def hf_model_refusal(folder: Path, auto: str, kwargs: dict[str, Any], trust: bool) -> Refusal:
    """Keyword arguments of ``auto.from_pretrained(folder)``, tried on its config and architecture."""
    return remembered([dist_stamp("transformers"), auto, local_digest(folder), str(trust),
                       json.dumps(kwargs, sort_keys=True, default=str)],
                      lambda: tried(lambda kw: _meta_model(folder, auto, kw, trust), kwargs, f"{auto} {folder.name}"))


def _a_device(text: str) -> bool:
    import torch

    try:
        torch.device(text)
    except (RuntimeError, ValueError):
        return False
    return True


def device_map_refusal(value: str | dict[str, Any], modules: Callable[[], set[str] | None]) -> Refusal:
    """A ``device_map`` from_pretrained can place by: one of accelerate's placements or a device,
    or a mapping of the model's modules (``""`` the whole model) to devices (a GPU number, a torch
    device or ``disk``)."""
    if isinstance(value, str):
        return None if value in PLACEMENTS or _a_device(value) else (
            (), f"{value!r} is neither a placement ({', '.join(PLACEMENTS)}) nor a device (cpu, cuda, cuda:0)")
    names = modules() if any(value) else None
    for key, device in value.items():
        if not ((isinstance(device, int) and not isinstance(device, bool) and device >= 0)
                or (isinstance(device, str) and (device == "disk" or _a_device(device)))):
            return (key,), f"{device!r} is not a device (a GPU number, cpu, cuda:0 or disk)"
        if key and names is not None and key not in names:
            near = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.5)
            return (key,), "not a module of the model" + (f"; did you mean {near[0]}?" if near else "")
    return None


def vlm_model_refusal(folder: Path, options: dict[str, Any], trust: bool) -> Refusal:
    """hf-vlm's ``attn_implementation`` and ``device_map``, tried on the architecture built on the
    meta device; the key path is under ``options``."""
    attn = {k: options[k] for k in ("attn_implementation",) if options.get(k) is not None}
    device_map = options.get("device_map")
    if not attn and device_map is None:
        return None

    def compute() -> Refusal:
        built: list[Any] = []

        def build(kw: dict[str, Any]) -> Any:
            built[:] = [_meta_model(folder, "AutoModelForImageTextToText", kw, trust)]

        if attn and (found := tried(build, attn, "transformers")) is not None:
            return ("attn_implementation",), found[1]
        if device_map is None:
            return None

        def modules() -> set[str] | None:
            if not built:
                tried(build, {}, "transformers")
            return {name for name, _ in built[0].named_modules()} if built else None

        found = device_map_refusal(device_map, modules)
        return None if found is None else (("device_map", *found[0]), found[1])

    return remembered([dist_stamp("transformers"), "hf-vlm", local_digest(folder), str(trust),
                       json.dumps({**attn, "device_map": device_map}, sort_keys=True, default=str)], compute)


def processor_refusal(folder: Path, kwargs: dict[str, Any], trust: bool,
                      encode: Callable[[Any], Any]) -> Refusal:
    """``processor_kwargs`` of ``AutoProcessor.from_pretrained(folder)``: each a setting of the
    processor or one of its parts (which transformers otherwise drops without a word), and the
    processor built with them able to ``encode`` one blank image and prompt, as it could without."""
    def compute() -> Refusal:
        from transformers import AutoProcessor

        def load(kw: dict[str, Any]) -> Any:
            return AutoProcessor.from_pretrained(folder, trust_remote_code=trust, **kw)

        try:
            plain = load({})
        except Exception:  # noqa: BLE001 - it does not load here at all: the load will say why
            return None
        try:
            processor = load(kwargs)
        except Exception as e:  # noqa: BLE001 - whatever it raises on them is its refusal
            return refusal(e, kwargs, "the processor")
        def parts(p: Any) -> list[Any]:
            attributes: list[str] = getattr(type(p), "get_attributes", list)()
            return [p, *(part for a in attributes if (part := getattr(p, a, None)) is not None)]

        # what the saved processor was made with (a tokenizer's init_kwargs also keep keys it ignores)
        saved = {k for part in parts(plain) for k in (getattr(part, "init_kwargs", None) or {})}
        for key in kwargs:
            if key not in saved and not any(key in getattr(p, "_valid_kwargs_names", ()) or hasattr(p, key)
                                            for p in parts(processor)):
                return (key,), (f"{type(processor).__name__} and its parts take no such setting "
                                f"(transformers would ignore it)")
        try:
            encode(plain)
        except Exception:  # noqa: BLE001 - it cannot encode without them either: the run will say why
            return None
        try:
            encode(processor)
        except Exception as e:  # noqa: BLE001
            return refusal(e, kwargs, type(processor).__name__)
        return None

    return remembered([dist_stamp("transformers"), "processor", local_digest(folder), str(trust),
                       json.dumps(kwargs, sort_keys=True, default=str)], compute)
