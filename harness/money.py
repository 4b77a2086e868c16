"""The money side of a run: which of a battery's calls are paid (its API model, its answer
extractor), their prices, the budget's check, the most one call costs, what the recipe's batteries
have spent so far, each record charged as it is written, and the battery run's totals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .models.api_costs import (USAGE_METRICS, Budget, Price, battery_usage, cost_usd, estimate_input_tokens,
                               price_of, spend, task_usage)
from .planning import Planned, record_stores
from .readouts.base import Readout
from .recipes import Recipe, RecipeError
from .stimuli.base import StimulusSet
from .tracking.metrics import RUN_TOTALS
from .trials.distributed import Dist
from .trials.records import RecordStore


def api_extractor(readout: Readout | None) -> Any:
    """A readout's answer extractor where it is an API model (CHART-6's LLM extractor), else None."""
    from .models.api import APIModel

    if readout is None or readout.options.get("extractor") != "llm":
        return None
    model = readout.extractor().model  # type: ignore[attr-defined]
    return model if isinstance(model, APIModel) else None


def paid_models(p: Planned, task_id: str) -> tuple[Any, Any]:
    """The API models a task of the battery pays for: its model and its answer extractor (None
    where either is not an API model)."""
    from .models.api import APIModel

    return (p.adapter if isinstance(p.adapter, APIModel) else None), api_extractor(p.readouts.get(task_id))


def task_prices(p: Planned, task_id: str) -> tuple[Price | None, Price | None]:
    """The table's prices of a task's paid calls: its model's and its answer extractor's."""
    return tuple(None if m is None else price_of(m.provider, m.capability_model)  # type: ignore[return-value]
                 for m in paid_models(p, task_id))


def battery_totals(p: Planned) -> tuple[str, ...]:
    """The run-level metrics of the model's battery run: its model calls, and what its API
    calls (an answer extractor's included) used and cost."""
    paid = any(m is not None for t, _ in p.tasks for m in paid_models(p, t.task_id))
    return RUN_TOTALS + (USAGE_METRICS if paid else ())


def check_budget(recipe: Recipe, planned: list[Planned]) -> None:
    """``budget_usd`` is counted at the price table's prices: every API model must have one,
    answer extractors included."""
    if recipe.budget_usd is None:
        return
    for p in planned:
        for task, _ in p.tasks:
            for role, m in zip(("model", "answer extractor"), paid_models(p, task.task_id)):
                if m is not None and price_of(m.provider, m.capability_model) is None:
                    raise RecipeError(f"{recipe.where('budget_usd')}: budget_usd: {role} of model "
                                      f"{p.model.id!r} ({m.provider}/{m.capability_model}) has no price in "
                                      f"harness/models/prices.csv; add its row or remove budget_usd")


def output_budget(api: Any, options: dict[str, Any]) -> int:
    """The output tokens an API call may bill: the model's ``max_tokens``, else the readout's
    ``max_new_tokens``."""
    return int(api.options.get("max_tokens") or options.get("max_new_tokens", 40))


def call_bound_usd(p: Planned, task_id: str, stimset: StimulusSet) -> float:
    """The most one of the task's model calls costs at the table's price (0 where the model is not
    a priced API model): its input tokens by the vendor's image rule and its whole output budget.
    A call that timed out is counted at it, and each call in flight can take a run this far past
    ``budget_usd``."""
    api, _ = paid_models(p, task_id)
    readout = p.readouts.get(task_id)
    price = None if api is None else price_of(api.provider, api.capability_model)
    if price is None or readout is None or not stimset.test:
        return 0.0
    tokens_in = estimate_input_tokens(api.provider, api.capability_model, stimset.test[0].image.size,
                                      stimset.prompt.text if stimset.prompt else "")
    return cost_usd(price, {"input_tokens": tokens_in, "output_tokens": output_budget(api, readout.options),
                            "batch": int(bool(api.options.get("batch")))})


def spent_so_far(recipe: Recipe, planned: list[Planned], stimsets: dict[str, StimulusSet]) -> float:
    """What the recipe's batteries have spent in all runs so far, read from their records (set-aside
    failed and stale attempts included), at the table's prices; timed-out calls at their bound."""
    total = 0.0
    for p in planned:
        for task_id, store in record_stores(recipe, p).items():
            if any(m is not None for m in paid_models(p, task_id)):
                total += spend(store.attempts(), *task_prices(p, task_id),
                               timed_out_usd=call_bound_usd(p, task_id, stimsets[task_id]))
    return total


@dataclass
class Charge:
    """A task's calls charged to the budget as their records are written: each record's cost in
    one process; with several, each chunk's, every process's together, so all processes stop at
    the same chunk. Calls that timed out count at ``timed_out_usd``; ``records`` counts this
    process's trials charged."""

    budget: Budget
    dist: Dist
    prices: tuple[Price | None, Price | None]
    timed_out_usd: float
    records: int = 0

    def __call__(self, records: list[dict]) -> None:
        self.records += len(records)
        usd = spend(records, *self.prices, timed_out_usd=self.timed_out_usd)
        rates = " and ".join(f"{p.model} prices of {p.date}" for p in self.prices if p is not None)
        self.budget.charge(sum(self.dist.gather([usd])), rates)


def run_totals(p: Planned, stores: dict[str, RecordStore], run_id: str, model_calls: int) -> dict[str, float]:
    """The battery run's totals, each of the run as a whole (every process and every invocation
    that continued it): an API model's ``model_calls``, tokens and cost counted from the records
    its calls left (answers, failed attempts set aside); another model's ``model_calls`` as
    counted by its processes."""
    from .models.api import APIModel

    usages, calls = [], 0
    for task, _ in p.tasks:
        if any(m is not None for m in paid_models(p, task.task_id)):
            made = [r for r in stores[task.task_id].attempts() if r["run_meta"]["run_id"] == run_id]
            calls += len(made)
            usages.append(task_usage(made, *task_prices(p, task.task_id)))
    if not usages:
        return {"model_calls": float(model_calls)}
    return {"model_calls": float(calls if isinstance(p.adapter, APIModel) else model_calls),
            **battery_usage(usages)}

