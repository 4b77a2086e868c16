"""similarity.nat.things: human reference from the raw triplets, sampling, and the image root."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from harness.scores.odd_one_out import score_odd_one_out
from harness.stimuli import things
from harness.stimuli.base import png_bytes
from harness.stimuli.montage import montage_of

PAPER = Path(__file__).resolve().parents[2] / "shared" / "papers" / "gestalt-grouping-battery.txt"


@pytest.fixture(scope="module")
def full(sources, monkeypatch_module):
    return things.build(sources, seed=0)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    mp.delenv(things.IMAGE_ENV, raising=False)
    yield mp
    mp.undo()


def canonical(s):
    """(sorted THINGS indices, votes in that order, majority concept index)."""
    idx = s.meta["things_index"]
    order = np.argsort(idx)
    return (tuple(int(idx[i]) for i in order), [s.meta["votes"][i] for i in order],
            idx[s.human_target - 1])


def first_answers(df, triplet_columns):
    """The rows that are a worker's first response to a triplet (file order)."""
    key = [tuple(sorted(r)) for r in df[triplet_columns].to_numpy()]
    return df.assign(key=key).drop_duplicates(["key", "subject_id"], keep="first")


def test_votes_match_the_derived_things_order_table(sources, full):
    # The builder maps the raw MTurk-order file through sortindex; the mirror's derived
    # per-response table did the same independently. A worker's repeats of a triplet are left out.
    table = pd.read_csv(sources.path("things", "derived/noise_ceiling_1000_responses_things_order.csv"))
    first = first_answers(table, ["item1", "item2", "item3"])
    assert len(table) - len(first) == 1125
    expected = {}
    for key, group in first.groupby("key"):
        votes = [int((group.odd_item == c).sum()) for c in key]
        expected[key] = votes
    assert len(full.test) == 1000 and not full.train
    tied = 0
    for s in full.test:
        triplet, votes, target = canonical(s)
        assert votes == expected[triplet], s.stimulus_id
        top = [c for c, v in zip(triplet, votes) if v == max(votes)]
        tied += len(top) > 1
        assert target == min(top), s.stimulus_id
        assert s.ground_truth == s.human_target
    assert tied == int(full.human.majority_tied.sum())


def raw_first_answers(sources):
    """(THINGS-order triplet, worker, odd item) of each worker's first response to a triplet,
    remapped independently: original 1-based item -> THINGS index via sortindex."""
    raw = pd.read_csv(sources.path("things", "LukasMut-VICE/data/test_triplets.csv"), sep="\t",
                      header=None, names=["i1", "i2", "i3", "choice", "subject_id"])
    sortindex = np.loadtxt(sources.path("things", "LukasMut-VICE/data/sortindex"), dtype=int)
    to_things = np.argsort(sortindex)
    items = to_things[raw[["i1", "i2", "i3"]].to_numpy() - 1]
    raw = raw.assign(t1=items[:, 0], t2=items[:, 1], t3=items[:, 2],
                     odd=items[np.arange(len(raw)), raw["choice"].to_numpy() - 1])
    return first_answers(raw, ["t1", "t2", "t3"])


def test_raw_responses_remap_through_sortindex(sources, full):
    votes = {}
    for key, group in raw_first_answers(sources).groupby("key"):
        votes[key] = {int(o): int(n) for o, n in group.odd.value_counts().items()}
    for s in full.test[:200]:
        triplet, v, _ = canonical(s)
        assert v == [votes[triplet].get(c, 0) for c in triplet]


def test_references_are_the_default_runs(sources):
    """The task's default (500 seeded triplets) is what the references are quoted for, each worker
    counted once per triplet: majority agreement 0.679, leave-one-out 0.645."""
    default = things.build(sources, seed=0, n_triplets=500)
    answers = {key: g for key, g in raw_first_answers(sources).groupby("key")}
    shares, loo = [], []
    for s in default.test:
        odd = answers[canonical(s)[0]].odd.to_numpy()
        labels, n = np.unique(odd, return_counts=True)
        shares.append(n.max() / n.sum())
        hits = []
        for j in range(len(odd)):
            rest_labels, rest_n = np.unique(np.delete(odd, j), return_counts=True)
            modes = rest_labels[rest_n == rest_n.max()]
            hits.append((odd[j] in modes) / len(modes))
        loo.append(np.mean(hits))
    scores = {s.name: s for s in score_odd_one_out([], default)}
    assert scores["human_individual_agreement"].value == pytest.approx(np.mean(shares), abs=1e-12)
    assert scores["human_individual_agreement_loo"].value == pytest.approx(np.mean(loo), abs=1e-12)
    assert round(np.mean(shares), 3) == 0.679 and round(np.mean(loo), 3) == 0.645
    counts = [np.unique(answers[canonical(s)[0]].odd, return_counts=True)[1] for s in default.test]
    tied = sum((c == c.max()).sum() > 1 for c in counts)
    assert tied == int(default.human.majority_tied.sum()) == 24
    ia = scores["human_individual_agreement"]
    assert ia.ci_low < ia.value < ia.ci_high


