"""Whether a model's weights fit the device it will run on, judged before they load.

The size comes from what is on disk, never from loaded tensors: a safetensors file's JSON header
(each tensor's dtype and shape), or a torch.save pickle read with every storage a placeholder (each
storage's element count). The weights then take ``elements x bytes`` of the dtype they load in
(the model entry's ``dtype``; ``auto`` is the checkpoint's own for a VLM, float32 for an encoder).

A model needs at least ``weights x HEADROOM + MARGIN`` on its device: the headroom stands for the
activations of a batch, the margin for the CUDA context and the framework. This is a lower bound: a
model refused here cannot run; one that passes may still run out of memory at a large batch
(``batch_size: auto`` then halves). The device's memory is a CUDA GPU's total memory, or a CPU's
available system memory. A model placed with ``options.device_map`` (spread over devices or
offloaded) is not judged.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from .base import ModelAdapter
from .device import is_cuda, planned_device
from .weights import torch_pickle

GiB = 1 << 30
HEADROOM = 1.2  # weights x 1.2: activations and workspace of a batch
MARGIN = GiB  # the CUDA context and the framework's own memory
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
HALF = "bfloat16"  # what a float32 model is offered when half its size would fit
_SAFETENSORS_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
                      "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass(frozen=True)
class Stored:
    """A checkpoint's tensors as stored: how many values, how many bytes."""

    elements: int
    nbytes: int


def safetensors_stored(path: Path) -> Stored:
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    elements = nbytes = 0
    for key, t in header.items():
        if key == "__metadata__":
            continue
        n = 1
        for d in t["shape"]:
            n *= int(d)
        elements += n
        nbytes += n * _SAFETENSORS_BYTES.get(t["dtype"], 4)
    return Stored(elements, nbytes)


def pickle_stored(path: Path) -> Stored | None:
    """torch.save's storages (element count and type by name), none of them read."""
    storages = torch_pickle(path)
    if storages is None:
        return None
    elements = sum(n for _, n in storages.values())
    nbytes = sum(n * _STORAGE_BYTES.get(kind, 4) for kind, n in storages.values())
    return Stored(elements, nbytes)


_STORAGE_BYTES = {"DoubleStorage": 8, "LongStorage": 8, "FloatStorage": 4, "IntStorage": 4, "HalfStorage": 2,
                  "BFloat16Storage": 2, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1, "BoolStorage": 1}


def stored(files: list[Path]) -> Stored | None:
    """All files' tensors together; None where one cannot be read without loading it."""
    total = Stored(0, 0)
    for f in files:
        try:
            one = safetensors_stored(f) if f.suffix == ".safetensors" else pickle_stored(f)
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            one = None
        if one is None:
            return None
        total = Stored(total.elements + one.elements, total.nbytes + one.nbytes)
    return total


def device_memory(device: str) -> int | None:
    """Bytes a model may use on ``device``: a CUDA GPU's total memory, a CPU's available memory
    (``MemAvailable``); None where the system does not say."""
    if is_cuda(device):
        import torch

        index = torch.device(device).index
        return int(torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index)
                   .total_memory)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def needed(weight_bytes: int) -> int:
    return int(weight_bytes * HEADROOM) + MARGIN


def gib(n: int) -> str:
    """Bytes in GiB, or in MiB below one GiB (a small model would read 0.00 GiB)."""
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / (1 << 20):.1f} MiB"


@dataclass(frozen=True)
class Fit:
    """A model's weights at the dtype they load in, against its device."""

    dtype: str  # float32, float16, bfloat16, or "auto" (as stored)
    device: str
    stored: Stored | None  # None: not on disk here (not fetched), or unreadable without loading
    memory: int | None  # the device's, None where unknown
    placed_by_map: bool = False  # options.device_map: spread or offloaded, not judged
    fetched: bool = True  # its files are here (a size still unknown: they cannot be read unloaded)

    @property
    def weight_bytes(self) -> int | None:
        if self.stored is None:
            return None
        per = DTYPE_BYTES.get(self.dtype)
        return self.stored.nbytes if per is None else self.stored.elements * per

    @property
    def fits(self) -> bool | None:
        size = self.weight_bytes
        if size is None or self.memory is None or self.placed_by_map:
            return None
        return needed(size) <= self.memory

    def line(self) -> str:
        size = self.weight_bytes
        if size is None:
            return "weights: size unknown (" + ("unreadable without loading" if self.fetched else "not fetched") + ")"
        at = "as stored" if self.dtype not in DTYPE_BYTES else f"at {self.dtype}"
        head = f"weights: {gib(size)} {at}, needs >= {gib(needed(size))} on {self.device}"
        if self.placed_by_map:
            return f"{head}; placed by options.device_map, not checked"
        if self.memory is None:
            return f"{head}; its memory unknown, not checked"
        return f"{head} of {gib(self.memory)}: {'fits' if self.fits else 'DOES NOT FIT'}"

    def refusal(self, model_id: str) -> str | None:
        """One line naming the model, its size, the device's memory and what would fit; None when
        it fits or cannot be judged."""
        size = self.weight_bytes
        if self.fits is not False or size is None or self.memory is None:
            return None
        at = "as stored" if self.dtype not in DTYPE_BYTES else f"at {self.dtype}"
        half = self.stored.elements * DTYPE_BYTES[HALF] if self.stored and self.dtype == "float32" else None
        if half is not None and needed(half) <= self.memory:
            fix = f"fits at dtype: {HALF} ({gib(half)})"
        else:
            fix = f"needs a {'GPU' if is_cuda(self.device) else 'device'} with >= {gib(needed(size))}"
        return (f"model {model_id!r}: weights {gib(size)} {at} need >= {gib(needed(size))} "
                f"(x{HEADROOM} + {gib(MARGIN)}), {self.device} has {gib(self.memory)}; {fix}")


HF_WEIGHTS = (("model.safetensors", "model.safetensors.index.json"),  # what transformers prefers,
              ("pytorch_model.bin", "pytorch_model.bin.index.json"))  # then the pickle


def hf_weight_files(name: str, revision: str | None) -> list[Path]:
    """The weight files transformers loads for ``name`` (a local folder or a hub repo in the local
    cache at ``revision``): one file, or every shard its index names; [] where any is missing."""
    local = Path(name)

    def find(file: str) -> Path | None:
        if local.is_dir():
            return local / file if (local / file).is_file() else None
        from huggingface_hub import try_to_load_from_cache

        got = try_to_load_from_cache(name, file, revision=revision)
        return Path(got) if isinstance(got, str) else None

    for single, index in HF_WEIGHTS:
        if (path := find(index)) is not None:
            shards = [find(s) for s in sorted(set(json.loads(path.read_text())["weight_map"].values()))]
            return [s for s in shards if s is not None] if None not in shards else []
        if (path := find(single)) is not None:
            return [path]
    return []


def adapter_fit(adapter: ModelAdapter) -> Fit | None:
    """The fit of an adapter's weights on the device it is planned for (looked up only when it
    has weight files to judge)."""
    files = adapter.weight_files()
    if files is None:
        return None
    return model_fit(files, adapter.weights_dtype, planned_device(), "device_map" in adapter.spec.options)


def model_fit(files: list[Path] | None, dtype: str, device: str, placed_by_map: bool = False) -> Fit | None:
    """The fit of weights loaded from ``files`` (None: a model with no weight files to judge, []:
    not fetched)."""
    if files is None:
        return None
    return Fit(dtype, device, stored(files) if files else None, device_memory(device), placed_by_map, bool(files))
