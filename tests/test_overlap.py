"""Stimulus preparation overlaps the model, and what does not depend on the
model is computed once per process; neither changes a single response or score."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from PIL import Image

from harness.models.base import ModelAdapter, ModelSpec
from harness.readouts.probes import PrototypeProbe
from harness.scores import agreement
from harness.scores.agreement import score_classification_vs_observers
from harness.scores.tasks import Bootstrap
from harness.stimuli.base import Stimulus, StimulusSet, png_bytes, prefetched
from harness.stimuli.registry import get_task
from harness.trials.distributed import Dist
from harness.trials.records import RecordStore
from harness.trials.runner import CountingAdapter, run_task


def _stimulus(i: int, render) -> Stimulus:
    return Stimulus(stimulus_id=f"s{i:02d}", split="test", ground_truth=str(i % 2),
                    image_source=lambda: render(i))


def _grey(i: int) -> Image.Image:
    return Image.new("RGB", (8, 8), (i, i, i))


def test_prefetch_prepares_the_next_batch_while_the_current_one_is_used():
    second_started = threading.Event()
    threads = []

    def render(i):
        threads.append(threading.current_thread().name)
        if i == 2:
            second_started.set()
        return _grey(i)

    batches = [[_stimulus(0, render), _stimulus(1, render)], [_stimulus(2, render), _stimulus(3, render)]]
    for s in (x for b in batches for x in b):
        s._sha256 = f"hash-{s.stimulus_id}"  # a generated image would be hashed by its parameters
    shown = prefetched(batches, "image")
    first = next(shown)
    # the consumer holds batch 0; batch 1 is being prepared meanwhile, not when asked for
    assert second_started.wait(timeout=60)
    rest = list(shown)
    assert [[s.stimulus_id for s in b] for b in [first, *rest]] == [["s00", "s01"], ["s02", "s03"]]
    assert all(isinstance(s.image_source, Image.Image) for s in first + rest[0])
    assert [s.sha256 for s in first] == ["hash-s00", "hash-s01"]  # the same stimulus to caches
    assert set(threads) == {"gestalt-prefetch_0"}


def test_prefetch_passes_through_what_it_cannot_load_and_what_it_is_not_asked_to():
    def render(i):
        if i == 1:
            raise OSError("truncated file")
        return _grey(i)

    batch = [_stimulus(0, render), _stimulus(1, render)]
    for s in batch:
        s._sha256 = "h"
    [loaded] = list(prefetched([batch], "image"))
    assert isinstance(loaded[0].image_source, Image.Image)
    assert loaded[1] is batch[1]  # its readout meets the error where it records a null
    assert list(prefetched([batch], None))[0] is batch


class Embeds(ModelAdapter):
    """Mean colour embedding; records the size of every call."""

    capabilities = frozenset({"embed"})
    fingerprint: ClassVar[dict[str, str]] = {"source": "test", "name": "mean-colour"}
    model_version = "mean-colour/1"

    def __init__(self, batch_size: int):
        super().__init__(ModelSpec(id="mean", source="test", name="mean", batch_size=batch_size))
        self.calls: list[int] = []

    def embed(self, images):
        self.calls.append(len(images))
        return np.array([np.asarray(im, float).reshape(-1, 3).mean(axis=0) + 1 for im in images])


def test_preparation_runs_beside_the_model_only_where_it_does_not_compete_with_it(monkeypatch):
    import torch

    from harness.models.device import prepares_beside

    cores = len(os.sched_getaffinity(0))
    assert prepares_beside("cuda:0") and prepares_beside("mps")
    monkeypatch.setattr(torch, "get_num_threads", lambda: cores)
    assert not prepares_beside("cpu") and not prepares_beside(None)  # torch has every core
    monkeypatch.setattr(torch, "get_num_threads", lambda: max(1, cores - 1))
    assert prepares_beside("cpu") == (cores > 1)  # a core left free for the preparing thread
    monkeypatch.delitem(sys.modules, "torch")
    assert prepares_beside("cpu")  # no torch model in this process (an API model)


def test_the_placed_device_is_none_until_the_model_runs_and_never_asks_auto():
    """What the battery's figures ask (BatteryRun's device): before the model's first call it
    is None, without resolving ``auto`` (which imports torch to look)."""
    def auto():
        raise AssertionError("device auto resolved before the model ran")

    assert CountingAdapter(Embeds(batch_size=16), auto).placed_device is None
    placed = CountingAdapter(Embeds(batch_size=16), "cpu")
    assert placed.placed_device is None
    placed.embed([Image.new("RGB", (8, 8))])
    assert placed.placed_device == "cpu" and placed.calls == 1


@pytest.mark.parametrize("beside", [True, False])
def test_the_runner_prefetches_as_the_device_allows(tmp_path, sources, monkeypatch, beside):
    task = get_task("closure.nat.silhouette")
    stimset = task.build(sources, seed=0)
    asked = []

    def spy(batches, what):
        asked.append(what)
        return iter(batches)

    monkeypatch.setattr("harness.trials.runner.prepares_beside", lambda device: beside)
    monkeypatch.setattr("harness.trials.runner.prefetched", spy)
    monkeypatch.setattr("harness.readouts.base.prefetched", spy)
    spec = ModelSpec(id="mean", source="test", name="mean", batch_size=16)
    run_task(task, stimset, spec, CountingAdapter(Embeds(batch_size=16), "cpu"), RecordStore(tmp_path / "r.jsonl"),
             readout_name="prototype", readout_options={}, seed=0, run_id="r", dist=Dist(), progress=False)
    # the probe's training images, then the test trials
    assert asked == (["image", "image"] if beside else [None, None])


def test_probe_train_split_is_embedded_a_model_batch_at_a_time_and_unchanged():
    train = [Stimulus(f"t{i}", "train", str(i % 3), _grey(20 * i)) for i in range(7)]
    stimset = StimulusSet("t", "1", "label", train, "none")
    model = Embeds(batch_size=3)
    probe = PrototypeProbe(stimset)
    probe.prepare(model)
    assert model.calls == [3, 3, 1]
    whole = model.embed([s.image for s in train])
    expected = np.stack([whole[[i for i in range(7) if i % 3 == c]].mean(axis=0) for c in range(3)])
    assert probe.classes == ["0", "1", "2"] and np.allclose(probe.prototypes, expected)


def test_a_run_with_prefetch_records_what_a_run_without_it_records(tmp_path, sources, monkeypatch):
    task = get_task("closure.nat.silhouette")
    stimset = task.build(sources, seed=0)

    def run(folder):
        adapter = CountingAdapter(Embeds(batch_size=16), "cpu")
        spec = ModelSpec(id="mean", source="test", name="mean", batch_size=16)
        return run_task(task, stimset, spec, adapter, RecordStore(folder / "r.jsonl"),
                        readout_name="prototype", readout_options={}, seed=0, run_id="r",
                        dist=Dist(), progress=False).records

    monkeypatch.setattr("harness.trials.runner.prepares_beside", lambda device: True)
    with_prefetch = run(tmp_path / "a")
    monkeypatch.setattr("harness.trials.runner.prefetched", lambda batches, what: iter(batches))
    monkeypatch.setattr("harness.readouts.base.prefetched", lambda batches, what: iter(batches))
    without = run(tmp_path / "b")
    keep = ("stimulus_id", "response", "stimulus_sha256", "cache_key", "extras")
    assert [{k: r.get(k) for k in keep} for r in with_prefetch] == \
        [{k: r.get(k) for k in keep} for r in without]
    assert png_bytes(stimset.test[0].image) == png_bytes(stimset.test[0].loaded("image").image)


def test_panel_references_are_computed_once_per_panel_and_equal_a_fresh_computation(sources, monkeypatch):
    from harness.stimuli.silhouette import build

    stimset = build(sources)
    boot = Bootstrap(n_boot=200, n_boot_kappa=200)
    calls = []
    real = agreement.two_level_pairwise_kappa  # runs only inside the panel's references

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(agreement, "two_level_pairwise_kappa", counted)
    agreement.panel_references.cache_clear()

    def scores(answer):
        recs = [{"stimulus_id": s.stimulus_id, "response": answer(s), "parse_status": "ok"}
                for s in stimset.test]
        return [s.to_dict() for s in score_classification_vs_observers(recs, stimset, boot=boot)]

    first = scores(lambda s: s.ground_truth)
    second = scores(lambda s: s.human_target)  # another model, the same panel
    assert len(calls) == 1
    agreement.panel_references.cache_clear()
    assert scores(lambda s: s.human_target) == second  # memo and fresh computation agree
    assert len(calls) == 2
    humans = [s for s in first if s["name"].startswith("human_")]
    assert humans == [s for s in second if s["name"].startswith("human_")]
    # another bootstrap is another input
    score_classification_vs_observers(
        [{"stimulus_id": s.stimulus_id, "response": s.ground_truth, "parse_status": "ok"} for s in stimset.test],
        stimset, boot=Bootstrap(n_boot=200, n_boot_kappa=300))
    assert len(calls) == 3


@pytest.mark.parametrize("a, b, same", [
    (np.array([1, 2, 3]), np.array([1, 2, 3]), True),
    (np.array([1, 2, 3]), np.array([1, 2, 4]), False),
    (np.array([1, 2, 3]), np.array([1.0, 2.0, 3.0]), False),  # dtype is part of the content
    (np.array([[1, 2], [3, 4]]), np.array([1, 2, 3, 4]), False),  # so is the shape
])
def test_once_per_input_keys_on_array_content(a, b, same):
    from harness.scores.bootstrap import once_per_input

    seen = []

    @once_per_input
    def f(x, k):
        seen.append(1)
        return x.sum() * k

    f(a, 2)
    f(b.copy(), 2)
    assert len(seen) == (1 if same else 2)
    f(a, 3)
    assert len(seen) == (2 if same else 3)


def test_a_runs_figures_are_rendered_in_the_background_then_logged_and_closed(tmp_path):
    from mlflow import MlflowClient

    from harness.reports.figures import plt
    from harness.tracking.mlflow_run import BatteryRun
    from tests.test_cli import write_modal_human_records
    from tests.test_reports import battery_scores

    rendered_in = {}
    started, drawn = threading.Event(), threading.Event()

    def figure(name, before=None, after=None):
        fig, ax = plt.subplots(figsize=(2, 2))
        drawn_figures.append(fig)
        ax.plot([0, 1], [0, 1])
        real = fig.savefig

        def save(*a, **k):
            rendered_in[name] = (threading.current_thread().name,
                                 os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            if before:
                before()
            real(*a, **k)
            if after:
                after()
        fig.savefig = save
        return fig

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = write_modal_human_records(tmp_path / "closure.nat.silhouette.jsonl")
    records = RecordStore(path).read()
    scores = battery_scores(0.5)["closure.nat.silhouette"]
    # the first figure holds the background thread until the second one is saved
    first, second = "closure.nat.silhouette.accuracy_vs_kappa.png", "closure.nat.silhouette.confusion.png"
    drawn_figures = []
    figs = {first: figure(first, before=lambda: (started.set(), drawn.wait(60))),
            second: figure(second, after=drawn.set)}
    with BatteryRun(uri=uri, experiment="figs", run_name="m", tags={},
                    tasks=["closure.nat.silhouette"]) as run:
        run.log_task("closure.nat.silhouette", scores, records, figs, path)
        assert started.wait(60)
        run.log_battery(intervals={}, recipe={}, recipe_sha256="f" * 64, stimulus_sets={})
    # saved in the background, at the lowest CPU priority: in the gaps the model leaves; what
    # that thread had not started when the battery ended, the main thread saved instead of waiting
    assert rendered_in == {first: ("gestalt-figures_0", 19), second: ("MainThread", os.getpriority(os.PRIO_PROCESS, 0))}
    logged = [a.path for a in MlflowClient(uri).list_artifacts(run.run_id, "figures")]
    assert logged == [f"figures/{name}" for name in sorted(figs)]
    local = MlflowClient(uri).download_artifacts(run.run_id, logged[0], str(tmp_path / "dl"))
    assert Image.open(local).size == (300, 300)  # 2 x 2 inches at the report's 150 dpi
    assert len(drawn_figures) == 2 and not any(plt.fignum_exists(fig.number) for fig in drawn_figures)

    # a run that fails before its end still waits for and closes its figures, logging none, and
    # logs the records of the tasks it finished
    drawn_figures.clear()
    failing = {"closure.nat.silhouette.confusion.png": figure("failing")}
    with pytest.raises(RuntimeError), \
            BatteryRun(uri=uri, experiment="figs", run_name="m2", tags={},
                       tasks=["closure.nat.silhouette"]) as run:
        run.log_task("closure.nat.silhouette", scores, records, failing, path)
        raise RuntimeError("crash")
    assert MlflowClient(uri).list_artifacts(run.run_id, "figures") == []
    assert [a.path for a in MlflowClient(uri).list_artifacts(run.run_id, "records")] == [
        "records/closure.nat.silhouette.jsonl"]
    assert not any(plt.fignum_exists(fig.number) for fig in drawn_figures)


@pytest.mark.parametrize("device, saved_by", [("cuda:0", "gestalt-figures_0"), ("cpu", "MainThread")])
def test_a_figure_is_saved_beside_the_model_only_where_that_leaves_the_model_its_cores(tmp_path, device, saved_by):
    """On a GPU the figure thread renders while the model works; where torch's threads hold
    every core (a CPU run), the task saves its own figures in the main thread and no figure
    thread starts to take a core from the model."""
    import torch
    from mlflow import MlflowClient

    from harness.reports.figures import plt
    from harness.tracking.mlflow_run import BatteryRun
    from tests.test_cli import write_modal_human_records
    from tests.test_reports import battery_scores

    saved_in = []
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    real = fig.savefig
    fig.savefig = lambda *a, **k: (saved_in.append(threading.current_thread().name), real(*a, **k))[1]
    path = write_modal_human_records(tmp_path / "closure.nat.silhouette.jsonl")
    threads = torch.get_num_threads()
    torch.set_num_threads(len(os.sched_getaffinity(0)))  # torch on every core, as a CPU run sets it
    try:
        with BatteryRun(uri=f"sqlite:///{tmp_path}/mlflow.db", experiment="figs", run_name="m", tags={},
                        tasks=["closure.nat.silhouette"], device=lambda: device) as run:
            run.log_task("closure.nat.silhouette", battery_scores(0.5)["closure.nat.silhouette"],
                         RecordStore(path).read(), {"closure.nat.silhouette.confusion.png": fig}, path)
            started = any(t.name.startswith("gestalt-figures") for t in threading.enumerate())
            run.log_battery(intervals={}, recipe={}, recipe_sha256="f" * 64, stimulus_sets={})
    finally:
        torch.set_num_threads(threads)
    assert saved_in == [saved_by] and started == (device != "cpu")
    assert [a.path for a in MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").list_artifacts(run.run_id, "figures")] \
        == ["figures/closure.nat.silhouette.confusion.png"]


def test_training_curves_are_one_store_write_and_the_checkpoint_is_staged(tmp_path, monkeypatch):
    """A model trained for a task logs its curves as a batch (a thousand metrics per store
    write, MLflow's limit), not a store write per epoch; its checkpoint is logged with the run's
    other artifacts in one call."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from harness.tracking.mlflow_run import BatteryRun

    writes, single_files = [], []
    real_batch = SqlAlchemyStore.log_batch
    monkeypatch.setattr(SqlAlchemyStore, "log_batch", lambda self, run_id, metrics, params, tags, **k: (
        writes.append(len(metrics)), real_batch(self, run_id, metrics, params, tags, **k))[1])
    monkeypatch.setattr(mlflow, "log_artifact", lambda *a, **k: single_files.append(a))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ckpt = tmp_path / "net.pt"
    ckpt.write_bytes(b"weights")
    task = "ratio.chart.grape_type1"
    one_fold = [{"epoch": e, "train_loss": 1.0 / e, "val_loss": 2.0 / e, "seconds": 0.5} for e in range(1, 121)]
    with BatteryRun(uri=uri, experiment="train", run_name="m", tags={},
                    tasks=[task, "ratio.chart.grape_type2"]) as run:
        writes.clear()
        run.log_training(task, [one_fold], {"checkpoint": ckpt})
        assert writes == [360]  # 120 epochs x 3 curves, one write
        writes.clear()
        run.log_training("ratio.chart.grape_type2", [one_fold] * 3, {})
        assert writes == [1000, 80]  # 3 folds: 1080 metrics in writes of at most 1000
    client = MlflowClient(uri)
    curve = client.get_metric_history(run.run_id, f"{task}/train/val_loss")
    assert [m.step for m in curve] == list(range(1, 121)) and curve[-1].value == 2.0 / 120
    assert len(client.get_metric_history(run.run_id, "ratio.chart.grape_type2/train/fold2/train_loss")) == 120
    assert single_files == []
    assert [a.path for a in client.list_artifacts(run.run_id, f"models/{task}")] == [f"models/{task}/net.pt"]
    local = client.download_artifacts(run.run_id, f"models/{task}/net.pt", str(tmp_path / "dl"))
    assert Path(local).read_bytes() == b"weights"
