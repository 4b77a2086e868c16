"""cnn: regressors on tiny bar-chart sets: training lowers the loss, checkpoints round-trip with
weights_only=True, the regression readout trains once and then loads, Grad-CAM, variants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.models.base import ModelError, ModelSpec
from harness.models.registry import build_adapter
from harness.models.regressors import ArrayData, CNNRegressor
from harness.readouts.registry import get_readout
from harness.stimuli.bars.render import render_stimuli
from harness.stimuli.bars.tasks import build_grape, build_haehn

SMALL = {"conv": [4, 8], "hidden": 16, "lr": 3e-3, "batch_size": 16, "seed": 0}


def _spec(name="lenet", **options):
    return ModelSpec(id=f"test-{name}", source="cnn", name=name, options={**SMALL, **options})


@pytest.fixture(scope="module")
def haehn_set(sources):
    return build_haehn(sources, 0, chart_type=1, n_train=96, n_val=32, n_test=16)


@pytest.fixture(scope="module")
def arrays(haehn_set):
    def data(subset):
        stim = [s for s in haehn_set.stimuli if s.meta["subset"] == subset]
        return ArrayData(render_stimuli(stim), [s.ground_truth for s in stim])
    return data("train"), data("val"), data("test")


def test_training_lowers_the_loss_and_checkpoint_round_trips(arrays, tmp_path):
    train, val, test = arrays
    model = build_adapter(_spec(max_epochs=4))
    history = model.fit(train, val, data_key="k")
    epochs = history[0]
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4]
    assert set(epochs[0]) == {"epoch", "train_loss", "val_loss", "seconds"}
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    pred = model.predict(test.images(np.arange(len(test))))
    assert pred.shape == (16,) and np.isfinite(pred).all()

    path = tmp_path / "m.pt"
    model.save(path)
    raw = torch.load(path, weights_only=True)  # plain tensors and values only
    assert raw["history"] == model.history and raw["trained_on"] == "k"
    again = CNNRegressor(_spec(max_epochs=4)).load(path)
    assert np.array_equal(again.predict(test.images(np.arange(len(test)))), pred)
    assert again.history == model.history and "@data:k" in again.model_version
    with pytest.raises(ModelError, match="different model"):
        CNNRegressor(_spec(max_epochs=4, hidden=8)).load(path)


def test_early_stopping_restores_the_best_epoch(arrays):
    train, val, _ = arrays
    model = CNNRegressor(_spec(max_epochs=30, patience=2, lr=0.05))
    (epochs,) = model.fit(train, val)
    best = min(e["val_loss"] for e in epochs)
    assert len(epochs) < 30 and epochs[-1]["val_loss"] > best  # stopped after 2 epochs without progress
    assert float(np.mean((model.predict(val.images(np.arange(len(val)))) - val.targets) ** 2)) == \
        pytest.approx(best, rel=1e-4)


def test_sgd_kfold_mlp_and_gradcam(arrays):
    train, val, test = arrays
    x = test.images(np.arange(4))
    model = CNNRegressor(_spec(max_epochs=1, optimizer="sgd", kfold=2))
    assert len(model.fit(train, val)) == 2 and len(model.nets) == 2
    folds = [CNNRegressor(_spec()) for _ in range(2)]
    for f, net in zip(folds, model.nets):
        f.nets, f.input_shape = [net], model.input_shape
    assert np.allclose(model.predict(x), (folds[0].predict(x) + folds[1].predict(x)) / 2)
    cams = model.gradcam(x)
    assert cams.shape == (4, 25, 25) and (cams >= 0).all()
    mlp = CNNRegressor(_spec("mlp", max_epochs=1))
    mlp.fit(train, val)
    assert mlp.predict(x).shape == (4,)
    with pytest.raises(ModelError, match="convolutional"):
        mlp.gradcam(x)


def test_timm_architecture_and_bad_specs(arrays):
    train, val, test = arrays
    tiny = CNNRegressor(ModelSpec(id="t", source="cnn", name="test_resnet",
                                  options={"max_epochs": 1, "input_size": 32, "batch_size": 32}))
    tiny.check()
    tiny.fit(train, val)
    assert tiny.predict(test.images(np.arange(3))).shape == (3,)
    assert tiny.gradcam(test.images(np.arange(2))).ndim == 3
    with pytest.raises(ModelError, match="neither"):
        build_adapter(ModelSpec(id="x", source="cnn", name="no_such_net"))
    with pytest.raises(ModelError, match="unknown cnn option"):
        CNNRegressor(ModelSpec(id="x", source="cnn", name="lenet", options={"lr_max": 1}))
    with pytest.raises(ModelError, match="not trained"):
        CNNRegressor(_spec()).predict(test.images(np.arange(2)))


def test_regression_readout_trains_once_then_loads(sources, tmp_path):
    ss = build_grape(sources, 0, chart_type=1, n_train=48, n_val=16, n_test=8, n_ood=2,
                     ood={"bar_width": [5]}, mask=True)
    readout_cls = get_readout("regression")
    readout = readout_cls(ss, checkpoint_dir=str(tmp_path), gradcam=True)
    model = build_adapter(_spec(max_epochs=1, input_size=50))
    readout.prepare(model)
    assert model.input_shape == (4, 50, 50)  # RGB + the target mask channel
    files = list(tmp_path.glob("*.pt"))
    assert len(files) == 1 and readout.settings["train_data"] == readout.data_key
    responses = readout.respond(model, ss.test)
    assert len(responses) == len(ss.test) == 10
    assert all(r.parse_status == "ok" and isinstance(r.response, float) for r in responses)
    cam = responses[0].extras["gradcam"]
    assert len(cam["values"]) == cam["shape"][0] * cam["shape"][1]

    class NoFit(CNNRegressor):
        def fit(self, *a, **k):
            raise AssertionError("retrained although a checkpoint exists")

    second = NoFit(_spec(max_epochs=1, input_size=50))
    readout_cls(ss, checkpoint_dir=str(tmp_path), gradcam=True).prepare(second)
    assert np.array_equal(second.predict(render_stimuli(ss.test)), model.predict(render_stimuli(ss.test)))
    # a differently seeded training set is a different key
    other = build_grape(sources, 1, chart_type=1, n_train=48, n_val=16, n_test=8, n_ood=2, ood="none", mask=True)
    assert readout_cls(other, checkpoint_dir=str(tmp_path)).data_key != readout.data_key
    with pytest.raises(ValueError, match="no option"):
        readout_cls(ss, epochs=3)
    with pytest.raises(ModelError, match="trained on inputs"):
        model.predict(np.zeros((2, 150, 150, 3), np.uint8))


def test_rendering_workers_do_not_change_results(arrays):
    train, val, test = arrays
    x = test.images(np.arange(4))
    preds = []
    for workers in (0, 2):
        model = CNNRegressor(_spec(max_epochs=1, num_workers=workers))
        model.fit(train, val)
        preds.append(model.predict(x))
    assert np.array_equal(*preds)


def _one_bar_charts(n: int, seed: int) -> ArrayData:
    """24 x 32 charts with one 3-px bar at a random x; the target is its height / 24."""
    rng = np.random.default_rng(seed)
    heights, xs = rng.integers(2, 23, n), rng.integers(0, 29, n)
    rows, cols = np.arange(24)[None, :, None], np.arange(32)[None, None, :]
    ink = (rows >= 24 - heights[:, None, None]) & (cols >= xs[:, None, None]) & (cols < xs[:, None, None] + 3)
    return ArrayData(np.where(ink, 255, 0).astype(np.uint8), heights / 24)


def test_colnet_reads_whole_columns_and_learns_a_bar_height():
    train, val = _one_bar_charts(512, 0), _one_bar_charts(128, 1)
    model = CNNRegressor(ModelSpec(id="col", source="cnn", name="colnet", options={
        "pixel_conv": [4], "column_channels": 8, "width": 8, "depth": 2, "hidden": 16, "lr": 1e-2,
        "batch_size": 32, "max_epochs": 15, "patience": 15, "seed": 0}))
    model.fit(train, val)
    x = val.images(np.arange(len(val)))
    mse = float(np.mean((model.predict(x) - val.targets) ** 2))
    assert mse < 0.01 * float(np.var(val.targets))  # a constant guess scores var (measured: ~1e-4 var)
    # one full-height filter per column; Grad-CAM uses the full-resolution layer before it
    assert model.nets[0].columns[0].kernel_size == (24, 1)
    cams = model.gradcam(x[:3])
    assert cams.shape == (3, 24, 30)  # 24 x 32 average-pooled to at most CAM_SIDE (30) wide
    # the map varies along y (a height-1 map could only mark whole columns)
    assert (np.ptp(cams, axis=1) > 0).any()


def _tiny_colnet(seed: int = 0) -> CNNRegressor:
    return CNNRegressor(ModelSpec(id="col", source="cnn", name="colnet", options={
        "pixel_conv": [4], "column_channels": 8, "width": 8, "depth": 2, "hidden": 16, "lr": 1e-2,
        "batch_size": 16, "max_epochs": 1, "seed": seed, "noise_std": 0.025}))


def test_training_is_bit_identical_whatever_the_callers_thread_count():
    """Same seed, same data: identical weights and predictions, also when the caller has set a
    different intra-op thread count (which changes how float sums are split between threads)."""
    train, val = _one_bar_charts(256, 0), _one_bar_charts(64, 1)
    x = val.images(np.arange(len(val)))
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 3, 3):
            torch.set_num_threads(threads)
            model = _tiny_colnet()
            model.fit(train, val)
            runs.append(({k: v.clone() for k, v in model.nets[0].state_dict().items()}, model.predict(x)))
            assert torch.get_num_threads() == threads  # the caller's setting is restored
    finally:
        torch.set_num_threads(before)
    for state, pred in runs[1:]:
        assert all(torch.equal(state[k], runs[0][0][k]) for k in state)
        assert np.array_equal(pred, runs[0][1])
    other = _tiny_colnet(seed=1)
    other.fit(train, val)
    assert not np.array_equal(other.predict(x), runs[0][1])  # the seed does matter


def test_pooled_training_data_gives_no_images_in_the_parts_shape():
    """k-fold over train + val pools them; asking for no images gives an empty batch, not None."""
    from harness.models.training_data import Pooled

    parts = [ArrayData(np.zeros((3, 8, 8, 3), np.uint8), np.zeros(3, np.float32)),
             ArrayData(np.ones((2, 8, 8, 3), np.uint8), np.ones(2, np.float32))]
    pooled = Pooled(parts)
    assert pooled.images(np.array([4, 0])).tolist() == [np.ones((8, 8, 3)).tolist(), np.zeros((8, 8, 3)).tolist()]
    empty = pooled.images(np.array([], dtype=np.int64))
    assert empty.shape == (0, 8, 8, 3) and empty.dtype == np.uint8
