"""What API calls cost: the vendors' prices as data (``prices.csv``), a trial's cost from its usage,
and the input tokens a request will carry, estimated before a run.

``prices.csv`` has one row per (vendor, model): USD per million input, output, cached-input, batch
input and batch output tokens, the date the figures were read, the vendor's own page for the
model (``source``), whether the figures were read there (``confirmed``: ``vendor page``) or only
in a third party's summary (``third party``), and a ``note`` naming any third party and any figure
derived or unconfirmed. Azure deployments are priced as the OpenAI model they serve. Thinking
tokens are billed as output, cached input at its own rate.

Input tokens of an image follow each vendor's documented rule for the model's family
(:func:`image_tokens`); text is counted at about four characters a token. An estimate gives its
output twice: the bound (every call spends its output budget) and the expected figure (the mean
the model's recorded calls of the task billed, else the length of the task's answers): the run
itself counts what the vendors report, and beside it, at their bound, the attempts the vendor may
have billed without reporting them (:func:`unreported_usage`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol
from importlib import resources

from ..errors import GestaltError

PRICES = resources.files("harness.models").joinpath("prices.csv")
PRICE_VENDOR = {"azure": "openai"}  # a deployment bills as the model it serves


@dataclass(frozen=True)
class Price:
    """USD per million tokens of one model, with where and when the figures were read."""

    vendor: str
    model: str
    input: float
    output: float
    cached_input: float | None
    batch_input: float
    batch_output: float
    date: str
    source: str
    confirmed: str  # "vendor page", or "third party" where only others' summaries give the figures


@lru_cache(maxsize=1)
def _prices() -> dict[tuple[str, str], Price]:
    out = {}
    with PRICES.open() as f:
        for row in csv.DictReader(f):
            cached = row["cached_input_usd_per_mtok"]
            out[row["vendor"], row["model"]] = Price(
                row["vendor"], row["model"], float(row["input_usd_per_mtok"]), float(row["output_usd_per_mtok"]),
                float(cached) if cached else None, float(row["batch_input_usd_per_mtok"]),
                float(row["batch_output_usd_per_mtok"]), row["date"], row["source"], row["confirmed"])
    return out


def price_of(provider: str, model: str) -> Price | None:
    """The model's price, or None when ``prices.csv`` has no row for it."""
    return _prices().get((PRICE_VENDOR.get(provider, provider), model))


def cost_usd(price: Price, usage: dict[str, int]) -> float:
    """A call's cost from its normalised usage (``input_tokens`` including ``cached_tokens``;
    ``output_tokens`` without ``thinking_tokens``, which bill as output). A call answered through
    the vendor's batch interface (``usage['batch']``) bills at the batch rates, its cached input
    at the cached rate with the same discount."""
    cached = usage.get("cached_tokens", 0)
    fresh = usage.get("input_tokens", 0) - cached
    rate_in, rate_out = (price.batch_input, price.batch_output) if usage.get("batch") else (price.input, price.output)
    cached_rate = rate_in if price.cached_input is None else price.cached_input * rate_in / price.input
    out = usage.get("output_tokens", 0) + usage.get("thinking_tokens", 0)
    return (fresh * rate_in + cached * cached_rate + out * rate_out) / 1e6


def _fit(width: float, height: float, longest: float) -> tuple[float, float]:
    scale = min(1.0, longest / max(width, height))
    return width * scale, height * scale


# OpenAI, https://platform.openai.com/docs/guides/images-vision#calculating-costs (read 2026-12-05;
# the multipliers as the page gives them: measurements posted on community.openai.com bill
# gpt-5-mini at 1.2 and gpt-5-nano at 1.5, so these estimates err high for those two).
OPENAI_PATCH_MULTIPLIER = {"gpt-5-mini": 1.62, "gpt-5-nano": 2.46, "gpt-4.1-mini": 1.62, "gpt-4.1-nano": 2.46,
                           "o4-mini": 1.72}
