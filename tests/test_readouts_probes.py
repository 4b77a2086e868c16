"""Encoder readouts: cosine odd-one-out and the ridge probe, with small hand-made embedders."""

from itertools import combinations

import numpy as np
import pytest
from PIL import Image

from harness.models.base import ModelSpec
from harness.readouts.odd_one_out import CosineOddOneOut, odd_one_out
from harness.readouts.registry import get_readout
from harness.readouts.ridge import RidgeCV, RidgeProbe
from harness.stimuli import mark_color, series_count
from harness.stimuli.base import Stimulus, StimulusSet


class CentrePixel:
    """Embeds an image as its centre pixel's RGB, offset so that cosine separates hues."""

    spec = ModelSpec(id="centrepixel", source="python", name="CentrePixel", batch_size=16)

    def embed(self, images):
        return np.array([np.array(im.getpixel((im.width // 2, im.height // 2)), float) - 100
                         for im in images])


class Brightness:
    """A one-number embedding: mean grey level, plus a constant column."""

    spec = ModelSpec(id="brightness", source="python", name="Brightness", batch_size=16)

    def embed(self, images):
        return np.array([[np.asarray(im, float).mean(), 1.0] for im in images])


class ColourPresence:
    """Which of the 20 series colours appear as point interiors (3x3 uniform pixels)."""

    spec = ModelSpec(id="colour-presence", source="python", name="ColourPresence", batch_size=16)

    def embed(self, images):
        codes = np.array([int(h[1:], 16) for h in series_count.PALETTE])
        out = []
        for im in images:
            a = np.asarray(im).astype(int)
            code = (a[..., 0] << 16) | (a[..., 1] << 8) | a[..., 2]
            c = code[1:-1, 1:-1]
            uniform = np.ones_like(c, dtype=bool)
            for dy in range(3):
                for dx in range(3):
                    uniform &= code[dy:dy + c.shape[0], dx:dx + c.shape[1]] == c
            out.append(np.isin(codes, c[uniform]).astype(float))
        return np.array(out)


def test_registry_names():
    assert get_readout("odd_one_out") is CosineOddOneOut
    assert get_readout("ridge") is RidgeProbe
    assert CosineOddOneOut.capability == RidgeProbe.capability == "embed"


def test_odd_one_out_follows_the_montage_positions():
    a, b = np.array([1.0, 0.0, 0.2]), np.array([0.0, 1.0, 0.0])
    a2 = a + np.array([0.0, 0.05, 0.0])
    for order in ((0, 1, 2), (2, 0, 1), (1, 2, 0)):
        parts = np.stack([a, a2, b])[list(order)]
        odd, sims = odd_one_out(parts[None])
        assert odd[0] == list(order).index(2) + 1
        assert sims.shape == (1, 3)


def test_cosine_readout_on_mark_triplets(sources):
    stimset = mark_color.build(sources, seed=3)
    model = CentrePixel()
    batch = stimset.test[:40]
    responses = CosineOddOneOut(stimset).respond(model, batch)
    palette = mark_color.read_palette(sources)
    for s, r in zip(batch, responses):
        # independent: cosine between palette colours in canonical order, most similar pair
        vec = {c: np.array([int(palette[c][i:i + 2], 16) for i in (1, 3, 5)], float) - 100
               for c in s.meta["colors"]}
        def cos(x, y, vec=vec):
            return vec[x] @ vec[y] / np.linalg.norm(vec[x]) / np.linalg.norm(vec[y])

        pair = max(combinations(sorted(s.meta["colors"]), 2), key=lambda p: cos(*p))
        odd_colour = (set(s.meta["colors"]) - set(pair)).pop()
        assert r.parse_status == "ok" and r.response in (1, 2, 3)
        assert s.meta["colors"][r.response - 1] == odd_colour
        assert len(r.extras["cosine_12_13_23"]) == 3 and r.extras["tie"] is False


def test_degenerate_embeddings_are_null_and_parts_required(sources):
    stimset = mark_color.build(sources, seed=0)

    class Zero:
        def embed(self, images):
            return np.zeros((len(images), 4))

    r = CosineOddOneOut(stimset).respond(Zero(), stimset.test[:2])
    assert [x.parse_status for x in r] == ["null:degenerate_embedding"] * 2
    assert all(x.response is None for x in r)
    broken = Stimulus("x", "test", 1, stimset.test[0].image_source, part_sources=())
    with pytest.raises(ValueError, match="x: odd-one-out needs 3 part images"):
        CosineOddOneOut(stimset).respond(Zero(), [broken])


def test_ridge_cv_chooses_penalty_by_cross_validation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 30))
    w = rng.normal(size=30)
    y = x @ w + 0.01 * rng.normal(size=200)
    clean = RidgeCV(seed=1).fit(x, y)
    assert clean.alpha <= 1.0
    assert clean.cv_mse.argmin() == list(clean.alphas).index(clean.alpha)
    assert np.allclose(clean.predict(x[:5]), x[:5] @ w, atol=0.1)
    assert RidgeCV(seed=1).fit(x, y).alpha == clean.alpha  # folds are seeded
    noise = RidgeCV(seed=1).fit(x, rng.normal(size=200))
    assert noise.alpha >= 1e3  # nothing to learn: the strongest penalties win
    with pytest.raises(ValueError, match="too few"):
        RidgeCV().fit(x[:6], y[:6])


@pytest.mark.parametrize("n, p", [(60, 8), (30, 80)])  # more samples than features, and fewer
def test_ridge_closed_form(n, p):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(n, p)) * rng.uniform(0.5, 3, p) + 4
    y = x @ rng.normal(size=p) + rng.normal(size=n)
    probe = RidgeCV(alphas=(3.0,)).fit(x, y)
    z = (x - x.mean(0)) / x.std(0)
    coef = np.linalg.solve(z.T @ z + 3.0 * np.eye(p), z.T @ (y - y.mean()))
    assert np.allclose(probe.coef, coef)
    assert np.allclose(probe.predict(x), z @ coef + y.mean())


