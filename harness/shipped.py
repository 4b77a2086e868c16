"""Recipes shipped with the package, so ``gestalt recipe full.yaml`` works from any directory and
in the image exactly as the design card writes it.

``harness/shipped_recipes`` links to the repository's ``recipes/``: a checkout reads them in place,
an installed wheel carries them as package data.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

import yaml

from .errors import GestaltError

SUFFIX = ".yaml"


def shipped_dir() -> Path:
    return Path(str(resources.files("harness").joinpath("shipped_recipes")))


def shipped_recipes() -> dict[str, Path]:
    """Shipped recipe name (file stem) -> file, sorted by name."""
    return {p.stem: p for p in sorted(shipped_dir().glob(f"*{SUFFIX}"))}


def resolve_recipe(name: str) -> Path:
    """A path that exists wins; else a bare name (``full``, ``full.yaml``) names a shipped recipe.

    A path with a folder part names a file: the closest recipe file in its folder is suggested
    where there is one, else it is returned as given (the loader's "recipe file not found")."""
    path = Path(name)
    if path.exists():
        return path
    if path.parent != Path("."):  # a misspelt file in a folder that exists: the closest recipe there
        near = difflib.get_close_matches(path.name, sorted(p.name for p in path.parent.glob(f"*{SUFFIX}")),
                                         n=1, cutoff=0.6) if path.parent.is_dir() else []
        if near:
            raise GestaltError(f"{name}: recipe file not found; did you mean {path.parent / near[0]}?")
        return path
    shipped = shipped_recipes()
    stem = name.removesuffix(SUFFIX)
    if stem in shipped:
        return shipped[stem]
    guess = difflib.get_close_matches(stem, list(shipped), n=1, cutoff=0.5)
    raise GestaltError(f"{name}: recipe file not found here, and no shipped recipe of that name "
                       f"(shipped: {', '.join(shipped)}; see `gestalt recipes`)"
                       + (f"; did you mean {guess[0]}?" if guess else ""))


def describe(path: Path) -> str:
    """The recipe's one-line ``description`` (empty when it has none)."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    return str(data.get("description", "")) if isinstance(data, dict) else ""
