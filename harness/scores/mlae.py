"""MLAE for the bar-chart ratio battery: three published forms, Delta-MLAE, tests, Grad-CAM IoU.

Per trial, with truth t and estimate e as fractions, the log absolute error is
``LAE = log2(100 |e - t| + 1/8)`` (Cleveland & McGill 1984). Its three published summaries:

- ``cleveland_mcgill``: the midmean (interquartile mean) of the LAEs. For n divisible by 4 this
  is the mean of the sorted values n/4+1 .. 3n/4 (GRAPE's Eq. 1); otherwise the values straddling
  the quartiles count with the fraction of them inside [n/4, 3n/4] (Tukey's midmean).
- ``grape``: the plain mean of the per-trial LAEs (GRAPE, bootstrapped 95% CIs).
- ``haehn``: ``log2(MAE + 0.125)``, MAE = mean of 100 |e - t| over the test set (Haehn et al.,
  one number per network).

Inputs are fractions (a regressor's ratio) or percents (a prompt model's 0-100 answer); every
function takes ``scale`` explicitly, and a truth outside the scale's range is an error that
suggests the other scale. Delta-MLAE (GRAPE Eq. 3) is MLAE(OOD) - MLAE(IID) on paired charts
(each OOD chart is its IID twin perturbed), i.e. the mean paired LAE difference; the
"deviation" GRAPE's notebooks plot is the mean absolute paired difference. The normality of the
LAEs is checked with D'Agostino-Pearson (``scipy.stats.normaltest``), and parameters' deviations
are compared with Student's t-tests, as GRAPE does.

Midmean or mean: GRAPE's Eq. 1 defines MLAE as a midmean (2/n times the sum of the sorted log
errors n/4+1 .. 3n/4, Cleveland & McGill's summary), but the authors' code and every GRAPE
figure (user study and CNNs alike) use the plain mean of the per-trial log errors. The two
differ by several tenths on the same errors (the midmean drops both tails), so each human
reference is compared only with the form it was published in (``HUMAN_FOR_FORM``):
``mlae`` (mean) with GRAPE's user study and progressive studies (digitised from the authors'
figures); ``mlae_midmean`` with Cleveland & McGill 1984 and Heer & Bostock 2010 (midmeans as
Haehn et al. tabulate them); ``mlae_haehn`` with none (Haehn's per-network form has no human
counterpart). Every score's ``method`` names its form.

Human references (StimulusSet.human, a stimuli.bars.humans.MLAEReferences loaded from the
sources) go in each Score's ``extra``, never in ``ceiling``: people are not an
upper bound on this task (GRAPE's CNNs beat them IID). ``floor`` is chance: the same MLAE form
for guesses uniform on [0, 1] over the same truths (mean of ``CHANCE_DRAWS`` seeded draws). In
Haehn's form its expectation is about 5.0: 4.995 on GRAPE's type-1 test set (1,000 charts, seed
0) and 4.881 on the Haehn-generated one, whose truths differ (tests/test_chance_floor.py
recomputes both).
``mlae_minus_human`` scores give model minus human
directly; their interval carries both sides' uncertainty (:func:`minus_human`): the model's
percentile bootstrap over test charts and the human value's published 95% interval, combined in
quadrature per side. Where no human interval is published the interval is the model's alone, and
its method says so.

Every MLAE interval resamples the test charts with the model's answers held fixed: for a trained
network that is one training seed, and the spread over seeds is not in it (docs/methods.md:
``benchmarks/bars_seeds.py`` trains several seeds and shows their range).

Grad-CAM IoU (GRAPE Eq. 4): the map (models/regressors.py: on a layer that keeps both image
dimensions; colnet's later maps have height 1) is resized bilinearly to the mask (pixel centres aligned,
like torch's ``align_corners=False``), min-max scaled to 0-255, and its high-intensity region
``>= GRADCAM_THRESHOLD`` (200, GRAPE's "empirical threshold of 200") compared with the marked
bars' mask: |T & G| / |T | G|.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

import numpy as np
from scipy import stats

from ..stimuli.bars.authors import RENDERED_BY
from ..stimuli.bars.humans import MLAEReferences
from ..stimuli.bars.render import ChartImage, target_masks
from ..stimuli.base import Stimulus, StimulusSet, by_id
from .bootstrap import N_BOOT_DEFAULT, Statistic, bootstrap, resample_indices
from .record import Score
from .tasks import Bootstrap

Scale = Literal["fraction", "percent"]
Form = Literal["cleveland_mcgill", "grape", "haehn"]
OFFSET = 0.125
CHANCE_DRAWS = 200
GRADCAM_THRESHOLD = 200
TTEST_ALPHA = 0.05
FORMS: dict[Form, str] = {
    "grape": ("mean over trials of log2(100|e-t|+1/8) (GRAPE's code and figures; its Eq. 1 is "
              "written as a midmean); compared with GRAPE's user study"),
    "cleveland_mcgill": ("midmean over trials of log2(100|e-t|+1/8) (Cleveland & McGill 1984; GRAPE "
                         "Eq. 1); compared with C&M 1984 and Heer & Bostock 2010"),
    "haehn": "log2(mean 100|e-t| + 0.125) (Haehn et al. 2019)",
}
SCORE_NAMES: dict[Form, str] = {"grape": "mlae", "cleveland_mcgill": "mlae_midmean", "haehn": "mlae_haehn"}
# which published human MLAE each form is compared with (same summary form)
HUMAN_FOR_FORM = {"grape": ("grape_user_study",),
                  "cleveland_mcgill": ("cleveland_mcgill_1984", "heer_bostock_2010")}
_RANGE = {"fraction": 1.0, "percent": 100.0}


def as_fraction(values, scale: Scale, what: str = "values") -> np.ndarray:
    if scale not in _RANGE:
        raise ValueError(f"scale must be 'fraction' or 'percent', got {scale!r}")
    v = np.asarray(values, dtype=np.float64)
    return v / 100.0 if scale == "percent" else v


def _check_truth(truth: np.ndarray, scale: Scale) -> None:
    hi = _RANGE[scale]
    if truth.size and (truth.min() < 0 or truth.max() > hi):
        other = "percent" if scale == "fraction" else "fraction"
        raise ValueError(f"truth values in [{truth.min():g}, {truth.max():g}] lie outside [0, {hi:g}] "
                         f"for scale={scale!r}; are they in {other}?")


def log_abs_error(estimate, truth, *, scale: Scale) -> np.ndarray:
    """Per-trial log2(100 |e - t| + 1/8), estimate and truth both on ``scale``."""
    e, t = as_fraction(estimate, scale), np.asarray(truth, dtype=np.float64)
    _check_truth(t, scale)
    t = as_fraction(t, scale)
    if e.shape != t.shape:
        raise ValueError(f"estimate shape {e.shape} differs from truth shape {t.shape}")
    return np.log2(100.0 * np.abs(e - t) + OFFSET)


def midmean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along ``axis``, with fractional weights at the quartiles."""
    v = np.sort(np.asarray(values, dtype=np.float64), axis=axis)
    n = v.shape[axis]
    if n == 0:
        return np.full(np.delete(v.shape, axis), np.nan)
    lo, hi = np.arange(n), np.arange(1, n + 1)
    w = (np.clip(np.minimum(hi, 0.75 * n) - np.maximum(lo, 0.25 * n), 0, None)) / (0.5 * n)
    return np.moveaxis(v, axis, -1) @ w


