"""Haehn et al. (2019) position-length stimuli as parameters, with label-disjoint splits.

Reference/grape-generation.md section 2 (read from github.com/Rhoana/perception,
EXP/ClevelandMcGill/figure4.py and EXP/run_position_length.py):

- The two marked values are two different members of Cleveland & McGill's set
  s_i = 10 * 10^((i-1)/12), i = 1..10, rounded to integers (10, 12, 15, 18, 22, 26, 32, 38, 46,
  56); the target (the "label") is rounded smaller / rounded larger.
- Unmarked values per type: bars (types 1, 3) uniform integers in [10, 93); type 2 four segments
  per stack in [8, floor((93 - marked) / 4)); type 4 the same below the marked top segment, the
  right stack redrawn up to ``TYPE4_REDRAWS`` times until neither end of its marked segment lines
  up with the left one's, else the sample is discarded; type 5 three segments in
  [3, floor((93 - A - B) / 3)) under A and B and a 5-segment distractor stack in [8, 18); the
  sample is discarded when that range is empty (93 - A - B < 12: NumPy's ``randint`` truncates
  the float bound and raises, which Haehn's driver catches; the reference's "<= 9" misses 10, 11).
- Splits are label-disjoint as in Haehn's driver: every candidate is sent to a random split
  (train, val, test); a label already used by a split always goes to that split; a candidate
  for a full split is dropped. Candidates are drawn in vectorised chunks, then assigned in order.
- GRAPE section IV-B widens type 1's parameter space in three steps, as options (the defaults
  give Haehn's stimuli above, draw for draw): ``values="cleveland-mcgill-20"`` draws the two
  marked values from 20 fixed values s'_i = 10^(1 + (i-1)/24), i = 1..20, rounded as the 10
  (10, 11, 12, 13, 15, ..., 51, 56, 62); ``values="random"`` leaves every bar, the marked two
  too, a uniform integer in [10, 93) (the two may be equal, target 1); ``marked="adjacent"``
  marks bars (j, j+1) with j uniform in 1..9 (1-based), the pair across the group gap included
  (the paper: "j ranges from 1 to 9"). Other chart types accept only the defaults.
- Optional noise: independent uniform noise on every pixel, Haehn's U[0, 0.05) of the ink value,
  here in uint8 (ink 242 + U{0..12}, background U{0..12}); drawn from a per-chart seed so one
  chart renders the same alone or in a batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace
from functools import cached_property

import numpy as np

from .grape import CHART_TYPES, check_type, per_chart_sha256

CM_VALUES = np.round(10.0 * 10.0 ** (np.arange(10) / 12.0)).astype(np.int16)
CM20_VALUES = np.round(10.0 ** (1.0 + np.arange(20) / 24.0)).astype(np.int16)  # GRAPE IV-B step (a)
VALUE_SETS = {"cleveland-mcgill": CM_VALUES, "cleveland-mcgill-20": CM20_VALUES}
VALUES = (*VALUE_SETS, "random")
MARKED = ("fixed", "adjacent")
DISTRACTOR_RANGE = (10, 93)
TYPE4_REDRAWS = 20
TYPE5_RIGHT_RANGE = (8, 18)
SPLITS = ("train", "val", "test")
NOISE_LEVELS = 13  # uint8 noise values 0..12, about 0.05 of the 0-255 range
INK_WITH_NOISE = 255 - NOISE_LEVELS
_CHUNK = 4096
_MAX_CANDIDATES = 200


@dataclass(frozen=True)
class HaehnCharts:
    """n binary charts of one type: ``values`` are the 10 drawn quantities (bars left to right;
    stacked types: left stack bottom-up, then right stack), ``marked`` their marked indices."""

    chart_type: int
    values: np.ndarray  # (n, 10)
    marked: np.ndarray  # (n, 2)
    noise_seed: np.ndarray  # (n,) uint64; used only when noise is on
    noise: bool = False

    def __len__(self) -> int:
        return len(self.values)

    @property
    def target(self) -> np.ndarray:
        v = np.take_along_axis(self.values, self.marked, axis=1).astype(np.float64)
        return v.min(axis=1) / v.max(axis=1)

    def take(self, idx) -> HaehnCharts:
        idx = np.asarray(idx)
        return replace(self, values=self.values[idx], marked=self.marked[idx],
                       noise_seed=self.noise_seed[idx])

    def content_hash(self) -> str:
        h = hashlib.sha256(f"haehn|{self.chart_type}|{self.noise}".encode())
        for f in fields(self):
            a = getattr(self, f.name)
            if isinstance(a, np.ndarray):
                h.update(f"{f.name}{a.dtype}{a.shape}".encode())
                h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    @cached_property
    def chart_hashes(self) -> list[str]:
        """``take([i]).content_hash()`` for every chart i, computed together."""
        arrays = [(f.name, a) for f in fields(self) if isinstance(a := getattr(self, f.name), np.ndarray)]
        return per_chart_sha256(f"haehn|{self.chart_type}|{self.noise}", arrays)


def _segments(rng: np.random.Generator, high: np.ndarray, count: int, low: int) -> np.ndarray:
    return rng.integers(low, high[:, None], (len(high), count))


def check_options(chart_type: int, values: str, marked: str) -> None:
    """GRAPE section IV-B's options are defined for type 1 only; anything else is an error."""
    if values not in VALUES:
        raise ValueError(f"values={values!r} is not known; choices: {', '.join(VALUES)}")
    if marked not in MARKED:
        raise ValueError(f"marked={marked!r} is not known; choices: {', '.join(MARKED)}")
    for name, value, default in (("values", values, VALUES[0]), ("marked", marked, MARKED[0])):
        if value != default and chart_type != 1:
            raise ValueError(f"{name}={value!r} applies to chart type 1 only (GRAPE section IV-B), "
                             f"not type {chart_type}")


