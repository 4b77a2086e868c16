"""``shape.nat.cue_conflict``: the shape bias of Geirhos et al. (2019), its observers and the
published networks.

Every reference number is recomputed here from the CSVs with the standard library (csv, re) and
plain arithmetic, never with the harness's functions, and compared with what the harness gives:
the published-CNN recipe on the images the mirror holds, and the scorer on all 1,280 trials."""

import csv
import dataclasses
import re
import statistics

import numpy as np
import pytest

from harness.scores.shape_bias import score_shape_bias
from harness.scores.tasks import Bootstrap
from harness.sources import RELEASES, DataError, Sources
from harness.stimuli import cue_conflict
from tests.conftest import MIRROR, REPO

RELEASE = "geirhos-edges-cue-conflict"
RAW = MIRROR / RELEASE / "raw-data"
CUE = "style-transfer-512-nomask-experiment"
CUE_DIR = MIRROR / RELEASE / "stimuli/style-transfer-preprocessed-512"
BOOT = Bootstrap(n_boot=200, n_boot_kappa=200)
# the recipe's networks: (edge-experiment file or None, cue-conflict file), as published
NETWORKS = {
    "alexnet": ("edge-experiment/edge-experiment_alexnet_session_1.csv", f"{CUE}/{CUE}_alexnet_session_1.csv"),
    "googlenet": ("edge-experiment/edge-experiment_googlenet_session_1.csv", f"{CUE}/{CUE}_googlenet_session_1.csv"),
    "vgg": ("edge-experiment/edge-experiment_vgg_session_1.csv", f"{CUE}/{CUE}_vgg_session_1.csv"),
    "resnet50": ("edge-experiment-trained-CNNs/edge-experiment_resnet50_session-1.csv",
                 f"{CUE}-trained-CNNs/{CUE}_resnet50_session-1.csv"),
    "resnet50-60ep": ("edge-experiment-trained-CNNs/edge-experiment_resnet50_train_60_epochs_session-1.csv",
                      f"{CUE}-trained-CNNs/{CUE}_resnet50_train_60_epochs_session-1.csv"),
    **{model: (None, f"{CUE}-trained-CNNs/{CUE}_{name}_session-1.csv") for model, name in [
        ("alexnet-trained-cnns", "alexnet"), ("alexnet-60ep", "alexnet_train_60_epochs_lr0.001"),
        ("vgg16", "vgg16"), ("vgg16-60ep", "vgg16_train_60_epochs_lr0.01"),
        ("squeezenet1-1", "squeezenet1_1"), ("squeezenet1-1-60ep", "squeezenet1_1_train_60_epochs_lr0.001"),
        ("densenet121", "densenet121"), ("densenet121-60ep", "densenet121_train_60_epochs"),
        ("resnet101", "resnet101"), ("resnet152", "resnet152"), ("oidv2-resnet101", "oidv2-resnet101")]},
}


# -- independent recomputation ------------------------------------------------------------------

def answers(path):
    """image ('bird3-bird2', 'oven10') -> (response, category)."""
    with open(path, newline="") as f:
        return {row["imagename"].rsplit("_", 1)[-1][:-len(".png")]: (row["object_response"], row["category"])
                for row in csv.DictReader(f)}


def texture_of(image):
    return re.sub(r"\d+", "", image.split("-")[1])


def shape_bias(path, images=None):
    n_shape = n_texture = 0
    for image, (response, shape) in answers(path).items():
        if texture_of(image) == shape or (images is not None and image not in images):
            continue  # no conflict (left out as in the paper), or not among the images scored
        n_shape += response == shape
        n_texture += response == texture_of(image)
    return n_shape / (n_shape + n_texture)


def observers():
    return sorted((RAW / CUE).glob("*_subject-*_session_1.csv"))


def edge_kappa(path):
    """Aggregate error consistency on images 6-10 against the 10 observers' per-image accuracy."""
    def correct(p):
        return {i: r == c for i, (r, c) in answers(p).items() if int(re.sub(r"\D", "", i)) >= 6}

    model = correct(path)
    panel = [correct(p) for p in sorted((RAW / "edge-experiment").glob("*_subject-*.csv"))]
    images = sorted(model)
    m = [float(model[i]) for i in images]
    p = [statistics.mean(float(obs[i]) for obs in panel) for i in images]
    a_m, a_h = statistics.mean(m), statistics.mean(p)
    c_obs = statistics.mean(mi * pi + (1 - mi) * (1 - pi) for mi, pi in zip(m, p))
    c_exp = a_m * a_h + (1 - a_m) * (1 - a_h)
    return (c_obs - c_exp) / (1 - c_exp)


