"""The CHART-6 administration protocol (Verma et al. 2025, section 1.4 and appendix A).

Each item's prompt is the paper's Table 3 template: model prefix + the test's instructions + the
question text unmodified (+ "Choices: ..." for multiple-choice items) + model suffix, built from
the task's versioned template (``stimset.prompt``). The image is attached by the adapter.

Options:

- ``paper_model``: one of the paper's eight models (its name, e.g. "LLaVA1.5-Vicuna-7B", or the
  checkpoint, e.g. "llava-hf/llava-1.5-7b-hf"). It supplies the Table 4 prefix/suffix and the
  Table 2 temperature/top-p. Whitespace in the prefixes follows the lab's administration code
  (Table 4 does not show it). The ``<image>`` token of the LLaVA-1.5 prefix is dropped: every
  adapter here places the image itself (before the text, where the token put it).
- ``prefix``, ``suffix``, ``temperature``, ``top_p``: override those defaults. A model the paper
  did not evaluate gets no prefix/suffix (its adapter's chat template is its format) and plain
  sampling, temperature 1.0 and top-p 1.0: the corner of the paper's grid
  (:func:`decoding_grid`) that leaves the model's distribution unchanged.
- ``greedy`` (False): greedy decoding instead (temperature 0 to the adapter).
- ``n_reps`` (10): presentations per item; repetition ``r`` samples with seed ``seed + r``.
- ``max_new_tokens`` (270, the paper's value), ``seed`` (the stimulus set's seed).
- ``choice_order`` ("paper"): the options in the order of the source files, as Table 3 lists
  them ({Choice 1}, ..., {Choice 4}); "reversed" is the order the lab's administration code sent
  (mc4 ... mc1). Either way VLAT's "Skip" is not offered (it was a button for people).
- ``extractor`` ("rule"): "llm" sends the response through the paper's Table 5 extractor,
  ``extractor_model`` (a model spec dict, e.g. ``{"source": "api", "name": "gpt-4-0613"}``, or an
  adapter), with ``extractor_settings`` (default: the paper's GPT-4 settings).
- ``answer_rule`` ("paper"): "final" reads the text after the last "answer:" marker, else the last
  option, number or line (:func:`harness.readouts.extract.extract`): a deviation from the paper,
  recorded per trial and stated in the scores' method.

A response is the extracted answer (an option string, a number, or a short text); invalid ones are
``null:<why>`` (see :mod:`harness.readouts.extract`). ``raw_output`` is the model's text; ``extras``
keeps the answer text after the prompt echo was cut, the extractor's output (LLM extractor only),
``valid`` and ``correct`` (by the item's rule: exact, or within 5% for HOLF/HOLF-Multi/ChartQA-Human).
The prompt itself is not stored per trial: it is the hashed task template filled by these settings
(:meth:`Chart6Readout.item_prompt` rebuilds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..models.base import ModelSpec, fingerprint_hash
from ..stimuli.base import Prompt, Stimulus, StimulusSet
from ..stimuli.chart6 import TESTS, is_correct, item_body
from ..stimuli.registry import base_task_id
from .base import Readout, ReadoutSettings, Response
from .extract import EXTRACTOR_SETTINGS, LLMExtractor, excise_prompt, extract
from .parse import AnswerRule, Parsed, null
from .prompt import generate_all, generation_record, human_facing, request_preflight

MAX_NEW_TOKENS = 270
N_PRESENTATIONS = 10
GRID_TEMPERATURES = (0.2, 0.4, 0.6, 0.8, 1.0)
GRID_TOP_PS = (0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass(frozen=True)
class PaperModel:
    name: str
    checkpoint: str
    prefix: str  # Table 4
    suffix: str
    top_p: float  # Table 2
    temperature: float


PAPER_MODELS: dict[str, PaperModel] = {m.name: m for m in [
    PaperModel("Blip2-FlanT5-4B", "Salesforce/blip2-flan-t5-xl", "Question: ", "\nAnswer:", 0.6, 1.0),
    PaperModel("Blip2-FlanT5-11B", "Salesforce/blip2-flan-t5-xxl", "Question: ", "\nAnswer:", 1.0, 1.0),
    PaperModel("LLaVA1.5-Vicuna-7B", "llava-hf/llava-1.5-7b-hf", "USER: <image>\n", "\nASSISTANT:", 0.4, 1.0),
    PaperModel("LLaVA1.5-Vicuna-13B", "llava-hf/llava-1.5-13b-hf", "USER: <image>\n", "\nASSISTANT:", 1.0, 0.4),
    PaperModel("LLaVA1.6-Yi-34B", "liuhaotian/llava-v1.6-34b", "USER: ", "\nASSISTANT:", 1.0, 0.4),
    PaperModel("Pix2Struct-0.3B", "google/pix2struct-chartqa-base", "Question: ", " Answer:", 0.8, 1.0),
    PaperModel("MatCha-0.3B", "google/matcha-chartqa", "Question: ", " Answer:", 0.4, 1.0),
    PaperModel("GPT-4V", "gpt-4-vision-preview", "Question: ", "\nAnswer:", 1.0, 0.2),
]}


def paper_model(key: str) -> PaperModel:
    """A paper model by its name or its checkpoint."""
    for m in PAPER_MODELS.values():
        if key in (m.name, m.checkpoint):
            return m
    raise ValueError(f"unknown CHART-6 model {key!r}; known: {', '.join(PAPER_MODELS)}")


def decoding_grid(temperatures=GRID_TEMPERATURES, top_ps=GRID_TOP_PS) -> list[dict[str, float]]:
    """The paper's search (section 1.4), run on VLAT: each temperature at top-p 1.0, then each
    top-p at temperature 1.0; (1.0, 1.0) once. 9 settings with the paper's values."""
    grid = [{"temperature": float(t), "top_p": 1.0} for t in temperatures]
    grid += [{"temperature": 1.0, "top_p": float(p)} for p in top_ps]
    return [dict(s) for s in dict.fromkeys(tuple(sorted(s.items())) for s in grid)]


