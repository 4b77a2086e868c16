"""Scoring families: a task's ``scoring`` name -> its scorer and its headline scores.

One entry per family (docs/design.md, "Scoring"). A scorer is
``fn(records: list[dict], stimset: StimulusSet, *, boot: Bootstrap) -> list[Score]``: the one
call the run, ``gestalt score`` and the tests make, so every interval follows the recipe's
``bootstrap`` settings. ``records`` are validated TrialRecord dicts for the test split, nulls
included: one per stimulus after repetition aggregation, or every presentation for tasks
declared ``all_reps``; the human reference comes from ``stimset``, whose images are never
decoded here.

``headline`` names a family's own scores that summarise a model (patterns as in
:mod:`fnmatch`); ``primary`` is the task's single number on a higher-is-better scale between
floor and ceiling (ranking, the matrix's colour and rank correlations of a ranked task; None for
an error measure such as MLAE). A family also owns how its scores are shown: the task's one
headline on every surface (:meth:`Family.lead_score`: the primary score, or for a task no order
answers the first of its ``verdict`` scores), its short metric name in the runs table (``short``), the few
``secondary`` scores a run logs besides it and each score's decimals in tables. The terminal,
the tracking layer, the scorecards and the report all ask the family, never a task id.
Scorers are pure numpy: this stage never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

from ..lazy import resolve
from .bootstrap import N_BOOT_DEFAULT, N_BOOT_KAPPA, SEED_DEFAULT
from .record import Score

if TYPE_CHECKING:
    from ..stimuli.base import StimulusSet

# What the readouts' ``answer_rule: final`` reads (harness.readouts.parse), for the scores' method.
FINAL_RULE = "the text after the last 'answer:' marker, else the last number or label"


class Bootstrap(BaseModel):
    """How every interval of a battery is computed: ``n_boot`` draws (``n_boot_kappa`` for the
    kappa family's slower-converging statistics), one ``seed``, percentile intervals over stimuli.
    The recipe's ``bootstrap:`` section is this model, so a setting has one name from the recipe
    to the scorer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # an integer, not YAML's true or text such as '2' (pydantic would otherwise read them as numbers);
    # under 100 draws a 95% percentile interval rests on its two or three most extreme draws
    n_boot: Annotated[int, Strict()] = Field(default=N_BOOT_DEFAULT, ge=100, le=100_000)
    n_boot_kappa: Annotated[int, Strict()] = Field(default=N_BOOT_KAPPA, ge=100, le=100_000)
    seed: Annotated[int, Strict()] = Field(default=SEED_DEFAULT, ge=0, le=2**32 - 1)
    method: Literal["percentile"] = "percentile"


Scorer = Callable[..., list[Score]]


@dataclass(frozen=True)
class Family:
    name: str
    scorer: str  # "module:function"
    headline: tuple[str, ...]  # fnmatch patterns of the model's headline scores, most telling first
    primary: tuple[str, ...] = ()  # the task's single number: the first of these with a value
    # the few other scores a scientist compares across runs (logged as run metrics, value only;
    # every score and interval stays in intervals.json)
    secondary: tuple[str, ...] = ()
    # short names of its scores in the runs table: score -> suffix of "<Task>.<suffix>"
    short: dict[str, str] = field(default_factory=dict, hash=False)
    # decimals a score is printed with in a table (the same for every model: columns line up); 3 otherwise
    decimals: dict[str, int] = field(default_factory=dict, hash=False)
    # the figures drawn for its tasks, by name (harness.reports maps each name to its drawing, so
    # scoring never imports plotting): of one model's run of a task (logged with the run), and
    # across an experiment's models (the report)
    run_figures: tuple[str, ...] = ("scores",)
    report_figures: tuple[str, ...] = ()
    # its headline scores in words, for the terminal's legend: fnmatch pattern -> what it measures
    terms: dict[str, str] = field(default_factory=dict, hash=False)
    # why its tasks get no rank groups on any surface (terminal, summary run, report), where an
    # order of its scores would not say which model is more like people ("" = ranked on the
    # primary score); ``verdict``: the scores each model is shown with instead, under that reason
    unranked: str = ""
    verdict: tuple[str, ...] = ()

    @property
    def ranked(self) -> bool:
        return bool(self.primary) and not self.unranked


    def score(self, records: list[dict], stimset: StimulusSet, boot: Bootstrap) -> list[Score]:
        """The scorer's scores; where the answers were read by a rule other than the paper's (the
        readouts' ``answer_rule``), every score's method says which."""
        fn: Scorer = resolve(self.scorer)
        scores = fn(records, stimset, boot=boot)
        rules = sorted({r["extras"]["answer_rule"] for r in records if "answer_rule" in (r.get("extras") or {})})
        if not rules:
            return scores
        clause = f"answers read by answer_rule {', '.join(rules)}: {FINAL_RULE}, not the paper's rule"
        return [replace(s, method=f"{s.method}; {clause}") for s in scores]

    def is_headline(self, name: str) -> bool:
        return any(fnmatchcase(name, p) for p in self.headline)

    def headline_scores(self, scores: Sequence[Score]) -> list[Score]:
        return [s for s in scores if self.is_headline(s.name)]

    def primary_score(self, scores: Sequence[Score]) -> Score | None:
        by = {s.name: s for s in scores if s.value is not None}
        return next((by[n] for n in self.primary if n in by), None)

    @property
    def lead_name(self) -> str:
        """The name of the task's one headline (:meth:`lead_score`) as declared: what the runs
        table's sortable column is named after before any score exists."""
        return (self.verdict or self.primary or tuple(p for p in self.headline if "*" not in p))[0]

    def lead_score(self, scores: Sequence[Score]) -> Score | None:
        """The task's one headline wherever it is shown (terminal, runs table, scorecard, report
        matrix): for a task no order answers, the first of its verdict scores (series counting:
        the capacity, read against people's band); else the primary score; for a family with
        neither (an error measure such as MLAE, which the matrix leaves out) its first headline
        score with a value."""
        names = self.verdict[:1] or self.primary
        if names:
            by = {s.name: s for s in scores if s.value is not None}
            return next((by[n] for n in names if n in by), None)
        return next((s for s in self.headline_scores(scores) if s.value is not None), None)

    def short_name(self, task_id: str, score_name: str) -> str:
        """The score's short metric name, ``<Task>.<short>`` (``Silhouette.B``; a variant
        BASE:NAME gives ``<Task>.<short>:NAME``): the task's last id part, capitalised, so the
        headlines sort before every ``<task id>/...`` metric (MLflow's Compare sorts by code
        point) and stay apart when the runs table truncates a header."""
        base, _, variant = task_id.partition(":")
        label = base.rsplit(".", 1)[-1]
        name = f"{label[:1].upper()}{label[1:]}.{self.short.get(score_name, score_name)}"
        return f"{name}:{variant}" if variant else name

    def term(self, score_name: str) -> str | None:
        """What the score measures, in words, with its name in the runs table where it differs."""
        words = next((w for p, w in self.terms.items() if fnmatchcase(score_name, p)), None)
        short = self.short.get(score_name)
        return None if words is None else f"{words}{f' (runs table: {short})' if short else ''}"

    def decimals_of(self, score_name: str) -> int:
        return self.decimals.get(score_name, 3)


FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("classification_vs_observers", "harness.scores.agreement:score_classification_vs_observers",
           ("B", "accuracy", "kappa", "kappa_pairwise"), primary=("B",), secondary=("kappa", "accuracy"),
           run_figures=("scores", "confusion"), report_figures=("accuracy_vs_kappa", "texture_vs_shape"),
           terms={"B": "share of images on which the model gives the observers' modal (most frequent) answer",
                  "accuracy": "share of images named correctly",
                  "kappa": "error consistency: whether the model gets the same images wrong as the observers "
                           "(0 = chance overlap)",
                  "kappa_pairwise": "error consistency with each observer alone, averaged over observers"}),
    Family("odd_one_out", "harness.scores.odd_one_out:score_odd_one_out", ("B", "B_*", "individual_agreement"),
           primary=("B",), secondary=("individual_agreement",),
           terms={"B": "share of triplets on which the model picks the odd one out people picked most often",
                  "B_*": "B against another human reference (named after B_)",
                  "individual_agreement": "share of individual people's votes that match the model's pick"}),
    # headlined by its capacity (SPEC 6; the paper reads its 40 charts "only as capacity-band
    # membership"); its accuracy is a secondary score, never a rank (``unranked`` below)
    Family("capacity", "harness.scores.capacity:score_capacity",
           ("capacity", "capacity_in_band", "accuracy", "mae"), primary=("accuracy",),
           secondary=("accuracy", "mae"),
           decimals={"capacity": 1, "capacity_in_band": 0, "mae": 2}, report_figures=("a_k",),
           terms={"accuracy": "share of charts whose colour series the model counts exactly",
                  "mae": "mean absolute error of the count, in series",
                  "capacity": "the series count at which the model's fitted accuracy curve falls through 0.5",
                  "capacity_in_band": "1 when the capacity's whole 95% interval lies in people's 6-12 band, else 0"},
           # the paper's likeness is the capacity inside people's 6-12 band (SPEC 6: replication holds
           # when its interval lies in it): in or out, no order; accuracy would rank who counts best
           unranked="people's capacity is a band (6-12 series, cited from the literature), not an order: a "
                    "model counts like people when its capacity (gestalt's definition: where its fitted "
                    "accuracy curve crosses 50%) has its 95% interval in the band (capacity_in_band 1); "
                    "accuracy would rank who counts best, not who counts like people",
           verdict=("capacity", "capacity_in_band")),
    Family("chart6", "harness.scores.chart6:score_chart6",
           ("accuracy_all", "accuracy_valid", "valid_rate", "gap_all", "gap_valid", "error_r_valid",
            "error_r_all", "retest_r"), primary=("accuracy_all",), secondary=("accuracy_valid", "valid_rate"),
           short={"accuracy_all": "acc"}, run_figures=("chart6",), report_figures=("chart6",),
           terms={"accuracy_all": "share of presentations answered correctly, invalid answers counted wrong",
                  "accuracy_valid": "share of valid answers that are correct",
                  "valid_rate": "share of presentations with a valid answer",
                  "gap_*": "model accuracy minus people's on the same items",
                  "error_r_*": "Pearson r between the model's and people's accuracy per item",
                  "retest_r": "the model's own split-half consistency per item"}),
    Family("shape_bias", "harness.scores.shape_bias:score_shape_bias",
           ("shape_bias", "shape_share", "texture_share", "B", "kappa"), primary=("shape_bias",),
           run_figures=("shape_bias",), report_figures=("texture_vs_shape",),
           terms={"shape_bias": "share of shape answers among the shape and texture answers on cue-conflict images",
                  "shape_share": "share of all answers naming the shape's class",
                  "texture_share": "share of all answers naming the texture's class",
                  "B": "share of images on which the model gives the observers' modal answer",
                  "kappa": "error consistency with the observers (0 = chance overlap)"}),
    Family("mlae_vs_humans", "harness.scores.mlae:score_mlae_vs_humans",
           ("mlae", "mlae_midmean", "mlae_haehn", "mlae_minus_human", "mlae_midmean_minus_human",
            "gradcam_iou"), secondary=("mlae_minus_human",), decimals={"mlae": 2, "mlae_midmean": 2,
           "mlae_haehn": 2, "mlae_minus_human": 2, "mlae_midmean_minus_human": 2},
           run_figures=("bars",), report_figures=("generalization_matrix",),
           terms={"mlae*_minus_human": "the model's error minus people's (below 0: more accurate than people)",
                  "mlae": "log2 absolute error of the estimate (lower is better)",
                  "mlae_midmean": "MLAE averaged over the middle half of the trials",
                  "mlae_haehn": "MLAE in the form of Haehn et al.",
                  "gradcam_iou": "overlap of the model's Grad-CAM map with the marked bars"},
           unranked="no single score to rank: its error comes in several published forms (see the table above)"),
]}


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise KeyError(f"unknown scoring family {name!r}; known: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]


def get_scorer(name: str) -> Scorer:
    """The scorer function of a family (for calling it on hand-made records)."""
    return resolve(get_family(name).scorer)


def family_of(task_id: str) -> Family | None:
    """The scoring family of a task id; None for a task this harness no longer declares (an old
    run read by the report)."""
    from ..stimuli.registry import TASKS, base_task_id

    spec = TASKS.get(base_task_id(task_id))
    return None if spec is None else get_family(spec.scoring)
