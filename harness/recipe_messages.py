"""A recipe's errors as its writer reads them: :class:`RecipeError`, one line that names the file,
the line and the key, and pydantic's validation errors put as ``file:line: key: what``, with the
closest key a section takes for a misspelt one."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from .errors import GestaltError, plain


class RecipeError(GestaltError):
    """A recipe that cannot run; the message names file, line and key."""


def line_of(lines: dict[tuple, str], place: tuple, fallback: str) -> str:
    """'file:line' of a key of the recipe (or of the nearest enclosing one), else ``fallback``."""
    return next((lines[place[:i]] for i in range(len(place), 0, -1) if place[:i] in lines), fallback)


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


def validation_message(e: ValidationError, lines: dict, fallback: str, prefix: tuple,
                       model: type[BaseModel]) -> str:
    """The first error of a pydantic validation of ``model`` (the section at ``prefix``) as
    'file:line: key: what' (+ how many more); an unknown key with the closest key it takes there."""
    err = e.errors()[0]
    loc = prefix + tuple(err["loc"])
    key = ".".join(str(p) for p in loc) or "(recipe)"
    msg = plain(err["msg"])
    if err["type"] == "extra_forbidden":
        msg = "unknown key" + did_you_mean(str(err["loc"][-1]), _keys_at(model, tuple(err["loc"][:-1])))
    more = f" (+{e.error_count() - 1} more errors)" if e.error_count() > 1 else ""
    return f"{line_of(lines, loc, fallback)}: {key}: {msg}{more}"
