"""Recipes: strict YAML (models x tasks + settings), ``extends:``, command-line overrides.

Every section forbids unknown keys; an error names the file, the line and the key. The resolved
recipe (after ``extends`` and overrides, defaults filled) is what runs, is printed by
``--dry-run`` and is logged to MLflow with its sha256.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import GestaltError

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"


class RecipeError(GestaltError):
    """A recipe that cannot run; the message names file, line and key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelEntry(_Strict):
    id: str = Field(pattern=ID_PATTERN)
    source: str = Field(description="a model source: built-in or a plugin's (`gestalt models list`)")
    name: str
    weights: str | None = None
    revision: str | None = Field(default=None, description="exact hub commit (40 hex) for pinned runs")
    family: str = "unknown"
    batch_size: int = Field(default=32, ge=1)
    dtype: Literal["float32", "float16", "bfloat16", "auto"] = "float32"
    readouts: dict[str, str] = Field(default_factory=dict, description="task id -> readout override")
    generation: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    trust_remote_code: bool = Field(default=False, description="allow code shipped with hub weights to run")

    @field_validator("source")
    @classmethod
    def _known_source(cls, v):
        from .models.registry import sources  # the registry, plugins included, is the one list

        if v not in sources():
            raise ValueError(f"unknown model source {v!r}; known: {', '.join(sorted(sources()))}")
        return v

    @field_validator("revision")
    @classmethod
    def _full_commit(cls, v):
        if v is not None and not (len(v) == 40 and all(c in "0123456789abcdef" for c in v)):
            raise ValueError("revision must be a full 40-hex commit hash")
        return v


class Bootstrap(_Strict):
    n_boot: int = Field(default=1000, ge=100)
    n_boot_kappa: int = Field(default=2000, ge=100)
    seed: int = 0


