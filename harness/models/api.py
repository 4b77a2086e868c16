"""``api:<provider>/<model>``: closed and served models over HTTP (httpx2, one pooled client).

Why gestalt builds the requests itself rather than calling the vendors' SDKs: docs/api-transport.md.

Wire formats, one module per vendor: :mod:`harness.models.api_openai` (``openai``, ``azure``,
``openai-compatible``: Chat Completions), :mod:`harness.models.api_anthropic` (``anthropic``:
Messages, streamed where the output budget needs it), :mod:`harness.models.api_google` (``google``:
Gemini generateContent); each builds its request and credential headers and reads its answer, usage
and money run out. :mod:`harness.models.api_transport` sends them all: the pooled client, the
in-flight window, the retry policy and which failures are final.

Every request is one user turn holding the image (base64 PNG, the exact bytes of
:func:`harness.stimuli.base.png_bytes`) *before* the prompt text; ``image=None`` sends the text alone
(the CHART-6 LLM answer extractor).

Parameters: :mod:`harness.models.api_capabilities` says which of temperature, top_p, seed, the
output-budget field and the thinking forms a model family accepts. :meth:`APIModel.plan` applies it
before a request is built: a setting the model does not accept is left out and reported in
``Generation.settings_dropped``; where leaving it out would change the experiment (a setting the
readout marks ``exact`` with a value other than the vendor's default 1.0), or where the thinking
and output budgets cannot work, it raises :class:`ModelError` (at preflight, via the readouts).
Output budget: ``options.max_tokens`` (size it for thinking tiers), else the readout's
``max_new_tokens``. ``options.thinking_budget`` enables Anthropic thinking / sets Gemini's
``thinkingBudget``; ``options.adaptive_thinking`` asks Anthropic for adaptive thinking;
``options.reasoning_effort`` is passed to OpenAI.

Answers cut short are not answers: ``finish_reason: length`` / ``stop_reason: max_tokens`` /
``finishReason: MAX_TOKENS`` give the error ``truncated``, a refusal ``refusal``, a content filter,
Gemini safety/recitation stop or blocked prompt ``safety`` (recorded as ``null:truncated`` etc.).

Failures never leave the battery: they are retried, or recorded as a failed call
(``Generation(text=None, error="<code>: <detail>")``, ``null:api_error:<code>``), by the rules of
:mod:`harness.models.api_transport`; money run out stops the model's calls.
:meth:`APIModel.verify` asks the vendor about the key and the model without generating (preflight).

Secrets: keys are read from the environment at request time (surrounding whitespace stripped) and
never stored on the adapter; every stored text (errors, answers, reasoning) is scrubbed of the key
in any representation (:func:`harness.models.api_secrets.scrub_secret`) before it is stored or logged.

``latency_s`` is the wall time of the attempt that succeeded; ``usage`` is normalised across vendors
to ``input_tokens`` (cached included), ``cached_tokens``, ``output_tokens`` (the answer, thinking
excluded), ``thinking_tokens`` (where the vendor reports it: OpenAI, Gemini, Anthropic's
``output_tokens_details``) and ``total_tokens``; attempts that reached the vendor but brought back
no usage (a read timeout, a cut response or stream, an unreadable 200) add their bound
(:func:`harness.models.api_costs.unreported_usage`), since the vendor may have billed them.
The vendors' reasoning fields are kept in ``Generation.extras['reasoning']``, never in the answer.
Requests in flight per model: the window of :mod:`harness.models.api_transport`;
``generate_many`` keeps that many requests in flight, and a battery hands the model its trials
as calls of their own, ``max_in_flight`` at once (:mod:`harness.trials.runner`), so the window
alone paces them from the first trial to the last. ``options.batch`` sends a battery's trials
through the vendor's batch interface instead, at its batch price (:mod:`harness.models.api_batch`).
"""

from __future__ import annotations

import base64
import logging
import os
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import httpx2
from PIL import Image
from pydantic import Field, field_validator, model_validator

from ..version import __version__
from ..stimuli.base import png_bytes
from . import api_anthropic, api_google, api_openai
from .api_anthropic import anthropic_nonstreaming_limit
from .api_capabilities import MIN_OUTPUT_WHEN_THINKING, Family, RequestPlan, family_of
from .api_costs import estimate_input_tokens, unreported_usage
from .api_openai import OPENAI_FORMAT
from .api_secrets import scrub_secret
from .api_transport import REFUSED_KEY, REFUSED_KEY_BREAKER, VENDOR_SAID, APITransport, Retryable, Terminal
from .base import Generation, ModelError, ModelOptions, ModelSpec, NotReady