OPENAI_PATCH_CAP = 1536  # 32 px patches; an image that needs more is scaled down to fit
# (base, per 512 px tile) of the tile families, longest prefix first; others as gpt-4o, gpt-4.1
OPENAI_TILES = (("computer-use-preview", 65, 129), ("gpt-4o-mini", 2833, 5667), ("gpt-5", 70, 140),
                ("o1", 75, 150), ("o3", 75, 150))
OPENAI_DEFAULT_TILES = (85, 170)
# Anthropic, https://platform.claude.com/docs/en/build-with-claude/vision (read 2026-12-05): an image
# whose long edge exceeds 1568 px or that would cost more than about 1,600 tokens is scaled down first.
ANTHROPIC_LONG_EDGE, ANTHROPIC_MAX_TOKENS, ANTHROPIC_PIXELS_PER_TOKEN = 1568, 1600, 750
# Gemini 2.x, https://ai.google.dev/gemini-api/docs/tokens (read 2026-12-05): 258 tokens for an
# image of at most 384 px both ways, else 258 per 768 x 768 tile it is cropped and scaled into.
GEMINI_SMALL, GEMINI_TILE, GEMINI_TILE_TOKENS = 384, 768, 258


def image_rule(provider: str, model: str) -> str:
    """The billing rule of the model's family: ``patch`` (OpenAI's 32 px patches times a multiplier),
    ``tile`` (OpenAI's 512 px tiles; also OpenAI-compatible servers, which document none),
    ``pixel`` (Anthropic) or ``gemini``."""
    if provider == "anthropic":
        return "pixel"
    if provider == "google":
        return "gemini"
    return "patch" if _prefixed(model, OPENAI_PATCH_MULTIPLIER) else "tile"


def _prefixed(model: str, names) -> str | None:
    """The longest of ``names`` that ``model`` is or is a dated snapshot of (gpt-5-nano-2025-08-07)."""
    hits = [n for n in names if model == n or model.startswith(n + "-")]
    return max(hits, key=len) if hits else None


def _openai_patches(width: float, height: float) -> int:
    patches = math.ceil(width / 32) * math.ceil(height / 32)
    if patches <= OPENAI_PATCH_CAP:
        return patches
    # the page's step B: scale to the cap, then shrink until whole patches cover the width or height
    r = math.sqrt(32 * 32 * OPENAI_PATCH_CAP / (width * height))
    r *= min(math.floor(width * r / 32) / (width * r / 32), math.floor(height * r / 32) / (height * r / 32))
    return min(OPENAI_PATCH_CAP, math.ceil(width * r / 32) * math.ceil(height * r / 32))


def image_tokens(provider: str, model: str, width: int, height: int) -> int:
    """Input tokens one image bills on the model, by its family's documented rule (:func:`image_rule`;
    OpenAI images at ``detail: high``, what ``auto`` picks for images over 512 px)."""
    rule = image_rule(provider, model)
    if rule == "pixel":
        w, h = _fit(width, height, ANTHROPIC_LONG_EDGE)  # then scaled to the token cap, if over it
        return min(ANTHROPIC_MAX_TOKENS, math.ceil(w * h / ANTHROPIC_PIXELS_PER_TOKEN))
    if rule == "gemini":
        if width <= GEMINI_SMALL and height <= GEMINI_SMALL:
            return GEMINI_TILE_TOKENS
        return GEMINI_TILE_TOKENS * math.ceil(width / GEMINI_TILE) * math.ceil(height / GEMINI_TILE)
    if rule == "patch":
        multiplier = OPENAI_PATCH_MULTIPLIER[str(_prefixed(model, OPENAI_PATCH_MULTIPLIER))]
        return math.ceil(_openai_patches(width, height) * multiplier)
    family = _prefixed(model, [name for name, *_ in OPENAI_TILES])
    base, per_tile = next(((b, t) for name, b, t in OPENAI_TILES if name == family), OPENAI_DEFAULT_TILES)
    w, h = _fit(width, height, 2048)
    scale = min(1.0, 768 / min(w, h))
    return base + per_tile * math.ceil(w * scale / 512) * math.ceil(h * scale / 512)


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)  # about four characters a token, as the vendors' pages say


