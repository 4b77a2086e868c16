"""``hf-vlm:<repo or local dir>``: open vision-language models through transformers.

Any image-text-to-text model (``AutoModelForImageTextToText`` + ``AutoProcessor``) with its own
chat template. One user turn holds the image *before* the prompt text (the Gestalt paper's
protocol, appendix B). Decoding is greedy unless a readout asks for a temperature; the model's
own generation config supplies everything else (e.g. a repetition penalty it ships with).

Batches are left-padded so every row's answer starts at the same column; rows are independent
(attention masks), so a batch answers as its items would alone, up to floating-point summation
order in half precision (set ``batch_size: 1`` for a model whose processor cannot batch). Latency
per item is the batch's wall time divided by its size.

Spec fields: ``revision`` (hub commit, recorded as ``model_version = name@revision``),
``dtype`` (float32 | bfloat16 | float16 | auto: the weights' type), ``precision`` (autocast of
float32 weights, :mod:`.device`: recorded in the fingerprint when not float32), ``batch_size``
(an integer, or ``auto``: halved on GPU out-of-memory, ``options.max_batch_size`` to start). Options:
``device_map`` (e.g. "auto", for models larger than one GPU; accelerate places the layers and
``to(device)`` is then a no-op), ``processor_kwargs`` (e.g. Qwen2-VL ``min_pixels``/``max_pixels``:
they change what the model sees, so they are part of the fingerprint), ``attn_implementation``,
``generation`` (the recipe's generation settings; they reach the model through the readout).
``attn_implementation``, ``device_map`` and ``processor_kwargs`` are tried at preflight on what
transformers builds without weights (:mod:`.loader_options`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from PIL import Image
from pydantic import Field

from .base import Generation, ModelAdapter, ModelError, ModelSpec, not_in_hub_cache
from .device import BatchOptions, BatchSizer, autocast, compute_precision, is_cuda, planned_device, to_device
from .loader_options import OptionRefused, local_digest, processor_refusal, vlm_model_refusal
from .memory import hf_weight_files

ADAPTER_VERSION = "1"  # bump when the prompt assembly or decoding changes


class HFVLMOptions(BatchOptions):
    device_map: str | dict[str, Any] | None = None
    processor_kwargs: dict[str, Any] = Field(default_factory=dict)
    attn_implementation: str | None = None


DTYPES = {"float32", "bfloat16", "float16", "auto"}
DEFAULT_MAX_NEW_TOKENS = 40


def chat(prompt: str, image: Image.Image | None = None) -> list[dict[str, Any]]:
    """One user turn: the image first, then the prompt text."""
    content: list[dict[str, Any]] = []
    if image is not None:
        content.append({"type": "image", "image": image})
    content.append({"type": "text", "text": prompt})
    return [{"role": "user", "content": content}]


def encode(processor: Any, conversations: list[list[dict[str, Any]]]) -> Any:
    """The model's inputs for a batch of chats: its template, left-padded."""
    return processor.apply_chat_template(
        conversations, add_generation_prompt=True, tokenize=True, return_dict=True,
        return_tensors="pt", processor_kwargs={"padding": True, "padding_side": "left"})


# from_pretrained keys the entry sets itself: in processor_kwargs they would be given twice
ENTRY_KEYS = {"revision": "set by the entry's revision", "trust_remote_code": "set by the entry's trust_remote_code"}