def _form_stat(form: Form, abs_err_pct: np.ndarray):
    """Statistic over an index matrix for one MLAE form, from per-trial 100|e-t|."""
    lae = np.log2(abs_err_pct + OFFSET)
    if form == "grape":
        return lambda idx: lae[idx].mean(axis=-1)
    if form == "cleveland_mcgill":
        return lambda idx: midmean(lae[idx], axis=-1)
    if form == "haehn":
        return lambda idx: np.log2(abs_err_pct[idx].mean(axis=-1) + OFFSET)
    raise ValueError(f"unknown MLAE form {form!r}; known: {sorted(FORMS)}")


def mlae(estimate, truth, *, scale: Scale, form: Form = "grape") -> float:
    lae_ = log_abs_error(estimate, truth, scale=scale)  # validates
    abs_pct = np.exp2(lae_) - OFFSET
    return float(_form_stat(form, abs_pct)(np.arange(len(abs_pct))[None])[0])


def minus_human(value: float, lo: float, hi: float,
                human: dict[str, Any]) -> tuple[float, float, float, str]:
    """Model MLAE minus a published human MLAE, with a 95% interval carrying both uncertainties,
    and the method clause that says how.

    ``value`` [``lo``, ``hi``] is the model's MLAE and its percentile interval; ``human`` has
    ``mlae`` and, where published, its 95% ``ci_low``/``ci_high``. The two sides are independent
    (different people, different charts), so their half-widths add in quadrature, side by side:
    the difference's low end pairs the model's lower half-width with people's upper one (a larger
    human MLAE lowers the difference), its high end the other two. Quadrature rather than adding
    normal draws to the bootstrap's: it needs no random numbers, keeps the published interval's
    asymmetry, and a difference recomputes from the two intervals alone.
    """
    h = float(human["mlae"])
    h_lo, h_hi = human.get("ci_low"), human.get("ci_high")
    d = value - h
    if h_lo is None or h_hi is None or not (np.isfinite(h_lo) and np.isfinite(h_hi)):
        return d, lo - h, hi - h, ("95% interval: the model side's percentile bootstrap interval only; it "
                                   "covers the model side only (no human interval published)")
    low = d - float(np.hypot(value - lo, h_hi - h))
    high = d + float(np.hypot(hi - value, h - h_lo))
    return d, low, high, ("95% interval: the model side's percentile bootstrap interval and the "
                          "published human 95% interval combined in quadrature, end by end (low end: "
                          "the model's lower and the human's upper half-width)")


