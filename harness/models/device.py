"""What the torch adapters share to run fast on a GPU and unchanged on a CPU.

- ``auto_device``: the device ``runtime.device: auto`` means (a CUDA GPU when torch sees one; the
  CPU, without importing torch, where no GPU driver is installed).
- ``compute_precision``: the precision a model's forward pass runs in. The model entry's
  ``precision`` is ``float32`` (default: no autocast), ``bfloat16``/``float16`` (autocast to that
  on any device; on a CPU torch autocasts matrix products and convolutions to bfloat16) or
  ``auto`` (bfloat16 on a CUDA GPU that has it, else float16 on CUDA; float32 on a CPU, where
  half precision is rarely faster). Autocast applies only to float32 weights: with ``dtype``
  float16/bfloat16 the weights themselves set the precision. An adapter whose precision is not
  float32 records it in its fingerprint, so cached float32 trials are never reused for it.
- ``to_device``: host-to-device copies from pinned memory on CUDA (asynchronous), channels-last
  for convolutional networks on CUDA (tensor cores read NHWC); plain ``.to`` on a CPU.
- ``BatchSizer``: ``batch_size: auto`` starts at ``options.max_batch_size`` (default 256) on CUDA,
  halves on CUDA out-of-memory and keeps the size that worked; on a CPU ``auto`` is 32 (memory is
  rarely the limit there and larger batches are not faster). Results do not depend on the batch
  size, so it is not in any fingerprint.
- ``prepares_beside``: whether the next batch's images are prepared in a background thread
  while the model works (on a GPU, or on a CPU with a core torch leaves free), or in line.
- ``keep_cpu_heap``: a torch model on a CPU gets glibc's heap set to keep what it frees
  (``$GESTALT_CPU_HEAP=system`` leaves glibc's defaults).
- ``long_lived_frozen``: a battery runs with the objects alive when it started out of the
  cyclic garbage collector's full passes; ``free_device_memory``: a released model's GPU memory
  freed before the next model loads.
- ``hub_progress_bars``: Hugging Face's own bars (downloads, weights loading) drawn only where
  the run draws its own (``runtime.progress``, main process).

Nothing here imports torch at module level: a rerun with nothing to do never loads it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import Field

from .base import ModelError, ModelOptions, ModelSpec

log = logging.getLogger("harness")

AUTO_MAX_BATCH = 256  # batch_size auto on CUDA starts here unless options.max_batch_size says otherwise
AUTO_CPU_BATCH = 32
HALF_DTYPES = ("float16", "bfloat16")


class BatchOptions(ModelOptions):
    """The option every batched source takes: where ``batch_size: auto`` starts on a GPU."""

    max_batch_size: int | None = Field(None, ge=1, le=65536)

T = TypeVar("T")


# torch reaches a GPU only through a driver, which leaves these files (NVIDIA, ROCm, WSL2's GPU)
GPU_DRIVER_FILES = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/kfd", "/dev/dxg")


def gpu_driver_present() -> bool:
    """Whether this machine has a GPU driver torch could reach: without one, ``auto`` is the CPU
    and a rerun with nothing to compute does not import torch (2 s) to learn it."""
    return any(os.path.exists(p) for p in GPU_DRIVER_FILES)


@functools.cache
def auto_device() -> str:
    """`device: auto`: the GPU when torch sees one, else the CPU, said once (not silently slow)."""
    if not gpu_driver_present():
        log.info("device auto: no GPU driver on this machine; running on the CPU")
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    log.info("device auto: no CUDA GPU visible to torch; running on the CPU")
    return "cpu"


def planned_device() -> str:
    """The device a single process will place its models on ($GESTALT_DEVICE, else auto); the
    same answer as ``Dist.device``, for a fingerprint computed before the model is placed."""
    want = os.environ.get("GESTALT_DEVICE", "auto")
    return auto_device() if want == "auto" else want


def is_cuda(device: str | None) -> bool:
    return str(device or "").startswith("cuda")


def compute_precision(spec: ModelSpec, device: Callable[[], str | None]) -> str:
    """float32, bfloat16 or float16: what the forward pass runs in. ``device`` is asked only when
    the answer depends on it (``precision: auto``), so the default never imports torch."""
    precision = spec.precision
    if precision == "float32" or spec.dtype in HALF_DTYPES:
        return "float32"
    if precision != "auto":
        return precision
    if not is_cuda(device()):
        return "float32"
    import torch

    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def autocast(device: str | None, precision: str) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` to ``precision`` on the device's type; nothing for float32."""
    if precision == "float32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=str(device or "cpu").split(":")[0], dtype=getattr(torch, precision))