log = logging.getLogger(__name__)

ADAPTER_VERSION = "1"
USER_AGENT = f"gestalt-harness/{__version__} httpx2/{httpx2.__version__}"
PROVIDERS: dict[str, dict[str, Any]] = {
    "openai": {"base_url": "https://api.openai.com/v1", "keys": ("OPENAI_API_KEY",)},
    "azure": {"base_url": None, "keys": ("AZURE_OPENAI_API_KEY",)},
    "openai-compatible": {"base_url": None, "keys": ()},
    "anthropic": {"base_url": "https://api.anthropic.com", "keys": ("ANTHROPIC_API_KEY",)},
    # google-genai's get_env_api_key: GOOGLE_API_KEY first
    "google": {"base_url": "https://generativelanguage.googleapis.com",
               "keys": ("GOOGLE_API_KEY", "GEMINI_API_KEY")},
}
# Options that change an answer (fingerprint) and runtime knobs that do not.
ANSWER_OPTIONS = {"base_url", "max_tokens", "supports_temperature", "thinking_budget", "adaptive_thinking",
                  "reasoning_effort", "anthropic_version", "extra_body", "api_version", "served_model"}
# ``generation`` holds the recipe's generation settings, which reach the model through the readout.
RUNTIME_OPTIONS = {"api_key_env", "timeout_s", "max_retries", "backoff_base_s", "backoff_cap_s",
                   "concurrency", "max_concurrency", "generation", "batch", "batch_poll_s"}
# Providers whose batch interface ``options.batch`` uses (harness.models.api_batch).
BATCH_PROVIDERS = ("openai", "anthropic", "google")
Tokens = Annotated[int, Field(ge=0, le=10_000_000)]
Seconds = Annotated[float, Field(ge=0, le=7 * 86400)]
Requests = Annotated[int, Field(ge=1, le=4096)]


class APIOptions(ModelOptions):
    """ANSWER_OPTIONS and RUNTIME_OPTIONS (above), typed."""

    base_url: str | None = None
    max_tokens: Tokens | None = None
    supports_temperature: bool | None = None
    thinking_budget: Tokens | None = None
    adaptive_thinking: bool = False
    reasoning_effort: str | None = None
    anthropic_version: str = "2026-10-21"  # anthropic 2.14's ANTHROPIC_API_VERSION
    extra_body: dict[str, Any] | None = None
    api_version: str | None = None
    served_model: str | None = None
    api_key_env: str | None = None
    api_key: None = None  # refused below: a key in a recipe would reach logs and MLflow
    timeout_s: Seconds = 600.0
    max_retries: int = Field(6, ge=0, le=1000)
    backoff_base_s: Seconds = 1.0
    backoff_cap_s: Seconds = 60.0
    concurrency: Requests = 4
    max_concurrency: Requests | None = None
    batch: bool = False
    batch_poll_s: Seconds | None = None

    @field_validator("api_key", mode="before")
    @classmethod
    def _key_from_environment(cls, v):
        raise ValueError("API keys are read only from the environment; name the variable with "
                         "options.api_key_env instead of options.api_key")

    @model_validator(mode="after")
    def _ceiling(self):
        if self.max_concurrency is not None and self.max_concurrency < self.concurrency:
            raise ValueError("options.max_concurrency must be >= options.concurrency")
        return self


DEFAULTS = {k: APIOptions.model_fields[k].default for k in ("timeout_s", "max_retries", "backoff_base_s",
                                                           "backoff_cap_s", "concurrency", "anthropic_version")}
# Where the SDKs read a base URL when the client is given none (options.base_url comes first).
BASE_URL_ENV = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL", "google": "GOOGLE_GEMINI_BASE_URL"}


def out_of_money(records: Iterable[dict[str, Any]]) -> str | None:
    """What the first trial whose call a vendor refused for money says happened and what to do
    (gestalt's words, before the vendor's own), or None where no vendor did."""
    for r in records:
        extras = r.get("extras") or {}
        for error in (extras.get("error"), extras.get("extractor_error")):
            if isinstance(error, str) and error.startswith("quota: ") and VENDOR_SAID in error:
                return error.removeprefix("quota: ").split(VENDOR_SAID, 1)[0]
    return None


