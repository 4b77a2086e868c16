"""Where a recipe's settings come from besides its file: ``extends:`` (a parent recipe, merged
key by key under the file's own) and ``--section.key=value`` overrides from the command line,
each key keeping the line it came from (``command line`` for an override)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .recipe_messages import RecipeError
from .recipe_yaml import parse_yaml, read_yaml


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_extended(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict, dict]:
    """A recipe file merged over the recipes it extends (a path relative to its folder), with
    the line of each key in the file that set it last."""
    if "\0" in str(path):
        raise RecipeError(f"{str(path)!r}: a path cannot hold a NUL character")
    path = path.resolve()
    if path in seen:
        raise RecipeError(f"{path}: extends itself (cycle: {' -> '.join(map(str, seen + (path,)))})")
    data, lines = read_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data, lines
    if not isinstance(parent, str):
        raise RecipeError(f"{lines.get(('extends',), path)}: extends must be a path")
    if "\0" in parent:
        raise RecipeError(f"{lines.get(('extends',), path)}: extends: a path cannot hold a NUL character")
    base, base_lines = read_extended((path.parent / parent), seen + (path,))
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


def task_ids(tasks: Any) -> list[str]:
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
    known = set(task_ids(data.get("tasks"))) | set(existing if isinstance(existing, dict) else ())

    def fits(form: str) -> bool:
        return rest == form or rest.startswith(form + ".")

    # the command line (fire) reads '-' in an option name as '_': step-b arrives as step_b
    found = [(len(t), fits(t), t) for t in known if fits(t) or fits(t.replace("-", "_"))]
    if not found:
        raise RecipeError(f"override {dotted}: names no task of the recipe "
                          f"(tasks: {', '.join(task_ids(data.get('tasks'))) or 'none'})")
    task = max(found)[2]  # the longest; an exact spelling before a '-' read as '_'
    tail = rest[len(task) + 1:]
    return ["task_options", task, *(tail.split(".") if tail else [])]


def apply_overrides(data: dict, lines: dict[tuple, str], overrides: dict[str, Any]) -> None:
    """Set each dotted override (``runtime.processes``) in ``data``, its value read as YAML, and
    mark the places it set as the command line's in ``lines``."""
    # task_options.* last: their task ids are resolved against the tasks as overridden
    ordered = sorted(overrides.items(), key=lambda kv: kv[0].startswith("task_options."))
    for dotted, value in ordered:
        if isinstance(value, str) and not value.strip():  # YAML would read it as null: the default
            raise RecipeError(f"override {dotted}: empty value (write {dotted}=null to reset it to its default)")
        if isinstance(value, str):
            value, _ = parse_yaml(value, f"override {dotted}")
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
