"""A score is a small record, not a float."""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Score:
    """One number with everything needed to read it.

    ``name`` is the metric key under the task prefix (``B``, ``kappa``, ``accuracy`` ...);
    ``ceiling``/``floor`` are the human-human ceiling and the guessing floor on the same scale
    (None where none applies); ``method`` says how value and interval were computed.
    """

    name: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    nulls: int
    method: str
    version: str
    ceiling: float | None = None
    floor: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # "nothing to score" (e.g. every answer null) comes out of numpy as NaN; the record holds
        # None, as intervals.json does, so a live score and a logged one read the same
        for name in ("value", "ci_low", "ci_high", "ceiling", "floor", "extra"):
            object.__setattr__(self, name, _no_nan(getattr(self, name)))

    @property
    def null_rate(self) -> float:
        total = self.n + self.nulls
        return self.nulls / total if total else 0.0

    @property
    def ceiling_source(self) -> str:
        """What the ceiling is and where it comes from: the scorer's ``extra['ceiling_source']``,
        else the ``ceiling:`` clause of its method; "" without a ceiling or a word on it."""
        if self.ceiling is None:
            return ""
        said = self.extra.get("ceiling_source") or next(
            (part.split("ceiling:", 1)[1] for part in self.method.split(";") if "ceiling:" in part), "")
        return " ".join(str(said).split())

    def to_dict(self) -> dict[str, Any]:
        """The record as strict JSON holds it."""
        return {**asdict(self), "null_rate": self.null_rate}


def _no_nan(v: Any) -> Any:
    """``v`` with every NaN in it (numpy's floats too, in dicts, lists and tuples) as None."""
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {k: _no_nan(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_no_nan(x) for x in v)
    return v
