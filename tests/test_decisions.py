"""``source: decisions``: published networks' trial-by-trial decisions scored as models.

Expected values (the published decisions scored on the test split) are checked against the
harness and recomputed here independently, straight from the CSVs, with the aggregate
error-consistency formula."""

import csv
import json
from collections import Counter

import numpy as np
import pytest
import yaml

from harness.models.base import ModelError, ModelSpec
from harness.models.registry import build_adapter
from harness.recipes import load_recipe
from tests.conftest import MIRROR, REPO

TASK = "closure.nat.silhouette"
RAW = MIRROR / "geirhos-silhouettes" / "raw-data"
# accuracy and kappa on the test split (images 6-10)
EXPECTED = {"alexnet": (0.438, 0.299), "googlenet": (0.500, 0.365), "vgg": (0.463, 0.330),
            "resnet50": (0.538, 0.465), "resnet50-60ep": (0.463, 0.369)}
FILES = {"alexnet": "silhouette-filled-experiment/silhouette-filled-experiment_alexnet_session_1.csv",
         "googlenet": "silhouette-filled-experiment/silhouette-filled-experiment_googlenet_session_1.csv",
         "vgg": "silhouette-filled-experiment/silhouette-filled-experiment_vgg_session_1.csv",
         "resnet50": "silhouette-filled-experiment-trained-CNNs/silhouette-filled-experiment_resnet50_session-1.csv",
         "resnet50-60ep": "silhouette-filled-experiment-trained-CNNs/"
                          "silhouette-filled-experiment_resnet50_train_60_epochs_session-1.csv"}


def _correct(path):
    """image ('airplane7') -> correct, over the test images 6-10."""
    out = {}
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        image = row["imagename"].rsplit("_", 1)[-1].removesuffix(".png")
        if int("".join(c for c in image if c.isdigit())) >= 6:
            out[image] = row["object_response"] == row["category"]
    return out


def independent(path, leave_out=None):
    """Accuracy and aggregate kappa vs the panel's per-image accuracy (na incorrect)."""
    model = _correct(path)
    images = sorted(model)
    panel = [_correct(p) for p in sorted((RAW / "silhouette-filled-experiment").glob("*subject-*.csv"))
             if p.name != leave_out]
    m = np.array([model[i] for i in images], float)
    p = np.array([[obs[i] for i in images] for obs in panel], float).mean(axis=0)
    c_obs = (m * p + (1 - m) * (1 - p)).mean()
    c_exp = m.mean() * p.mean() + (1 - m.mean()) * (1 - p.mean())
    return m.mean(), (c_obs - c_exp) / (1 - c_exp)


def decision_entry(model_id, name, **options):
    return {"id": model_id, "source": "decisions", "name": name,
            "options": {"images": "geirhos-silhouettes:stimuli/filled-silhouettes", **options}}


def write(tmp_path, models, name="dec"):
    recipe = {"name": name, "models": models, "tasks": [TASK],
              "bootstrap": {"n_boot": 100, "n_boot_kappa": 100},
              "runtime": {"progress": False}, "data": {"mirror": str(MIRROR)},
              "tracking": {"enabled": False}, "output_dir": str(tmp_path / "out")}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


@pytest.fixture(autouse=True)
def mirror(monkeypatch):
    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))


def headline(result):
    scores = {s.name: s for s in result.scores[TASK]}
    return scores["accuracy"], scores["kappa"]


def test_published_cnns_recipe_scores_the_five_networks(tmp_path):
    from harness.run import run_recipe

    recipe = load_recipe(REPO / "recipes/published-cnns.yaml", {
        "output_dir": str(tmp_path / "out"), "tracking.enabled": False, "runtime.progress": False,
        "data.mirror": str(MIRROR), "bootstrap.n_boot": 100, "bootstrap.n_boot_kappa": 100})
    results = {r.model_id: r for r in run_recipe(recipe)}
    assert set(EXPECTED) <= set(results)  # and the further cue-conflict networks
    for model_id, (acc, kappa) in EXPECTED.items():
        a, k = headline(results[model_id])
        assert a.nulls == 0 and a.n == 80
        ind_acc, ind_kappa = independent(RAW / FILES[model_id])
        assert a.value == pytest.approx(ind_acc, abs=1e-9) and k.value == pytest.approx(ind_kappa, abs=1e-9)
        assert round(a.value, 3) == pytest.approx(acc, abs=0.0011)
        assert round(k.value, 3) == pytest.approx(kappa, abs=0.0011)
        assert "leave-one-out" not in k.method
    records = [json.loads(x) for x in (tmp_path / "out/alexnet/records" / f"{TASK}.jsonl").open()]
    assert {r["extras"]["observer"] for r in records} == {"alexnet"}
    assert records[0]["run_meta"]["model_version"].startswith("decisions:alexnet#")


def test_an_observers_own_file_is_compared_with_the_panel_without_them(tmp_path):
    from harness.run import run_recipe

    own = "silhouette-filled-experiment_subject-01_session_1.csv"
    entry = decision_entry("subject-01", f"geirhos-silhouettes:raw-data/silhouette-filled-experiment/{own}")
    (result,) = run_recipe(load_recipe(write(tmp_path, [entry])))
    _, kappa = headline(result)
    _, loo = independent(RAW / "silhouette-filled-experiment" / own, leave_out=own)
    _, inflated = independent(RAW / "silhouette-filled-experiment" / own)
    assert kappa.value == pytest.approx(loo, abs=1e-9) and loo < inflated - 0.03
    assert "leave-one-out" in kappa.method and "subject-01" in kappa.method


