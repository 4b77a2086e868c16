"""The Python API: ``harness.evaluate`` and ``harness.load_records``.

``evaluate`` builds a recipe from its arguments and runs exactly what ``gestalt recipe`` runs
(preflight, records and their cache, one MLflow run per model, figures); it never exits the
interpreter: bad input raises :class:`harness.errors.GestaltError` subclasses (RecipeError,
ModelError, DataError, PlanError), and a tracking server that does not answer
:class:`harness.errors.TrackingUnavailable`, with the one-line message the CLI would print.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import GestaltError, plain
from .recipes import Recipe, RecipeError, _check_task_options

if TYPE_CHECKING:
    import pandas as pd

ModelLike = dict[str, Any] | tuple[str, object] | object


class Evaluation(NamedTuple):
    scores: pd.DataFrame  # one row per model x task x score
    run_ids: dict[str, str]  # model id -> MLflow run id (or the local id with tracking off)


def _entry(model: ModelLike, taken: set[str]) -> dict[str, Any]:
    """A recipe model entry; a live object is registered for the python source under its id."""
    from .models.python_source import LIVE, LIVE_PREFIX

    if isinstance(model, dict):
        return dict(model)
    if isinstance(model, tuple) and len(model) == 2 and isinstance(model[0], str):
        model_id, obj = model
    else:
        obj = model
        base = model_id = re.sub(r"(?<!^)(?=[A-Z])", "-", type(obj).__name__).lower()  # ShapeRule: shape-rule
        n = 1
        while model_id in taken:
            n += 1
            model_id = f"{base}-{n}"
    LIVE[LIVE_PREFIX + model_id] = obj
    return {"id": model_id, "source": "python", "name": LIVE_PREFIX + model_id}


def make_recipe(models: Sequence[ModelLike], tasks: Sequence[str], **recipe_keys: Any) -> Recipe:
    from pydantic import ValidationError

    entries: list[dict[str, Any]] = []
    for m in models:
        entries.append(_entry(m, {e.get("id", "") for e in entries}))
    data = {"name": "evaluate", "models": entries, "tasks": list(tasks), **recipe_keys}
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(recipe)"
        msg = "unknown key" if err["type"] == "extra_forbidden" else plain(err["msg"])
        raise RecipeError(f"evaluate: {key}: {msg}") from None
    _check_task_options(recipe, {}, "evaluate", list(tasks))
    if recipe.runtime.processes != 1:
        raise RecipeError("evaluate: runtime.processes: the Python API runs in one process "
                          "(use `gestalt recipe` for several)")
    return recipe


def evaluate(models: Sequence[ModelLike], tasks: Sequence[str], **recipe_keys: Any) -> Evaluation:
    """Score ``models`` on ``tasks``; returns the score table and each model's run id.

    ``models``: recipe model entries (``{"id": ..., "source": ..., "name": ...}``), live objects
    with ``embed`` / ``generate`` / ``predict`` (id from the class name) or ``(id, object)``
    pairs. ``recipe_keys``: any other recipe key (``seed``, ``bootstrap``, ``tracking``,
    ``data``, ``output_dir``, ``name``...), validated as in a recipe file.
    """
    import pandas as pd

    from .run import run_recipe

    recipe = make_recipe(models, tasks, **recipe_keys)
    results = run_recipe(recipe, echo=lambda line: None)
    rows = [{"model": r.model_id, "task": task_id, "run_id": r.run_id, **s.to_dict()}
            for r in results for task_id, scores in r.scores.items() for s in scores]
    return Evaluation(pd.DataFrame(rows), {r.model_id: r.run_id for r in results})


def load_records(run_id: str, uri: str | None = None) -> pd.DataFrame:
    """One MLflow run's trial records (every task of its battery) as a DataFrame."""
    import pandas as pd
    from mlflow.exceptions import MlflowException

    import mlflow

    from .tracking.store import tracking_uri
    from .trials.records import RecordStore

    client = mlflow.MlflowClient(tracking_uri(uri))
    try:
        files = [f.path for f in client.list_artifacts(run_id, "records") if f.path.endswith(".jsonl")]
    except MlflowException as e:
        raise GestaltError(f"run {run_id}: {e.message}") from None
    if not files:
        raise GestaltError(f"run {run_id}: no records logged")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            rows += RecordStore(Path(client.download_artifacts(run_id, path, tmp))).read()
    return pd.DataFrame(rows)