def is_conv_net(model: Any) -> bool:
    """More than one 2-D convolution: a CNN (a ViT has one, its patch embedding), where
    channels-last pays on CUDA."""
    import torch

    return sum(isinstance(m, torch.nn.Conv2d) for m in model.modules()) > 1


HEAP_ENV = "GESTALT_CPU_HEAP"


def cpu_heap_wanted() -> str:
    """``$GESTALT_CPU_HEAP``: keep (the default) or system; anything else is refused by name
    (preflight asks, so a typo stops the run before its first trial)."""
    want = os.environ.get(HEAP_ENV, "keep")
    if want not in ("keep", "system"):
        raise ModelError(f"${HEAP_ENV}={want!r}: expected keep (the default) or system")
    return want


# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


@functools.cache
def keep_cpu_heap() -> bool:
    """Make glibc's malloc keep the memory a forward pass frees for the next one; whether it now does.

    By default glibc serves every block over its mmap threshold (at most 32 MiB) with a fresh
    mmap and unmaps it on free, and trims the heap's top: a CNN's activations (tens to hundreds of
    MB per layer at a batch of 40) are then page-faulted in, zero-filled, on every layer of every
    batch. On a CPU that is more than half of EfficientNet-Lite2's forward time (2 cores: the
    Gestalt battery's bare loop 67 s under glibc's defaults, 30 s with the heap kept;
    ``benchmarks/overhead.py --cpu-heap system``).
    PyTorch's CPU tuning guides swap in jemalloc or tcmalloc for the same reason; these two
    settings get it from the allocator already loaded. The cost: the process keeps its peak heap
    until it exits. Process-wide and once; only on glibc; ``$GESTALT_CPU_HEAP=system`` opts out."""
    if cpu_heap_wanted() == "system":
        return False
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    import ctypes

    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # every block from the heap, none mmapped; free memory at the top is returned only past 2 GiB
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def place(model: Any, device: str | None, dtype: Any = None) -> Any:
    """The model on ``device`` (in ``dtype`` when given); channels-last for a CNN on CUDA, the
    heap kept (``keep_cpu_heap``) for one on a CPU."""
    import torch

    if not is_cuda(device):
        keep_cpu_heap()
    model = model.to(device) if dtype is None else model.to(device, dtype=dtype)
    if is_cuda(device) and is_conv_net(model):
        model = model.to(memory_format=torch.channels_last)
    return model


@dataclass
class AfterBattery:
    collect: bool = False  # the battery called its model and another battery follows


@contextlib.contextmanager
def long_lived_frozen() -> Iterator[AfterBattery]:
    """A battery with the objects alive when it starts (modules, the recipe's plan: most of the
    heap) kept out of the cyclic garbage collector (``gc.freeze``). A full collection otherwise
    walks all of them (0.14-0.20 s over the 560k objects of torch, timm, transformers, MLflow
    and one model, in runs on two days; ``benchmarks/fixed_cost.py``) at whatever moment the
    battery's allocations set one off; frozen, it walks what the battery made.
    The battery sets ``collect`` where it called its model and another battery follows: one
    collection when it ends frees what its model left in reference cycles before the next
    loads. A battery whose trials were all recorded called nothing, so a rerun of a long roster
    pays no full collection per battery; after the last the collector simply resumes. A process that
    froze objects itself or turned the collector off is left as it is."""
    after = AfterBattery()
    if gc.get_freeze_count() or not gc.isenabled():
        yield after
        return
    gc.freeze()
    try:
        yield after
    finally:
        gc.unfreeze()
        if after.collect:
            gc.collect()


@contextlib.contextmanager
def hub_progress_bars(shown: bool) -> Iterator[None]:
    """Hugging Face's own progress bars (a download; transformers' "Loading weights" at every
    load) only where the run draws its own: with ``runtime.progress: false`` (a batch job's log)
    and on every process but the main one, a model loads without one. transformers copies the
    hub's switch once, when it is imported, so its own switch is turned too; both are as they
    were afterwards. A ``$HF_HUB_DISABLE_PROGRESS_BARS`` the user set has the last word."""
    if shown:
        yield
        return
    from huggingface_hub import constants
    from huggingface_hub import utils as hub

    if constants.HF_HUB_DISABLE_PROGRESS_BARS is not None:
        yield
        return
    hub_was_on = not hub.are_progress_bars_disabled()
    imported = sys.modules.get("transformers.utils.logging")
    # first imported inside, transformers' bars start as the hub's are outside
    transformers_was_on = imported.is_progress_bar_enabled() if imported else hub_was_on
    hub.disable_progress_bars()
    if imported:
        imported.disable_progress_bar()
    try:
        yield
    finally:
        imported = sys.modules.get("transformers.utils.logging")
        if imported and transformers_was_on:
            imported.enable_progress_bar()  # the hub's too, so that one is set after it
        if hub_was_on:
            hub.enable_progress_bars()
        else:
            hub.disable_progress_bars()