def _test_answers(path):
    """image -> (answer, true class) over the test images 6-10 ('na': no answer)."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    out = {}
    for row in rows:
        image = row["imagename"].rsplit("_", 1)[-1].removesuffix(".png")
        if int("".join(c for c in image if c.isdigit())) >= 6:
            out[image] = (row["object_response"], row["category"])
    return out


def _modes(answers):
    votes = Counter(a for a in answers if a != "na")
    top = max(votes.values(), default=0)
    return sorted(a for a, n in votes.items() if n == top)


def nine_observer_references(own):
    """B of observer ``own`` against the other nine's modal answers (a tie goes to the true class
    when tied, else the alphabetically first), and the B ceiling of those nine: each one's answers
    vs the modal answer of the other eight, a tie counting 1/len(modes)."""
    panel = {p.name: _test_answers(p) for p in sorted((RAW / "silhouette-filled-experiment").glob(
        "*subject-*_session_1.csv"))}
    mine = panel.pop(own)
    others = list(panel.values())
    hits = answered = 0
    for image, (answer, truth) in mine.items():
        modes = _modes([o[image][0] for o in others])
        if answer != "na":
            answered += 1
            hits += answer == (truth if truth in modes else modes[0])
    ceiling_hits = ceiling_n = 0
    for k, obs in enumerate(others):
        for image, (answer, _) in obs.items():
            modes = _modes([o[image][0] for j, o in enumerate(others) if j != k])
            if answer != "na" and modes:
                ceiling_hits += (answer in modes) / len(modes)
                ceiling_n += 1
    return hits / answered, ceiling_hits / ceiling_n


@pytest.mark.parametrize("subject", ["02", "03"])
def test_an_observer_is_left_out_of_the_modal_answers_and_the_b_ceiling(tmp_path, subject):
    from harness.run import run_recipe

    own = f"silhouette-filled-experiment_subject-{subject}_session_1.csv"
    entry = decision_entry(f"subject-{subject}",
                           f"geirhos-silhouettes:raw-data/silhouette-filled-experiment/{own}")
    (result,) = run_recipe(load_recipe(write(tmp_path, [entry])))
    scores = {s.name: s for s in result.scores[TASK]}
    b, ceiling = nine_observer_references(own)
    # the nine-observer values: 0.7921 without subject-02, 0.7775 without subject-03; subject-02's
    # B against the others' mode is 0.724 (0.737 against a mode that holds its own vote)
    assert ceiling == pytest.approx({"02": 0.7921, "03": 0.7775}[subject], abs=1e-4)
    assert scores["B"].ceiling == pytest.approx(ceiling, abs=1e-12)
    assert scores["human_loo_modal_agreement"].value == pytest.approx(ceiling, abs=1e-12)
    assert scores["B"].value == pytest.approx(b, abs=1e-12)
    if subject == "02":
        assert round(b, 3) == 0.724
    assert "leave-one-out" in scores["B"].method


def test_column_map_reads_other_schemas_from_a_plain_path(tmp_path):
    with open(RAW / FILES["vgg"]) as f:
        rows = list(csv.DictReader(f))
    other = tmp_path / "vgg-renamed.csv"
    with open(other, "w", newline="") as f:
        w = csv.DictWriter(f, ["network", "file", "answer"])
        w.writeheader()
        for r in rows:
            w.writerow({"network": "vgg19", "file": r["imagename"], "answer": r["object_response"]})
    columns = {"subject": "network", "image": "file", "decision": "answer"}
    images = str(MIRROR / "geirhos-silhouettes/stimuli/filled-silhouettes")
    adapter = build_adapter(ModelSpec(id="v", source="decisions", name=str(other),
                                      options={"images": images, "columns": columns}))
    assert adapter.model_version.startswith("decisions:vgg19#")
    with pytest.raises(ModelError, match=r"no column\(s\) \['imagename', 'object_response', 'subj'\]"):
        build_adapter(ModelSpec(id="v", source="decisions", name=str(other), options={"images": images}))
    from harness.run import run_recipe

    entry = {"id": "vgg-renamed", "source": "decisions", "name": str(other),
             "options": {"images": images, "columns": columns}}
    (result,) = run_recipe(load_recipe(write(tmp_path, [entry])))
    assert headline(result)[0].value == pytest.approx(independent(RAW / FILES["vgg"])[0])


def test_bad_decision_files_are_refused_naming_the_model(tmp_path):
    both = "geirhos-silhouettes:raw-data/silhouette-filled-experiment/*_session_1.csv"
    with pytest.raises(ModelError, match="'many'.* holds 13 subjects"):
        build_adapter(ModelSpec(id="many", source="decisions", name=both,
                                options={"images": "geirhos-silhouettes:stimuli/filled-silhouettes"}))
    with pytest.raises(ModelError, match="matches no file"):
        build_adapter(ModelSpec(id="none", source="decisions", name=str(tmp_path / "*.csv"),
                                options={"images": str(tmp_path)}))
    with pytest.raises(ModelError, match="options.images"):
        build_adapter(ModelSpec(id="x", source="decisions", name=str(tmp_path / "*.csv")))