# the tokens a request bills beside its parts: OpenAI's cookbook counts 3 per message, 3 priming the
# reply and the role (https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken)
MESSAGE_TOKENS = 7


def estimate_input_tokens(provider: str, model: str, image_size: tuple[int, int] | None, prompt: str) -> int:
    """Input tokens of one request: its image by the model's rule, its text at ~4 characters a
    token, and the message wrapping."""
    image = image_tokens(provider, model, *image_size) if image_size else 0
    return MESSAGE_TOKENS + image + text_tokens(prompt)


def expected_output_tokens(records: list[dict], answers: Sequence[object] = (), thinking: int = 0) -> float:
    """What a call of the task is expected to bill as output (thinking included): the mean of the
    model's recorded calls that reported usage, else the mean length of the task's answers (at
    least one token) plus ``thinking``, what a call that thinks is expected to think
    (``APIModel.expected_thinking``)."""
    billed = [u.get("output_tokens", 0) + u.get("thinking_tokens", 0) for r in records
              if "output_tokens" in (u := r.get("usage") or {})]  # not a failed call's unreported bound
    if billed:
        return sum(billed) / len(billed)
    lengths = [max(1, text_tokens(str(a))) for a in answers]
    return (sum(lengths) / len(lengths) if lengths else 1.0) + thinking


@dataclass(frozen=True)
class Job:
    """One task's calls to run on one API model, as the dry run plans them."""

    calls: int
    image_size: tuple[int, int] | None
    prompt: str
    max_tokens: int  # the output budget: what a call may bill at most
    expected_tokens: float  # what a call is expected to bill (expected_output_tokens)


@dataclass(frozen=True)
class Estimate:
    """What a model's planned calls will cost: input tokens by the vendors' rules, output as a bound
    and as an expected figure; the USD figures None where ``prices.csv`` has no row."""

    calls: int
    tokens_in: int
    tokens_out_bound: int
    tokens_out_expected: int
    usd_bound: float | None
    usd_expected: float | None
    price: Price | None


def estimate(provider: str, model: str, jobs: Sequence[Job], batch: bool = False) -> Estimate:
    """The calls' cost, without a key (batch prices for a model in batch mode)."""
    tokens_in = sum(j.calls * estimate_input_tokens(provider, model, j.image_size, j.prompt) for j in jobs)
    bound = sum(j.calls * j.max_tokens for j in jobs)
    expected = round(sum(j.calls * min(j.expected_tokens, j.max_tokens) for j in jobs))
    price = price_of(provider, model)
    usd = [None if price is None else cost_usd(price, {"input_tokens": tokens_in, "output_tokens": out,
                                                       "batch": int(batch)}) for out in (bound, expected)]
    return Estimate(sum(j.calls for j in jobs), tokens_in, bound, expected, usd[0], usd[1], price)


def estimate_line(provider: str, model: str, jobs: Sequence[Job], batch: bool = False) -> str:
    """The dry run's line for one API model: its calls still to run, their input tokens, their output
    as a bound and as expected, and what each costs at the table's prices."""
    e = estimate(provider, model, jobs, batch)
    line = f"  estimated: {e.calls} calls, ~{e.tokens_in:,} input tokens, <= {e.tokens_out_bound:,} output tokens"
    expected = f"expected ~{e.tokens_out_expected:,} output tokens"
    if e.price is None:
        return f"{line}; {expected}; no price for {provider}/{model} in harness/models/prices.csv"
    rates = "batch prices" if batch else "prices"
    who = "" if e.price.confirmed == "vendor page" else ", read in a third party's summary"
    return (f"{line}, ~${e.usd_bound:.2f} at {e.price.model} {rates} of {e.price.date} (harness/models/prices.csv"
            f"{who}); {expected}, ~${e.usd_expected:.2f}")


