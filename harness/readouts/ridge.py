"""Ridge regression probe: a frozen linear readout of a count or scalar from embeddings.

``prepare`` embeds the probe-train split and fits ridge regression of the target on the
standardised embedding (with intercept). The penalty is chosen on probe-train only, by k-fold
cross-validation (``folds`` = 5, folds from a permutation seeded by the stimulus set's seed,
standardisation refit inside each fold) over the grid ``alphas``; the lowest mean squared CV error
wins, ties going to the stronger penalty. The model is then refit on all of probe-train and
applied frozen to the test split. A probe estimates what is linearly decodable and cannot add
organisation the representation lacks (the Gestalt paper's appendix).

Responses: for ``count`` tasks the prediction is rounded half up to an integer and clipped to
the task's valid range (min..max of ``stimset.options``), the paper's "rounded ridge readout";
for ``scalar`` tasks it is returned unrounded (options ``round`` and ``clip=(lo, hi)`` override
both). A non-finite prediction is a null.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from pydantic import Field

from .base import Readout, ReadoutSettings, Response, SplitTooSmall

ALPHAS = tuple(float(a) for a in 10.0 ** np.arange(-3.0, 6.5, 0.5))
FOLDS = 5


def _standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = x.mean(axis=0), x.std(axis=0)
    return mu, np.where(sd > 0, sd, 1.0)


def _ridge_path(z: np.ndarray, y: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """Coefficients (p, n_alphas) for centred z (n, p), y: all penalties from one eigendecomposition
    of the smaller Gram matrix, w = z'(zz' + aI)^-1 y = (z'z + aI)^-1 z'y. (An SVD of z gives the
    same path; with a probe's n of a few hundred and p of a thousand or more, eigh of the n x n
    Gram matrix costs less. Every penalty is > 0 (RidgeProbe refuses others): lam + a never vanishes.)"""
    if len(z) <= z.shape[1]:
        lam, u = np.linalg.eigh(z @ z.T)
        return z.T @ (u @ ((u.T @ y)[:, None] / (lam[:, None] + alphas[None, :])))
    lam, v = np.linalg.eigh(z.T @ z)
    return v @ ((v.T @ (z.T @ y))[:, None] / (lam[:, None] + alphas[None, :]))


class RidgeCV:
    """Ridge regression with the penalty chosen by k-fold cross-validation on the fit data."""

    def __init__(self, alphas: tuple[float, ...] = ALPHAS, folds: int = FOLDS, seed: int = 0):
        self.alphas = np.asarray(alphas, dtype=np.float64)
        self.folds = folds
        self.seed = seed

    def cv_errors(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mean squared held-out error per alpha."""
        n = len(y)
        fold = np.empty(n, dtype=int)
        fold[np.random.default_rng(self.seed).permutation(n)] = np.arange(n) % self.folds
        sq = np.zeros(len(self.alphas))
        for f in range(self.folds):
            tr, te = fold != f, fold == f
            mu, sd = _standardise(x[tr])
            w = _ridge_path((x[tr] - mu) / sd, y[tr] - y[tr].mean(), self.alphas)
            pred = ((x[te] - mu) / sd) @ w + y[tr].mean()
            sq += ((pred - y[te][:, None]) ** 2).sum(axis=0)
        return sq / n

    def fit(self, x: np.ndarray, y: np.ndarray) -> RidgeCV:
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if len(y) < 2 * self.folds:
            raise ValueError(f"ridge probe: {len(y)} training samples is too few for "
                             f"{self.folds}-fold cross-validation")
        if not np.isfinite(x).all():
            raise ValueError("ridge probe: non-finite values in the training embeddings")
        self.cv_mse = self.cv_errors(x, y)
        best = len(self.alphas) - 1 - int(np.argmin(self.cv_mse[::-1]))
        self.alpha = float(self.alphas[best])
        self.mu, self.sd = _standardise(x)
        self.intercept = float(y.mean())
        self.coef = _ridge_path((x - self.mu) / self.sd, y - self.intercept,
                                np.array([self.alpha]))[:, 0]
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, dtype=np.float64) - self.mu) / self.sd) @ self.coef + self.intercept


class RidgeSettings(ReadoutSettings):
    alphas: tuple[float, ...] = Field(ALPHAS, strict=False)  # the ridge penalties cross-validated over
    folds: int = FOLDS
    round: bool | None = None  # None: round where the task's answers are counts
    clip: tuple[float, float] | None = Field(None, strict=False)  # None: a count task's option range


class RidgeProbe(Readout):
    name = "ridge"
    capability = "embed"
    Settings: ClassVar[type[ReadoutSettings]] = RidgeSettings

    def __init__(self, stimset, **options):
        super().__init__(stimset, **options)
        self.alphas, self.folds = options.get("alphas", ALPHAS), options.get("folds", FOLDS)
        if not self.alphas or min(self.alphas) <= 0 or int(self.folds) < 2:
            raise ValueError(f"{stimset.task_id}: ridge probe needs alphas > 0 and folds >= 2, got "
                             f"alphas {self.alphas}, folds {self.folds}")
        if len(stimset.train) < 2 * int(self.folds):  # each fold needs two samples to score a penalty
            raise SplitTooSmall(f"ridge probe: {len(stimset.train)} probe-train samples is too few for "
                                f"{self.folds}-fold cross-validation; set n_train >= {2 * int(self.folds)}")
        is_count = stimset.response_space == "count"
        self.round = options.get("round", is_count)
        clip = options.get("clip")
        if clip is None and is_count:
            clip = (min(stimset.options), max(stimset.options))
        self.clip = tuple(clip) if clip is not None else None

    def prepare(self, model) -> None:
        train = self.stimset.train
        x = self.embed_all(model, train)
        y = np.array([float(s.ground_truth) for s in train])
        self.probe = RidgeCV(self.alphas, self.folds, seed=self.stimset.seed).fit(x, y)

    def respond(self, model, batch):
        preds = self.probe.predict(model.embed([s.image for s in batch]))
        out = []
        for p in preds:
            p = float(p)
            if not math.isfinite(p):
                out.append(Response(response=None, parse_status="null:nonfinite_prediction"))
                continue
            value = math.floor(p + 0.5) if self.round else p
            if self.clip is not None:
                value = min(max(value, self.clip[0]), self.clip[1])
            out.append(Response(response=int(value) if self.round else value,
                                extras={"prediction": round(p, 6), "alpha": self.probe.alpha}))
        return out
