"""``cnn:`` bar-chart regressors trained from scratch, with the ``predict`` capability.

Architectures (``ModelSpec.name``):
- ``lenet``: Haehn et al.'s LeNet: conv 5x5 (20) - ReLU - maxpool 2 - dropout 0.2 - conv 5x5
  (50) - ReLU - maxpool 2 - dropout 0.2 - dense 256 - ReLU - dropout 0.5 - linear output.
  Options reshape it within that pattern: ``conv`` (filters per block, any number of blocks),
  ``kernel``, ``batchnorm`` (after each conv), ``dropout`` (after each block), ``stride`` (of
  the first conv), ``hidden``.
- ``mlp``: Haehn's MLP: flattened pixels - dense 256 - ReLU - dropout 0.5 - linear output.
- ``colnet``: a column network, small enough to learn GRAPE's charts in minutes on a CPU. A bar's
  value is a property of its pixel columns, so after ``pixel_conv`` 3x3 convolutions (full
  resolution: the dots are single pixels) one convolution spans the whole image height (a weight
  per row, ``column_channels`` filters), leaving a 1-D sequence along x; ``depth`` 1-D
  convolutions of width 5 (``width`` filters; 4 of them see 17 columns, two adjacent bars) then
  mean- and max-pooling over x and a dense ``hidden`` layer give the output. recipes/bars-quick.yaml
  trains it and shows how to train a ``lenet`` of similar cost on the same charts instead.
- any timm architecture (``vgg19``, ``resnet152`` ...), built with ``pretrained=False``,
  ``num_classes=1`` and the data's channel count; GRAPE resized charts to 224 x 224 for these
  (``input_size``, default 224 for timm models, native size otherwise).

Training (GRAPE sections IV-V; Haehn's driver): MSE on targets in [0, 1] (the ratio itself; no
label rescaling is needed), AdamW (``lr`` 1e-4, ``weight_decay`` 0.01) or SGD with momentum 0.9
(Nesterov by default), batch 32, gradient-norm clip 10, up to ``max_epochs`` with early stopping
when the validation loss has not improved for ``patience`` epochs, the best epoch's weights
restored. Pixels are scaled to [0, 1] and centred (-0.5, Haehn); ``noise_std`` adds Gaussian
noise during training (GRAPE: 0.025; GRAPE also adds it at test time, which would make
predictions random, so here it is training-only). ``kfold`` = k trains k models on k folds of
train + val (each fold once the validation set) and predicts their mean. ``max_train_seconds``
stops after the epoch that exceeds a time budget.

Data arrive as uint8 arrays (n, H, W) or (n, H, W, C) through a :class:`TrainingData` (GRAPE's
mask variant: 4 channels, the fourth the target-bar mask). Devices go through accelerate: one
process on a CPU or one GPU, data-parallel (DDP) when launched on several; only the main process
writes checkpoints. On a CUDA GPU batches cross from pinned memory as uint8 (cast on the GPU) and
convolutional nets run channels-last; training and prediction stay float32 (``precision`` other
than float32/auto is refused: the bit-reproducible training below is this model's contract).
Checkpoints are ``torch.save`` dicts of tensors and plain values, read back with
``torch.load(weights_only=True)``. ``history`` holds per-epoch train/val loss per fold. A training
given a :class:`~.checkpoints.TrainingCheckpoint` keeps each finished epoch there and, stopped,
resumes from the last one (models/checkpoints.py).
Reproducibility: for a given ``seed`` a CPU training gives bit-identical weights whatever the
machine's load or the caller's ``torch.set_num_threads``: fitting, prediction and Grad-CAM run
with ``threads`` intra-op threads (a fixed reduction order) and torch's deterministic
algorithms, initial weights come from ``torch.manual_seed(seed + fold)``, and data order and
noise from generators seeded the same way (tests/test_regressors.py trains twice to check).

Grad-CAM (Selvaraju et al.; GRAPE section VI) maps the output's gradient onto a convolutional
feature map that keeps both image dimensions: lenet's last convolution block; for colnet, the
last full-resolution convolution, because its later maps have height 1 (the full-height
convolution reads whole columns), on which a Grad-CAM region could only be a set of columns.
Maps wider than ``CAM_SIDE`` are average-pooled to at most ``CAM_SIDE`` x ``CAM_SIDE`` (records
carry them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from PIL import Image
from pydantic import Field

from .base import ModelAdapter, ModelError, ModelSpec
from .checkpoints import FoldProgress, TrainingCheckpoint, fold_state, restore_fold
from .device import HALF_DTYPES, BatchOptions, is_cuda, place, to_device
from .training_data import Pooled, Subset, TrainingData, load_batches

LOCAL_ARCHS = ("lenet", "mlp", "colnet")
Count = Annotated[int, Field(ge=1, le=65536)]  # filters, units, items


class CNNOptions(BatchOptions):
    optimizer: Literal["adamw", "sgd"] = "adamw"  # sgd: with momentum
    lr: float = Field(1e-4, gt=0, le=10)
    weight_decay: float = Field(0.01, ge=0, le=10)
    momentum: float = Field(0.9, ge=0, le=1)
    nesterov: bool = True
    batch_size: Count = 32
    max_epochs: int = Field(100, ge=1, le=1_000_000)
    patience: int = Field(10, ge=0, le=1_000_000)
    grad_clip: float = Field(10.0, ge=0)  # 0: none
    noise_std: float = Field(0.0, ge=0, le=10)
    input_size: int | None = Field(None, ge=8, le=4096)  # None: native size (lenet, mlp) or 224 (timm)
    kfold: int = Field(0, ge=0, le=100)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    max_train_seconds: float | None = Field(None, gt=0)
    # lenet: filters per conv block (conv - [batchnorm] - ReLU - maxpool - dropout)
    conv: tuple[Count, ...] = Field((20, 50), min_length=1, max_length=64, strict=False)
    kernel: int = Field(5, ge=1, le=31)  # lenet
    batchnorm: bool = False  # lenet
    dropout: float = Field(0.2, ge=0, lt=1)  # lenet: after each conv block (the dense layer keeps Haehn's 0.5)
    hidden: Count = 256  # lenet, mlp, colnet
    # colnet: filters per full-resolution 3x3 convolution
    pixel_conv: tuple[Count, ...] = Field((8,), min_length=1, max_length=64, strict=False)
    column_channels: Count = 32  # colnet: filters of the full-height convolution
    width: Count = 64  # colnet: filters per 1-D convolution along x
    depth: int = Field(4, ge=0, le=64)  # colnet: number of 1-D convolutions
    stride: int = Field(1, ge=1, le=16)  # lenet: stride of the first convolution
    threads: int = Field(2, ge=1, le=256)  # intra-op threads while fitting and predicting: fixes the reduction order
    # change speed or place, never results: rendering processes for training batches, torch device
    num_workers: int = Field(0, ge=0, le=256)
    device: str | None = None


RUNTIME_OPTIONS = {k: CNNOptions.model_fields[k].default for k in ("num_workers", "device", "max_batch_size")}
DEFAULTS: dict[str, Any] = {k: f.default for k, f in CNNOptions.model_fields.items() if k not in RUNTIME_OPTIONS}
CHECKPOINT_FORMAT = 2  # 2: colnet's layers split into ``pixels`` and ``columns``
CAM_SIDE = 30
log = logging.getLogger(__name__)


class ArrayData:
    """TrainingData over arrays already in memory."""

    def __init__(self, images: np.ndarray, targets: Sequence[float]):
        self._images = np.asarray(images)
        self.targets = np.asarray(targets, dtype=np.float32)
        if len(self._images) != len(self.targets):
            raise ValueError(f"{len(self._images)} images but {len(self.targets)} targets")

    def __len__(self) -> int:
        return len(self.targets)

    def images(self, idx: np.ndarray) -> np.ndarray:
        return self._images[idx]


def _to_array(images) -> np.ndarray:
    if isinstance(images, np.ndarray):
        return images
    return np.stack([np.asarray(im) for im in images])


def _build_net(name: str, channels: int, height: int, width: int, opts: dict[str, Any]):
    import torch
    from torch import nn

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            layers, c_in = [], channels
            for k, c_out in enumerate(int(c) for c in opts["conv"]):
                stride = int(opts["stride"]) if k == 0 else 1
                layers += [nn.Conv2d(c_in, c_out, int(opts["kernel"]), stride=stride,
                                     padding=int(opts["kernel"]) // 2)]
                layers += [nn.BatchNorm2d(c_out)] if opts["batchnorm"] else []
                layers += [nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(float(opts["dropout"]))]
                c_in = c_out
            self.features = nn.Sequential(*layers)
            with torch.no_grad():
                n = self.features(torch.zeros(1, channels, height, width)).numel()
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(n, int(opts["hidden"])), nn.ReLU(),
                                      nn.Dropout(0.5), nn.Linear(int(opts["hidden"]), 1))

        def cam_layer(self, x):
            return self.features(x)

        def from_cam_layer(self, f):
            return self.head(f)

        def forward(self, x):
            return self.head(self.features(x))

    class ColNet(nn.Module):
        def __init__(self):
            super().__init__()
            layers, c_in = [], channels
            for c_out in (int(c) for c in opts["pixel_conv"]):
                layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU()]
                c_in = c_out
            self.pixels = nn.Sequential(*layers)  # full resolution: Grad-CAM's layer
            # one weight per row: reads each pixel column whole, (n, c, 1, W) out
            layers = [nn.Conv2d(c_in, int(opts["column_channels"]), (height, 1)), nn.ReLU()]
            c_in = int(opts["column_channels"])
            for _ in range(int(opts["depth"])):  # along x
                layers += [nn.Conv2d(c_in, int(opts["width"]), (1, 5), padding=(0, 2)), nn.ReLU()]
                c_in = int(opts["width"])
            self.columns = nn.Sequential(*layers)
            self.head = nn.Sequential(nn.Linear(2 * c_in, int(opts["hidden"])), nn.ReLU(),
                                      nn.Linear(int(opts["hidden"]), 1))

        def cam_layer(self, x):
            return self.pixels(x)

        def from_cam_layer(self, f):
            f = self.columns(f)
            return self.head(torch.cat([f.mean(dim=(2, 3)), f.amax(dim=(2, 3))], dim=1))

        def forward(self, x):
            return self.from_cam_layer(self.pixels(x))

    if name == "lenet":
        return LeNet()
    if name == "colnet":
        return ColNet()
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, int(opts["hidden"])),
                             nn.ReLU(), nn.Dropout(0.5), nn.Linear(int(opts["hidden"]), 1))
    import timm

    return timm.create_model(name, pretrained=False, num_classes=1, in_chans=channels)


class CNNRegressor(ModelAdapter):
    """A regressor from chart pixels to the ratio; weights come from :meth:`fit` or :meth:`load`."""

    capabilities = frozenset({"predict"})
    Options = CNNOptions

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        # the values as written (a fingerprint keeps them so), over the defaults
        self.options = {**DEFAULTS, **{k: v for k, v in spec.options.items() if k in DEFAULTS}}
        self.runtime = {**RUNTIME_OPTIONS, **{k: v for k, v in spec.options.items() if k in RUNTIME_OPTIONS}}
        if spec.precision in HALF_DTYPES:
            raise ModelError(f"model {spec.id!r}: cnn regressors train and predict in float32 (bit-reproducible "
                             f"training); precision {spec.precision} is not available for them")
        if self.options["input_size"] is None and spec.name not in LOCAL_ARCHS:
            self.options["input_size"] = 224
        self.device: str | None = self.runtime["device"]
        self.nets: list = []  # one per fold
        self.input_shape: tuple[int, int, int] | None = None  # channels, height, width of the data
        self.history: list[list[dict[str, float]]] = []  # per fold, per epoch
        self.trained_on: str | None = None  # key of the training data (set by fit / load)

    # -- identity
    def check(self) -> None:
        if self.spec.name in LOCAL_ARCHS:
            return
        import timm

        if not timm.is_model(self.spec.name):
            raise ModelError(f"model {self.spec.id!r}: {self.spec.name!r} is neither "
                             f"{' nor '.join(LOCAL_ARCHS)} nor a timm architecture")

    @property
    def fingerprint(self) -> dict[str, Any]:
        """Architecture and training recipe; the training data enter through the readout."""
        import torch

        fp = {"source": self.spec.source, "name": self.spec.name,
              "options": {k: list(v) if isinstance(v, tuple) else v for k, v in self.options.items()},
              "torch": torch.__version__.split("+")[0], "format": CHECKPOINT_FORMAT}
        if self.spec.name not in LOCAL_ARCHS:
            import timm

            fp["timm"] = timm.__version__
        return fp

    @property
    def model_version(self) -> str:
        h = hashlib.sha256(json.dumps(self.fingerprint, sort_keys=True).encode()).hexdigest()[:12]
        trained = f"@data:{self.trained_on[:12]}" if self.trained_on else "@untrained"
        return f"{self.spec.ref}#{h}{trained}"

    def to(self, device: str) -> CNNRegressor:
        self.device = device
        self.nets = [place(net, device) for net in self.nets]
        return self

    def release(self) -> None:
        """The trained networks go (their checkpoint stays: ``load`` brings them back)."""
        self.nets = []

    # -- tensors
    def _tensor(self, arr: np.ndarray, device):
        import torch
        import torch.nn.functional as F

        x = torch.from_numpy(np.ascontiguousarray(arr))
        x = x[:, None] if x.ndim == 3 else x.permute(0, 3, 1, 2)
        x = to_device(x, str(device), torch.float32) / 255.0 - 0.5  # CUDA: uint8 from pinned memory
        size = self.options["input_size"]
        if size is not None and tuple(x.shape[-2:]) != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        if is_cuda(str(device)) and self.spec.name != "mlp":  # as place() put the conv net
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def _shape_of(self, arr: np.ndarray) -> tuple[int, int, int]:
        c = 1 if arr.ndim == 3 else arr.shape[3]
        size = self.options["input_size"]
        return (c, size, size) if size is not None else (c, arr.shape[1], arr.shape[2])

    def _new_net(self):
        import torch

        torch.manual_seed(int(self.options["seed"]) + len(self.nets))
        return _build_net(self.spec.name, *self.input_shape, self.options)

    # -- training
    def fit(self, train: TrainingData, val: TrainingData | None = None, data_key: str | None = None,
            checkpoint: TrainingCheckpoint | None = None, label: str | None = None) -> list[list[dict[str, float]]]:
        """Train (k models with ``kfold``); returns and keeps the per-epoch history. With a
        ``checkpoint`` each finished epoch is kept there and a training it holds resumes; ``label``
        names the training in its lines (the model id by default)."""
        from accelerate import Accelerator

        if len(train) == 0:
            raise ModelError(f"model {self.spec.id!r}: no training data")
        self.input_shape = self._shape_of(train.images(np.arange(1)))
        with _reproducible(int(self.options["threads"])):
            self._fit_all(Accelerator(cpu=self.device == "cpu"), train, val, checkpoint, label or self.spec.id)
        self.trained_on = data_key
        return self.history

    def _fit_all(self, acc, train: TrainingData, val: TrainingData | None,
                 checkpoint: TrainingCheckpoint | None, label: str) -> None:
        k = int(self.options["kfold"])
        self.nets, self.history = [], []
        folds: list[tuple[TrainingData, TrainingData]]
        if k >= 2:
            parts = [train] + ([val] if val is not None else [])
            rng = np.random.default_rng(int(self.options["seed"]))
            sizes = [len(p) for p in parts]
            order = rng.permutation(sum(sizes))
            fold_of = np.empty(len(order), int)
            fold_of[order] = np.arange(len(order)) % k
            pooled = Pooled(parts)
            folds = [(Subset(pooled, np.flatnonzero(fold_of != f)), Subset(pooled, np.flatnonzero(fold_of == f)))
                     for f in range(k)]
        else:
            if val is None or len(val) == 0:
                raise ModelError(f"model {self.spec.id!r}: early stopping needs a validation set")
            folds = [(train, val)]
        saved = checkpoint.load() if checkpoint is not None else None
        current = None
        if checkpoint is not None and saved is not None and tuple(saved["input_shape"]) == self.input_shape:
            for state, history in zip(saved["states"], saved["history"]):  # folds trained before it stopped
                self.nets.append(place(self._new_net(), str(acc.device)).eval())
                self.nets[-1].load_state_dict(state)
                self.history.append(history)
            current = saved["current"]
            if acc.is_main_process:
                epochs = len(current["history"]) if current else 0
                log.info("%s: training resumes %s%s, from %s", label, f"after epoch {epochs}" if epochs else "at",
                         _fold(len(self.nets) + 1, k), checkpoint.path)
        for train_part, val_part in folds[len(self.nets):]:
            self._fit_one(acc, train_part, val_part, checkpoint, current, label)
            current = None

    def _fit_one(self, acc, train: TrainingData, val: TrainingData, checkpoint: TrainingCheckpoint | None,
                 current: dict[str, Any] | None, label: str) -> None:
        import torch

        assert self.input_shape is not None  # fit() set it
        o = self.options
        net = place(self._new_net(), str(acc.device))  # channels-last for a conv net on CUDA
        opt: torch.optim.Optimizer
        if o["optimizer"] == "adamw":
            opt = torch.optim.AdamW(net.parameters(), lr=float(o["lr"]),
                                    weight_decay=float(o["weight_decay"]))
        else:
            opt = torch.optim.SGD(net.parameters(), lr=float(o["lr"]), momentum=float(o["momentum"]),
                                  nesterov=bool(o["nesterov"]), weight_decay=float(o["weight_decay"]))
        # only the network goes through accelerate (DDP across processes: its backward syncs
        # the gradients); the steps are plain torch, as accelerate's optimizer and backward
        # wrappers add nothing without mixed precision or accumulation, and cost per step
        net = acc.prepare_model(net)
        gen = torch.Generator().manual_seed(int(o["seed"]) + len(self.nets))
        rng = np.random.default_rng(int(o["seed"]) + len(self.nets))
        # every process restores the same epoch (DDP: their weights stay equal)
        p = FoldProgress() if current is None else restore_fold(current, acc.unwrap_model(net), opt, gen, rng)
        bs = int(o["batch_size"])
        t_start = time.perf_counter() - p.seconds
        for epoch in range(len(p.history), int(o["max_epochs"])):
            t0 = time.perf_counter()
            net.train()
            order = rng.permutation(len(train))
            mine = order[acc.process_index::acc.num_processes]  # same batch count on every process
            mine = mine[:len(order) // acc.num_processes]
            total, count = 0.0, 0
            batches = [np.sort(mine[start:start + bs]) for start in range(0, len(mine), bs)]
            for images, targets in load_batches(train, batches, int(self.runtime["num_workers"])):
                x = self._tensor(images, acc.device)
                if o["noise_std"]:
                    x = x + float(o["noise_std"]) * torch.randn(x.shape, generator=gen).to(x.device)
                y = torch.from_numpy(targets).to(acc.device)
                loss = torch.nn.functional.mse_loss(net(x).squeeze(1), y)
                opt.zero_grad()
                loss.backward()
                if o["grad_clip"]:
                    torch.nn.utils.clip_grad_norm_(net.parameters(), float(o["grad_clip"]))
                opt.step()
                total += float(loss.detach()) * len(targets)
                count += len(targets)
            sums = acc.reduce(torch.tensor([total, count], device=acc.device), reduction="sum")
            train_loss = float(sums[0] / sums[1])
            val_loss = self._mse(acc, net, val)
            p.history.append({"epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss,
                              "seconds": round(time.perf_counter() - t0, 3)})
            if acc.is_main_process:
                log.info("%s: training%s, epoch %d: train loss %.5f, val loss %.5f (%.0f s)", label,
                         _fold(len(self.nets) + 1, int(o["kfold"])), epoch + 1, train_loss, val_loss,
                         p.history[-1]["seconds"])
            if val_loss < p.best:
                p.best, p.stale = val_loss, 0
                state = acc.unwrap_model(net).state_dict()
                p.best_state = {k: v.detach().cpu().clone() for k, v in state.items()}
            else:
                p.stale += 1
            p.seconds = time.perf_counter() - t_start
            budget = o["max_train_seconds"]
            stop = p.stale >= int(o["patience"]) or bool(budget and p.seconds > float(budget))
            done = stop or epoch + 1 == int(o["max_epochs"])
            if done:
                self.nets.append(acc.unwrap_model(net).eval())
                self.nets[-1].load_state_dict(p.best_state)
                self.history.append(p.history)
            if checkpoint is not None and acc.is_main_process:
                checkpoint.save(self.input_shape, self.nets, self.history,
                                None if done else fold_state(acc.unwrap_model(net), opt, gen, rng, p))
            if stop:
                break

    def _mse(self, acc, net, data: TrainingData) -> float:
        import torch

        net.eval()
        idx = np.arange(len(data))[acc.process_index::acc.num_processes]
        total = torch.zeros(2, device=acc.device, dtype=torch.float64)
        with torch.inference_mode():
            for start in range(0, len(idx), 256):
                part = idx[start:start + 256]
                pred = net(self._tensor(data.images(part), acc.device)).squeeze(1)
                y = torch.from_numpy(data.targets[part]).to(acc.device)
                total += torch.stack([((pred - y) ** 2).sum().double(),
                                      torch.tensor(float(len(part)), device=acc.device, dtype=torch.float64)])
        total = acc.reduce(total, reduction="sum")
        return float(total[0] / total[1])

    # -- prediction
    def _ready(self) -> tuple[int, int, int]:
        """The input shape the trained nets take; an error where nothing is trained yet."""
        if not self.nets or self.input_shape is None:
            raise ModelError(f"model {self.spec.id!r}: not trained; fit() or load() it first")
        return self.input_shape

    def predict(self, images: Sequence[Image.Image] | np.ndarray) -> np.ndarray:
        """(n,) predicted ratios (mean over fold models)."""
        import torch

        self._ready()
        arr = _to_array(images)
        if self._shape_of(arr) != self.input_shape:
            raise ModelError(f"model {self.spec.id!r} was trained on inputs {self.input_shape}, "
                             f"got {self._shape_of(arr)}")
        device = self.device or "cpu"
        out = np.zeros(len(arr), np.float64)
        with _reproducible(int(self.options["threads"])), torch.inference_mode():
            for net in self.nets:
                place(net, device).eval()
                for start in range(0, len(arr), 256):
                    x = self._tensor(arr[start:start + 256], device)
                    out[start:start + len(x)] += net(x).squeeze(1).double().cpu().numpy()
        return out / len(self.nets)

    def gradcam(self, images: Sequence[Image.Image] | np.ndarray) -> np.ndarray:
        """(n, h, w) Grad-CAM maps (ReLU of the gradient-weighted channel sum, averaged over fold
        models) on the layer named in the module docstring, not yet resized to the image."""
        import torch
        import torch.nn.functional as F

        self._ready()
        if self.spec.name == "mlp":
            raise ModelError(f"model {self.spec.id!r}: Grad-CAM needs a convolutional model, not 'mlp'")
        arr = _to_array(images)
        device = self.device or "cpu"
        maps: list[np.ndarray] = []
        with _reproducible(int(self.options["threads"])):
            for net in self.nets:
                place(net, device).eval()
                # local nets name Grad-CAM's layer; timm models split at their last feature map
                layer, rest = ((net.cam_layer, net.from_cam_layer) if self.spec.name in LOCAL_ARCHS
                               else (net.forward_features, net.forward_head))
                x = self._tensor(arr, device)
                with torch.enable_grad():
                    feats = layer(x)
                    feats.retain_grad()
                    rest(feats).sum().backward()
                weights = feats.grad.mean(dim=(2, 3), keepdim=True)
                cam = torch.relu((weights * feats).sum(dim=1, keepdim=True)).detach()
                h, w = cam.shape[-2:]
                if max(h, w) > CAM_SIDE:
                    cam = F.adaptive_avg_pool2d(cam, (min(h, CAM_SIDE), min(w, CAM_SIDE)))
                maps.append(cam[:, 0].cpu().numpy())
                net.zero_grad(set_to_none=True)
        return np.mean(maps, axis=0)

    # -- checkpoints
    def save(self, path: str | Path) -> None:
        import torch

        input_shape = self._ready()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".part")
        torch.save({"format": CHECKPOINT_FORMAT, "fingerprint": json.dumps(self.fingerprint, sort_keys=True),
                    "input_shape": list(input_shape), "trained_on": self.trained_on,
                    "history": self.history, "states": [net.state_dict() for net in self.nets]}, tmp)
        tmp.replace(path)

    def load(self, path: str | Path) -> CNNRegressor:
        """Weights from a checkpoint written by :meth:`save` for the same fingerprint."""
        import torch

        ckpt = torch.load(Path(path), map_location="cpu", weights_only=True)
        if ckpt.get("format") != CHECKPOINT_FORMAT or \
                json.loads(ckpt["fingerprint"]) != json.loads(json.dumps(self.fingerprint, sort_keys=True)):
            raise ModelError(f"{path}: checkpoint was written for a different model or format")
        self.input_shape = tuple(ckpt["input_shape"])
        self.nets = []
        for state in ckpt["states"]:
            net = self._new_net()
            net.load_state_dict(state)
            self.nets.append(net.eval())
        self.history, self.trained_on = ckpt["history"], ckpt["trained_on"]
        if self.device:
            self.to(self.device)
        return self


def _fold(number: int, k: int) -> str:
    return f" fold {number} of {k}" if k >= 2 else ""


@contextmanager
def _reproducible(threads: int) -> Iterator[None]:
    """Fixed intra-op threads and deterministic algorithms for the block, then the caller's
    settings again. A float sum's result depends on how it is split between threads, so the
    thread count, not the machine's load, must decide the split."""
    import torch

    before = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    # warn_only: on CUDA some kernels have no deterministic form; the CPU ones all do
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1])