def _candidates(chart_type: int, m: int, rng: np.random.Generator, values: str = "cleveland-mcgill",
                marked: str = "fixed"):
    """m candidate samples: (values (m, 10), marked (m, 2), label (m,), valid (m,)).

    The default options draw exactly as before they existed (same calls, same order)."""
    pair: tuple[np.ndarray, np.ndarray] | None = None  # None: the marked bars keep random values
    if values != "random":
        pool = VALUE_SETS[values]
        ia = rng.integers(0, len(pool), m)
        ib = (ia + rng.integers(1, len(pool), m)) % len(pool)  # uniform over the others
        pair = pool[ia].astype(np.int64), pool[ib].astype(np.int64)
    valid: np.ndarray = np.ones(m, bool)
    vals = np.zeros((m, 10), np.int64)
    if chart_type in (1, 3):
        vals[:] = rng.integers(*DISTRACTOR_RANGE, (m, 10))
        if marked == "adjacent":  # any (j, j+1), 0-based j in 0..8, across the group gap too
            first = rng.integers(0, 9, m)
            pos = np.stack([first, first + 1], axis=1)
        else:
            pos = np.tile((1, 2) if chart_type == 1 else (1, 6), (m, 1))
        rows = np.arange(m)
        if pair is None:
            a, b = vals[rows, pos[:, 0]], vals[rows, pos[:, 1]]
        else:
            a, b = pair
            vals[rows, pos[:, 0]], vals[rows, pos[:, 1]] = a, b
        label = np.minimum(a, b) / np.maximum(a, b)
        return vals, pos, label, valid
    if pair is None:
        raise ValueError(f"values='random' does not apply to chart type {chart_type}")
    a, b = pair
    if chart_type == 2:
        vals[:, 0], vals[:, 5] = a, b
        vals[:, 1:5] = _segments(rng, (93 - a) // 4, 4, 8)
        vals[:, 6:10] = _segments(rng, (93 - b) // 4, 4, 8)
        fixed_pos = (0, 5)
    elif chart_type == 4:
        vals[:, 0:4] = _segments(rng, (93 - a) // 4, 4, 8)
        vals[:, 4] = a
        below = vals[:, 0:4].sum(axis=1)
        tries = rng.integers(8, ((93 - b) // 4)[:, None, None], (m, TYPE4_REDRAWS, 4))
        below2 = tries.sum(axis=2)
        ok = (below2 != below[:, None]) & (below2 + b[:, None] != (below + a)[:, None])
        first = ok.argmax(axis=1)
        valid = ok.any(axis=1)
        vals[:, 5:9] = tries[np.arange(m), first]
        vals[:, 9] = b
        fixed_pos = (4, 9)
    else:
        high = (93 - a - b) // 3
        valid = high > 3  # else NumPy's randint(3, high) raises and Haehn skips the sample
        vals[:, 0:3] = _segments(rng, np.where(valid, high, 4), 3, 3)
        vals[:, 3], vals[:, 4] = a, b
        vals[:, 5:10] = rng.integers(*TYPE5_RIGHT_RANGE, (m, 5))
        fixed_pos = (3, 4)
    label = np.minimum(a, b) / np.maximum(a, b)
    return vals, np.tile(np.asarray(fixed_pos), (m, 1)), label, valid


def sample_haehn_splits(chart_type: int, sizes: dict[str, int], rng: np.random.Generator,
                        noise: bool = False, values: str = "cleveland-mcgill",
                        marked: str = "fixed") -> dict[str, HaehnCharts]:
    """Label-disjoint splits of the requested sizes (keys among 'train', 'val', 'test');
    ``values`` and ``marked``: GRAPE section IV-B's type-1 options (module docstring)."""
    chart_type = check_type(chart_type)
    check_options(chart_type, values, marked)
    unknown = set(sizes) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; splits are {SPLITS}")
    target = [int(sizes.get(s, 0)) for s in SPLITS]
    picked: list[list[int]] = [[], [], []]
    pot_of: dict[float, int] = {}
    chunks: list[tuple] = []
    offset = 0
    while not all(len(p) >= t for p, t in zip(picked, target)):
        if offset >= _MAX_CANDIDATES * _CHUNK:
            short = {s: t - len(p) for s, p, t in zip(SPLITS, picked, target) if len(p) < t}
            raise ValueError(f"Haehn type {chart_type}: could not fill label-disjoint splits "
                             f"{short} from {offset} candidates (too few distinct labels left)")
        cand_values, cand_marked, label, valid = _candidates(chart_type, _CHUNK, rng, values, marked)
        pots = rng.integers(0, 3, _CHUNK)
        chunks.append((cand_values, cand_marked, label))
        for k, (lab, ok, pot) in enumerate(zip(label.tolist(), valid.tolist(), pots.tolist())):
            if not ok:
                continue  # Haehn's generator raises here and the sample is skipped
            pot = pot_of.get(lab, pot)
            if len(picked[pot]) < target[pot]:
                pot_of.setdefault(lab, pot)
                picked[pot].append(offset + k)
        offset += _CHUNK
    all_values = np.concatenate([c[0] for c in chunks]).astype(np.int16)
    all_marked = np.concatenate([c[1] for c in chunks]).astype(np.int8)
    out = {}
    for split, chosen in zip(SPLITS, picked):
        if split in sizes:
            idx = np.asarray(chosen, dtype=np.int64)
            seeds = rng.integers(0, 2**63 - 1, len(idx), dtype=np.int64).astype(np.uint64)
            out[split] = HaehnCharts(chart_type, all_values[idx], all_marked[idx], seeds, noise)
    return out


__all__ = ["CHART_TYPES", "CM20_VALUES", "CM_VALUES", "MARKED", "VALUES", "HaehnCharts",
           "check_options", "sample_haehn_splits"]
