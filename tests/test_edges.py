"""``closure.nat.edges``, and ``images: all`` for it and the silhouettes.

The observers' references and the published networks' accuracy and kappa are recomputed here
from the CSVs with the standard library, never with the harness's functions."""

import csv
import itertools
import re
import statistics

import pytest
import yaml

from harness.scores.agreement import score_classification_vs_observers
from harness.scores.tasks import Bootstrap
from harness.stimuli import edges, silhouette
from harness.stimuli.registry import BATTERIES, TASKS, get_task
from tests.conftest import MIRROR, REPO

RAW = {"closure.nat.edges": MIRROR / "geirhos-edges-cue-conflict/raw-data/edge-experiment",
       "closure.nat.silhouette": MIRROR / "geirhos-silhouettes/raw-data/silhouette-filled-experiment"}
BOOT = Bootstrap(n_boot=200, n_boot_kappa=200)


def correct(path, images=range(1, 11)):
    """image ('oven10') -> answered the true class ('na' is not), over the images numbered in ``images``."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for row in rows:
        image = row["imagename"].rsplit("_", 1)[-1][:-len(".png")]
        if int(re.sub(r"\D", "", image)) in images:
            out[image] = row["object_response"] == row["category"]
    return out


def kappa(m, p):
    a_m, a_h = statistics.mean(m), statistics.mean(p)
    c_obs = statistics.mean(x * y + (1 - x) * (1 - y) for x, y in zip(m, p))
    c_exp = a_m * a_h + (1 - a_m) * (1 - a_h)
    return (c_obs - c_exp) / (1 - c_exp)


def panel(task, images=range(1, 11)):
    return [correct(p, images) for p in sorted(RAW[task].glob("*_subject-*_session_1.csv"))]


def modal_records(stimset):
    return [{"stimulus_id": s.stimulus_id, "parse_status": "ok", "response": s.human_target, "extras": {}}
            for s in stimset.test]


def test_edges_is_a_task_of_the_texture_vs_shape_battery():
    assert BATTERIES["texture_vs_shape"] == ["closure.nat.silhouette", "closure.nat.edges", "shape.nat.cue_conflict"]
    assert "closure.nat.silhouette" in BATTERIES["gestalt"] and len(BATTERIES["gestalt"]) == 4
    assert TASKS["closure.nat.edges"].readouts == TASKS["closure.nat.silhouette"].readouts
    assert edges.PROMPT.text.startswith("What object is shown in this line drawing? Choose exactly one: airplane")


def test_gestalt_tasks_lists_the_battery_with_each_of_its_tasks():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "harness.cli", "tasks"], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout.splitlines()
    line = {row.split()[0]: row for row in out}
    assert "[gestalt, texture_vs_shape]" in line["closure.nat.silhouette"]
    assert "[texture_vs_shape]" in line["closure.nat.edges"] and "[texture_vs_shape]" in line["shape.nat.cue_conflict"]


def test_edges_split_and_observer_panel_from_the_csvs(sources):
    stimset = edges.build(sources)
    assert (len(stimset.train), len(stimset.test)) == (80, 80)
    assert {int(re.sub(r"\D", "", s.meta["image"])) for s in stimset.test} == set(range(6, 11))
    people = panel("closure.nat.edges", range(6, 11))
    images = [s.meta["image"] for s in stimset.test]
    assert stimset.human.correct.tolist() == [[obs[i] for i in images] for obs in people]
    assert stimset.human.paper_ranges == {}  # the paper gives no observer ranges for the edges


def test_edges_human_references_on_all_160_images_match_the_source(sources):
    """SOURCE.md: accuracy per observer 0.613-0.956, mean pairwise kappa 0.318 (0.103-0.610),
    over all 160 images: recomputed here, and what the scorer reports with images: all."""
    people = panel("closure.nat.edges")
    images = sorted(people[0])
    acc = [statistics.mean(map(float, obs.values())) for obs in people]
    pairs = [kappa([float(a[i]) for i in images], [float(b[i]) for i in images])
             for a, b in itertools.combinations(people, 2)]
    assert (round(min(acc), 3), round(max(acc), 3)) == (0.613, 0.956)
    assert (round(statistics.mean(pairs), 3), round(min(pairs), 3), round(max(pairs), 3)) == (0.318, 0.103, 0.610)
    stimset = get_task("closure.nat.edges").build(sources, images="all")
    assert (len(stimset.train), len(stimset.test)) == (0, 160)
    scores = {s.name: s for s in score_classification_vs_observers(modal_records(stimset), stimset, boot=BOOT)}
    ceiling = scores["human_kappa_pairwise"]
    assert ceiling.value == pytest.approx(statistics.mean(pairs), abs=1e-12) and ceiling.n == 160
    assert (ceiling.extra["range_min"], ceiling.extra["range_max"]) == pytest.approx((min(pairs), max(pairs)))
    assert "paper_range" not in ceiling.extra and "all 160 images" in ceiling.method
    human = scores["human_accuracy"]
    assert (human.extra["range_min"], human.extra["range_max"]) == pytest.approx((min(acc), max(acc)))


def published_entries():
    """The five networks that answer the silhouettes and the edges, as recipes/published-cnns.yaml
    declares them."""
    models = yaml.safe_load((REPO / "recipes/published-cnns.yaml").read_text())["models"]
    return [m for m in models if "tasks" not in m]


FILES = {"closure.nat.edges": {
    "alexnet": "edge-experiment_alexnet_session_1.csv", "googlenet": "edge-experiment_googlenet_session_1.csv",
    "vgg": "edge-experiment_vgg_session_1.csv",
    "resnet50": "../edge-experiment-trained-CNNs/edge-experiment_resnet50_session-1.csv",
    "resnet50-60ep": "../edge-experiment-trained-CNNs/edge-experiment_resnet50_train_60_epochs_session-1.csv"},
    "closure.nat.silhouette": {
    "alexnet": "silhouette-filled-experiment_alexnet_session_1.csv",
    "googlenet": "silhouette-filled-experiment_googlenet_session_1.csv",
    "vgg": "silhouette-filled-experiment_vgg_session_1.csv",
    "resnet50": "../silhouette-filled-experiment-trained-CNNs/silhouette-filled-experiment_resnet50_session-1.csv",
    "resnet50-60ep": "../silhouette-filled-experiment-trained-CNNs/"
                     "silhouette-filled-experiment_resnet50_train_60_epochs_session-1.csv"}}


def test_published_networks_on_all_160_images_equal_the_recomputation(write_recipe, monkeypatch):
    """images: all, where the readout trains nothing: each network's accuracy and kappa on all 160
    silhouettes and all 160 edge drawings, against the ten observers, as recomputed from the CSVs."""
    from harness.recipes import load_recipe
    from harness.run import run_recipe

    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    tasks = ["closure.nat.silhouette", "closure.nat.edges"]
    path = write_recipe(published_entries(), tasks, bootstrap={"n_boot": 100, "n_boot_kappa": 100},
                        task_options={t: {"images": "all"} for t in tasks}, tracking={"enabled": False})
    results = {r.model_id: r for r in run_recipe(load_recipe(path), echo=lambda *_: None)}
    assert set(results) == set(FILES["closure.nat.edges"])
    for task in tasks:
        people = panel(task)
        for model, name in FILES[task].items():
            own = correct(RAW[task] / name)
            images = sorted(own)
            m = [float(own[i]) for i in images]
            p = [statistics.mean(float(obs[i]) for obs in people) for i in images]
            got = {s.name: s for s in results[model].scores[task]}
            assert got["accuracy"].n == 160 and got["accuracy"].nulls == 0
            assert got["accuracy"].value == pytest.approx(statistics.mean(m), abs=1e-12), (task, model)
            assert got["kappa"].value == pytest.approx(kappa(m, p), abs=1e-12), (task, model)


def test_a_probe_refuses_images_all_in_one_line(write_recipe, capsys):
    from harness.cli import main

    encoder = {"id": "tiny", "source": "timm", "name": "resnet10t", "weights": "random"}  # not loaded
    path = write_recipe([encoder], ["closure.nat.edges"], task_options={"closure.nat.edges": {"images": "all"}})
    with pytest.raises(SystemExit) as stop:
        main(["recipe", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1, err
    assert "readout prototype fits its class prototypes on the probe-train split" in err
    assert "images: split" in err


def test_images_all_for_the_silhouettes_keeps_every_reference_on_the_same_images(sources):
    split = silhouette.build(sources)
    every = silhouette.build(sources, images="all")
    assert len(every.test) == 160 and not every.train
    assert {s.stimulus_id for s in every.test} == {s.stimulus_id for s in split.stimuli}
    scores = {s.name: s for s in score_classification_vs_observers(modal_records(every), every, boot=BOOT)}
    truth = [s.ground_truth for s in every.test]
    assert scores["accuracy"].floor == 1 / 16 and scores["B"].n == 160
    modal = [s.human_target for s in every.test]
    assert scores["B"].floor == max(modal.count(x) for x in set(modal)) / 160
    assert scores["human_kappa_pairwise"].extra["paper_range"] == [0.150, 0.812]
    assert truth.count("cat") == 10


def test_imagenet_classifiers_answer_through_model_vs_humans_16_class_mapping(write_recipe, monkeypatch):
    """readout imagenet16: the mean softmax probability over each class's ImageNet indices (read
    here with json from the mapping's file), the highest wins; nothing is fitted, so images: all
    runs, every trial answered."""
    import json

    from harness.models.base import ModelSpec
    from harness.models.registry import build_adapter
    from harness.readouts.imagenet16 import ImageNet16
    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from harness.sources import Sources

    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    stimset = edges.build(Sources(mirror=MIRROR), images="all")
    model = build_adapter(ModelSpec(id="tiny", source="timm", name="resnet10t", weights="random"))
    batch = stimset.test[::10]
    probabilities = model.classify([s.image for s in batch])
    assert probabilities.shape == (16, 1000) and probabilities.sum(axis=1) == pytest.approx(1, abs=1e-4)
    indices = json.loads((MIRROR / "imagenet-16-class-mapping/indices.json").read_text())["categories"]
    expected = [max(stimset.options, key=lambda c: sum(row[i] for i in indices[c]) / len(indices[c]))
                for row in probabilities.tolist()]
    assert [r.response for r in ImageNet16(stimset).respond(model, batch)] == expected
    entry = {"id": "tiny", "source": "timm", "name": "resnet10t", "weights": "random",
             "readouts": {"closure.nat.edges": "imagenet16"}}
    path = write_recipe([entry], ["closure.nat.edges"], task_options={"closure.nat.edges": {"images": "all"}},
                        tracking={"enabled": False})
    (result,) = run_recipe(load_recipe(path), echo=lambda *_: None)
    accuracy = {s.name: s for s in result.scores["closure.nat.edges"]}["accuracy"]
    assert (accuracy.n, accuracy.nulls) == (160, 0)
