"""GRAPE's colour pools and the two lightness scales the generator uses.

Pools (sources/grape/derived/color_pools.csv): ``bg_color`` (27 very light), ``bar_color`` (73),
``line_color`` (29 dark strokes); the 37-colour ``dark_bgcolor`` pool serves only variants outside
the main experiments and is not used here.

- :func:`grape_lightness` is the L* the generator compares when it rejects colours that are too
  alike: RGB/255 taken as *linear* (no sRGB gamma), Y from the sRGB/D65 matrix, L* = 116 f(Y) - 16.
  Matching it keeps the pool draws as GRAPE made them (reference/grape-generation.md 3.4).
- :func:`shift_lightness` applies the OOD lightness perturbations. GRAPE's own round trip has no
  gamma and swaps red and blue; we use proper sRGB <-> CIELAB (D65), as the reference recommends,
  clip to 0-255 and round to the nearest integer, so a shift of 0 is the identity.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...sources import DataError, Sources

POOLS_FILE = "derived/color_pools.csv"
POOL_NAMES = ("bg_color", "bar_color", "line_color")

# sRGB (D65) linear RGB -> XYZ, the 7-digit matrix (Lindbloom; skimage): with it the generator's
# L* column of color_pools.csv is reproduced to its 2 decimals.
_M = np.array([[0.4124564, 0.3575761, 0.1804375],
               [0.2126729, 0.7151522, 0.0721750],
               [0.0193339, 0.1191920, 0.9503041]])
_M_INV = np.linalg.inv(_M)
_WHITE = _M.sum(axis=1)  # XYZ of RGB (1, 1, 1): the reference white of this matrix


def _f(t: np.ndarray) -> np.ndarray:
    return np.where(t > 0.008856, np.cbrt(t), 7.787 * t + 4 / 29)


def _f_inv(t: np.ndarray) -> np.ndarray:
    return np.where(t > 6 / 29, t ** 3, (t - 4 / 29) / 7.787)


def grape_lightness(rgb: np.ndarray) -> np.ndarray:
    """The generator's L* of uint8 RGB triplets (..., 3): linear RGB, no gamma."""
    y = (np.asarray(rgb, dtype=np.float64) / 255.0) @ _M[1]
    return 116.0 * _f(y) - 16.0


def _srgb_to_linear(c: np.ndarray) -> np.ndarray:
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _linear_to_srgb(c: np.ndarray) -> np.ndarray:
    c = np.clip(c, 0.0, 1.0)
    return np.where(c <= 0.0031308, 12.92 * c, 1.055 * c ** (1 / 2.4) - 0.055)


def rgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    xyz = _srgb_to_linear(np.asarray(rgb, dtype=np.float64) / 255.0) @ _M.T / _WHITE
    fx, fy, fz = (_f(xyz[..., i]) for i in range(3))
    return np.stack([116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)], axis=-1)


def lab_to_rgb(lab: np.ndarray) -> np.ndarray:
    """CIELAB -> uint8 sRGB, clipped to the gamut and rounded to the nearest integer."""
    fy = (lab[..., 0] + 16) / 116
    fx, fz = fy + lab[..., 1] / 500, fy - lab[..., 2] / 200
    xyz = np.stack([_f_inv(fx), _f_inv(fy), _f_inv(fz)], axis=-1) * _WHITE
    return np.rint(_linear_to_srgb(xyz @ _M_INV.T) * 255).astype(np.uint8)


def shift_lightness(rgb: np.ndarray, delta_l: float) -> np.ndarray:
    """uint8 RGB (..., 3) with CIELAB L* shifted by ``delta_l``; identity for 0."""
    rgb = np.asarray(rgb, dtype=np.uint8)
    if delta_l == 0:
        return rgb.copy()
    lab = rgb_to_lab(rgb)
    lab[..., 0] = lab[..., 0] + delta_l
    return lab_to_rgb(lab)


@dataclass(frozen=True)
class ColourPools:
    """RGB (k, 3) uint8 and the generator's L* (k,) of each pool used by the main experiments."""

    rgb: dict[str, np.ndarray]
    lightness: dict[str, np.ndarray]


def load_pools(sources: Sources) -> ColourPools:
    return _load_pools(str(sources.path("grape", POOLS_FILE)))


@lru_cache(maxsize=4)
def _load_pools(path: str) -> ColourPools:
    rows: dict[str, list[tuple[int, tuple[int, int, int]]]] = {name: [] for name in POOL_NAMES}
    with open(path, newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            if row["pool"] not in rows:
                continue
            try:
                rows[row["pool"]].append((int(row["index"]), (int(row["r"]), int(row["g"]), int(row["b"]))))
            except (KeyError, ValueError) as e:
                raise DataError(f"{path}:{line}: bad colour row ({e})") from e
    rgb, lightness = {}, {}
    for name, items in rows.items():
        if not items:
            raise DataError(f"{path}: pool {name!r} is empty")
        arr = np.array([c for _, c in sorted(items)], dtype=np.uint8)
        rgb[name] = arr
        lightness[name] = grape_lightness(arr)
    return ColourPools(rgb=rgb, lightness=lightness)