class Chart6Settings(ReadoutSettings):
    paper_model: str | None = None  # the paper's model whose prompt and sampling to use
    prefix: str | None = None  # None: the paper model's, else ""
    suffix: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)  # None: the paper model's, else 1.0
    top_p: float | None = Field(None, gt=0, le=1)
    greedy: bool = False
    n_reps: int = Field(default=N_PRESENTATIONS, ge=1, le=1000)
    max_new_tokens: int = Field(default=MAX_NEW_TOKENS, ge=1, le=1_000_000)
    seed: int | None = Field(None, ge=0, le=2**32 - 1)  # None: the recipe's seed
    choice_order: Literal["paper", "reversed"] = "paper"
    extractor: Literal["rule", "llm"] = "rule"
    # a model entry (source, name, ...) or, from Python, an adapter
    extractor_model: Any = None
    extractor_settings: dict[str, Any] | None = None
    answer_rule: AnswerRule = "paper"


class Chart6Readout(Readout):
    name = "chart6"
    capability = "generate"
    uses_prompt = True
    Settings: ClassVar[type[ReadoutSettings]] = Chart6Settings

    def __init__(self, stimset: StimulusSet, **options: Any):
        task = stimset.task_id
        o = self.with_defaults(stimset, options)
        if stimset.prompt is None or base_task_id(stimset.task_id).removeprefix("literacy.chart.") not in TESTS:
            raise ValueError(f"{task}: readout chart6 answers CHART-6 tasks only")
        self.prompt: Prompt = stimset.prompt
        paper = paper_model(o["paper_model"]) if o["paper_model"] else None
        defaults = ({"prefix": paper.prefix, "suffix": paper.suffix, "temperature": paper.temperature,
                     "top_p": paper.top_p} if paper else
                    {"prefix": "", "suffix": "", "temperature": 1.0, "top_p": 1.0})
        for key, value in defaults.items():
            if o[key] is None:
                o[key] = value
        if o["greedy"]:
            o["temperature"], o["top_p"] = 0.0, None
        if o["seed"] is None:
            o["seed"] = stimset.seed
        if (o["extractor"] == "llm") != (o["extractor_model"] is not None):
            raise ValueError(f"{task}: extractor_model is needed with extractor='llm' and only then")
        super().__init__(stimset, **o)
        self._extractor: LLMExtractor | None = None

    @property
    def n_reps(self) -> int:
        return int(self.options["n_reps"])

    @property
    def settings(self) -> dict[str, Any]:
        """The cache key's settings: everything that changes a response (not ``n_reps``; the
        paper's answer rule left out, so trials recorded before the option keep their keys)."""
        out = {"readout": self.name, **{k: v for k, v in self.options.items()
                                        if k != "n_reps" and (k, v) != ("answer_rule", "paper")}}
        model = out["extractor_model"]
        if model is not None and not isinstance(model, dict):
            out["extractor_model"] = fingerprint_hash(model.fingerprint)
        return out

    def generation_settings(self, rep: int) -> dict[str, Any]:
        """The paper's decoding (Table 2, or the recipe's) is the experiment: ``exact``."""
        o = self.options
        return {"max_new_tokens": int(o["max_new_tokens"]), "temperature": float(o["temperature"]),
                "top_p": o["top_p"], "seed": int(o["seed"]) + rep, "exact": ["temperature", "top_p"]}

    def preflight(self, model: Any) -> dict[str, Any]:
        dropped = request_preflight(model, self.generation_settings(0))
        if self.options["extractor"] == "llm":
            extractor = self.extractor()
            dropped.update({f"extractor.{k}": v for k, v in
                            request_preflight(extractor.model, extractor.settings).items()})
        return dropped

    def choices(self, stimulus: Stimulus) -> list[str]:
        options = list(stimulus.meta["options"])
        return options[::-1] if self.options["choice_order"] == "reversed" else options

    def item_prompt(self, stimulus: Stimulus) -> str:
        return self.prompt.text.format(
            prefix=self.options["prefix"].replace("<image>", ""), suffix=self.options["suffix"],
            body=item_body(stimulus.meta["question"], self.choices(stimulus)))

    def extractor(self) -> LLMExtractor:
        if self._extractor is None:
            model = self.options["extractor_model"]
            if isinstance(model, dict):
                from ..models.registry import build_adapter

                model = build_adapter(ModelSpec(**{"id": model["name"], **model}))  # id: its name by default
            settings = self.options["extractor_settings"] or EXTRACTOR_SETTINGS
            self._extractor = LLMExtractor(model, settings)
        return self._extractor

    def _answer(self, stimulus: Stimulus, text: str, extras: dict[str, Any]) -> Parsed:
        fmt, options = stimulus.meta["response_format"], stimulus.meta["options"]
        if self.options["extractor"] == "llm":
            gen = self.extractor()(stimulus.meta["question"], text, self.choices(stimulus))
            extras["extracted"] = gen.text
            if gen.usage:  # the extractor's call is paid for too
                extras["extractor_usage"] = dict(gen.usage)
            if gen.settings_dropped:
                extras["extractor_settings_dropped"] = dict(gen.settings_dropped)
            if gen.error is not None:
                extras["extractor_error"] = gen.error
                return null("extractor_error")
            text = gen.text or ""
        return extract(text, fmt, options, self.options["answer_rule"])

    def _parse_reply(self, stimulus: Stimulus, prompt: str, extras: dict[str, Any],
                     text: str | None) -> Parsed:
        extras["answer"] = excise_prompt(text or "", prompt)
        return self._answer(stimulus, extras["answer"], extras)

    def respond(self, model, batch: list[Stimulus]) -> list[Response]:
        prompts = [self.item_prompt(s) for s in batch]
        images = [human_facing(s.image) for s in batch]
        generations = generate_all(model, images, prompts, self.generation_settings(self.rep))
        out = []
        for stimulus, prompt, gen in zip(batch, prompts, generations):
            extras: dict[str, Any] = {}
            parsed = generation_record(gen, extras, partial(self._parse_reply, stimulus, prompt, extras))
            if self.options["answer_rule"] != "paper":  # the scores say so in their method
                extras["answer_rule"] = self.options["answer_rule"]
            extras["valid"] = parsed.ok
            extras["correct"] = is_correct(stimulus, parsed.value) if parsed.ok else None
            out.append(Response(response=parsed.value, raw_output=gen.text, parse_status=parsed.status,
                                latency_s=gen.latency_s, usage=dict(gen.usage), extras=extras))
        return out
