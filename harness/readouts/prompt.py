"""Prompt readouts: show the human-facing image with the task's verbatim prompt, parse the answer.

Every prompt readout sends ``stimulus.image`` (the picture people saw: the silhouette, the
numbered montage, the chart), flattened onto white if it has transparency, together with
``stimset.prompt.text`` unchanged, to a model with the ``generate`` capability, and parses the
reply by the rules of :mod:`harness.readouts.parse`. A failed model call is
``null:api_error:<code>`` with the error text in ``extras['error']``; an answer the vendor cut
short is ``null:truncated`` / ``null:refusal`` / ``null:safety``; a parser exception is
``null:parse_error``. Settings an API model does not accept (its capability table) are left out
and listed in ``extras['settings_dropped']``; a ``temperature`` or ``top_p`` the recipe sets
explicitly is the experiment, and a model that would not receive it is refused at preflight.

Options (all readouts): ``max_new_tokens`` (40, the Gestalt protocol), ``temperature`` (0 =
greedy), ``top_p`` (unset), ``seed`` (the stimulus set's seed; repetition ``r`` samples with
``seed + r``), ``n_reps`` (1), ``answer_rule`` ("paper"; "final": :mod:`harness.readouts.parse`,
a deviation from the papers that the scores' method states). The runner sets ``readout.rep``
before each ``respond``; it should run ``readout.n_reps`` repetitions, which
:func:`harness.readouts.parse.aggregate_reps` combines.

``prompt_choice`` also takes ``all_permutations``: each stimulus is shown in all six orders of its
three montage parts (``Stimulus.part_sources``), re-rendered with
:func:`harness.stimuli.montage.montage_of`, so position bias can be measured. Repetition ``r``
shows permutation ``r % 6`` (0 is the stimulus' own order, sent as ``stimulus.image`` itself) and
``n_reps`` becomes ``6 x n_reps``. The response is mapped back to the stimulus' montage numbering,
so it compares with ``ground_truth`` and ``option_order`` as usual; ``extras`` keeps
``permutation`` (montage index shown at each position, 0-based) and ``presented_response``
(the position the model named in the picture it saw).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import permutations
from typing import Any, ClassVar

from PIL import Image
from pydantic import Field

from ..models.api import APIModel
from ..models.base import Generation, Generator
from ..stimuli.base import Prompt, Stimulus, StimulusSet, png_bytes
from .base import Readout, ReadoutSettings, Response
from .parse import AnswerRule, Parsed, api_error_status, null, parse_integer, parse_label, parse_number

PERMUTATIONS: tuple[tuple[int, ...], ...] = tuple(permutations(range(3)))


def human_facing(image: Image.Image) -> Image.Image:
    """The picture as seen on a white page: transparency composited onto white."""
    if image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(canvas, rgba).convert("RGB")
    return image


def generate_all(model: Generator, images: list[Image.Image], prompts: list[str],
                 settings: dict[str, Any]) -> list[Generation]:
    """Batched or concurrent where the adapter does so (the contract's default: one call per item)."""
    return model.generate_many(images, prompts, settings)


def request_preflight(model: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """Settings an API model will not be sent (``{name: value}``); raises ModelError, one line
    naming the model and the setting, where leaving one out would change the experiment. Other
    adapters take every setting."""
    return model.plan(settings).dropped if isinstance(model, APIModel) else {}


def generation_record(gen: Generation, extras: dict[str, Any],
                      parse: Callable[[str | None], Parsed]) -> Parsed:
    """One trial's parsed answer from a model's generation: a failed or cut-short call is its null
    reason (error kept in ``extras['error']``); a parser exception is ``null:parse_error``, never a
    crash of the battery. Settings the adapter left out are kept in ``extras['settings_dropped']``."""
    if gen.settings_dropped:
        extras["settings_dropped"] = dict(gen.settings_dropped)
    if gen.error is not None:
        extras["error"] = gen.error
        return Parsed(None, api_error_status(gen.error))
    try:
        return parse(gen.text)
    except Exception as e:  # noqa: BLE001 - one odd answer must not abort a paid battery
        extras["error"] = f"parse_error: {type(e).__name__}"
        return null("parse_error")


class PromptSettings(ReadoutSettings):
    max_new_tokens: int = Field(default=40, ge=1, le=1_000_000)
    temperature: float | None = Field(0.0, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = Field(None, ge=0, le=2**32 - 1)  # None: the recipe's seed
    n_reps: int = Field(default=1, ge=1, le=1000)
    answer_rule: AnswerRule = "paper"


class PromptChoiceSettings(PromptSettings):
    all_permutations: bool = False


class PromptNumberSettings(PromptSettings):
    lo: float = 0.0
    hi: float = 100.0


class PromptReadout(Readout):
    capability = "generate"
    uses_prompt = True
    response_space: ClassVar[str]
    Settings: ClassVar[type[ReadoutSettings]] = PromptSettings
    rep: int = 0  # set by the runner before each respond()

    def __init__(self, stimset: StimulusSet, **options: Any):
        task = stimset.task_id
        resolved = self.with_defaults(stimset, options)
        if stimset.prompt is None:
            raise ValueError(f"{task}: readout {self.name} needs a prompt, the task has none")
        self.prompt: Prompt = stimset.prompt
        if stimset.response_space != self.response_space:
            raise ValueError(f"{task}: readout {self.name} answers {self.response_space!r} tasks, "
                             f"the task's response space is {stimset.response_space!r}")
        if resolved["seed"] is None:
            resolved["seed"] = stimset.seed
        super().__init__(stimset, **resolved)
        # Sampling the recipe sets is the experiment; the default temperature 0 applies only
        # where a model accepts one (full.yaml), so an API model may drop it.
        self.exact = tuple(k for k in ("temperature", "top_p") if options.get(k) is not None)

    @property
    def n_reps(self) -> int:
        return int(self.options["n_reps"])

    @property
    def settings(self) -> dict[str, Any]:
        """What changes one response (the cache key); ``n_reps`` only adds trials, so it is out, and
        the paper's answer rule is left out so the keys of trials recorded before the option stay."""
        return {"readout": self.name, **{k: v for k, v in self.options.items()
                                         if k != "n_reps" and (k, v) != ("answer_rule", "paper")}}

    @property
    def rule(self) -> str:
        return str(self.options["answer_rule"])

    def generation_settings(self, rep: int) -> dict[str, Any]:
        o = self.options
        return {"max_new_tokens": int(o["max_new_tokens"]), "temperature": float(o["temperature"]),
                "top_p": o["top_p"], "seed": int(o["seed"]) + rep, "exact": list(self.exact)}

    def preflight(self, model: Any) -> dict[str, Any]:
        return request_preflight(model, self.generation_settings(0))

    def parse(self, text: str | None) -> Parsed:
        raise NotImplementedError

    def present(self, stimulus: Stimulus, rep: int) -> tuple[Image.Image, dict[str, Any]]:
        """The image shown for this repetition, and what to record about the presentation."""
        return stimulus.image, {}

    def record(self, parsed: Parsed, extras: dict[str, Any]) -> Parsed:
        """The response as recorded (default: as parsed); may add to the trial's extras."""
        return parsed

    def respond(self, model, batch: list[Stimulus]) -> list[Response]:
        rep = self.rep
        shown = [self.present(s, rep) for s in batch]
        images = [human_facing(image) for image, _ in shown]
        prompts = [self.prompt.text] * len(batch)
        generations = generate_all(model, images, prompts, self.generation_settings(rep))
        out = []
        for gen, (_, presentation) in zip(generations, shown):
            extras = {**presentation, **gen.extras}
            parsed = generation_record(gen, extras, self.parse)
            if self.rule != "paper":  # the scores say so in their method
                extras["answer_rule"] = self.rule
            if parsed.ok:
                parsed = self.record(parsed, extras)
            out.append(Response(response=parsed.value, raw_output=gen.text, parse_status=parsed.status,
                                latency_s=gen.latency_s, usage=dict(gen.usage), extras=extras))
        return out


class PromptChoice(PromptReadout):
    """Numbered-montage choice (odd-one-out): the first integer, one of the task's options."""

    name = "prompt_choice"
    response_space = "choice"
    Settings = PromptChoiceSettings

    def __init__(self, stimset: StimulusSet, **options: Any):
        super().__init__(stimset, **options)
        if not stimset.options:
            raise ValueError(f"{stimset.task_id}: prompt_choice needs the task's options")
        if self.options["all_permutations"]:
            if tuple(stimset.options) != (1, 2, 3):
                raise ValueError(f"{stimset.task_id}: all_permutations needs a 1-2-3 montage task, "
                                 f"options are {stimset.options}")
            for s in stimset.test:
                if len(s.part_sources) != 3:
                    raise ValueError(f"{stimset.task_id}: stimulus {s.stimulus_id} has "
                                     f"{len(s.part_sources)} montage parts; all_permutations needs 3")
        self._layout_checked: set[str] = set()

    @property
    def n_reps(self) -> int:
        return super().n_reps * (len(PERMUTATIONS) if self.options["all_permutations"] else 1)

    def parse(self, text):
        return parse_integer(text, self.stimset.options, self.rule)

    def present(self, stimulus, rep):
        if not self.options["all_permutations"]:
            return stimulus.image, {}
        from ..stimuli.montage import montage_of

        perm = PERMUTATIONS[rep % len(PERMUTATIONS)]
        if stimulus.stimulus_id not in self._layout_checked:
            # Re-rendering must reproduce the stimulus exactly, or the permuted montages would
            # differ from the original in more than the order.
            if png_bytes(montage_of(stimulus.part_sources)) != png_bytes(stimulus.image):
                raise ValueError(f"{self.stimset.task_id}: stimulus {stimulus.stimulus_id}: its image "
                                 f"is not the default montage of its parts; cannot permute it")
            self._layout_checked.add(stimulus.stimulus_id)
        image = stimulus.image if perm == PERMUTATIONS[0] else \
            montage_of([stimulus.part_sources[i] for i in perm])
        return image, {"permutation": list(perm)}

    def record(self, parsed, extras):
        perm = extras.get("permutation")
        if perm is None or not parsed.ok:
            return parsed
        extras["presented_response"] = parsed.value
        return Parsed(perm[parsed.value - 1] + 1, parsed.status)


class PromptCount(PromptReadout):
    """Counts: the first integer, within the task's options when it lists them."""

    name = "prompt_count"
    response_space = "count"

    def parse(self, text):
        return parse_integer(text, self.stimset.options, self.rule)


class PromptLabel(PromptReadout):
    """Text labels (silhouette classes): the first option mentioned."""

    name = "prompt_label"
    response_space = "label"

    def __init__(self, stimset: StimulusSet, **options: Any):
        super().__init__(stimset, **options)
        if not stimset.options:
            raise ValueError(f"{stimset.task_id}: prompt_label needs the task's label options")

    def parse(self, text):
        return parse_label(text, self.stimset.options, self.rule)


class PromptNumber(PromptReadout):
    """Scalar answers (bar-chart ratio, a percentage): the first number within [lo, hi]."""

    name = "prompt_number"
    response_space = "scalar"
    Settings = PromptNumberSettings

    def parse(self, text):
        return parse_number(text, float(self.options["lo"]), float(self.options["hi"]), self.rule)