NEUTRAL = 1.0  # temperature and top_p that leave the model's distribution as it is


def split_name(name: str) -> tuple[str, str]:
    """``provider/model`` -> (provider, model); the model part may itself contain slashes."""
    provider, _, model = name.partition("/")
    return provider, model


def _b64_png(image: Image.Image) -> str:
    return base64.b64encode(png_bytes(image)).decode("ascii")


class APIModel(APITransport):
    capabilities = frozenset({"generate"})
    Options = APIOptions

    def __init__(self, spec: ModelSpec):
        super().__init__(spec, {**DEFAULTS, **spec.options})
        self.provider, self.model = split_name(spec.name)

    def __repr__(self) -> str:
        return f"APIModel({self.spec.id!r}, {self.provider}/{self.model})"

    # -- identity --------------------------------------------------------------------------
    def check(self) -> None:
        s = self.spec
        if self.provider not in PROVIDERS or not self.model:
            raise ModelError(f"model {s.id!r}: api name {s.name!r} must be <provider>/<model> with "
                             f"provider one of {sorted(PROVIDERS)}")
        if self.options.get("batch") and self.provider not in BATCH_PROVIDERS:
            raise ModelError(f"model {s.id!r}: options.batch needs a vendor batch interface, which "
                             f"{self.provider} lacks; providers with one: {', '.join(BATCH_PROVIDERS)}")
        if self.base_url is None:
            raise ModelError(f"model {s.id!r}: provider {self.provider} needs options.base_url")
        if self.provider == "azure" and not self.options.get("api_version"):
            raise ModelError(f"model {s.id!r}: Azure OpenAI needs options.api_version "
                             f"(e.g. 2024-10-21)")
        names = self._key_names()
        if names and self._key() is None:
            raise NotReady(f"model {s.id!r}: no API key; set the environment variable "
                             f"{' or '.join(names)}")
        if (reason := self.unknown_reason()) is not None:
            log.warning("model %s: %s", s.id, reason)

    @property
    def base_url(self) -> str | None:
        url = (self.options.get("base_url") or os.environ.get(BASE_URL_ENV.get(self.provider, ""), "").strip()
               or PROVIDERS.get(self.provider, {}).get("base_url"))
        return url.rstrip("/") if url else None

    @property
    def capability_model(self) -> str:
        """The model name the capability table is read with (Azure: the model a deployment serves)."""
        return str(self.options.get("served_model") or self.model)

    @property
    def family(self) -> tuple[Family, bool]:
        return family_of(self.provider, self.capability_model)

    def unknown_reason(self) -> str | None:
        """Why the request follows the vendor's conservative row (recorded with each trial), or
        None for a model the capability table names."""
        family, known = self.family
        if known:
            return None
        return (f"{self.provider}/{self.capability_model} is not in the capability table; "
                f"requests follow the {family.name} row: {family.evidence}")

    def _key_names(self) -> tuple[str, ...]:
        if self.options.get("api_key_env"):
            return (self.options["api_key_env"],)
        return tuple(PROVIDERS.get(self.provider, {}).get("keys", ()))

    def _key(self) -> str | None:
        # Keys from files and secret stores often end in a newline: never part of the key.
        for name in self._key_names():
            value = os.environ.get(name, "").strip()
            if value:
                return value
        return None

    @property
    def fingerprint(self) -> dict[str, Any]:
        s = self.spec
        opts = {k: v for k, v in s.options.items() if k in ANSWER_OPTIONS and k != "base_url"}
        fp = {"source": s.source, "provider": self.provider, "model": self.model,
              "revision": s.revision, "options": opts, "adapter": f"api/{ADAPTER_VERSION}"}
        if self.options.get("base_url"):
            # Where the model is served identifies it for openai-compatible servers; drop any
            # credentials or query string someone put in the URL.
            u = urllib.parse.urlsplit(self.options["base_url"])
            fp["base_url"] = f"{u.scheme}://{u.hostname}{':' + str(u.port) if u.port else ''}{u.path}"
        return fp

    @property
    def model_version(self) -> str:
        rev = f"@{self.spec.revision}" if self.spec.revision else ""
        return f"{self.provider}/{self.model}{rev}"

    def fetch(self) -> str:
        return f"{self.spec.id}: nothing to fetch (served over HTTP)"

    # -- what a request may carry (the capability table) -------------------------------------
    def _refuse(self, why: str) -> ModelError:
        return ModelError(f"model {self.spec.id!r} ({self.provider}/{self.capability_model}): {why}")

    def _thinking(self, family: Family, max_tokens: int) -> tuple[dict[str, Any], bool]:
        """(thinking request, whether the model thinks on this request); refuses what cannot work."""
        o = self.options
        budget, effort = o.get("thinking_budget"), o.get("reasoning_effort")
        adaptive = bool(o.get("adaptive_thinking"))
        form = {"anthropic": "enabled", "google": "budget"}.get(self.provider)
        if budget is not None and form not in family.thinking:
            extra = " (it accepts only adaptive thinking: options.adaptive_thinking)" \
                if "adaptive" in family.thinking else ""
            raise self._refuse(f"options.thinking_budget is not accepted by the {family.name} "
                               f"family{extra}")
        if adaptive and "adaptive" not in family.thinking:
            raise self._refuse(f"options.adaptive_thinking is not accepted by the {family.name} family")
        if effort is not None and "effort" not in family.thinking:
            raise self._refuse(f"options.reasoning_effort is not accepted by the {family.name} family")
        if budget is not None and int(budget) == 0:
            if not family.thinking_can_be_off:
                raise self._refuse("thinking cannot be turned off (options.thinking_budget 0)")
            return ({"budget": 0} if self.provider == "google" else {}), False  # Anthropic: omit it
        if budget is not None and not (self.provider == "google" and int(budget) == -1):  # -1: dynamic
            budget = int(budget)
            lo, hi = family.thinking_budget_min, family.thinking_budget_max
            if (lo is not None and budget < lo) or (hi is not None and budget > hi):
                raise self._refuse(f"options.thinking_budget {budget} is outside "
                                   f"{lo or 1}..{hi if hi is not None else 'max_tokens - 1'}")
            if budget >= max_tokens:
                raise self._refuse(f"the output budget max_tokens={max_tokens} must exceed "
                                   f"options.thinking_budget={budget} (thinking counts against it)")
            return {"budget": budget}, True
        thinking: dict[str, Any]
        if adaptive:
            thinking, thinks = {"adaptive": True}, True
        elif budget is not None:
            thinking, thinks = {"budget": -1}, True
        elif effort is not None:
            thinking, thinks = {"effort": effort}, effort != "none"
        else:
            thinking, thinks = {}, family.thinks_by_default
        if thinks and max_tokens < MIN_OUTPUT_WHEN_THINKING:
            raise self._refuse(f"the model thinks before it answers and max_tokens={max_tokens} "
                               f"leaves no room for the answer; set generation.max_new_tokens "
                               f"(or options.max_tokens) >= {MIN_OUTPUT_WHEN_THINKING}"
                               + (" or turn thinking off" if family.thinking_can_be_off else ""))
        return thinking, thinks

    def expected_thinking(self, max_tokens: int) -> int:
        """The thinking tokens a call with this output budget is expected to bill before a recorded
        call says how many (the dry run's expected cost): none where the request does not think, else
        its thinking budget where one is set, else its whole output budget: the vendors document no
        typical amount for thinking on by default, and gemini-2.5-flash and gpt-5-nano were measured
        billing five times and more what their answers' length suggests."""
        thinking, thinks = self._thinking(self.family[0], max_tokens)
        if not thinks:
            return 0
        budget = thinking.get("budget")
        return budget if isinstance(budget, int) and budget > 0 else max_tokens

    def plan(self, settings: dict[str, Any]) -> RequestPlan:
        """The request's parameters for these readout settings, by the capability table.

        ``settings["exact"]`` names the settings the experiment depends on (the paper's decoding):
        one the model does not accept is refused unless its value is the neutral 1.0, which the
        vendor applies anyway. Others are dropped and listed in ``RequestPlan.dropped``.
        """
        family, _ = self.family
        max_tokens = int(self.options.get("max_tokens") or settings.get("max_new_tokens", 40))
        thinking, thinks = self._thinking(family, max_tokens)
        exact = set(settings.get("exact") or ())
        effort = self.options.get("reasoning_effort")
        sampling_ok = ((not thinks or family.sampling_with_thinking)
                       and not (family.sampling_needs_effort_none and effort not in (None, "none")))
        in_family = {"temperature": family.temperature and self.options.get("supports_temperature") is not False,
                     "top_p": family.top_p}
        sampling: dict[str, float] = {}
        dropped: dict[str, Any] = {}

        def drop(name: str, value: float, why: str) -> None:
            if name in exact and value != NEUTRAL:
                raise self._refuse(f"{why}; the experiment sets {name}={value}, and leaving it out "
                                   f"would change it")
            dropped[name] = value

        for name in ("temperature", "top_p"):
            value = settings.get(name)
            if value is None:
                continue
            if in_family[name] and sampling_ok:
                sampling[name] = float(value)
            else:
                drop(name, float(value), f"the {family.name} family does not accept {name}"
                     + (" while it thinks" if in_family[name] else ""))
        if len(sampling) == 2 and not family.temperature_with_top_p:
            # One of the two must go: the neutral one changes nothing, else the one not exact.
            name = next((n for n in ("top_p", "temperature") if sampling[n] == NEUTRAL),
                        next((n for n in ("top_p", "temperature") if n not in exact), "top_p"))
            drop(name, sampling.pop(name), f"the {family.name} family does not accept temperature "
                                           f"and top_p together")
        seed = settings.get("seed")
        if seed is not None and not family.seed:
            dropped["seed"] = seed
            seed = None
        return RequestPlan(max_tokens=max_tokens, sampling=sampling,
                           seed=int(seed) if seed is not None else None, thinking=thinking,
                           dropped=dropped)

    # -- requests --------------------------------------------------------------------------
    def _request(self, image: Image.Image | None, prompt: str,
                 plan: RequestPlan) -> tuple[str, dict[str, str], dict[str, Any]]:
        """(url, headers, body) in the provider's wire format."""
        data = _b64_png(image) if image is not None else None
        headers = {"content-type": "application/json", **self._headers()}
        body: dict[str, Any]
        if self.provider in OPENAI_FORMAT:
            url = api_openai.url(self.provider, self.base_url, self.model, self.options.get("api_version"))
            body = api_openai.body(self.model, data, prompt, plan, self.family[0].budget_param)
        elif self.provider == "anthropic":
            url, body = api_anthropic.url(self.base_url), api_anthropic.body(self.model, data, prompt, plan)
        else:  # google
            url, body = api_google.url(self.base_url, self.model), api_google.body(data, prompt, plan)
        body.update(self.options.get("extra_body") or {})
        return url, headers, body

    def _headers(self) -> dict[str, str]:
        """The user agent and the provider's credential headers (the key read now, never kept)."""
        key = self._key()
        if self.provider in OPENAI_FORMAT:
            credentials = api_openai.credentials(self.provider, key)
        elif self.provider == "anthropic":
            credentials = api_anthropic.credentials(key, self.options["anthropic_version"])
        else:
            credentials = api_google.credentials(key)
        return {"user-agent": USER_AGENT, **credentials}

    # -- preflight: the key and the model name, asked of the vendor without generating ----------
    def _model_url(self) -> str:
        """The vendor's model lookup: OpenAI and compatible servers ``GET /models/<model>``,
        Anthropic ``GET /v1/models/<model>``, Gemini ``GET /v1beta/models/<model>``; Azure's data
        plane lists models only (``GET /openai/models``), so there the key alone is checked."""
        if self.provider in OPENAI_FORMAT:
            return api_openai.model_url(self.provider, self.base_url, self.model, self.options.get("api_version"))
        if self.provider == "anthropic":
            return api_anthropic.model_url(self.base_url, self.model)
        return api_google.model_url(self.base_url, self.model)

    def verify(self) -> None:
        """Preflight: one authenticated request that generates nothing, so a refused key or a model
        name the vendor does not know stops the run in one line before any trial (ModelError)."""
        names = " or ".join(f"${n}" for n in self._key_names()) or "no key"
        where = f"model {self.spec.id!r} ({self.provider}/{self.model})"
        try:
            try:
                self._get(self._model_url())
            except Terminal as e:
                if e.code != "http_404" or self.provider != "openai-compatible":
                    raise
                # servers that only list their models (vLLM): the name must be among them
                listed = self._get(f"{self.base_url}/models").get("data") or []
                if not any(isinstance(m, dict) and m.get("id") == self.model for m in listed):
                    raise Terminal("http_404", "not among the served models") from None
        except Terminal as e:
            if e.code in REFUSED_KEY:
                raise ModelError(f"{where}: the API key in {names} was refused ({e.code}); set a valid "
                                 f"key") from None
            if e.code == "http_404":
                raise ModelError(f"{where}: the vendor does not know model {self.model!r} ({e.code}); "
                                 f"check the name") from None
            raise ModelError(f"{where}: the credential check failed ({e.code}: "
                             f"{' '.join(e.detail.split())})") from None
        except Retryable as e:
            raise ModelError(f"{where}: could not reach {self.base_url} to check the key and model "
                             f"({e.code}); check the network or the vendor's status") from None

    def streams(self, plan: RequestPlan) -> bool:
        """Whether the request goes out streamed: an Anthropic output budget above what it takes in
        one non-streaming response (:func:`anthropic_nonstreaming_limit`)."""
        return self.provider == "anthropic" and plan.max_tokens > anthropic_nonstreaming_limit(self.model)

    def _read(self, payload: dict[str, Any]) -> tuple[str, dict[str, int], str | None, str]:
        """(text, usage, cut, reasoning) from a provider's response body; ``cut`` is "<truncated|
        refusal|safety>: <vendor's reason>" for an answer cut short; ``reasoning`` the vendor's
        reasoning fields (never part of the answer). Raises Retryable on a malformed one."""
        wire = api_openai if self.provider in OPENAI_FORMAT else (
            api_anthropic if self.provider == "anthropic" else api_google)
        try:
            text, usage, cut, reasoning = wire.read(payload)
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise Retryable("malformed_json", f"unexpected response shape ({type(e).__name__}: {e})",
                            billed=True) from None
        if not isinstance(text, str) or not isinstance(reasoning, str):
            raise Retryable("malformed_json", f"answer text is a {type(text).__name__}", billed=True)
        return text, {k: int(v) for k, v in usage.items() if isinstance(v, (int, float))}, cut, reasoning

    # -- generate --------------------------------------------------------------------------
    def answer(self, payload: dict[str, Any], plan: RequestPlan, t0: float) -> Generation:
        """The Generation of a vendor's response body (raises Retryable on a malformed one)."""
        text, usage, cut, reasoning = self._read(payload)
        # an answer may echo what it was sent, the key included: stored scrubbed like errors
        key = self._key()
        extras = {"reasoning": scrub_secret(reasoning, key)} if reasoning else {}
        if (unknown := self.unknown_reason()) is not None:
            extras["capabilities"] = unknown
        return Generation(text=scrub_secret(text, key), latency_s=time.perf_counter() - t0,
                          usage=usage, error=self._scrub(cut) if cut else None,
                          settings_dropped=plan.dropped, extras=extras)

    def generate(self, image: Image.Image | None, prompt: str, settings: dict[str, Any]) -> Generation:
        t0 = time.perf_counter()
        try:
            plan = self.plan(settings)
            url, headers, body = self._request(image, prompt, plan)
        except ModelError as e:
            return Generation(text=None, error=f"refused: {self._scrub(str(e))}")
        except Exception as e:  # noqa: BLE001 - a request that cannot be built is one null trial
            return Generation(text=None, latency_s=time.perf_counter() - t0,
                              error=f"request: {type(e).__name__}: {self._scrub(str(e))}")
        if self._out_of_money is not None:
            return Generation(text=None, settings_dropped=plan.dropped, error=f"quota: {self._not_sent()}")
        if len(self._refused) >= REFUSED_KEY_BREAKER:
            return Generation(text=None, settings_dropped=plan.dropped,
                              error=f"{self._refused[-1]}: not sent: the key was refused {len(self._refused)} "
                                    f"times in a row")
        tokens_in = estimate_input_tokens(self.provider, self.capability_model, image.size if image else None,
                                          prompt)
        billed: list[Retryable] = []  # attempts the vendor may have billed without reporting usage
        gen = self._attempts(url, headers, body, plan, tokens_in, billed, self.streams(plan))
        if billed:
            gen.usage.update(unreported_usage(len(billed), tokens_in, plan.max_tokens))
        return gen

    def generate_many(self, images: Sequence[Image.Image | None], prompts: list[str],
                      settings: dict[str, Any]) -> list[Generation]:
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
        workers = max(1, min(self._window.ceiling, len(images)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda ip: self.generate(ip[0], ip[1], settings), zip(images, prompts)))