def unreported_usage(attempts: int, input_tokens: int, max_tokens: int) -> dict[str, int]:
    """The usage keys a call adds for ``attempts`` that reached the vendor but returned no usage (a
    timeout after the request was sent, a response or stream cut short, an unreadable 200): the
    vendor may have answered and billed each, so each is bounded by the request's estimated
    ``input_tokens`` and its whole output budget ``max_tokens``. :func:`cost_usd` leaves them out
    (it is what the vendor reported); :func:`unreported_usd` prices them."""
    return {"unreported_attempts": attempts, "unreported_input_tokens": attempts * input_tokens,
            "unreported_output_tokens": attempts * max_tokens}


def unreported_usd(price: Price, usage: dict[str, int]) -> float:
    """The most a call's unreported attempts (:func:`unreported_usage`) may have been billed."""
    return cost_usd(price, {"input_tokens": usage.get("unreported_input_tokens", 0),
                            "output_tokens": usage.get("unreported_output_tokens", 0),
                            "batch": usage.get("batch", 0)})


# an API battery's run metrics (battery_usage): what the vendors reported the calls cost, and the
# most its attempts that reported nothing may have been billed beyond it
USAGE_METRICS = ("tokens_in", "tokens_out", "cost_usd", "cost_usd_unreported_max")


def task_usage(records: list[dict], price: Price | None, extractor: Price | None = None) -> dict[str, float]:
    """A task's tokens and cost from its trials' recorded usage (what the vendors reported): the
    model's ``tokens_in`` (cached included), ``tokens_out`` (thinking included), ``thinking_tokens``
    and ``cached_tokens``; the answer extractor's (CHART-6's LLM extractor, ``extras.extractor_usage``)
    ``extractor_calls``, ``extractor_tokens_in`` and ``extractor_tokens_out`` where it made calls;
    ``cost_usd`` of both at the table's prices where it prices them, and ``cost_usd_unreported_max``,
    the most their unreported attempts may add (:func:`unreported_usd`)."""
    usages = [r.get("usage") or {} for r in records]
    out = {"tokens_in": float(sum(u.get("input_tokens", 0) for u in usages)),
           "tokens_out": float(sum(u.get("output_tokens", 0) + u.get("thinking_tokens", 0) for u in usages)),
           "thinking_tokens": float(sum(u.get("thinking_tokens", 0) for u in usages)),
           "cached_tokens": float(sum(u.get("cached_tokens", 0) for u in usages))}
    extracted = [u for r in records if (u := (r.get("extras") or {}).get("extractor_usage"))]
    if extracted:
        out.update(extractor_calls=float(len(extracted)),
                   extractor_tokens_in=float(sum(u.get("input_tokens", 0) for u in extracted)),
                   extractor_tokens_out=float(sum(u.get("output_tokens", 0) + u.get("thinking_tokens", 0)
                                                  for u in extracted)))
    if price is not None or extractor is not None:
        out["cost_usd"] = trials_cost(records, price, extractor)
        out["cost_usd_unreported_max"] = trials_cost(records, price, extractor, unreported_usd)
    return out


def trials_cost(records: list[dict], price: Price | None, extractor: Price | None = None,
                priced: Callable[[Price, dict[str, int]], float] = cost_usd) -> float:
    """What trials' calls cost at the table's prices: the model's at ``price``, their answer
    extractor's at ``extractor`` (either None: not a paid API model, nothing counted); ``priced``
    :func:`unreported_usd` for the most their unreported attempts may add."""
    total = 0.0
    for r in records:
        if price is not None:
            total += priced(price, r.get("usage") or {})
        if extractor is not None:
            total += priced(extractor, (r.get("extras") or {}).get("extractor_usage") or {})
    return total