class Runtime(_Strict):
    processes: int = Field(default=1, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    progress: bool = True


class Data(_Strict):
    root: str | None = None
    mirror: str | None = None


class Tracking(_Strict):
    enabled: bool = True
    uri: str | None = Field(default=None, description="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    experiment: str = "gestalt"
    tags: dict[str, str] = Field(default_factory=dict)


class Recipe(_Strict):
    schema_version: Literal[1] = 1
    name: str = Field(pattern=ID_PATTERN)
    description: str = ""
    seed: int = 0
    models: list[ModelEntry] = Field(min_length=1)
    tasks: list[str] = Field(min_length=1)
    task_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    bootstrap: Bootstrap = Bootstrap()
    runtime: Runtime = Runtime()
    data: Data = Data()
    tracking: Tracking = Tracking()
    output_dir: str | None = None

    @model_validator(mode="after")
    def _unique_models(self):
        seen = set()
        for m in self.models:
            if m.id in seen:
                raise ValueError(f"model id {m.id!r} appears twice")
            seen.add(m.id)
        return self

    @property
    def out_dir(self) -> Path:
        return Path(self.output_dir or f"outputs/{self.name}")

    def resolved(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.resolved(), sort_keys=True).encode()).hexdigest()


# -- YAML with line numbers ---------------------------------------------------------------------

def _lines(node, path=(), out=None, file="?"):
    """(key path) -> 'file:line' for every mapping key and sequence item."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            p = path + (k.value,)
            out[p] = f"{file}:{k.start_mark.line + 1}"
            _lines(v, p, out, file)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out[path + (i,)] = f"{file}:{v.start_mark.line + 1}"
            _lines(v, path + (i,), out, file)
    return out


def _read_yaml(path: Path) -> tuple[dict, dict]:
    if not path.is_file():
        raise RecipeError(f"{path}: recipe file not found")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise RecipeError(f"{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a YAML mapping")
    return data, _lines(node, file=str(path))


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _load_raw(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict, dict]:
    path = path.resolve()
    if path in seen:
        raise RecipeError(f"{path}: extends itself (cycle: {' -> '.join(map(str, seen + (path,)))})")
    data, lines = _read_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data, lines
    if not isinstance(parent, str):
        raise RecipeError(f"{lines.get(('extends',), path)}: extends must be a path")
    base, base_lines = _load_raw((path.parent / parent), seen + (path,))
    return _merge(base, data), {**base_lines, **lines}


def _set_path(data: dict, keys: list[str], value: Any) -> None:
    node: Any = data
    for k in keys[:-1]:
        if isinstance(node, list):
            node = node[int(k)]
        else:
            node = node.setdefault(k, {})
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _task_ids(tasks: Any) -> list[str]:
    """The task ids of a ``tasks`` list, batteries expanded; unknown names are kept as written
    (validation reports them)."""
    from .stimuli.registry import BATTERIES

    names = tasks if isinstance(tasks, list) else []
    return [t for n in names if isinstance(n, str) for t in BATTERIES.get(n, [n])]


def _override_keys(data: dict, dotted: str) -> list[str]:
    """The key path of a dotted override. Under ``task_options.`` the task id (dots and all) is
    the longest prefix of the rest that is a task of the recipe or an existing task_options key:
    ``task_options.ratio.chart.haehn_type1:step_a.values`` sets
    ``task_options["ratio.chart.haehn_type1:step_a"]["values"]``."""
    keys = dotted.split(".")
    if keys[0] != "task_options" or len(keys) < 2:
        return keys
    rest = dotted[len("task_options."):]
    existing = data.get("task_options")
    known = set(_task_ids(data.get("tasks"))) | set(existing if isinstance(existing, dict) else ())

    def fits(form: str) -> bool:
        return rest == form or rest.startswith(form + ".")

    # the command line (fire) reads '-' in an option name as '_': step-b arrives as step_b
    found = [(len(t), fits(t), t) for t in known if fits(t) or fits(t.replace("-", "_"))]
    if not found:
        raise RecipeError(f"override {dotted}: names no task of the recipe "
                          f"(tasks: {', '.join(_task_ids(data.get('tasks'))) or 'none'})")
    task = max(found)[2]  # the longest; an exact spelling before a '-' read as '_'
    tail = rest[len(task) + 1:]
    return ["task_options", task, *(tail.split(".") if tail else [])]


def _check_task_options(recipe: "Recipe", lines: dict, path: str | Path, file_tasks: list[str]) -> None:
    """Every task in ``tasks`` is known and every task_options (and per-model readouts) key is one
    of them: a misspelt key would otherwise drop its settings without a word."""
    from .stimuli.registry import UnknownTask, expand

    for i, name in enumerate(recipe.tasks):
        try:
            expand([name])
        except UnknownTask as e:
            raise RecipeError(f"{lines.get(('tasks', i), path)}: tasks.{i}: {e}") from None
    tasks = expand(recipe.tasks)
    # `--tasks=[...]` may run a subset of a recipe: the file's other tasks keep their options, unused
    keyed = [(("task_options", key), key) for key in recipe.task_options]
    keyed += [(("models", i, "readouts", key), key) for i, m in enumerate(recipe.models) for key in m.readouts]
    for place, key in keyed:
        if key not in tasks and key not in file_tasks:
            where = lines.get(place) or lines.get(place[:-1]) or str(path)
            raise RecipeError(f"{where}: {'.'.join(map(str, place))}: not a task of this recipe "
                              f"(tasks: {', '.join(tasks)})")


def load_recipe(path: str | Path, overrides: dict[str, Any] | None = None) -> Recipe:
    """Load, extend, override and validate. Overrides are dotted paths (``runtime.processes``)."""
    data, lines = _load_raw(Path(path))
    file_tasks = _task_ids(data.get("tasks"))
    # task_options.* last: their task ids are resolved against the tasks as overridden
    ordered = sorted((overrides or {}).items(), key=lambda kv: kv[0].startswith("task_options."))
    for dotted, value in ordered:
        try:
            keys = _override_keys(data, dotted)
            _set_path(data, keys, yaml.safe_load(value) if isinstance(value, str) else value)
        except (IndexError, ValueError, TypeError, AttributeError):
            raise RecipeError(f"override {dotted}: no such place in the recipe") from None
        where = tuple(int(k) if k.isdigit() else k for k in keys)
        for stale in [k for k in lines if k[:len(where)] == where]:  # the file's lines it replaced
            del lines[stale]
        lines[where] = "command line"
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        where = next((lines[loc[:i]] for i in range(len(loc), 0, -1) if loc[:i] in lines), str(path))
        key = ".".join(str(p) for p in loc) or "(recipe)"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        more = f" (+{e.error_count() - 1} more errors)" if e.error_count() > 1 else ""
        raise RecipeError(f"{where}: {key}: {msg}{more}") from None
    _check_task_options(recipe, lines, path, file_tasks)
    return recipe
