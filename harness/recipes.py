"""Recipes: strict YAML (models x tasks + settings), ``extends:``, command-line overrides.

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

import copy
import difflib
import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, Strict, ValidationError,
                      field_validator, model_validator)

from .errors import GestaltError, plain
from .models.base import DType, ModelSpec, Precision
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


class RecipeError(GestaltError):
    """A recipe that cannot run; the message names file, line and key."""


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
        for i in range(len(place), 0, -1):
            if place[:i] in self._lines:
                return self._lines[place[:i]]
        return self._file

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


# -- YAML: one strict reading, with line numbers ---------------------------------------------------

MAX_BYTES = 1 << 20  # a recipe is a page of settings, not data
MAX_DEPTH = 32  # nesting levels (a recipe needs about 6)
MAX_NODES = 100_000  # values after alias expansion: bounds "billion laughs"
_CORE = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
         "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")


class _Loader(yaml.SafeLoader):
    """YAML 1.2 core scalars instead of PyYAML's 1.1 ones, so values read as written:
    ``yes``/``on``/``no`` and ``1:30`` stay strings (a typed field then refuses or reads them),
    only ``true``/``false`` are booleans, and an integer with a leading zero (1.1: octal, ``012``
    -> 10) is refused rather than guessed."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _CORE]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
                              list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
               r"|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | str:
    text = str(loader.construct_scalar(node))
    digits = text.lstrip("+-")
    if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
        raise yaml.constructor.ConstructorError(
            None, None, f"{text} has a leading zero (YAML 1.1 reads it as octal); write it without, "
            f"or quote it", node.start_mark)
    try:
        return int(text, 0) if digits[:2] in ("0o", "0x") else int(text)
    except ValueError:  # over Python's 4,300 digits: the text, which the typed setting then refuses
        return text


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _scan(root: yaml.Node, file: str) -> dict[tuple, str]:
    """(key path) -> 'file:line' for every mapping key and sequence item, refusing duplicate
    keys, nesting deeper than MAX_DEPTH and alias expansion beyond MAX_NODES. Iterative, and
    aliased nodes are counted each time they are reached, so a bomb stops at the bound."""
    out: dict[tuple, str] = {}
    stack: list[tuple[yaml.Node, tuple, int]] = [(root, (), 0)]
    seen_nodes = 0
    while stack:
        node, path, depth = stack.pop()
        seen_nodes += 1
        if seen_nodes > MAX_NODES:
            raise RecipeError(f"{file}:{node.start_mark.line + 1}: more than {MAX_NODES:,} values after "
                              f"expanding aliases (a YAML alias bomb?)")
        if depth > MAX_DEPTH:
            raise RecipeError(f"{file}:{node.start_mark.line + 1}: nested more than {MAX_DEPTH} levels")
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for k, v in node.value:
                line = k.start_mark.line + 1
                if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
                    stack.append((v, path, depth + 1))
                    continue
                if k.value in first:
                    raise RecipeError(f"{file}:{line}: key {k.value!r} repeats the one on line "
                                      f"{first[k.value]} (only one may stay)")
                first[k.value] = line
                out[path + (k.value,)] = f"{file}:{line}"
                stack.append((v, path + (k.value,), depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                out[path + (i,)] = f"{file}:{v.start_mark.line + 1}"
                stack.append((v, path + (i,), depth + 1))
    return out


# PyYAML's problem (its words) -> what it means in a recipe and how to fix it
YAML_WORDS = (
    ("mapping values are not allowed", "a second ': ' on the line (quote a value that holds ': ') "
                                       "or a key indented under a value"),
    ("could not find expected ':'", "a line that is neither 'key: value' nor '- item' (a ':' missing, or "
                                    "a line indented under a value)"),
    ("did not find expected key", "a line that does not line up with the keys above it (check its indentation)"),
    ("did not find expected '-' indicator", "a line that does not line up with the list items above it "
                                            "(check its indentation)"),
    ("found character '\\t'", "a tab: indent with spaces"),
    ("that cannot start any token", "a value starting with a character YAML reserves ('@', '`'): quote it"),
    ("expected <block end>", "a line that does not line up with the lines above it (check its indentation)"),
    ("found unexpected end of stream", "a quote opened and never closed"),
    ("expected ',' or ']'", "a '[' list not closed by ']' (or a ',' missing between its items)"),
    ("expected ',' or '}'", "a '{' mapping not closed by '}' (or a ',' missing between its items)"),
    ("found duplicate anchor", "an anchor ('&name') defined twice"),
    ("found undefined alias", "an alias ('*name') with no anchor '&name' before it"),
)


def _parse(text: str, file: str) -> tuple[Any, dict[tuple, str]]:
    """The value of one YAML document and its line map; any failure is one RecipeError line."""
    loader = None
    try:
        loader = _Loader(text)  # its reader refuses control characters already
        node = loader.get_single_node()
        if node is None:
            return None, {}
        lines = _scan(node, file)
        return loader.construct_document(node), lines
    except RecursionError:
        raise RecipeError(f"{file}: nested too deeply (over {MAX_DEPTH} levels)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        words = next((w for p, w in YAML_WORDS if p in problem), problem)
        raise RecipeError(f"{where}: not valid YAML: {words}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _read_yaml(path: Path) -> tuple[dict, dict]:
    try:
        if not path.is_file():
            raise RecipeError(f"{path}: recipe file not found")
        if path.stat().st_size > MAX_BYTES:
            raise RecipeError(f"{path}: {path.stat().st_size:,} bytes; a recipe is at most {MAX_BYTES:,}")
        raw = path.read_bytes()
    except OSError as e:
        raise RecipeError(f"{path}: cannot read ({e.strerror or e})") from None
    if b"\0" in raw:
        raise RecipeError(f"{path}: a binary file, not a YAML recipe")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecipeError(f"{path}: not UTF-8 text (byte {e.start})") from None
    data, lines = _parse(text, str(path))
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a YAML mapping")
    return data, lines


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _load_raw(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict, dict]:
    if "\0" in str(path):
        raise RecipeError(f"{str(path)!r}: a path cannot hold a NUL character")
    path = path.resolve()
    if path in seen:
        raise RecipeError(f"{path}: extends itself (cycle: {' -> '.join(map(str, seen + (path,)))})")
    data, lines = _read_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data, lines
    if not isinstance(parent, str):
        raise RecipeError(f"{lines.get(('extends',), path)}: extends must be a path")
    if "\0" in parent:
        raise RecipeError(f"{lines.get(('extends',), path)}: extends: a path cannot hold a NUL character")
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


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """'; did you mean X?' with the known name closest to a misspelt one, or '' when none is close."""
    match = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.5)
    return f"; did you mean {match[0]}?" if match else ""


def _keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys the section of ``model`` at ``loc`` takes (through list items and mapping values)."""
    node: Any = model
    for part in loc:
        if isinstance(node, type) and issubclass(node, BaseModel) and part in node.model_fields:
            node = node.model_fields[part].annotation
        elif get_origin(node) in (list, dict):
            node = get_args(node)[-1]
        else:
            return []
    return list(node.model_fields) if isinstance(node, type) and issubclass(node, BaseModel) else []


def _validation_message(e: ValidationError, lines: dict, fallback: str, prefix: tuple = (),
                        model: type[BaseModel] | None = None) -> str:
    """The first error of a pydantic validation as 'file:line: key: what' (+ how many more); an
    unknown key with the closest key ``model`` takes there."""
    err = e.errors()[0]
    loc = prefix + tuple(err["loc"])
    where = next((lines[loc[:i]] for i in range(len(loc), 0, -1) if loc[:i] in lines), fallback)
    key = ".".join(str(p) for p in loc) or "(recipe)"
    msg = plain(err["msg"])
    if err["type"] == "extra_forbidden":
        msg = "unknown key" + did_you_mean(str(err["loc"][-1]), _keys_at(model or Recipe, tuple(err["loc"][:-1])))
    more = f" (+{e.error_count() - 1} more errors)" if e.error_count() > 1 else ""
    return f"{where}: {key}: {msg}{more}"


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
            where = next((lines[at[:i]] for i in range(len(at), 0, -1) if at[:i] in lines), str(path))
            raise RecipeError(f"{where}: {'.'.join(map(str, place + (key,)))}: unknown key{did_you_mean(key, known)} "
                              f"(settings of readouts {', '.join(models)}: {', '.join(known) or 'none'})")
    errors = []
    for model in (m for m in models.values() if set(settings) <= set(m.model_fields)):
        try:
            model.model_validate(settings)
            return
        except ValidationError as e:
            errors.append(_validation_message(e, lines, str(path), place, model))
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
            raise RecipeError(_validation_message(e, lines, str(path), place,
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
            raise RecipeError(_validation_message(e, lines, str(path), ("models", i, "options"), options)) from None


def load_recipe(path: str | Path, overrides: dict[str, Any] | None = None) -> Recipe:
    """Load, extend, override and validate. Overrides are dotted paths (``runtime.processes``)."""
    data, lines = _load_raw(Path(path))
    file_tasks = _task_ids(data.get("tasks"))
    # task_options.* last: their task ids are resolved against the tasks as overridden
    ordered = sorted((overrides or {}).items(), key=lambda kv: kv[0].startswith("task_options."))
    for dotted, value in ordered:
        if isinstance(value, str) and not value.strip():  # YAML would read it as null: the default
            raise RecipeError(f"override {dotted}: empty value (write {dotted}=null to reset it to its default)")
        if isinstance(value, str):
            value, _ = _parse(value, f"override {dotted}")
        if dotted.rsplit(".", 1)[-1] == "tasks" and isinstance(value, str):  # --tasks=x: a list of one
            value = [value]
        try:
            keys = _override_keys(data, dotted)
            _set_path(data, keys, value)
        except (IndexError, ValueError, TypeError, AttributeError):
            raise RecipeError(f"override {dotted}: no such place in the recipe") from None
        where = tuple(int(k) if k.isdigit() else k for k in keys)
        for stale in [k for k in lines if k[:len(where)] == where]:  # the file's lines it replaced
            del lines[stale]
        for i in range(1, len(where) + 1):  # a section the file does not have is the command line's too
            lines.setdefault(where[:i], "command line")
        lines[where] = "command line"
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        raise RecipeError(_validation_message(e, lines, str(path))) from None
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
