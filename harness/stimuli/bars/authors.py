"""GRAPE charts rendered by the authors' own generator, as test stimuli beside gestalt's.

A trained network's MLAE on the authors' charts against its MLAE on gestalt's IID charts of the
same type measures what is left of the generator difference (docs/grape-generator-audit.md).
The folder is one "valid" set as GRAPE's generator writes it (its dataset configs:
``inputFolder`` "input", ``outputFolder`` "target"): ``input/<name>_<i>.png`` (150 x 150 RGB)
and ``target/<name>_<i>.json`` holding ``[ratio]``, the smaller marked bar over the larger
(``mark.ratio.ratio2MarkOnly``). Other files the generator writes beside it (``_r``, ``_l``,
``_ll``, ``_h`` JSONs) are ignored.

Such stimuli carry ``manipulated_value`` = {"parameter": RENDERED_BY, "level": AUTHORS}, so the
MLAE scorer reports them as their own group beside the IID charts, with the gap between both
(scores/mlae.py, ``rendered_by.grape-authors.*``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from PIL import Image

from ...sources import DataError
from ...sources.store import file_sha256
from ..base import Stimulus

RENDERED_BY = "rendered_by"
AUTHORS = "grape-authors"
IMAGE_SIZE = (150, 150)
_NAME = re.compile(r"(?P<stem>[a-z]+_type\d+)_(?P<index>\d+)\.png")


def authors_test_stimuli(folder: str | Path, tag: str, chart_type: int,
                         limit: int | None = None) -> list[Stimulus]:
    """Test stimuli from one rendered GRAPE set, ordered by image index; at most ``limit``.

    A missing folder, an image without its target, an unreadable target, a ratio outside
    (0, 1] or an image that is not 150 x 150 RGB is a DataError naming the file.
    """
    folder = Path(folder)
    inputs, targets = folder / "input", folder / "target"
    if not inputs.is_dir() or not targets.is_dir():
        raise DataError(f"{folder}: not a GRAPE test set (needs input/ and target/ folders)")
    found = sorted(((int(m["index"]), p) for p in inputs.iterdir() if (m := _NAME.fullmatch(p.name))),
                   key=lambda t: t[0])
    if not found:
        raise DataError(f"{inputs}: no <name>_<i>.png images")
    out = []
    for index, image in found[:limit]:
        target = targets / f"{image.stem}.json"
        try:
            value = json.loads(target.read_text())
            ratio = float(value[0] if isinstance(value, list) else value)
        except (OSError, ValueError, TypeError, IndexError) as e:
            raise DataError(f"{target}: no readable [ratio] for {image.name} ({e})") from e
        if not 0 < ratio <= 1 or not np.isfinite(ratio):
            raise DataError(f"{target}: ratio {ratio} is not in (0, 1]")
        with Image.open(image) as im:
            if im.size != IMAGE_SIZE or im.mode not in ("RGB", "RGBA"):
                raise DataError(f"{image}: {im.mode} {im.size[0]} x {im.size[1]}, expected RGB 150 x 150")
        out.append(Stimulus(
            stimulus_id=f"{tag}-{AUTHORS}-{index:06d}", split="test", ground_truth=ratio,
            image_source=image, file_sha256=file_sha256(image),
            manipulated_value={"parameter": RENDERED_BY, "level": AUTHORS},
            meta={"generator": AUTHORS, "chart_type": chart_type, "subset": AUTHORS, "file": image.name}))
    return out