def test_ridge_probe_counts_series():
    stimset = series_count.build(None, seed=0, n_train=60, n_test=40)
    probe = RidgeProbe(stimset)
    probe.prepare(ColourPresence())
    responses = probe.respond(ColourPresence(), stimset.test)
    assert all(r.parse_status == "ok" and isinstance(r.response, int) for r in responses)
    assert [r.response for r in responses] == [s.ground_truth for s in stimset.test]
    assert all(abs(r.extras["prediction"] - r.response) < 0.5 for r in responses)


def grey_set(values, split):
    """Stimuli whose grey level encodes their target (40 grey levels per unit)."""
    return [Stimulus(f"{split}{i}", split, v, Image.new("L", (4, 4), int(round(v * 40))))
            for i, v in enumerate(values)]


def test_ridge_rounds_and_clips_counts_but_not_scalars():
    train = grey_set([1, 2, 3, 4, 5] * 4, "train")
    test = grey_set([0.2, 2.7, 3.3, 6.0], "test")
    counts = StimulusSet("t.c.count", "1", "count", train + test, "none", options=(1, 2, 3, 4, 5))
    probe = RidgeProbe(counts)
    probe.prepare(Brightness())
    assert [r.response for r in probe.respond(Brightness(), counts.test)] == [1, 3, 3, 5]

    scalars = StimulusSet("t.c.scalar", "1", "scalar", train + test, "none")
    probe = RidgeProbe(scalars)
    probe.prepare(Brightness())
    got = [r.response for r in probe.respond(Brightness(), scalars.test)]
    assert got == pytest.approx([0.2, 2.7, 3.3, 6.0], abs=0.02)
    assert all(isinstance(v, float) for v in got)
    clipped = RidgeProbe(scalars, clip=(1.0, 5.0))
    clipped.prepare(Brightness())
    assert [r.response for r in clipped.respond(Brightness(), scalars.test)][::3] == [1.0, 5.0]


@pytest.mark.parametrize("n_train", [0, 8])
def test_ridge_needs_a_train_split_its_folds_can_divide(n_train):
    """Refused when the readout is made (before any run), not after embedding the split."""
    with pytest.raises(ValueError, match=f"ridge probe: {n_train} probe-train samples .* n_train >= 10"):
        RidgeProbe(series_count.build(None, n_train=n_train))


def test_a_probe_train_split_too_small_for_its_folds_stops_the_recipe_at_its_line(tmp_path):
    from harness.recipes import RecipeError, load_recipe
    from harness.run import preflight

    recipe = tmp_path / "r.yaml"
    recipe.write_text("schema_version: 1\nname: small\nmodels:\n  - {id: m, source: timm, name: mobilenetv2_100, "
                      "weights: random}\ntasks: [similarity.chart.series_count]\ntask_options:\n"
                      "  similarity.chart.series_count: {n_train: 8, n_test: 10}\n"
                      "tracking: {enabled: false}\n")
    with pytest.raises(RecipeError, match=r"r.yaml:7: task_options.similarity.chart.series_count.n_train: .*8 probe"):
        preflight(load_recipe(recipe))


@pytest.mark.parametrize("options", [{"alphas": (0.0, 1.0)}, {"alphas": ()}, {"folds": 1}])
def test_ridge_refuses_a_penalty_path_it_cannot_fit(options):
    with pytest.raises(ValueError, match="similarity.chart.series_count: ridge probe needs alphas > 0"):
        RidgeProbe(series_count.build(None, n_train=20, n_test=4), **options)


class CountedThumbnail:
    """An 8x8 grey thumbnail as the embedding; counts every image it is asked to embed."""

    embedded = 0

    def embed(self, images):
        CountedThumbnail.embedded += len(images)
        return np.array([np.asarray(im.convert("L").resize((8, 8)), np.float32).ravel() for im in images])


def test_recomputing_one_trial_embeds_only_its_image_not_the_probe_train_split(tmp_path):
    """Probe-train embeddings are kept beside the records like any trial's answer: a rerun that
    recomputes one test trial embeds that trial's image alone and answers as the first run did."""
    import json

    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from tests.test_own_models import TASK, write_recipe

    path = write_recipe(tmp_path, [{"id": "thumb", "source": "python",
                                    "name": "tests.test_readouts_probes:CountedThumbnail"}])
    CountedThumbnail.embedded = 0
    [first] = run_recipe(load_recipe(path))
    n_train = CountedThumbnail.embedded - first.new_trials
    assert first.new_trials == 80 and n_train > 0
    records = tmp_path / "out" / "thumb" / "records" / f"{TASK}.jsonl"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join(lines[:-1]))  # one trial to compute again

    CountedThumbnail.embedded = 0
    [rerun] = run_recipe(load_recipe(path))
    assert (rerun.new_trials, rerun.model_calls, CountedThumbnail.embedded) == (1, 1, 1)
    again = json.loads(records.read_text().splitlines()[-1])
    before = json.loads(lines[-1])
    assert (again["response"], again["extras"]) == (before["response"], before["extras"])

    # a damaged file is not an error: the probe-train images are embedded again, and kept
    records.with_suffix(".probe-train.npz").write_bytes(b"PK\x03\x04 torn")
    records.write_text("".join(lines[:-1]))
    CountedThumbnail.embedded = 0
    run_recipe(load_recipe(path))
    assert CountedThumbnail.embedded == n_train + 1
