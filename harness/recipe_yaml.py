"""The recipe's YAML reader: one strict reading of a file (or of a command-line value), with the
line of every key and item.

YAML 1.2 core scalars (``yes``/``on``/``1:30`` stay strings, ``012`` is refused), duplicate keys
refused naming both lines, a file that is not UTF-8 text refused, nesting and alias expansion
bounded; every failure is one :class:`~harness.recipe_messages.RecipeError` line, ``file:line``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .recipe_messages import RecipeError

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


def parse_yaml(text: str, file: str) -> tuple[Any, dict[tuple, str]]:
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


def read_yaml(path: Path) -> tuple[dict, dict]:
    """One recipe file's mapping and its line map: a file of at most MAX_BYTES, UTF-8 text."""
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
    data, lines = parse_yaml(text, str(path))
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a YAML mapping")
    return data, lines

