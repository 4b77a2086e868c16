"""Recipes: their typed sections (models x tasks + settings) and :func:`load_recipe`, which reads
the file strictly (:mod:`harness.recipe_yaml`), merges ``extends:`` and applies command-line
overrides (:mod:`harness.recipe_overrides`), validates, and words what is wrong
(:mod:`harness.recipe_messages`).

Every section forbids unknown keys; an error names the file, the line and the key, and exits 2
before anything loads. ``task_options.<task>`` holds the task builder's options, checked against
the builder's :class:`~harness.stimuli.registry.TaskOptions` model, a model's ``options`` against its
source's :class:`~harness.models.base.ModelOptions` model, and under ``readout:`` the
readout's settings, checked at load against the task's readouts'
:class:`~harness.readouts.base.ReadoutSettings` (as a model's ``generation`` is) and again when
preflight builds each readout. The resolved recipe (after
``extends`` and overrides, defaults filled) is what runs, is printed by ``--dry-run`` and is
logged to MLflow with its sha256. Format and rules: docs/design.md ("Recipes").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, Strict, ValidationError,
                      field_validator, model_validator)

from .models.base import DType, ModelSpec, Precision
from .recipe_messages import RecipeError, did_you_mean, line_of, validation_message
from .recipe_overrides import apply_overrides, read_extended, task_ids
from .scores.tasks import Bootstrap

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
# an integer setting takes an integer: not YAML's true (1), nor text such as '2' or '٤٠'
# (Arabic-Indic digits), which pydantic would otherwise read as numbers
Int = Annotated[int, Strict()]
# a boolean setting takes true or false: YAML 1.2 reads `yes` and `on` as text, and pydantic would
# otherwise read such text ("yes", "false", "1") as a boolean instead of refusing it
Bool = Annotated[bool, Strict()]
NAME_MAX = 100  # a recipe name or model id names a folder (255 bytes at most), with room for what is appended
PATH_MAX = 1024  # characters of a folder setting: well under the 4,096 bytes Linux takes for a whole path
PART_MAX = 255  # bytes of one folder name, on every common file system


def _path_text(v: str) -> str:
    """A folder setting that every later ``open`` can take: not empty (the default is ``null``), no
    NUL byte, not longer than PATH_MAX, no folder name over PART_MAX bytes; otherwise the run
    would fail with a traceback once it first writes there."""
    if not v.strip():
        raise ValueError("empty: leave it out (or write null) for the default")
    if "\0" in v:
        raise ValueError("a path cannot hold a NUL character")
    if len(v) > PATH_MAX:
        raise ValueError(f"a path of {len(v):,} characters; at most {PATH_MAX:,}")
    if long := next((part for part in Path(v).parts if len(part.encode()) > PART_MAX), None):
        raise ValueError(f"a folder name of {len(long.encode()):,} bytes; file systems take at most {PART_MAX}")
    return v


PathText = Annotated[str, AfterValidator(_path_text)]
EXPERIMENT_MAX = 500  # MLflow's longest experiment name (mlflow.utils.validation.MAX_EXPERIMENT_NAME_LENGTH)
# the schemes MLflow opens a tracking store for (mlflow/tracking/_tracking_service/utils.py; a
# database scheme may name its driver, postgresql+psycopg2); a URI without one is a folder
TRACKING_SCHEMES = ("file", "sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks",
                    "databricks-uc", "uc")


def _tracking_schemes() -> list[str]:
    """MLflow's schemes and those plugins register (entry points, read without importing MLflow)."""
    from importlib.metadata import entry_points

    return [*TRACKING_SCHEMES, *(e.name for e in entry_points(group="mlflow.tracking_store"))]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelEntry(_Strict):
    id: str = Field(pattern=ID_PATTERN, max_length=NAME_MAX)
    source: str = Field(description="a model source: built-in or a plugin's (`gestalt models list`)")
    name: str
    weights: str | None = None
    revision: str | None = Field(default=None, description="exact hub commit (40 hex) for pinned runs")
    family: str = "unknown"
    batch_size: int | Literal["auto"] = Field(
        default=32, description="items per forward pass, or `auto`: start at options.max_batch_size "
                                "(default 256) on a GPU and halve on out-of-memory; 32 on a CPU")
    dtype: DType = Field(default="float32", description="the weights' type")
    precision: Precision = Field(
        default="float32", description="autocast of the forward pass (torch encoders, hf-vlm): `auto` is "
                                       "bfloat16 (else float16) on a GPU, float32 on a CPU")
    readouts: dict[str, str] = Field(default_factory=dict, description="task id -> readout override")
    tasks: list[str] | None = Field(
        default=None, description="the recipe's tasks (ids or batteries) this model answers; default all "
                                  "(e.g. published decisions that exist for some tasks only)")
    generation: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    trust_remote_code: Bool = Field(default=False, description="allow code shipped with hub weights to run")

    @field_validator("tasks")
    @classmethod
    def _some_tasks(cls, v):
        if v == []:  # it would run nothing and the run would still end well
            raise ValueError("empty: the model would run nothing; leave tasks out for all of the recipe's tasks, "
                             "or list the ones it answers")
        return v

    @field_validator("source")
    @classmethod
    def _known_source(cls, v):
        from .models.registry import sources  # the registry, plugins included, is the one list

        if v not in sources():
            raise ValueError(f"unknown model source {v!r}; known: {', '.join(sorted(sources()))}")
        return v

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size(cls, v):
        if isinstance(v, str) and v.isascii() and v.strip().isdigit():  # a command-line override arrives as text
            v = int(v)
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65536):
            return v
        raise ValueError(f"batch_size must be an integer from 1 to 65536 or 'auto', got {v!r}")

    @model_validator(mode="after")
    def _one_precision(self):
        # half-precision weights already set the precision; autocasting them to another would be
        # a third thing neither setting says
        if self.dtype in ("float16", "bfloat16") and self.precision not in ("float32", "auto"):
            raise ValueError(f"dtype {self.dtype} (weights) and precision {self.precision} (autocast) "
                             f"both set; set one of them")
        return self

    def spec(self) -> ModelSpec:
        """The model as adapters take it: the entry's fields ModelSpec shares, by name, with the
        generation settings under ``options``; recipe-only fields (readouts, tasks) stay here."""
        shared = {f.name for f in fields(ModelSpec)} - {"options"}
        options = {**self.options, **({"generation": self.generation} if self.generation else {})}
        return ModelSpec(**self.model_dump(include=shared), options=options)

    @field_validator("weights")
    @classmethod
    def _named_weights(cls, v):
        if v is not None and not v.strip():
            raise ValueError("empty: write `random` for a random initialisation, or name the weights")
        return v

    @field_validator("revision")
    @classmethod
    def _full_commit(cls, v):
        if v is not None and not (len(v) == 40 and all(c in "0123456789abcdef" for c in v)):
            raise ValueError("revision must be a full 40-hex commit hash")
        return v