def mlae_ci(estimate, truth, *, scale: Scale, form: Form = "grape", n_boot: int = N_BOOT_DEFAULT,
            seed: int = 0) -> tuple[float, float, float]:
    """(MLAE, 95% CI low, high), percentile bootstrap over trials."""
    abs_pct = np.exp2(log_abs_error(estimate, truth, scale=scale)) - OFFSET
    return bootstrap(_form_stat(form, abs_pct), len(abs_pct), n_boot, seed)


def chance_mlae(truth, *, scale: Scale, form: Form = "grape", seed: int = 0,
                draws: int = CHANCE_DRAWS) -> float:
    """Expected MLAE of guesses uniform on [0, 1] (fractions) for these truths."""
    t = as_fraction(truth, scale)
    _check_truth(np.asarray(truth, dtype=np.float64), scale)
    guesses = np.random.default_rng(seed).random((draws, len(t)))
    abs_pct = 100.0 * np.abs(guesses - t[None])
    if form == "grape":
        return float(np.log2(abs_pct + OFFSET).mean())
    if form == "cleveland_mcgill":
        return float(midmean(np.log2(abs_pct + OFFSET), axis=-1).mean())
    return float(np.log2(abs_pct.mean(axis=-1) + OFFSET).mean())


def paired_delta(lae_ood: np.ndarray, lae_iid: np.ndarray, n_boot: int = N_BOOT_DEFAULT, seed: int = 0,
                 absolute: bool = False) -> tuple[float, float, float]:
    """Delta-MLAE (mean of lae_ood - lae_iid over pairs) or, ``absolute``, the deviation
    (mean |difference|), with a bootstrap over the pairs."""
    d = np.asarray(lae_ood, float) - np.asarray(lae_iid, float)
    if absolute:
        d = np.abs(d)
    return bootstrap(lambda idx: d[idx].mean(axis=-1), len(d), n_boot, seed)


