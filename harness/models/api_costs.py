"""What API calls cost: the vendors' prices as data (``prices.csv``), a trial's cost from its usage,
and the input tokens a request will carry, estimated before a run.

``prices.csv`` has one row per (vendor, model): USD per million input, output, cached-input, batch
input and batch output tokens, the date of the price, the vendor's pricing page (``source``) and
the third-party summary the figures were read from (``via``; not checked against ``source``).
Azure deployments are priced as the OpenAI model they serve. Thinking tokens are billed as output,
cached input at its own rate.

Input tokens of an image follow each vendor's documented rule: OpenAI 85 + 170 per 512 px tile
once the image fits 2048 px and its short side is at most 768 px; Anthropic width x height / 750
once the long side is at most 1568 px; Gemini 258 per image of at most 384 px, else per 768 px
tile. Text is counted at about four characters a token: an estimate, for the dry run; the run
itself counts what the vendors report.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
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


@lru_cache(maxsize=1)
def _prices() -> dict[tuple[str, str], Price]:
    out = {}
    with PRICES.open() as f:
        for row in csv.DictReader(f):
            cached = row["cached_input_usd_per_mtok"]
            out[row["vendor"], row["model"]] = Price(
                row["vendor"], row["model"], float(row["input_usd_per_mtok"]), float(row["output_usd_per_mtok"]),
                float(cached) if cached else None, float(row["batch_input_usd_per_mtok"]),
                float(row["batch_output_usd_per_mtok"]), row["date"], row["source"])
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


def _fit(width: int, height: int, longest: float) -> tuple[float, float]:
    scale = min(1.0, longest / max(width, height))
    return width * scale, height * scale


def image_tokens(provider: str, width: int, height: int) -> int:
    if provider == "anthropic":
        w, h = _fit(width, height, 1568)
        return math.ceil(w * h / 750)
    if provider == "google":
        if width <= 384 and height <= 384:
            return 258
        return 258 * math.ceil(width / 768) * math.ceil(height / 768)
    w, h = _fit(width, height, 2048)  # OpenAI and compatible servers: OpenAI's high-detail rule
    scale = min(1.0, 768 / min(w, h))
    return 85 + 170 * math.ceil(w * scale / 512) * math.ceil(h * scale / 512)


def estimate_input_tokens(provider: str, image_size: tuple[int, int] | None, prompt: str) -> int:
    """Input tokens of one request: its image by the vendor's rule, its text at ~4 characters a token."""
    image = image_tokens(provider, *image_size) if image_size else 0
    return image + math.ceil(len(prompt) / 4)


def estimate_line(provider: str, model: str, jobs: Sequence[tuple[int, tuple[int, int] | None, str, int]],
                  batch: bool = False) -> str:
    """The dry run's line for one API model: its calls still to run, their input tokens (estimated),
    their output budget (an upper bound) and what that costs at the table's prices (batch prices
    for a model in batch mode). ``jobs``: per task (calls, image size, prompt, output budget)."""
    calls = sum(n for n, *_ in jobs)
    tokens_in = sum(n * estimate_input_tokens(provider, size, prompt) for n, size, prompt, _ in jobs)
    tokens_out = sum(n * budget for n, _, _, budget in jobs)
    line = f"  estimated: {calls} calls, ~{tokens_in:,} input tokens, <= {tokens_out:,} output tokens"
    price = price_of(provider, model)
    if price is None:
        return f"{line}; no price for {provider}/{model} in harness/models/prices.csv"
    usd = cost_usd(price, {"input_tokens": tokens_in, "output_tokens": tokens_out, "batch": int(batch)})
    rates = "batch prices" if batch else "prices"
    return f"{line}, ~${usd:.2f} at {price.model} {rates} of {price.date} (harness/models/prices.csv)"


USAGE_METRICS = ("tokens_in", "tokens_out", "cost_usd")  # an API battery's run metrics (battery_usage)


def task_usage(records: list[dict], price: Price | None, extractor: Price | None = None) -> dict[str, float]:
    """A task's tokens and cost from its trials' recorded usage (what the vendors reported): the
    model's ``tokens_in`` (cached included), ``tokens_out`` (thinking included), ``thinking_tokens``
    and ``cached_tokens``; the answer extractor's (CHART-6's LLM extractor, ``extras.extractor_usage``)
    ``extractor_calls``, ``extractor_tokens_in`` and ``extractor_tokens_out`` where it made calls;
    ``cost_usd`` of both at the table's prices where it prices them."""
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
    return out


def trials_cost(records: list[dict], price: Price | None, extractor: Price | None = None) -> float:
    """What trials' calls cost at the table's prices: the model's at ``price``, their answer
    extractor's at ``extractor`` (either None: not a paid API model, nothing counted)."""
    total = 0.0
    for r in records:
        if price is not None:
            total += cost_usd(price, r.get("usage") or {})
        if extractor is not None:
            total += cost_usd(extractor, (r.get("extras") or {}).get("extractor_usage") or {})
    return total


def battery_usage(tasks: list[dict[str, float]]) -> dict[str, float]:
    """A battery's run metrics (:data:`USAGE_METRICS`) from its tasks' :func:`task_usage`: the
    model's tokens, and the cost of its calls and its extractor's where priced."""
    out = {k: sum(t.get(k, 0.0) for t in tasks) for k in ("tokens_in", "tokens_out")}
    if any("cost_usd" in t for t in tasks):
        out["cost_usd"] = sum(t.get("cost_usd", 0.0) for t in tasks)
    return out


TIMED_OUT = "null:api_error:timeout"  # a call gestalt stopped waiting for: the vendor may still bill it


def spend(records: list[dict], price: Price | None, extractor: Price | None = None,
          timed_out_usd: float = 0.0) -> float:
    """What trials' calls cost against ``budget_usd``: :func:`trials_cost`, and each call that timed
    out at ``timed_out_usd``, its estimated cost (no usage came back, but the vendor may have
    answered it after gestalt stopped waiting, and billed it)."""
    return trials_cost(records, price, extractor) + timed_out_usd * sum(
        r.get("parse_status") == TIMED_OUT for r in records)


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