def free_device_memory(device: str | None) -> None:
    """On CUDA, collect the reference cycles that may still hold dropped tensors and give the
    allocator's cached blocks back: after a model is released (``ModelAdapter.release``), so the
    next model of a roster finds the memory free, and after an out-of-memory try (``BatchSizer``).
    On a CPU freed memory returns to the heap that the next model reuses (``keep_cpu_heap``)."""
    if is_cuda(device):
        import torch

        gc.collect()
        torch.cuda.empty_cache()


def to_device(x: Any, device: str | None, dtype: Any = None, channels_last: bool = False) -> Any:
    """A host tensor on ``device``. On CUDA the copy goes through pinned (page-locked) memory and
    does not block the host; the cast to ``dtype`` happens after the copy, on the GPU, so a uint8
    batch crosses the bus at a quarter of float32's size. A CPU gets the plain ``.to`` it always had."""
    import torch

    if not is_cuda(device):
        return x.to(device or "cpu", dtype=dtype) if dtype is not None else x.to(device or "cpu")
    x = x.pin_memory().to(device, non_blocking=True)
    if dtype is not None:
        x = x.to(dtype)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def chunk_size(spec: ModelSpec) -> int:
    """How many trials the runner hands the model at once: the batch size, or for ``auto`` the
    most the adapter may try (it splits further on out-of-memory)."""
    if spec.batch_size == "auto":
        return max_batch_size(spec)
    return max(1, int(spec.batch_size))


def max_batch_size(spec: ModelSpec) -> int:
    return max(1, int(spec.options.get("max_batch_size", AUTO_MAX_BATCH)))


class BatchSizer:
    """Runs a model over n items in sub-batches of the model's batch size. With ``batch_size:
    auto`` a CUDA out-of-memory error frees the cache, halves the size and retries the same
    sub-batch; the size that worked is kept for later calls (lm-evaluation-harness does the same).
    A fixed batch size that runs out of memory, or auto down to 1, is a ModelError naming the model."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.auto = spec.batch_size == "auto"
        self.size: int | None = None if self.auto else max(1, int(spec.batch_size))

    def start_size(self, device: str | None) -> int:
        if self.size is None:
            self.size = max_batch_size(self.spec) if is_cuda(device) else min(AUTO_CPU_BATCH, max_batch_size(self.spec))
        return self.size

    def run(self, n: int, call: Callable[[int, int], T], device: str | None) -> list[T]:
        """[call(start, stop) for each sub-batch], in order."""
        import torch

        out: list[T] = []
        start = 0
        while start < n:
            size = min(self.start_size(device), n - start)
            try:
                out.append(call(start, start + size))
                start += size
                continue
            except torch.cuda.OutOfMemoryError as e:
                if not self.auto:
                    raise ModelError(f"model {self.spec.id!r}: out of memory at batch_size {size} on "
                                     f"{device}; set a smaller batch_size or batch_size: auto") from e
                if size == 1:
                    raise ModelError(f"model {self.spec.id!r}: out of memory on {device} even at batch "
                                     f"size 1 (batch_size auto)") from e
            # out of the except block, the failed call's frames and the GPU tensors they held are
            # released; only then can the cache give their memory back for a smaller try
            free_device_memory(device)
            self.size = size // 2
            log.warning("%s: out of memory at batch size %d on %s; retrying at %d",
                        self.spec.id, size, device, self.size)
        return out


def prepares_beside(device: str | None) -> bool:
    """Whether preparing the next batch (decoding, rendering) in a background thread runs beside
    the model rather than against it. A GPU leaves the CPU idle while the model works, and so
    does a process that has not loaded torch (an API model); torch on a CPU with as many intra-op
    threads as the process has cores does not: a second busy thread then stalls torch's OpenMP
    team, and the forward pass slows by more than the preparation it hides (2 cores: the
    Gestalt battery's overhead 1.057 with it, 1.027 without; ``benchmarks/overhead.py
    --prepare-beside always``)."""
    if device is not None and not device.startswith("cpu"):
        return True
    torch = sys.modules.get("torch")  # not imported: no torch model runs in this process
    if torch is None:
        return True
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return bool(torch.get_num_threads() < cores)