class Runtime(_Strict):
    processes: Int = Field(default=1, ge=1, le=64)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    progress: Bool = True


class Data(_Strict):
    root: PathText | None = None
    mirror: PathText | None = None


class Tracking(_Strict):
    enabled: Bool = True
    uri: str | None = Field(default=None, description="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    experiment: str = Field(default="gestalt", max_length=EXPERIMENT_MAX)
    tags: dict[str, str] = Field(default_factory=dict)
    outage_budget_s: Int = Field(
        default=300, ge=1, le=86400,
        description="how long a tracking server that stops answering is retried before the run gives up "
                    "(exit 1, records kept; docs/clusters.md)")

    @field_validator("uri")
    @classmethod
    def _store_mlflow_opens(cls, v):
        if v is None:
            return v
        if not v.strip() or "\0" in v:
            raise ValueError("empty or holding a NUL character: write null for the default store")
        # a scheme has two letters or more (C: is a Windows drive); postgresql+psycopg2 is postgresql's
        scheme = v.split(":", 1)[0].split("+", 1)[0].lower() if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", v) else ""
        if scheme and scheme not in (known := _tracking_schemes()):
            raise ValueError(f"MLflow opens no store for {scheme}:// (it takes {', '.join(known)}, "
                             f"or a folder)")
        return v

    @field_validator("experiment")
    @classmethod
    def _named(cls, v):
        if not v.strip():
            raise ValueError("empty: MLflow needs a name for the experiment")
        return v


class Recipe(_Strict):
    schema_version: Literal[1] = 1
    name: str = Field(pattern=ID_PATTERN, max_length=NAME_MAX)
    description: str = ""
    seed: Int = Field(default=0, ge=0, le=2**32 - 1)
    models: list[ModelEntry] = Field(min_length=1, max_length=256)
    tasks: list[str] = Field(min_length=1)
    task_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    bootstrap: Bootstrap = Bootstrap()
    runtime: Runtime = Runtime()
    data: Data = Data()
    tracking: Tracking = Tracking()
    output_dir: PathText | None = None
    # USD the recipe's API calls may spend in one run of it, at harness/models/prices.csv's prices:
    # the battery in progress stops cleanly when reached (records kept; a rerun continues). Strict:
    # YAML's true would otherwise be $1 and "5" $5; an integer is a number of dollars
    budget_usd: Annotated[float, Strict()] | None = Field(default=None, gt=0, allow_inf_nan=False)
    _lines: dict[tuple, str] = PrivateAttr(default_factory=dict)
    _file: str = PrivateAttr(default="recipe")

    @field_validator("output_dir")
    @classmethod
    def _a_folder(cls, v):
        """Not a file, nor under one (``/dev/null``): the run writes its records there."""
        if v is not None:
            path = Path(v)
            there = next((p for p in (path, *path.parents) if os.path.exists(p)), None)
            if there is not None and not os.path.isdir(there):
                raise ValueError(f"{there} is a file, not a folder (records and the report are written in "
                                 f"the folder output_dir names); choose another with --output_dir=DIR")
        return v

    @model_validator(mode="after")
    def _unique_models(self):
        seen = set()
        for m in self.models:
            if m.id in seen:
                raise ValueError(f"model id {m.id!r} appears twice")
            seen.add(m.id)
        return self

    def where(self, *place: str | int) -> str:
        """'file:line' of a key of the recipe (or of the nearest enclosing one), for messages."""
        return line_of(self._lines, place, self._file)

    def builder_options(self, task_id: str) -> dict[str, Any]:
        """``task_options.<task>`` without ``readout`` (checked at load against the builder)."""
        return {k: v for k, v in self.task_options.get(task_id, {}).items() if k != "readout"}

    def readout_options(self, task_id: str) -> dict[str, Any]:
        """``task_options.<task>.readout``."""
        return dict(self.task_options.get(task_id, {}).get("readout") or {})

    @property
    def out_dir(self) -> Path:
        return Path(self.output_dir or f"outputs/{self.name}")

    def resolved(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.resolved(), sort_keys=True).encode()).hexdigest()


