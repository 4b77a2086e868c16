"""Encoders with the ``embed`` capability: timm, open_clip and transformers vision towers.

All three share batching, device placement and lazy loading (:class:`TorchEncoder`); each source
only says how to check a name, load weights and preprocessing, and run the image tower. On a CUDA
GPU the shared part autocasts to the entry's ``precision``, copies batches from pinned memory and
runs CNNs channels-last; ``batch_size: auto`` backs off on out-of-memory (:mod:`.device`).
Weights resolve offline in this order: ``pypi:<package>`` (real ImageNet weights from a wheel),
a local path, or the hub name pinned by ``revision`` (baked into the Docker image at build time
by ``gestalt models fetch``; run time is ``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from PIL import Image
from pydantic import Field, ValidationInfo, field_validator

from ..memo import Memo
from ..options import PathOption
from .base import ModelAdapter, ModelError, ModelSpec, not_in_hub_cache
from .device import (BatchOptions, BatchSizer, autocast, compute_precision, is_conv_net, is_cuda, place, planned_device,
                     to_device)
from .loader_options import OptionRefused, dist_stamp, hf_model_refusal, timm_refusal
from .memory import hf_weight_files
from .weights import check_keys, checkpoint_keys, load_by_order, pypi_weights, weights_kind


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _tensor_steps(steps: list[Any]) -> bool:
    """Whether a transform ends with PIL-to-tensor (torchvision's, or timm's that passes tensors
    through) and then normalisation: steps that can run on a whole batch at once."""
    from torchvision.transforms import Normalize, ToTensor

    return (len(steps) == 2 and type(steps[0]) in (ToTensor, *_timm_to_tensor())
            and type(steps[1]) is Normalize)


def _timm_to_tensor() -> tuple[type, ...]:
    try:
        from timm.data.transforms import MaybeToTensor
    except ImportError:
        return ()
    return (MaybeToTensor,)


def random_init_seed(spec: ModelSpec) -> int:
    """``weights: random`` is a seeded initialisation (``options.init_seed``, default 0): the same
    network on every run and machine, so its trials can be cached and its scores reproduced."""
    return int(spec.options.get("init_seed", 0))


@contextlib.contextmanager
def seeded_init(spec: ModelSpec) -> Iterator[None]:
    import torch

    with torch.random.fork_rng(devices=[]):  # the caller's own random state is left as it was
        torch.manual_seed(random_init_seed(spec))
        yield


def _plain(value: Any) -> Any:
    """``value`` as JSON has it (tuples as lists, others as str), which is how the fingerprint
    hash sees it: a remembered value and a fresh one hash the same."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _tuples(value: Any) -> Any:
    """JSON's lists back as the tuples timm's config holds (same hash, same values)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


RANDOM_ONLY = "never read unless weights: random (it seeds a random initialisation)"


class EncoderOptions(BatchOptions):
    init_seed: int = Field(0, ge=0, le=2**32 - 1)  # weights: random
    # option -> the kinds of weights (weights.weights_kind) that read it, and what to say otherwise
    READ_WITH: ClassVar[dict[str, tuple[tuple[str, ...], str]]] = {"init_seed": (("random",), RANDOM_ONLY)}

    @classmethod
    def unread(cls, key: str, weights: str | None) -> str | None:
        """Why an option set with these weights would be ignored; None where they read it."""
        kinds, why = cls.READ_WITH.get(key, (None, ""))
        return None if kinds is None or weights_kind(weights) in kinds else why

    @field_validator("*")
    @classmethod
    def _read_by_the_weights(cls, value: Any, info: ValidationInfo) -> Any:
        """A recipe validates its options with its entry's weights (the context): an option those
        weights never read is refused, not ignored."""
        context = info.context or {}
        if info.field_name and "weights" in context and (why := cls.unread(info.field_name, context["weights"])):
            raise ValueError(why)
        return value


class TimmOptions(EncoderOptions):
    model_kwargs: dict[str, Any] = Field(default_factory=dict)  # to timm.create_model
    hf_hub_id: str | None = None
    READ_WITH = {
        **EncoderOptions.READ_WITH,
        "model_kwargs": (("random", "hub", "named"), "never read with pypi: weights, whose tensors load into the "
                                                    "architecture as timm builds it by default"),
        "hf_hub_id": (("hub",), "never read unless weights: hub")}


class OpenClipOptions(EncoderOptions):
    config_dir: PathOption | None = None


class HFEncoderOptions(EncoderOptions):
    model_kwargs: dict[str, Any] = Field(default_factory=dict)  # to from_pretrained
    pooling: Literal["pooler", "cls", "mean"] = "pooler"
    READ_WITH = {"init_seed": ((), "never read: an hf model loads the weights its name holds")}


# from_pretrained keys an hf encoder's entry sets itself: in model_kwargs they would clash or be undone
HF_ENTRY_KEYS = {"revision": "set by the entry's revision", "dtype": "set by the entry's dtype",
                 "torch_dtype": "set by the entry's dtype",
                 "device_map": "an hf encoder is placed whole on runtime.device (device_map is an hf-vlm option)"}


class TorchEncoder(ModelAdapter):
    capabilities = frozenset({"embed"})
    Options = EncoderOptions
    library: str = ""

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self._model: Any = None
        self._transform: Callable[[Image.Image], Any] | None = None
        self._placed: str | None = None  # the device given to to(); before that, the planned one
        self._sizer = BatchSizer(spec)

    # -- what subclasses provide
    def check(self) -> None:
        """Refuse an option these weights never read (a recipe's are refused at load already)."""
        for key in self.spec.options:
            if why := self.Options.unread(key, self.spec.weights):
                raise OptionRefused(self.spec.id, ("options", key), why)

    def _load(self) -> tuple[Any, Callable[[Image.Image], Any]]:
        raise NotImplementedError

    def _forward(self, model, batch):
        raise NotImplementedError

    # -- shared
    @property
    def fingerprint(self) -> dict[str, Any]:
        s = self.spec
        options = {k: v for k, v in s.options.items() if k != "max_batch_size"}  # speed, not results
        fp: dict[str, Any] = {
            "source": s.source, "name": s.name, "weights": s.weights, "revision": s.revision,
            "dtype": s.dtype, "options": options, "library": f"{self.library}=={_version(self.library)}",
            "torch": _version("torch")}
        if self.precision != "float32":  # only then: a float32 run's fingerprint is the one it always had
            fp["precision"] = self.precision
        pkg = pypi_weights(s.weights)
        if pkg is not None:
            fp["weights_sha256"] = pkg.sha256
        if s.weights in (None, "random"):
            fp["init_seed"] = random_init_seed(s)
        return fp

    @property
    def model_version(self) -> str:
        s = self.spec
        pkg = pypi_weights(s.weights)
        if pkg is not None:
            return f"{s.ref}@pypi:{pkg.package}=={pkg.version}#sha256:{pkg.sha256[:12]}"
        rev = f"@{s.revision}" if s.revision else ""
        weights = f"[{s.weights}]" if s.weights else ""
        return f"{s.ref}{weights}{rev}"

    @property
    def torch_dtype(self):
        import torch

        # "auto": the weights' own precision for encoders is float32
        return torch.float32 if self.spec.dtype == "auto" else getattr(torch, self.spec.dtype)

    @property
    def weights_dtype(self) -> str:
        return "float32" if self.spec.dtype == "auto" else self.spec.dtype

    @property
    def precision(self) -> str:
        """What the forward pass runs in (autocast); the device is looked up only for ``auto``."""
        return compute_precision(self.spec, lambda: self._placed or planned_device())

    def load(self):
        if self._model is None:
            model, self._transform = self._load()
            self._model = place(model, self.device, self.torch_dtype).eval()
        return self._model

    def to(self, device: str) -> TorchEncoder:
        self.device = self._placed = device
        if self._model is not None:
            self._model = place(self._model, device)
        return self

    def release(self) -> None:
        self._model = self._transform = None

    def preprocess(self, images: list[Image.Image]):
        import torch

        self.load()
        transform = self._transform
        assert transform is not None  # load() sets it with the model
        steps = getattr(transform, "transforms", None)
        if steps and _tensor_steps(steps[-2:]):
            # the image steps one image at a time, then to-tensor and normalisation once for the
            # batch: the same float32 operations on each pixel, without a tensor per image (on a
            # CPU they were most of the preprocessing)
            from torchvision.transforms import functional

            pictures = [im.convert("RGB") for im in images]
            for step in steps[:-2]:
                pictures = [step(p) for p in pictures]
            if len({(p.size, p.mode) for p in pictures}) == 1:
                pixels = torch.from_numpy(np.stack([np.asarray(p) for p in pictures]))
                batch = pixels.permute(0, 3, 1, 2).contiguous().to(torch.float32).div(255)
                return functional.normalize(batch, steps[-1].mean, steps[-1].std, inplace=True)
            return torch.stack([steps[-1](steps[-2](p)) for p in pictures])
        return torch.stack([transform(im.convert("RGB")) for im in images])

    def embed(self, images: list[Image.Image]) -> np.ndarray:
        return self._batched(images, self._forward)

    def _batched(self, images: list[Image.Image], forward: Callable[[Any, Any], Any]) -> np.ndarray:
        """``forward(model, batch)`` over ``images`` a batch at a time, as a float32 array."""
        import torch

        model = self.load()
        dtype, precision = self.torch_dtype, self.precision
        channels_last = is_cuda(self.device) and is_conv_net(model)  # as place() put the model

        def run(start: int, stop: int) -> np.ndarray:
            batch = to_device(self.preprocess(images[start:stop]), self.device, dtype, channels_last)
            with torch.inference_mode(), autocast(self.device, precision):
                return forward(model, batch).float().cpu().numpy()

        out = self._sizer.run(len(images), run, self.device)
        return np.concatenate(out, axis=0) if out else np.zeros((0, 0), np.float32)


class TimmEncoder(TorchEncoder):
    """``timm:<architecture>``; embedding = pre-logits features (``forward_head(pre_logits=True)``);
    ``classify`` = the softmax of its ImageNet-1k head."""

    library = "timm"
    capabilities = frozenset({"embed", "classify"})
    Options = TimmOptions

    def _timm_facts(self) -> dict[str, Any]:
        """What check and fingerprint read from timm (is the name an architecture, its
        preprocessing), remembered per timm build and name so a rerun does not import timm."""
        key = f"{dist_stamp('timm')}|{self.spec.name}"
        memo = Memo("timm_facts")
        facts = memo.get(key)
        if not isinstance(facts, dict):
            import timm

            is_model = bool(timm.is_model(self.spec.name))
            cfg = timm.models.get_pretrained_cfg(self.spec.name) if is_model else None
            pre = None if cfg is None else {k: getattr(cfg, k) for k in
                                            ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")}
            memo.set(key, {"is_model": is_model, "preprocess": _plain(pre)})
            memo.save()
            return {"is_model": is_model, "preprocess": pre}
        pre = facts.get("preprocess")
        return {"is_model": facts.get("is_model"),
                "preprocess": None if pre is None else {k: _tuples(v) for k, v in pre.items()}}

    def check(self) -> None:
        super().check()
        if not self._timm_facts()["is_model"]:
            import difflib

            import timm

            near = difflib.get_close_matches(self.spec.name, timm.list_models(), n=1, cutoff=0.8)
            raise ModelError(f"model {self.spec.id!r}: timm has no architecture {self.spec.name!r}"
                             + (f"; did you mean {near[0]}?" if near else ""))
        if refused := timm_refusal(self.spec.name, self.spec.options.get("model_kwargs") or {}):
            raise OptionRefused(self.spec.id, ("options", "model_kwargs", *refused[0]), refused[1])
        pkg = pypi_weights(self.spec.weights)
        if pkg is not None:
            if pkg.architecture != self.spec.name:
                raise ModelError(f"model {self.spec.id!r}: weights {pkg.package} are for "
                                 f"{pkg.architecture}, not {self.spec.name}")
            if not pkg.path().is_file():
                raise ModelError(f"model {self.spec.id!r}: weight file {pkg.path()} missing")
        elif self.spec.weights == "hub" and os.environ.get("HF_HUB_OFFLINE") == "1" and not self._hub_cached():
            raise not_in_hub_cache(self.spec.id, f"timm {self.spec.name!r} hub weights are")
        elif self.spec.weights not in (None, "random", "hub"):
            path = Path(self.spec.weights)
            if not path.is_file():  # a typo loads nothing: bad input at its line, not a failed call per trial
                raise OptionRefused(self.spec.id, ("weights",),
                                    f"{self.spec.weights!r} is neither random, hub, pypi:<package> nor a file")
            if (found := checkpoint_keys(path)) is not None:  # loaded strictly: the names must match
                try:
                    check_keys(path, found, self._state_keys(), f"timm {self.spec.name}")
                except ModelError as e:
                    raise ModelError(f"model {self.spec.id!r}: weights {e}") from None

    def _state_keys(self) -> list[str]:
        """The names of the architecture's state dict, from a model built on the meta device (no
        memory, no initialisation), remembered per timm build, name and model_kwargs."""
        kwargs = self.spec.options.get("model_kwargs", {})
        key = f"{dist_stamp('timm')}|{self.spec.name}|state_keys|{json.dumps(kwargs, sort_keys=True)}"
        memo = Memo("timm_facts")
        keys = memo.get(key)
        if not isinstance(keys, list):
            import timm
            import torch

            with torch.device("meta"):
                keys = list(timm.create_model(self.spec.name, pretrained=False, **kwargs).state_dict())
            memo.set(key, keys)
            memo.save()
        return keys

    @property
    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint
        pre = self._timm_facts()["preprocess"]
        if pre is not None:
            fp["preprocess"] = pre
        return fp

    def _hub_cached(self) -> bool:
        """Whether the Hugging Face cache holds a weight file timm would read for ``weights: hub``;
        True where timm fetches from a URL instead, which this cannot see."""
        files = self._hub_files()
        return files is None or bool(files)

    def _hub_files(self) -> list[Path] | None:
        """The cached weight file timm reads for ``weights: hub`` (its ``.safetensors`` alternative
        or the file itself), [] where none is cached; None where timm fetches from a URL."""
        import timm
        from huggingface_hub import try_to_load_from_cache

        cfg = timm.models.get_pretrained_cfg(self.spec.name)
        hub_id = self.spec.options.get("hf_hub_id") or getattr(cfg, "hf_hub_id", None)
        if not hub_id:
            return None
        name = getattr(cfg, "hf_hub_filename", None) or "pytorch_model.bin"
        files = [*(["model.safetensors"] if name == "pytorch_model.bin" else
                   [name[:-4] + ".safetensors"] if name.endswith(".bin") else []), name]
        cached = (try_to_load_from_cache(hub_id, f, revision=self.spec.revision) for f in files)
        return next(([Path(c)] for c in cached if isinstance(c, str)), [])

    def weight_files(self) -> list[Path] | None:
        w = self.spec.weights
        if (pkg := pypi_weights(w)) is not None:
            return [pkg.path()] if pkg.path().is_file() else []
        if w == "hub":
            return self._hub_files()
        return [Path(w)] if w not in (None, "random") and Path(w).is_file() else None

    def _hub_kwargs(self) -> dict[str, Any]:
        s = self.spec
        kwargs: dict[str, Any] = {"pretrained": True, **s.options.get("model_kwargs", {})}
        hub_id = s.options.get("hf_hub_id")
        if hub_id or s.revision:
            import timm

            if not hub_id:
                cfg = timm.models.get_pretrained_cfg(s.name)
                if cfg is None:
                    raise ModelError(f"model {s.id!r}: timm has no pretrained config for {s.name!r}, "
                                     f"so no hub id to pin the revision to (set option hf_hub_id)")
                hub_id = cfg.hf_hub_id
            kwargs["pretrained_cfg_overlay"] = {"hf_hub_id": f"{hub_id}@{s.revision}" if s.revision else hub_id}
        return kwargs

    def _load(self):
        import timm
        import torch

        s = self.spec
        pkg = pypi_weights(s.weights)
        if pkg is not None:
            model = timm.create_model(s.name, pretrained=False)
            load_by_order(model, torch.load(pkg.verified_path(), map_location="cpu", weights_only=True))
        elif s.weights in (None, "random"):
            with seeded_init(s):
                model = timm.create_model(s.name, pretrained=False, **s.options.get("model_kwargs", {}))
        elif s.weights == "hub":
            model = timm.create_model(s.name, **self._hub_kwargs())
        else:
            path = Path(s.weights)
            if not path.is_file():
                raise ModelError(f"model {s.id!r}: weights {s.weights!r} is neither pypi:, hub, random "
                                 f"nor an existing file")
            model = timm.create_model(s.name, pretrained=False, **s.options.get("model_kwargs", {}))
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        cfg = timm.data.resolve_model_data_config(model)
        return model, timm.data.create_transform(**cfg, is_training=False)

    def _forward(self, model, batch):
        return model.forward_head(model.forward_features(batch), pre_logits=True)

    def classify(self, images: list[Image.Image]) -> np.ndarray:
        classes = self.load().num_classes
        if classes != 1000:
            raise ModelError(f"model {self.spec.id!r}: its head has {classes} classes, not ImageNet-1k's 1000")
        return self._batched(images, lambda model, batch: model(batch).softmax(dim=-1))

    def fetch(self) -> str:
        if self.spec.weights != "hub":
            return f"{self.spec.id}: nothing to fetch (weights {self.spec.weights})"
        import timm

        timm.create_model(self.spec.name, **self._hub_kwargs())
        return f"{self.spec.id}: fetched timm {self.spec.name}"


class OpenClipEncoder(TorchEncoder):
    """``open_clip:<config name>``; ``weights`` is an open_clip pretrained tag or a local file.

    ``options.config_dir`` registers extra model configs (tests use a tiny one). URL-hosted
    weights go to $GESTALT_CLIP_CACHE so a non-root container user finds what the build fetched.
    """

    library = "open_clip_torch"
    Options = OpenClipOptions

    def _register(self):
        import open_clip

        if self.spec.options.get("config_dir"):
            open_clip.add_model_config(str(self.spec.options["config_dir"]))
        return open_clip

    def check(self) -> None:
        super().check()
        open_clip = self._register()
        if self.spec.name not in open_clip.list_models():
            raise ModelError(f"model {self.spec.id!r}: open_clip has no config {self.spec.name!r}")

    def _create(self):
        open_clip = self._register()
        w = self.spec.weights
        pretrained = None if w in (None, "random") else w
        with seeded_init(self.spec) if pretrained is None else contextlib.nullcontext():
            model, _, preprocess = open_clip.create_model_and_transforms(
                self.spec.name, pretrained=pretrained, cache_dir=os.environ.get("GESTALT_CLIP_CACHE"))
        return model, preprocess

    def _load(self):
        return self._create()

    def _forward(self, model, batch):
        return model.encode_image(batch)

    def fetch(self) -> str:
        self._create()
        return f"{self.spec.id}: fetched open_clip {self.spec.name} [{self.spec.weights}]"


class HFVisionEncoder(TorchEncoder):
    """``hf:<repo or local dir>``: CLIP/SigLIP image towers, DINOv2, MAE, BEiT, I-JEPA, ViT ...

    Embedding: ``get_image_features`` where the model has one (contrastive towers); otherwise
    ``options.pooling``: ``pooler`` (default when the model returns one), ``cls`` or ``mean``
    over the last hidden state. ``options.model_kwargs`` go to ``from_pretrained``.
    """

    library = "transformers"
    Options = HFEncoderOptions

    def check(self) -> None:
        super().check()
        s = self.spec
        if s.weights is not None:
            raise OptionRefused(s.id, ("weights",), "never read: an hf model's weights are those its name holds "
                                                    "(a hub repo pinned by revision, or a folder)")
        if Path(s.name).is_dir():
            if not (Path(s.name) / "config.json").is_file():
                raise ModelError(f"model {s.id!r}: {s.name}/config.json missing")
            folder: Path | None = Path(s.name)
        else:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(s.name, "config.json", revision=s.revision)
            if os.environ.get("HF_HUB_OFFLINE") == "1" and not isinstance(cached, str):
                raise not_in_hub_cache(s.id, f"{s.name!r} is")
            folder = Path(cached).parent if isinstance(cached, str) else None  # else: from the hub at load
        kwargs = s.options.get("model_kwargs") or {}
        for key in kwargs:
            if key in HF_ENTRY_KEYS:
                raise OptionRefused(s.id, ("options", "model_kwargs", key), HF_ENTRY_KEYS[key])
        if kwargs and folder is not None and (found := hf_model_refusal(folder, "AutoModel", kwargs,
                                                                         s.trust_remote_code)):
            raise OptionRefused(s.id, ("options", "model_kwargs", *found[0]), found[1])

    def _load(self):
        from transformers import AutoImageProcessor, AutoModel

        s = self.spec
        # e.g. MAE needs mask_ratio=0.0, or it embeds a random 25% of the patches on every call
        kwargs = {"trust_remote_code": s.trust_remote_code, **s.options.get("model_kwargs", {})}
        model = AutoModel.from_pretrained(s.name, revision=s.revision, **kwargs)
        processor = AutoImageProcessor.from_pretrained(s.name, revision=s.revision,
                                                       trust_remote_code=s.trust_remote_code)

        def transform(image):
            return processor(images=image, return_tensors="pt")["pixel_values"][0]

        return model, transform

    def _forward(self, model, batch):
        if hasattr(model, "get_image_features"):
            out = model.get_image_features(pixel_values=batch)
            return out if not hasattr(out, "pooler_output") else out.pooler_output
        out = model(pixel_values=batch)
        pooling = self.spec.options.get("pooling", "pooler")
        if pooling == "pooler" and getattr(out, "pooler_output", None) is not None:
            return out.pooler_output.flatten(1)
        hidden = out.last_hidden_state
        return hidden.mean(dim=1) if pooling == "mean" else hidden[:, 0]

    def weight_files(self) -> list[Path]:
        return hf_weight_files(self.spec.name, self.spec.revision)

    def fetch(self) -> str:
        from huggingface_hub import snapshot_download

        path = snapshot_download(self.spec.name, revision=self.spec.revision)
        return f"{self.spec.id}: fetched {self.spec.name}@{self.spec.revision} -> {path}"
