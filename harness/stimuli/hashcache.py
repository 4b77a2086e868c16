"""Stimulus hashes without rendering: a rerun reads each stimulus's sha256 from a memo instead of
drawing and PNG-encoding its images again.

A generated image is a render function applied to plain values (``functools.partial`` of a
function of this package over strings, numbers and tuples). Such a stimulus is named exactly by a
*descriptor*: the function names and arguments of its image and parts (a local file by the sha256
of its bytes), its verified file hash,
the item text and targets :attr:`Stimulus.sha256` covers, plus the code of this package (every
``harness/stimuli`` source file) and the Pillow, FreeType and numpy builds the images are drawn
with. The memo maps that descriptor's sha256 to the stimulus's sha256 as computed from its PNG
bytes, so the hash is the same one a cold run computes; anything the descriptor cannot name (an
in-memory image, a file outside the verified sources, a closure) is hashed as before.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..memo import Memo
from .base import Stimulus, StimulusSet

TABLE = "stimulus_sha256"
PACKAGE = Path(__file__).parent


_PLAIN = (bool, int, float, str)


class Unnamed(Exception):
    """A value the descriptor cannot name exactly."""


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of the stimulus code and the builds that draw the images."""
    import PIL
    from PIL import features

    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(f"PIL={PIL.__version__};freetype={features.version('freetype2')};"
             f"numpy={np.__version__}".encode())
    return h.hexdigest()


def _name(value: Any) -> Any:
    """A JSON-able exact name of a value (a render call's argument); Unnamed when there is none."""
    kind = type(value)
    if value is None or kind in _PLAIN:  # JSON writes a float exactly (its shortest repr), 1 apart from 1.0
        return value
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return _name(value.item())
    if kind is tuple or kind is list:
        tag = "t" if kind is tuple else "l"
        if all(type(v) in _PLAIN for v in value):
            return [tag, list(value)]
        return [tag, [_name(v) for v in value]]
    if isinstance(value, dict):
        return ["d", sorted(([_name(k), _name(v)] for k, v in value.items()), key=json.dumps)]
    if isinstance(value, Path):
        # a local image file (THINGS photographs): the decoded image is a function of its bytes
        try:
            return ["file-bytes", hashlib.sha256(value.read_bytes()).hexdigest()]
        except OSError:
            raise Unnamed(f"unreadable file {value}") from None
    if isinstance(value, functools.partial):
        return ["p", _name(value.func), _name(value.args), _name(value.keywords)]
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if (inspect.isfunction(value) and isinstance(module, str) and isinstance(qualname, str)
            and module.startswith(__package__ + ".") and "<" not in qualname):
        return ["fn", module, qualname]  # a module-level function of this package (its code: code_digest)
    raise Unnamed(type(value).__name__)


def descriptor(stimulus: Stimulus) -> str | None:
    """sha256 naming everything ``stimulus.sha256`` depends on, or None when it cannot be named."""
    try:
        image = (["file", stimulus.file_sha256] if stimulus.file_sha256 is not None
                 else ["content", stimulus.image_source.content_hash()]
                 if hasattr(stimulus.image_source, "content_hash") else _name(stimulus.image_source))
        parts = [_name(p) for p in stimulus.part_sources]
    except Unnamed:
        return None
    payload = json.dumps([code_digest(), image, parts, stimulus.stimulus_id, stimulus.ground_truth,
                          stimulus.human_target, stimulus.option_order, stimulus.manipulated_value,
                          stimulus.meta.get("question"), stimulus.meta.get("options")],
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def prime(stimsets: Iterable[StimulusSet], *, compute: bool = True, save: bool = True,
          memo: Memo | None = None) -> tuple[int, int]:
    """Set each stimulus's hash from the memo; with ``compute``, hash the others now and (with
    ``save``) remember them. Returns (stimuli found in the memo, stimuli hashed)."""
    memo = memo or Memo(TABLE)
    found = hashed = 0
    for stimset in stimsets:
        if stimset.unavailable:
            continue
        for s in stimset.stimuli:
            if s._sha256 is not None:
                continue
            key = descriptor(s)
            cached = memo.get(key) if key is not None else None
            if isinstance(cached, str):
                s._sha256 = cached
                found += 1
            elif compute:
                if key is not None:
                    memo.set(key, s.sha256)
                else:
                    s.sha256  # noqa: B018 - hashed once here, as before
                hashed += 1
    if save:
        memo.save()
    return found, hashed