def _check_readout_settings(settings: dict[str, Any], readouts: list[str], lines: dict, path: str | Path,
                            place: tuple[str | int, ...]) -> None:
    """Settings given to readouts (a task's ``readout:``, a model's ``generation:``) are ones that
    the readouts they may go to take, of the types those take: otherwise an error with the line,
    the key and the closest known key. Which of them a model uses depends on its capabilities,
    known once its adapter is built: preflight then checks each (model, task) pair exactly."""
    from .readouts.registry import get_readout

    models = {name: get_readout(name).Settings for name in dict.fromkeys(readouts)}
    known = sorted({k for m in models.values() for k in m.model_fields})
    for key in settings:
        if key not in known:
            at = place + (key,)
            raise RecipeError(f"{line_of(lines, at, str(path))}: {'.'.join(map(str, at))}: unknown key"
                              f"{did_you_mean(key, known)} (settings of readouts {', '.join(models)}: "
                              f"{', '.join(known) or 'none'})")
    errors = []
    for model in (m for m in models.values() if set(settings) <= set(m.model_fields)):
        try:
            model.model_validate(settings)
            return
        except ValidationError as e:
            errors.append(validation_message(e, lines, str(path), place, model))
    if errors:
        raise RecipeError(errors[0])


def _check_task_options(recipe: Recipe, lines: dict, path: str | Path, file_tasks: list[str]) -> None:
    """Every task in ``tasks`` is known, every task_options (and per-model readouts) key is one
    of them (a misspelt key would otherwise drop its settings without a word), every task's
    builder options pass its TaskOptions model, ``readout`` is a mapping, and every per-model
    readout is a known one."""
    from .readouts.registry import READOUTS
    from .stimuli.registry import UnknownTask, expand, get_task

    for i, name in enumerate(recipe.tasks):
        try:
            expand([name])
        except UnknownTask as e:
            raise RecipeError(f"{recipe.where('tasks', i)}: tasks.{i}: {e}") from None
    tasks = expand(recipe.tasks)
    # `--tasks=[...]` may run a subset of a recipe: the file's other tasks keep their options, unused
    keyed: list[tuple[tuple[str | int, ...], str]] = [(("task_options", key), key) for key in recipe.task_options]
    keyed += [(("models", i, "readouts", key), key) for i, m in enumerate(recipe.models) for key in m.readouts]
    for at, key in keyed:
        if key not in tasks and key not in file_tasks:
            where = lines.get(at) or lines.get(at[:-1]) or str(path)
            raise RecipeError(f"{where}: {'.'.join(map(str, at))}: not a task of this recipe "
                              f"(tasks: {', '.join(tasks)})")
    for i, m in enumerate(recipe.models):
        for k, name in enumerate(m.tasks or []):
            try:
                own = expand([name])
            except UnknownTask as e:
                raise RecipeError(f"{lines.get(('models', i, 'tasks', k), path)}: models.{i}.tasks.{k}: {e}") from None
            if set(own) - set(tasks):
                raise RecipeError(f"{lines.get(('models', i, 'tasks', k), path)}: models.{i}.tasks.{k}: "
                                  f"{name} is not a task of this recipe (tasks: {', '.join(tasks)})")
        for key, readout in m.readouts.items():
            if readout not in READOUTS:
                raise RecipeError(f"{lines.get(('models', i, 'readouts', key), path)}: models.{i}.readouts."
                                  f"{key}: unknown readout {readout!r}; known: {', '.join(sorted(READOUTS))}")
        if m.generation:
            answered = expand(m.tasks) if m.tasks else tasks
            readouts = [r for t in answered for r in (*get_task(t).readouts.values(), m.readouts.get(t)) if r]
            _check_readout_settings(m.generation, readouts, lines, path, ("models", i, "generation"))
    for key in recipe.task_options:
        if key not in tasks:
            continue
        place: tuple[str | int, ...] = ("task_options", key)
        settings = recipe.task_options[key].get("readout")
        if settings is not None and not isinstance(settings, dict):
            raise RecipeError(f"{lines.get(place + ('readout',), path)}: task_options.{key}.readout: "
                              f"a mapping of the readout's settings")
        if settings:
            readouts = [*get_task(key).readouts.values(),
                        *(m.readouts[key] for m in recipe.models if key in m.readouts)]
            _check_readout_settings(settings, readouts, lines, path, place + ("readout",))
        try:
            get_task(key).check_options(recipe.builder_options(key))
        except ValidationError as e:
            hint = ""
            if e.errors()[0]["type"] == "extra_forbidden":
                known = ", ".join(sorted(get_task(key).options_model().model_fields)) or "none"
                hint = f" (options of {key}: {known}; the readout's settings go under readout:)"
            raise RecipeError(validation_message(e, lines, str(path), place,
                                                  get_task(key).options_model()) + hint) from None


