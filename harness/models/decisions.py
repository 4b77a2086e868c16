"""``source: decisions``: published trial-by-trial decisions answer as a model.

A network (or an observer) whose decisions on a stimulus set were published is scored like any
model: shown a stimulus image, it answers with the decision recorded for that image, so the
readout, records, scores and MLflow run are those of a live model.

- ``name``: a CSV file or glob, either a path or ``<release>:<glob of declared files>`` (then read
  from the data root or mirror, ``$GESTALT_DATA`` / ``$GESTALT_MIRROR``, each file's sha256
  checked). Every row of every file must be the same subject (one model is one subject).
- ``options.images``: the folder (path or ``<release>:<prefix>``) of the images the decisions are
  about; an image shown to the model is matched to a file by its pixels, and a file to a row by
  its name (``airplane1.png`` answers rows whose image column ends in ``_airplane1.png``, the
  model-vs-human convention, or equals ``airplane1.png``).
- ``options.columns``: the column map for other schemas; default model-vs-human's
  ``{subject: subj, image: imagename, decision: object_response}``.
- ``options.experiments``: the same subject's decisions in further experiments, each
  ``{name: <decision files>, images: <its image folder>}``: one model answers every task whose
  images one of them covers (image names repeat across experiments, e.g. ``airplane1.png`` is a
  silhouette and an edge drawing, so each file set is matched to its own folder only).
  An image no experiment covers is answered ``no_decision`` (a null trial).

Each answer carries ``extras.observer`` = the file's subject id, so a scorer can tell a human
observer's own file from a network's (it then compares it with the panel without that observer).
"""

from __future__ import annotations

import csv
import fnmatch
import functools
import glob
import hashlib
from pathlib import Path
from typing import Any, Literal

from PIL import Image
from pydantic import Field

from ..sources import DataError, Sources
from ..sources.store import file_sha256, get_release
from ..options import Options, PathOption
from .base import Generation, ModelAdapter, ModelError, ModelOptions, ModelSpec

COLUMNS = {"subject": "subj", "image": "imagename", "decision": "object_response"}


class Experiment(Options):
    name: str  # decision files
    images: PathOption  # their image folder


class DecisionsOptions(ModelOptions):
    images: PathOption  # the stimulus folder, a path or <release>:<prefix>
    columns: dict[Literal["subject", "image", "decision"], str] = Field(default_factory=dict)
    experiments: list[Experiment] = Field(default_factory=list)

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff"}
NO_DECISION = "no_decision"  # Generation.error code for an image the files do not cover


def pixel_key(image: Image.Image) -> str:
    """An image's identity as shown: its RGB pixels and size (not its file bytes)."""
    rgb = image.convert("RGB")
    return hashlib.sha256(f"{rgb.size}".encode() + rgb.tobytes()).hexdigest()


@functools.lru_cache(maxsize=4096)
def file_pixel_key(path: Path) -> str:
    """:func:`pixel_key` of an image file, once per process: a roster of published networks
    matches the same folders (verified files) once, not once per network."""
    with Image.open(path) as im:
        return pixel_key(im)


def image_name(value: str) -> str:
    """The stimulus file name a row refers to: ``0001_sif_dnn_0_airplane_00_airplane1.png`` ->
    ``airplane1.png``."""
    return Path(value).name.rsplit("_", 1)[-1]