def present_images():
    return {p.stem for p in CUE_DIR.rglob("*.png")}


def test_the_sources_facts_recomputed_from_the_csvs():
    """SOURCE.md's shape-bias facts (all 1,280 trials) from the CSVs: the independent functions
    these tests compare the harness with reproduce the published values."""
    people = [shape_bias(p) for p in observers()]
    assert round(statistics.mean(people), 3) == 0.958
    assert (round(min(people), 3), round(max(people), 3)) == (0.919, 0.987)
    for model, expected in (("resnet50", 0.221), ("resnet50-60ep", 0.806), ("vgg16", 0.092), ("alexnet", 0.429)):
        assert round(shape_bias(RAW / NETWORKS[model][1]), 3) == expected, model


# -- the stimuli --------------------------------------------------------------------------------

def test_conflict_images_are_the_test_split_and_the_rest_trains_a_probe(sources):
    stimset = cue_conflict.build(sources)
    held = present_images()
    conflict = {i for i in held if texture_of(i) != i.split("-")[0].rstrip("0123456789")}
    assert {s.meta["image"] for s in stimset.test} == conflict and len(conflict) == 150
    assert {s.meta["image"] for s in stimset.train} == held - conflict and len(held - conflict) == 80
    assert all(s.meta["shape"] != s.meta["texture"] == texture_of(s.meta["image"]) for s in stimset.test)
    assert "230 of the 1280 cue-conflict images" in stimset.note
    assert "230 of the 1280" in stimset.human.split and "never sees a conflict image" in stimset.human.split
    raw = {p.name.split("_")[1]: answers(p) for p in observers()}
    for s in stimset.test[:20]:
        votes = [raw[o][s.meta["image"]][0] for o in sorted(raw)]
        assert s.meta["observer_responses"] == votes
        assert votes.count(s.human_target) == max(votes.count(v) for v in set(votes) - {"na"})


def records_from(path, stimset):
    by_image = answers(path)
    return [{"stimulus_id": s.stimulus_id, "parse_status": "ok", "response": by_image[s.meta["image"]][0],
             "extras": {}} for s in stimset.test]


@pytest.fixture(scope="module")
def full_set(sources):
    """The task built on all 1,280 images: the absent files stood in by their declared paths (the
    scorer never decodes an image)."""
    everything = Sources(mirror=MIRROR)
    everything.present = lambda release, relpath: True
    everything.path = lambda release, relpath: MIRROR / release / relpath
    return cue_conflict.build(everything)


def test_shape_bias_on_all_1280_trials_equals_the_recomputation(full_set):
    assert len(full_set.test) == 1200 and len(full_set.train) == 80 and full_set.note is None
    for model in ("resnet50", "resnet50-60ep", "vgg16", "alexnet"):
        scores = {s.name: s for s in score_shape_bias(records_from(RAW / NETWORKS[model][1], full_set),
                                                      full_set, boot=BOOT)}
        assert scores["shape_bias"].value == pytest.approx(shape_bias(RAW / NETWORKS[model][1]), abs=1e-12)
        assert scores["shape_bias"].ci_low < scores["shape_bias"].value < scores["shape_bias"].ci_high
        shares = [scores[f"{k}_share"].value for k in ("shape", "texture", "other")]
        assert sum(shares) == pytest.approx(1) and "accuracy" not in scores
    human = scores["human_shape_bias"]
    people = [shape_bias(p) for p in observers()]
    assert human.value == pytest.approx(statistics.mean(people), abs=1e-12)
    assert (human.extra["range_min"], human.extra["range_max"]) == pytest.approx((min(people), max(people)))
    assert human.ci_low < human.value < human.ci_high
    # resampling observers too widens the interval
    assert human.extra["ci_high_two_level"] - human.extra["ci_low_two_level"] > human.ci_high - human.ci_low
    assert "all 1280 cue-conflict images" in human.method