def _check_model_options(recipe: Recipe, lines: dict, path: str | Path) -> None:
    """Each model's ``options`` pass its source's ``Options`` model (the adapter class's), so a
    wrong option stops here with its line, never in training after the run has started."""
    from .models.base import ModelError
    from .models.registry import adapter_class

    for i, m in enumerate(recipe.models):
        try:
            options = adapter_class(m.source).Options
        except ModelError as e:
            raise RecipeError(f"{lines.get(('models', i, 'source'), path)}: models.{i}.source: {e}") from None
        try:
            options.model_validate(m.options, context={"weights": m.weights})  # refuses options they never read
        except ValidationError as e:
            raise RecipeError(validation_message(e, lines, str(path), ("models", i, "options"), options)) from None


def load_recipe(path: str | Path, overrides: dict[str, Any] | None = None) -> Recipe:
    """Load, extend, override and validate. Overrides are dotted paths (``runtime.processes``)."""
    data, lines = read_extended(Path(path))
    file_tasks = task_ids(data.get("tasks"))
    apply_overrides(data, lines, overrides or {})
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        raise RecipeError(validation_message(e, lines, str(path), (), Recipe)) from None
    except RecursionError:
        raise RecipeError(f"{path}: nested too deeply") from None
    recipe._lines, recipe._file = lines, str(path)
    _check_model_options(recipe, lines, path)
    _check_task_options(recipe, lines, path, file_tasks)
    return recipe


def check_device(recipe: Recipe) -> None:
    """A ``runtime.device: cuda`` this machine lacks, as one line naming the devices it has, before
    a run (or its dry run) would place a model there and torch would raise. Not at load: a recipe
    written for a GPU machine still pulls its data and reads its scores on a laptop. Where
    ``$GESTALT_DEVICE`` is set (a launcher's, or the user's) it is in charge, not the recipe."""
    from .models.device import gpu_driver_present

    if recipe.runtime.device != "cuda" or "GESTALT_DEVICE" in os.environ:
        return
    if gpu_driver_present():
        import torch  # only where a driver is: without one, the answer needs no torch

        if torch.cuda.is_available():
            return
        reason = "torch sees no CUDA GPU here"
    else:
        reason = "this machine has no GPU driver"
    raise RecipeError(f"{recipe.where('runtime', 'device')}: runtime.device: cuda, but {reason} "
                      f"(devices here: cpu); write auto or cpu")