def battery_usage(tasks: list[dict[str, float]]) -> dict[str, float]:
    """A battery's run metrics (:data:`USAGE_METRICS`) from its tasks' :func:`task_usage`: the
    model's tokens, and the cost of its calls and its extractor's where priced."""
    out = {k: sum(t.get(k, 0.0) for t in tasks) for k in ("tokens_in", "tokens_out")}
    if any("cost_usd" in t for t in tasks):
        for k in ("cost_usd", "cost_usd_unreported_max"):
            out[k] = sum(t.get(k, 0.0) for t in tasks)
    return out


TIMED_OUT = "null:api_error:timeout"  # a call gestalt stopped waiting for: the vendor may still bill it


def spend(records: list[dict], price: Price | None, extractor: Price | None = None,
          timed_out_usd: float = 0.0) -> float:
    """What trials' calls cost against ``budget_usd``: :func:`trials_cost`, what their unreported
    attempts may have been billed (:func:`unreported_usd`), and each call that timed out with no
    such count (a record written before gestalt counted attempts) at ``timed_out_usd``, its
    estimated cost."""
    return trials_cost(records, price, extractor) + trials_cost(records, price, extractor, unreported_usd) + (
        timed_out_usd * sum(r.get("parse_status") == TIMED_OUT and "unreported_attempts" not in (r.get("usage") or {})
                            for r in records))


class BudgetReached(GestaltError):
    """The recipe's ``budget_usd`` is spent: the battery in progress stops, its records kept."""


class Budget:
    """What a recipe's batteries have spent on API calls, at the table's prices, in all runs so far
    (``spent_usd``: what their records held when the run started) against its ``budget_usd``."""

    def __init__(self, limit_usd: float, spent_usd: float = 0.0):
        self.limit_usd = limit_usd
        self.spent_usd = spent_usd

    @property
    def reached(self) -> bool:
        return self.spent_usd >= self.limit_usd

    def line(self) -> str:
        return f"budget_usd {self.limit_usd:g}: spent ${self.spent_usd:.4f} of ${self.limit_usd:g}"

    def charge(self, usd: float, rates: str) -> None:
        """Add the cost of calls just recorded (``rates``: the prices they were counted at); raises
        BudgetReached once the budget is spent, also when nothing was added: with the budget
        already spent, nothing more is sent."""
        self.spent_usd += usd
        if self.reached:
            raise BudgetReached(f"budget_usd {self.limit_usd:g} reached (spent ${self.spent_usd:.4f} of "
                                f"${self.limit_usd:g} at {rates}); records kept, a rerun with a larger "
                                f"budget continues")

    def covers(self, calls: int, bound_usd: float) -> int:
        """How many of ``calls`` the budget left covers at ``bound_usd`` each, the most one may bill:
        all a vendor batch may hold, since nothing stops its requests once it is submitted."""
        if bound_usd <= 0:
            return calls
        return max(0, min(calls, math.floor((self.limit_usd - self.spent_usd) / bound_usd)))

    def held_back(self, held: int, calls: int, bound_usd: float) -> None:
        """Raises BudgetReached for the ``held`` of a batch's ``calls`` that the budget left did not
        cover (:meth:`covers`), after the batch's answers are recorded."""
        raise BudgetReached(f"budget_usd {self.limit_usd:g}: {held} of {calls} batch requests not sent: each may "
                            f"bill up to ${bound_usd:.4f} at the table's batch prices, more than the budget left "
                            f"covers (spent ${self.spent_usd:.4f} of ${self.limit_usd:g}); records kept, a rerun "
                            f"sends as many as the budget left then covers")


class Charger(Protocol):
    """What a task's calls are charged to as their records are written (``harness.money.Charge``): its
    ``budget``, and ``timed_out_usd``, the most one of the task's calls may bill."""

    budget: Budget
    timed_out_usd: float

    def __call__(self, records: list[dict]) -> None: ...