class DecisionsModel(ModelAdapter):
    capabilities = frozenset({"generate"})
    Options = DecisionsOptions

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.columns = {**COLUMNS, **spec.options.get("columns", {})}
        # (decision files, image folder) per experiment, as written (a release prefix is not a path)
        self.experiments = [(spec.name, str(spec.options["images"]))] + [
            (str(e["name"]), str(e["images"])) for e in spec.options.get("experiments", [])]
        self._decisions: dict[tuple[int, str], str] | None = None  # (experiment, file name) -> decision
        self._by_pixels: dict[str, tuple[int, str]] = {}  # pixel key -> (experiment, file name)
        self.subject = ""
        self._files: dict[str, str] = {}  # decision file -> sha256

    # -- files ---------------------------------------------------------------------------------
    def _resolve(self, pattern: str, what: str) -> list[Path]:
        release, sep, rel = pattern.partition(":")
        if sep and not Path(pattern).exists():
            try:
                declared = get_release(release).files
                names = sorted(f for f in declared
                               if fnmatch.fnmatch(f, rel) or f.startswith(rel.rstrip("/") + "/"))
                sources = Sources()
                # of a set a mirror holds in part, the files here (the task shows only those)
                paths = [sources.path(release, f) for f in names if sources.present(release, f)]
            except DataError as e:
                raise ModelError(f"model {self.spec.id!r}: {what} {pattern!r}: {e}") from None
        else:
            root = Path(pattern)
            paths = ([p for p in sorted(root.rglob("*")) if p.is_file()] if root.is_dir()
                     else [Path(p) for p in sorted(glob.glob(pattern))])
        if not paths:
            raise ModelError(f"model {self.spec.id!r}: {what} {pattern!r} matches no file")
        return paths

    def _read(self) -> dict[tuple[int, str], str]:
        if self._decisions is not None:
            return self._decisions
        s, c = self.spec, self.columns
        decisions: dict[tuple[int, str], str] = {}
        subjects: set[str] = set()
        for k, (pattern, folder) in enumerate(self.experiments):
            rows: list[tuple[Path, dict[str, str]]] = []
            for path in self._resolve(pattern, "decisions"):
                with open(path, newline="") as f:
                    reader = csv.DictReader(f)
                    missing = set(c.values()) - set(reader.fieldnames or ())
                    if missing:
                        raise ModelError(f"model {s.id!r}: {path}: no column(s) {sorted(missing)} "
                                         f"(map them with options.columns)")
                    rows += [(path, row) for row in reader]
                self._files[str(path)] = file_sha256(path)
            subjects |= {row[c["subject"]] for _, row in rows}
            if len(subjects) != 1:
                raise ModelError(f"model {s.id!r}: {', '.join(p for p, _ in self.experiments[:k + 1])!r} "
                                 f"holds {len(subjects)} subjects ({', '.join(sorted(subjects))}); one "
                                 f"model is one subject's file(s)")
            for path, row in rows:
                name = image_name(row[c["image"]])
                if decisions.setdefault((k, name), row[c["decision"]]) != row[c["decision"]]:
                    raise ModelError(f"model {s.id!r}: {path}: two decisions for image {name}")
            images = [p for p in self._resolve(folder, "images") if p.suffix.lower() in IMAGE_SUFFIXES]
            for p in images:
                self._by_pixels.setdefault(file_pixel_key(p), (k, p.name))
            if not {name for j, name in decisions if j == k} & {p.name for p in images}:
                raise ModelError(f"model {s.id!r}: no decision of {pattern!r} names an image under "
                                 f"{folder!r}")
        self.subject = subjects.pop()
        self._decisions = decisions
        return decisions

    # -- the contract ----------------------------------------------------------------------------
    def check(self) -> None:
        self._read()

    @property
    def fingerprint(self) -> dict[str, Any]:
        self._read()
        # an image of the first experiment by its file name alone, as before experiments existed
        matching = "".join(sorted(f"{k}={f'{j}:' if j else ''}{name}\n"
                                  for k, (j, name) in self._by_pixels.items()))
        return {"source": "decisions", "files_sha256": sorted(self._files.values()),
                "columns": self.columns, "images_sha256": hashlib.sha256(matching.encode()).hexdigest()}

    @property
    def model_version(self) -> str:
        self._read()
        files = hashlib.sha256("".join(sorted(self._files.values())).encode()).hexdigest()
        return f"decisions:{self.subject}#{files[:12]}"

    def generate(self, image: Image.Image, prompt: str, settings: dict[str, Any]) -> Generation:
        decisions = self._read()
        key = self._by_pixels.get(pixel_key(image))
        if key is None or key not in decisions:
            return Generation(text=None, error=f"{NO_DECISION}: no recorded decision for this image",
                              extras={"observer": self.subject})
        return Generation(text=decisions[key], extras={"observer": self.subject})