def unpaired_gap(lae_a: np.ndarray, lae_b: np.ndarray, n_boot: int = N_BOOT_DEFAULT,
                 seed: int = 0) -> tuple[float, float, float]:
    """mean(lae_a) - mean(lae_b) of two independent chart sets, each resampled on its own."""
    a, b = np.asarray(lae_a, float), np.asarray(lae_b, float)
    draws = (a[resample_indices(len(a), n_boot, seed)].mean(axis=1)
             - b[resample_indices(len(b), n_boot, seed + 1)].mean(axis=1))
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return float(a.mean() - b.mean()), float(lo), float(hi)


def normality(lae: np.ndarray) -> tuple[float, float]:
    """D'Agostino-Pearson K^2 statistic and p-value of the LAEs (needs n >= 8)."""
    res = stats.normaltest(np.asarray(lae, float))
    return float(res.statistic), float(res.pvalue)


def deviation_ttests(deviations: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Student's t-test (equal variances) of per-chart deviations for every pair of parameters."""
    out = []
    for a, b in combinations(sorted(deviations), 2):
        res = stats.ttest_ind(deviations[a], deviations[b], equal_var=True)
        out.append({"a": a, "b": b, "t": float(res.statistic), "p": float(res.pvalue),
                    "df": int(len(deviations[a]) + len(deviations[b]) - 2)})
    return out


def resize_bilinear(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a 2-D map with pixel centres aligned (align_corners=False)."""
    image = np.asarray(image, dtype=np.float64)
    out = image
    for axis, size in enumerate(shape):
        n = image.shape[axis]
        pos = np.clip((np.arange(size) + 0.5) * n / size - 0.5, 0, n - 1)
        i0 = np.floor(pos).astype(int)
        i1 = np.minimum(i0 + 1, n - 1)
        w = pos - i0
        a, b = np.take(out, i0, axis=axis), np.take(out, i1, axis=axis)
        w = w.reshape([-1 if k == axis else 1 for k in range(out.ndim)])
        out = a * (1 - w) + b * w
    return out


def record_cam(record: dict) -> np.ndarray | None:
    """The raw Grad-CAM map a record carries in ``extras['gradcam']``, or None."""
    cam = (record.get("extras") or {}).get("gradcam")
    return None if not cam else np.reshape(np.asarray(cam["values"], dtype=np.float64), cam["shape"])


def gradcam_scaled(heatmap: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A Grad-CAM map on an image's pixels, as GRAPE thresholds it: resized bilinearly to ``shape``
    (H, W) and min-max scaled to 0-255 (a constant map scales to all zeros)."""
    h = resize_bilinear(heatmap, shape)
    span = h.max() - h.min()
    return (h - h.min()) / span * 255.0 if span > 0 else np.zeros_like(h)


def gradcam_iou(heatmap: np.ndarray, mask: np.ndarray, threshold: int = GRADCAM_THRESHOLD) -> float:
    """IoU of the Grad-CAM high-intensity region with a boolean target mask (GRAPE Eq. 4)."""
    mask = np.asarray(mask, bool)
    region = gradcam_scaled(heatmap, mask.shape) >= threshold
    union = np.logical_or(region, mask).sum()
    return float(np.logical_and(region, mask).sum() / union) if union else 0.0


# -- the scorer ------------------------------------------------------------------------------------

def _response_scale(record: dict[str, Any]) -> Scale:
    # A prompt model answered the task prompt, which asks for a percentage (0-100); readouts
    # without a prompt (regression, ridge) return the ratio itself.
    return "percent" if record.get("prompt_id") else "fraction"


def _level_key(level: Any) -> str:
    return str(level)


def _human_for(refs: MLAEReferences, form: str, parameter: str | None, level: Any) -> dict[str, Any]:
    """The human references a score of this MLAE ``form`` is compared with, as plain values."""
    out: dict[str, Any] = {}
    for key in HUMAN_FOR_FORM.get(form, ()):
        if key == "grape_user_study":
            cond = refs.standard if parameter is None else refs.condition_for(parameter, level)
            if cond is not None:
                out[key] = {"condition": cond.condition, **cond.values()}
        elif parameter is None:
            out[key] = refs.published_midmean[key].values()
    if form == "grape" and parameter is not None:
        lv = refs.progressive_for(parameter, level)
        if lv is not None:
            out["grape_progressive"] = lv.values()
    return out


@dataclass(frozen=True)
class ChartScoring:
    """What every step of the scorer reads: the task's charts, its human references and the
    bootstrap settings."""

    stimuli: dict[str, Stimulus]
    refs: MLAEReferences
    version: str
    seed: int
    n_boot: int


def answers_by_condition(records: list[dict]) -> dict[tuple, list[dict]]:
    """The records grouped by (parameter, level): (None, None) for the IID test charts."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        mv = r.get("manipulated_value")
        key = (None, None) if not mv else (mv["parameter"], _level_key(mv["level"]))
        groups.setdefault(key, []).append(r)
    return groups


def log_errors(records: list[dict]) -> tuple[dict[str, float], int]:
    """Each parseable answer's LAE by stimulus id, and the count of nulls."""
    out, nulls = {}, 0
    for r in records:
        if r["parse_status"] != "ok" or r["response"] is None:
            nulls += 1
            continue
        est = as_fraction(r["response"], _response_scale(r))
        out[r["stimulus_id"]] = float(log_abs_error(est, float(r["ground_truth"]), scale="fraction"))
    return out, nulls


def mlae_scores(ctx: ChartScoring, prefix: str, records: list[dict], parameter: str | None,
                level: Any) -> tuple[list[Score], dict[str, float]]:
    """The three MLAE forms of one set of charts with the uniform-guessing floor and the human
    references of each form, and model minus human where the standard condition's people are
    published; with the charts' LAEs by stimulus id."""
    lae, nulls = log_errors(records)
    ids = sorted(lae)
    truth = np.array([float(ctx.stimuli[i].ground_truth) for i in ids])
    abs_pct = np.exp2(np.array([lae[i] for i in ids])) - OFFSET
    charts = charts_boot(ctx.n_boot)
    scores = []
    for form, name in SCORE_NAMES.items():
        value, lo, hi = bootstrap(_form_stat(form, abs_pct), len(ids), ctx.n_boot, ctx.seed)
        human = _human_for(ctx.refs, form, parameter, level)
        floor = chance_mlae(truth, scale="fraction", form=form, seed=ctx.seed) if len(ids) else None
        scores.append(Score(name=f"{prefix}{name}", value=value, ci_low=lo, ci_high=hi, n=len(ids),
                            nulls=nulls, method=f"{FORMS[form]}; {charts}; floor = uniform guessing",
                            version=ctx.version, floor=floor, extra={"human": human} if human else {}))
        for ref_name, h in human.items():
            if ref_name in ("grape_user_study", "cleveland_mcgill_1984") and parameter is None:
                d, d_lo, d_hi, how = minus_human(value, lo, hi, h)
                scores.append(Score(
                    name=f"{prefix}{name}_minus_human", value=d, ci_low=d_lo, ci_high=d_hi,
                    n=len(ids), nulls=nulls, version=ctx.version,
                    method=f"model {name} minus the human {ref_name} MLAE; model side: {charts}; {how}",
                    extra={"human_reference": ref_name, "human": h}))
    return scores, lae


def lae_normality(ctx: ChartScoring, iid_lae: np.ndarray) -> list[Score]:
    """D'Agostino-Pearson's p of the IID log errors, where the test applies (n >= 8, some spread)."""
    if len(iid_lae) < 8 or np.ptp(iid_lae) == 0:
        return []
    stat, p = normality(iid_lae)
    return [Score(name="lae_normality_p", value=p, ci_low=None, ci_high=None, n=len(iid_lae), nulls=0,
                  method="D'Agostino-Pearson K^2 test (scipy.stats.normaltest) of IID log errors",
                  version=ctx.version, extra={"statistic": stat})]


def renderer_gap(ctx: ChartScoring, renderer: str, records: list[dict], iid: dict[str, float],
                 iid_lae: np.ndarray) -> list[Score]:
    """The task's charts drawn by another renderer (not a perturbation): their MLAE forms, and
    their mean-form MLAE minus the task's own IID charts', the two sets resampled independently."""
    scores, other = mlae_scores(ctx, f"{RENDERED_BY}.{renderer}.", records, None, None)
    if other and iid:
        value, lo, hi = unpaired_gap(np.array(list(other.values())), iid_lae, ctx.n_boot, ctx.seed)
        scores.append(Score(
            name=f"{RENDERED_BY}.{renderer}.mlae_gap", value=value, ci_low=lo, ci_high=hi,
            n=len(other), nulls=len(records) - len(other), version=ctx.version,
            method=(f"MLAE (mean form) on the charts rendered by {renderer} minus MLAE on the task's "
                    f"own IID test charts; {charts_boot(ctx.n_boot, 'the charts of each set, independently')}")))
    return scores


def delta_mlae_scores(ctx: ChartScoring, parameter: str, level_key: str, records: list[dict],
                      iid: dict[str, float]) -> tuple[list[Score], list[float]]:
    """One OOD level: its MLAE forms, then Delta-MLAE (GRAPE Eq. 3) and the deviation over the
    charts paired with their IID twins; with the pairs' |LAE(OOD) - LAE(IID)|."""
    prefix = f"ood.{parameter}.{level_key}."
    level = records[0]["manipulated_value"]["level"]
    scores, ood = mlae_scores(ctx, prefix, records, parameter, level)
    pairs = [(v, iid[ctx.stimuli[sid].meta["base_id"]]) for sid, v in ood.items()
             if ctx.stimuli[sid].meta.get("base_id") in iid]
    if not pairs:
        return scores, []
    o, b = (np.array(x) for x in zip(*pairs))
    human = _human_for(ctx.refs, "grape", parameter, level)
    standard = ctx.refs.standard
    extra = {}
    if "grape_user_study" in human and standard:
        extra["human_delta_mlae"] = round(human["grape_user_study"]["mlae"] - standard.mlae, 6)
    for name, absolute, method in (
            ("delta_mlae", False, "GRAPE Eq. 3: mean over paired charts of LAE(OOD) - LAE(IID)"),
            ("deviation", True, "mean over paired charts of |LAE(OOD) - LAE(IID)| (GRAPE notebooks)")):
        value, lo, hi = paired_delta(o, b, ctx.n_boot, ctx.seed, absolute)
        scores.append(Score(name=f"{prefix}{name}", value=value, ci_low=lo, ci_high=hi, n=len(o),
                            nulls=len(records) - len(o),
                            method=f"{method}; {charts_boot(ctx.n_boot, 'paired charts')}",
                            version=ctx.version, extra=extra if name == "delta_mlae" else {}))
    return scores, np.abs(o - b).tolist()


def parameter_deviations(ctx: ChartScoring, deviations: dict[str, list[float]]) -> list[Score]:
    """Each parameter's deviation over all its levels (GRAPE Fig. 7b), and the share of parameter
    pairs whose deviations differ by Student's t-test."""
    scores = []
    for parameter, devs in sorted(deviations.items()):
        d = np.array(devs)
        value, lo, hi = bootstrap(_mean_of(d), len(d), ctx.n_boot, ctx.seed)
        scores.append(Score(name=f"ood.{parameter}.deviation", value=value, ci_low=lo, ci_high=hi,
                            n=len(d), nulls=0, version=ctx.version,
                            method="mean |LAE(OOD) - LAE(IID)| over all levels' paired charts "
                                   f"(GRAPE Fig. 7b); {charts_boot(ctx.n_boot, 'paired charts')}"))
    if len(deviations) >= 2:
        tests = deviation_ttests({k: np.array(v) for k, v in deviations.items()})
        share = float(np.mean([t["p"] < TTEST_ALPHA for t in tests]))
        scores.append(Score(name="deviation_ttests_significant", value=share, ci_low=None, ci_high=None,
                            n=len(tests), nulls=0, version=ctx.version,
                            method=(f"share of parameter pairs whose per-chart |Delta LAE| differ by "
                                    f"Student's t-test at p < {TTEST_ALPHA} (levels pooled per parameter)"),
                            extra={"tests": tests}))
    return scores


def score_mlae_vs_humans(records: list[dict], stimset: StimulusSet, *, boot: Bootstrap = Bootstrap()) -> list[Score]:
    """MLAE of the IID test charts, then of each other renderer's and OOD level's charts with
    Delta-MLAE against their IID twins, the parameters' deviations and Grad-CAM IoU."""
    ctx = ChartScoring(stimuli=by_id(stimset.stimuli), refs=stimset.human_as(MLAEReferences),
                       version=stimset.version, seed=boot.seed, n_boot=boot.n_boot)
    groups = answers_by_condition(records)
    scores, iid = mlae_scores(ctx, "", groups.get((None, None), []), None, None)
    iid_lae = np.array(list(iid.values()))
    scores += lae_normality(ctx, iid_lae)
    deviations: dict[str, list[float]] = {}
    for (parameter, level), recs in sorted((k, v) for k, v in groups.items() if k[0] is not None):
        if parameter == RENDERED_BY:
            scores += renderer_gap(ctx, level, recs, iid, iid_lae)
            continue
        ood, devs = delta_mlae_scores(ctx, parameter, level, recs, iid)
        scores += ood
        if devs:
            deviations.setdefault(parameter, []).extend(devs)
    scores += parameter_deviations(ctx, deviations)
    scores += gradcam_scores(ctx, groups)
    return scores


def charts_boot(n_boot: int, unit: str = "test charts") -> str:
    """The interval clause of a score over a model's answers on the charts: the charts are the
    resampled unit; the network's training is not redrawn."""
    return (f"percentile bootstrap over {unit}, {n_boot} draws (the model's answers held fixed: "
            f"a trained network's interval covers one training seed, not the spread over seeds)")


def _mean_of(values: np.ndarray) -> Statistic:
    """The bootstrap statistic: the mean of ``values`` over each draw's indices."""
    return lambda idx: values[idx].mean(axis=-1)


def gradcam_scores(ctx: ChartScoring, groups: dict[tuple, list[dict]]) -> list[Score]:
    """Grad-CAM IoU (GRAPE Eq. 4) per condition, over the generated charts whose records carry a map."""
    stimuli, n_boot = ctx.stimuli, ctx.n_boot
    out = []
    for (parameter, level), recs in sorted(groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
        ious = []
        for r in recs:
            cam, src = record_cam(r), stimuli[r["stimulus_id"]].image_source
            if cam is not None and isinstance(src, ChartImage):  # only generated charts have a known mask
                ious.append(gradcam_iou(cam, target_masks(src.charts, [src.index])[0]))
        if not ious:
            continue
        v = np.array(ious)
        value, lo, hi = bootstrap(_mean_of(v), len(v), n_boot, ctx.seed)
        prefix = "" if parameter is None else f"ood.{parameter}.{level}."
        out.append(Score(name=f"{prefix}gradcam_iou", value=value, ci_low=lo, ci_high=hi, n=len(v),
                         nulls=len(recs) - len(v), version=ctx.version, floor=0.0,
                         method=(f"mean IoU of the Grad-CAM region (>= {GRADCAM_THRESHOLD}/255 after "
                                 f"bilinear resize and min-max scaling) with the marked bars' mask; the "
                                 f"map is taken on a layer that keeps both image dimensions (colnet: its "
                                 f"last full-resolution convolution, its later maps having height 1); "
                                 f"{charts_boot(n_boot, 'charts')}")))
    return out

