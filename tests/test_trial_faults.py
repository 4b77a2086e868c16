"""One odd answer or one failing model call is one null trial, never an aborted battery."""

from __future__ import annotations

import json
from typing import ClassVar

from harness.models.base import Generation, ModelAdapter, ModelSpec
from harness.readouts.prompt import PromptChoice
from harness.sources import Sources
from harness.stimuli.base import png_bytes
from harness.stimuli.registry import get_task
from harness.trials.distributed import Dist
from harness.trials.records import RecordStore
from harness.trials.runner import CountingAdapter, run_task
from tests.conftest import MIRROR

TASK = "similarity.chart.mark_color"


class Flaky(ModelAdapter):
    """Answers "3" (which the patched readout cannot record) for one stimulus, raises for another."""

    capabilities = frozenset({"generate"})
    fingerprint: ClassVar[dict[str, str]] = {"source": "test", "name": "flaky"}
    model_version = "flaky/1"

    def __init__(self, raises_on: bytes, odd_on: bytes):
        super().__init__(ModelSpec(id="flaky", source="test", name="flaky"))
        self.raises_on, self.odd_on = raises_on, odd_on

    def generate(self, image, prompt, settings):
        shown = png_bytes(image)
        if shown == self.raises_on:
            raise RuntimeError("adapter bug")
        return Generation(text="3" if shown == self.odd_on else "2")


def test_adapter_and_readout_exceptions_are_recorded_nulls(tmp_path, monkeypatch):
    task = get_task(TASK)
    stimset = task.build(Sources(mirror=MIRROR), seed=0)
    stimset.stimuli[:] = stimset.test[:6]  # the batch of 6 is tried whole, then item by item
    first, second = stimset.test[:2]

    def record(self, parsed, extras):
        if parsed.value == 3:
            raise KeyError("readout bug")
        return parsed

    monkeypatch.setattr(PromptChoice, "record", record)
    adapter = CountingAdapter(Flaky(png_bytes(first.image), png_bytes(second.image)), "cpu")
    spec = ModelSpec(id="flaky", source="test", name="flaky", batch_size=6)
    store = RecordStore(tmp_path / "records.jsonl")
    result = run_task(task, stimset, spec, adapter, store, readout_name="prompt_choice",
                      readout_options={}, seed=0, run_id="r", dist=Dist(), progress=False)

    by_id = {r["stimulus_id"]: r["parse_status"] for r in result.records}
    assert len(by_id) == 6
    assert by_id.pop(first.stimulus_id) == "null:api_error:RuntimeError"
    assert by_id.pop(second.stimulus_id) == "null:parse_error"
    assert set(by_id.values()) == {"ok"}
    written = [json.loads(x) for x in store.path.read_text().splitlines()]
    assert len(written) == 6 and "adapter bug" not in store.path.read_text()
