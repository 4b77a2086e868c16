"""Write a stimulus set to a folder for people to look at: one PNG per stimulus (and its parts)
plus ``index.csv`` with targets, so what a model was shown can be checked by eye."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .base import StimulusSet, png_bytes


def export_stimuli(stimset: StimulusSet, out: str | Path, split: str = "all") -> int:
    if stimset.unavailable:
        from ..errors import GestaltError

        raise GestaltError(f"{stimset.task_id}: unavailable: {stimset.unavailable}")
    out = Path(out)
    chosen = [s for s in stimset.stimuli if split == "all" or s.split == split]
    for sub in {s.split for s in chosen}:
        (out / sub).mkdir(parents=True, exist_ok=True)
    with open(out / "index.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["stimulus_id", "split", "file", "ground_truth", "human_target", "option_order",
                    "manipulated_value", "sha256"])
        for s in chosen:
            name = f"{s.split}/{s.stimulus_id}.png"
            (out / name).write_bytes(png_bytes(s.image))
            for k, part in enumerate(s.parts, 1):
                (out / f"{s.split}/{s.stimulus_id}.part{k}.png").write_bytes(png_bytes(part))
            w.writerow([s.stimulus_id, s.split, name, s.ground_truth, s.human_target,
                        json.dumps(list(s.option_order)) if s.option_order else "",
                        json.dumps(s.manipulated_value) if s.manipulated_value is not None else "",
                        s.sha256])
    if stimset.prompt:
        (out / "prompt.txt").write_text(stimset.prompt.text + "\n")
    return len(chosen)