class HFVLM(ModelAdapter):
    capabilities = frozenset({"generate"})
    Options = HFVLMOptions

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self._model: Any = None
        self._processor: Any = None  # transformers' AutoProcessor picks the class at load
        self._placed: str | None = None  # the device given to to(); before that, the planned one
        self._sizer = BatchSizer(spec)

    def __repr__(self) -> str:
        return f"HFVLM({self.spec.id!r}, {self.spec.name!r}@{self.spec.revision})"

    @property
    def _local(self) -> Path | None:
        path = Path(self.spec.name)
        return path if path.is_dir() else None

    # -- identity (no weights loaded) ------------------------------------------------------
    def check(self) -> None:
        s = self.spec
        if s.dtype not in DTYPES:
            raise ModelError(f"model {s.id!r}: dtype {s.dtype!r} is not one of {sorted(DTYPES)}")
        if s.weights is not None:
            raise OptionRefused(s.id, ("weights",), "never read: an hf-vlm model's weights are those its name "
                                                    "holds (a hub repo pinned by revision, or a folder)")
        for key in s.options.get("processor_kwargs", {}):
            if key in ENTRY_KEYS:
                raise OptionRefused(s.id, ("options", "processor_kwargs", key), ENTRY_KEYS[key])
        if self._local is not None:
            config = self._local / "config.json"
        else:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(s.name, "config.json", revision=s.revision)
            if not isinstance(cached, str):
                if os.environ.get("HF_HUB_OFFLINE") == "1":
                    raise not_in_hub_cache(s.id, f"{s.name!r} is")
                return  # resolved from the hub at load time
            config = Path(cached)
        if not config.is_file():
            raise ModelError(f"model {s.id!r}: {config} missing")
        self._check_architecture(json.loads(config.read_text()), config)
        self._check_loader_options(config.parent)

    def _check_loader_options(self, folder: Path) -> None:
        """The settings from_pretrained and the processor take, tried on what they build without
        weights (:mod:`.loader_options`)."""
        s = self.spec
        found = vlm_model_refusal(folder, s.options, s.trust_remote_code)
        if found is None and (kwargs := s.options.get("processor_kwargs")):
            blank = chat("?", Image.new("RGB", (32, 32), "white"))
            found = processor_refusal(folder, kwargs, s.trust_remote_code, lambda p: encode(p, [blank]))
            found = found and (("processor_kwargs", *found[0]), found[1])
        if found is not None:
            raise OptionRefused(s.id, ("options", *found[0]), found[1])

    def _check_architecture(self, config: dict, where: Path) -> None:
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        )

        model_type = config.get("model_type")
        if model_type not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
            raise ModelError(f"model {self.spec.id!r}: {where} has model_type {model_type!r}, which "
                             f"is not an image-text-to-text model in transformers")

    @property
    def fingerprint(self) -> dict[str, Any]:
        import importlib.metadata

        s = self.spec
        fp = {"source": s.source, "name": s.name, "revision": s.revision, "dtype": s.dtype,
              # placement (device_map), speed (max_batch_size) and the readout's settings
              # (generation) are not the model
              "options": {k: v for k, v in s.options.items()
                          if k not in ("device_map", "generation", "max_batch_size")},
              "adapter": f"hf-vlm/{ADAPTER_VERSION}",
              "transformers": importlib.metadata.version("transformers")}
        if self._local is not None:
            fp["local_sha256"] = local_digest(self._local)
        if self.precision != "float32":  # only then: a float32 run's fingerprint is the one it always had
            fp["precision"] = self.precision
        return fp

    @property
    def precision(self) -> str:
        """What generation runs in (autocast); the device is looked up only for ``auto``."""
        return compute_precision(self.spec, lambda: self._placed or planned_device())

    @property
    def model_version(self) -> str:
        s = self.spec
        if s.revision:
            return f"{s.name}@{s.revision}"
        if self._local is not None:
            return f"{s.name}@local-{local_digest(self._local)[:12]}"
        return s.name

    # -- weights ---------------------------------------------------------------------------
    def fetch(self) -> str:
        """Download the snapshot into the local hub cache (Docker build step)."""
        if self._local is not None:
            return f"{self.spec.id}: nothing to fetch (local dir {self.spec.name})"
        from huggingface_hub import snapshot_download

        path = snapshot_download(self.spec.name, revision=self.spec.revision)
        return f"{self.spec.id}: fetched {self.spec.name}@{self.spec.revision} -> {path}"

    def weight_files(self) -> list[Path]:
        return hf_weight_files(self.spec.name, self.spec.revision)

    def to(self, device: str) -> HFVLM:
        self.device = self._placed = device
        if self._model is not None and "device_map" not in self.spec.options:
            self._model = self._model.to(device)
        return self

    def release(self) -> None:
        self._model = self._processor = None

    def load(self):
        if self._model is None:
            import torch
            from transformers import AutoModelForImageTextToText, AutoProcessor

            s = self.spec
            kwargs: dict[str, Any] = {"revision": s.revision, "trust_remote_code": s.trust_remote_code,
                                      "dtype": "auto" if s.dtype == "auto" else getattr(torch, s.dtype)}
            for key in ("device_map", "attn_implementation"):
                if key in s.options:
                    kwargs[key] = s.options[key]
            try:
                processor = AutoProcessor.from_pretrained(s.name, revision=s.revision,
                                                          trust_remote_code=s.trust_remote_code,
                                                          **s.options.get("processor_kwargs", {}))
                model = AutoModelForImageTextToText.from_pretrained(s.name, **kwargs)
            except (OSError, ValueError) as e:
                raise ModelError(f"model {s.id!r}: cannot load {s.name!r}@{s.revision}: {e}") from e
            if "device_map" not in s.options:
                model = model.to(self.device)
            self._model, self._processor = model.eval(), processor
        return self._model

    # -- generate --------------------------------------------------------------------------
    def generate(self, image: Image.Image, prompt: str, settings: dict[str, Any]) -> Generation:
        return self.generate_many([image], [prompt], settings)[0]

    def generate_many(self, images: list[Image.Image], prompts: list[str],
                      settings: dict[str, Any]) -> list[Generation]:
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
        batches = self._sizer.run(len(images), lambda a, b: self._generate_batch(images[a:b], prompts[a:b],
                                                                                 settings), self.device)
        return [g for batch in batches for g in batch]

    def _generation_kwargs(self, settings: dict[str, Any]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"max_new_tokens": int(settings.get("max_new_tokens",
                                                                     DEFAULT_MAX_NEW_TOKENS))}
        temperature = float(settings.get("temperature") or 0.0)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature)
            if settings.get("top_p") is not None:
                kwargs["top_p"] = float(settings["top_p"])
        else:
            # Greedy; unset sampling knobs a hub generation config may carry, so transformers
            # neither warns nor mixes them in.
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        return kwargs

    def _generate_batch(self, images, prompts, settings) -> list[Generation]:
        import torch

        model = self.load()
        processor = self._processor
        conversations = [chat(p, im.convert("RGB")) for im, p in zip(images, prompts)]
        inputs = encode(processor, conversations)
        if is_cuda(str(model.device)):  # pinned, asynchronous copies of each input tensor
            for key, value in list(inputs.items()):
                if isinstance(value, torch.Tensor):
                    inputs[key] = to_device(value, str(model.device))
        else:
            inputs = inputs.to(model.device)
        if "pixel_values" in inputs and inputs["pixel_values"].is_floating_point():
            inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
        if float(settings.get("temperature") or 0.0) > 0 and settings.get("seed") is not None:
            torch.manual_seed(int(settings["seed"]))
        t0 = time.perf_counter()
        with torch.inference_mode(), autocast(str(model.device), self.precision):
            sequences = model.generate(**inputs, **self._generation_kwargs(settings))
        latency = (time.perf_counter() - t0) / len(images)
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = sequences[:, prompt_len:].cpu()
        texts = processor.batch_decode(new_tokens, skip_special_tokens=True)
        input_counts = inputs["attention_mask"].sum(dim=1).tolist()
        return [Generation(text=text.strip(), latency_s=latency,
                           usage={"input_tokens": int(n_in),
                                  "output_tokens": self._n_generated(row)})
                for text, n_in, row in zip(texts, input_counts, new_tokens)]

    def _n_generated(self, row) -> int:
        """Tokens generated up to and including the first end-of-sequence token."""
        eos = self._model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        for i, token in enumerate(row.tolist()):
            if token in eos_ids:
                return i + 1
        return len(row)