def test_per_class_shape_bias_pools_by_shape_class(full_set):
    path = RAW / NETWORKS["resnet50"][1]
    scores = {s.name: s for s in score_shape_bias(records_from(path, full_set), full_set, boot=BOOT)}
    for cls in ("cat", "knife", "truck"):
        s = t = 0
        for image, (response, shape) in answers(path).items():
            if shape == cls and texture_of(image) != cls:
                s, t = s + (response == cls), t + (response == texture_of(image))
        got = scores["shape_bias"].extra["per_class"][cls]
        assert (got["n_shape"], got["n_texture"]) == (s, t) and got["shape_bias"] == pytest.approx(s / (s + t))


def test_hand_made_responders(full_set):
    test = full_set.test
    always_shape = [{"stimulus_id": s.stimulus_id, "parse_status": "ok", "response": s.meta["shape"]} for s in test]
    always_texture = [{**r, "response": s.meta["texture"]} for r, s in zip(always_shape, test)]
    other = [{**r, "response": next(c for c in full_set.options if c not in (s.meta["shape"], s.meta["texture"]))}
             for r, s in zip(always_shape, test)]
    nulls = [{**r, "parse_status": "null:unparseable", "response": None} for r in always_shape]
    by = {name: {s.name: s for s in score_shape_bias(recs, full_set, boot=BOOT)}
          for name, recs in (("shape", always_shape), ("texture", always_texture), ("other", other),
                             ("null", nulls))}
    assert by["shape"]["shape_bias"].value == 1 and by["shape"]["shape_share"].value == 1
    assert by["texture"]["shape_bias"].value == 0 and by["texture"]["texture_share"].value == 1
    assert by["other"]["shape_bias"].value is None and by["other"]["other_share"].value == 1
    assert by["null"]["shape_bias"].value is None and by["null"]["shape_bias"].nulls == 1200
    with pytest.raises(ValueError, match="no record for 1 test stimuli"):
        score_shape_bias(always_shape[1:], full_set, boot=BOOT)


# -- the published networks ---------------------------------------------------------------------

def test_published_cnns_recipe_equals_the_recomputation(tmp_path, monkeypatch):
    """`gestalt recipe recipes/published-cnns.yaml` (the Python API it calls): every network's
    shape bias on the conflict images the mirror holds, and each edge network's kappa on images
    6-10, equal the recomputation from the CSVs."""
    from harness.recipes import load_recipe
    from harness.run import run_recipe

    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    recipe = load_recipe(REPO / "recipes/published-cnns.yaml", {
        "output_dir": str(tmp_path / "out"), "tracking.enabled": False, "runtime.progress": False,
        "data.mirror": str(MIRROR), "bootstrap.n_boot": 100, "bootstrap.n_boot_kappa": 100})
    results = {r.model_id: r for r in run_recipe(recipe, echo=lambda *_: None)}
    assert set(results) == set(NETWORKS)
    held = present_images()
    for model, (edges, cue) in NETWORKS.items():
        scores = results[model].scores
        bias = {s.name: s for s in scores["shape.nat.cue_conflict"]}["shape_bias"]
        assert bias.n == 150 and bias.nulls == 0
        assert bias.value == pytest.approx(shape_bias(RAW / cue, held), abs=1e-12), model
        assert "230 of the 1280" in bias.method
        if edges is None:
            assert set(scores) == {"shape.nat.cue_conflict"}, model  # decisions for cue-conflict only
            continue
        kappa = {s.name: s for s in scores["closure.nat.edges"]}["kappa"]
        assert kappa.n == 80 and kappa.value == pytest.approx(edge_kappa(RAW / edges), abs=1e-12), model


# -- the full set by URL ------------------------------------------------------------------------

