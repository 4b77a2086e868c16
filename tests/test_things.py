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


def test_votes_match_the_derived_things_order_table(sources, full):
    # The builder maps the raw MTurk-order file through sortindex; the mirror's derived table
    # did the same independently.
    table = pd.read_csv(sources.path("things", "derived/noise_ceiling_1000_triplet_votes_things_order.csv"))
    expected = {(r.a, r.b, r.c): ([r.votes_odd_a, r.votes_odd_b, r.votes_odd_c], r.majority_odd,
                                  r.majority_tied) for r in table.itertuples()}
    assert len(full.test) == 1000 and not full.train
    tied = 0
    for s in full.test:
        triplet, votes, target = canonical(s)
        exp_votes, exp_majority, exp_tied = expected[triplet]
        assert votes == exp_votes, s.stimulus_id
        if exp_tied:
            tied += 1
            assert target == min(c for c, v in zip(triplet, votes) if v == max(votes))
        else:
            assert target == exp_majority, s.stimulus_id
        assert s.ground_truth == s.human_target
    assert tied == int(full.human.majority_tied.sum()) == 32


def test_raw_responses_remap_through_sortindex(sources, full):
    # Independent remap of the raw file: original 1-based item -> THINGS index via sortindex.
    raw = pd.read_csv(sources.path("things", "LukasMut-VICE/data/test_triplets.csv"), sep="\t",
                      header=None, names=["i1", "i2", "i3", "choice", "subject"])
    sortindex = np.loadtxt(sources.path("things", "LukasMut-VICE/data/sortindex"), dtype=int)
    to_things = np.argsort(sortindex)
    items = to_things[raw[["i1", "i2", "i3"]].to_numpy() - 1]
    odd = items[np.arange(len(raw)), raw["choice"].to_numpy() - 1]
    votes = {}
    for row, o in zip(items, odd):
        key = tuple(sorted(row))
        votes.setdefault(key, {}).setdefault(int(o), 0)
        votes[key][int(o)] += 1
    for s in full.test[:200]:
        triplet, v, _ = canonical(s)
        assert v == [votes[triplet].get(c, 0) for c in triplet]


def test_ceilings_reproduce_source(full):
    scores = {s.name: s for s in score_odd_one_out([], full)}
    # SOURCE.md: majority agreement 0.6722, leave-one-response-out 0.6438 (ties split)
    assert scores["human_individual_agreement"].value == pytest.approx(0.672, abs=0.001)
    assert scores["human_individual_agreement_loo"].value == pytest.approx(0.6438, abs=0.001)
    assert (scores["human_individual_agreement"].ci_low < 0.672
            < scores["human_individual_agreement"].ci_high)


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
    assert full.prompt.prompt_id == "similarity.nat.things.v2"