def test_raters_are_workers_crossed_with_triplets(sources):
    """Each answer slot names its worker (one index per worker code, shared by all triplets) and
    the position they chose, so an interval can resample workers with all their answers."""
    default = things.build(sources, seed=0, n_triplets=500)
    h = default.human
    codes = sorted(raw_first_answers(sources).subject_id.astype(str).unique())
    answers = {key: g for key, g in raw_first_answers(sources).groupby("key")}
    for t, s in enumerate(default.test[:100]):
        group = answers[canonical(s)[0]]
        slots = h.raters[t] >= 0
        got = sorted((codes[r], s.meta["things_index"][c - 1])
                     for r, c in zip(h.raters[t][slots], h.choices[t][slots]))
        assert got == sorted(zip(group.subject_id.astype(str), group.odd)), s.stimulus_id
        assert (h.choices[t][~slots] == 0).all()


def test_unavailable_without_images(full):
    assert full.unavailable and "osf.io" in full.unavailable and things.IMAGE_ENV in full.unavailable
    with pytest.raises(FileNotFoundError, match="THINGS object images"):
        _ = full.test[0].image
    with pytest.raises(FileNotFoundError, match="THINGS object images"):
        _ = full.test[0].parts


def test_sampling_and_seed(sources, full, monkeypatch_module):
    half = things.build(sources, seed=0, n_triplets=500)
    assert len(half.test) == 500
    by_id = {s.stimulus_id: s for s in full.test}
    for s in half.test:  # same target concept as in the full set (orders balance per sample)
        full_s = by_id[s.stimulus_id]
        assert (s.meta["concepts"][s.human_target - 1]
                == full_s.meta["concepts"][full_s.human_target - 1])
    other = things.build(sources, seed=1, n_triplets=500)
    assert {s.stimulus_id for s in other.test} != {s.stimulus_id for s in half.test}
    reseeded = {s.stimulus_id: s for s in things.build(sources, seed=1).test}
    assert [s.option_order for s in full.test] != [reseeded[s.stimulus_id].option_order
                                                   for s in full.test]
    for s in full.test:  # the target concept does not move with the seed
        r = reseeded[s.stimulus_id]
        assert s.meta["concepts"][s.human_target - 1] == r.meta["concepts"][r.human_target - 1]
    with pytest.raises(ValueError, match="n_triplets"):
        things.build(sources, n_triplets=0)


def fake_root(tmp_path, stimset):
    root = tmp_path / "images"
    for s in stimset.test:
        for concept, index in zip(s.meta["concepts"], s.meta["things_index"]):
            folder = root / concept
            if folder.exists():
                continue
            folder.mkdir(parents=True)
            rgb = (index % 251, (7 * index) % 253, (13 * index) % 255)
            Image.new("RGB", (40, 30), rgb).save(folder / f"{concept}_02.jpg")
            Image.new("RGB", (40, 30), rgb).save(folder / f"{concept}_01b.jpg")
    return root


def test_fake_image_root(sources, tmp_path, monkeypatch):
    monkeypatch.delenv(things.IMAGE_ENV, raising=False)
    small = things.build(sources, seed=0, n_triplets=12)
    root = fake_root(tmp_path, small)
    a = things.build(sources, seed=0, n_triplets=12, image_root=root)
    assert a.unavailable is None
    s = a.test[0]
    assert [p.name for p in s.part_sources] == [f"{c}_01b.jpg" for c in s.meta["concepts"]]
    montage = s.image
    assert png_bytes(montage) == png_bytes(montage_of(s.part_sources)) and len(s.parts) == 3
    monkeypatch.setenv(things.IMAGE_ENV, str(root))
    b = things.build(sources, seed=0, n_triplets=12)
    assert b.unavailable is None and b.sha256 == a.sha256
    assert png_bytes(b.test[3].image) == png_bytes(a.test[3].image)


def test_missing_concept_folder_is_named(sources, tmp_path, monkeypatch):
    monkeypatch.delenv(things.IMAGE_ENV, raising=False)
    small = things.build(sources, seed=0, n_triplets=5)
    root = fake_root(tmp_path, small)
    gone = small.test[2].meta["concepts"][1]
    for f in (root / gone).iterdir():
        f.unlink()
    with pytest.raises(FileNotFoundError, match=f"{gone}: no .jpg image for THINGS concept"):
        things.build(sources, seed=0, n_triplets=5, image_root=root)
    with pytest.raises(FileNotFoundError, match="not a folder"):
        things.build(sources, n_triplets=5, image_root=tmp_path / "nowhere")


def test_prompt_is_verbatim_from_the_paper(full):
    assert f"object odd-one-out: {full.prompt.text}\n" in PAPER.read_text()
    assert full.prompt.prompt_id == "similarity.nat.things.v3"