def test_absent_images_are_pulled_by_url_unless_offline(tmp_path, monkeypatch):
    """A data root holding part of the set: offline, the task runs on what is there and says so;
    with a network, the rest is downloaded at the pinned commit and sha256-checked."""
    from tests.test_downloads import Mirror

    rel = RELEASES[RELEASE]
    images = sorted(f for f in rel.files if f.startswith(cue_conflict.FOLDER)
                    and (MIRROR / RELEASE / f).is_file())
    kept = [f for f in rel.files if not f.startswith(cue_conflict.FOLDER)] + images
    small = dataclasses.replace(rel)
    small.__dict__["files"] = {f: rel.files[f] for f in kept}  # the release, cut to what the mirror has
    monkeypatch.setitem(RELEASES, RELEASE, small)
    url = rel.url("DATASET_LICENSE").removesuffix("DATASET_LICENSE")
    tree = tmp_path / "web" / url.split("://", 1)[1].split("/", 1)[1]
    root = tmp_path / "data" / RELEASE
    absent = set(images[:3])
    for f in kept:
        for base in (tree, root) if f not in absent else (tree,):
            (base / f).parent.mkdir(parents=True, exist_ok=True)
            (base / f).write_bytes((MIRROR / RELEASE / f).read_bytes())
    monkeypatch.delenv("GESTALT_MIRROR", raising=False)
    monkeypatch.setenv("GESTALT_OFFLINE", "1")
    offline = cue_conflict.build(Sources(root=tmp_path / "data"))
    assert len(offline.stimuli) == len(images) - 3 and f"{len(images) - 3} of the {len(images)}" in offline.note
    with pytest.raises(DataError, match="not here"):
        Sources(root=tmp_path / "data").path(RELEASE, images[0])
    assert Sources(root=tmp_path / "data").verify(RELEASE) == len(kept) - 3  # the files here
    server = Mirror(tmp_path / "web")
    threading_server(server)
    monkeypatch.setenv("GESTALT_DOWNLOAD_BASE", server.base)
    monkeypatch.setenv("GESTALT_OFFLINE", "0")
    online = cue_conflict.build(Sources(root=tmp_path / "data"))
    assert len(online.stimuli) == len(images) and online.note is None
    assert {r.rsplit("/", 1)[-1] for r in server.requests} == {f.rsplit("/", 1)[-1] for f in absent}
    server.shutdown()


def threading_server(server):
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()


def test_every_score_names_the_images_it_used(sources):
    stimset = cue_conflict.build(sources)
    recs = [{"stimulus_id": s.stimulus_id, "parse_status": "ok", "response": s.meta["shape"]} for s in stimset.test]
    for s in score_shape_bias(recs, stimset, boot=BOOT):
        assert "230 of the 1280" in s.method, s.name
    assert np.isfinite([s.value for s in score_shape_bias(recs, stimset, boot=BOOT) if s.value is not None]).all()


def test_shape_bias_plot_and_edges_figure_per_run_and_across_models(full_set, sources):
    """The figures people know: per run, the model beside the observers; in the report, every
    model on one texture-to-shape axis with the people, and the edges' accuracy vs kappa."""
    from harness.reports.battery import battery_figures
    from harness.reports.shape_bias_figures import texture_vs_shape_report_figures
    from harness.stimuli import edges

    by_model = {m: {"shape.nat.cue_conflict": score_shape_bias(records_from(RAW / NETWORKS[m][1], full_set),
                                                               full_set, boot=BOOT)}
                for m in ("resnet50", "resnet50-60ep")}
    recs = records_from(RAW / NETWORKS["resnet50"][1], full_set)
    run = battery_figures("shape.nat.cue_conflict", recs, by_model["resnet50"]["shape.nat.cue_conflict"],
                          full_set, "resnet50")
    assert list(run) == ["shape.nat.cue_conflict.shape_bias.png"]
    (ax,) = [a for a in run["shape.nat.cue_conflict.shape_bias.png"].axes if a.get_yticklabels()]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(full_set.options)
    edge_set = edges.build(sources)
    from harness.scores.agreement import score_classification_vs_observers

    by_model["resnet50"]["closure.nat.edges"] = score_classification_vs_observers(
        [{"stimulus_id": s.stimulus_id, "parse_status": "ok", "response": s.human_target} for s in edge_set.test],
        edge_set, boot=BOOT)
    report = texture_vs_shape_report_figures(by_model)
    assert set(report) == {"shape.nat.cue_conflict.shape_bias.png", "closure.nat.edges.accuracy_vs_kappa.png"}
    legend = [t.get_text() for t in report["shape.nat.cue_conflict.shape_bias.png"].axes[0].get_legend().get_texts()]
    assert legend[0].startswith("people: mean 0.958") and any(x.startswith("resnet50: 0.221") for x in legend)
