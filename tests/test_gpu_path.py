"""The GPU path, checked on a CPU: precision (autocast) in the fingerprint only when it is not
float32, batch_size auto halving on out-of-memory (a fake CUDA OutOfMemoryError: the class exists
without CUDA), channels-last leaving a CNN's answers unchanged, bfloat16 autocast really running
(torch autocasts on the CPU too), and the recipe fields' validation."""

from __future__ import annotations

import importlib.metadata
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

import harness.models.encoders
import harness.models.hf_vlm
import harness.models.regressors  # noqa: F401 - imported before any test patches what they import
import harness.trials.runner
from harness.models import device as dev
from harness.models.base import ModelError, ModelSpec, fingerprint_hash
from harness.models.registry import build_adapter
from harness.recipes import RecipeError, load_recipe

VIT = ModelSpec(id="vit", source="timm", name="test_vit", weights="random")


def _images(n, size=48):
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)) for _ in range(n)]


@pytest.fixture
def on(monkeypatch):
    """on("cpu") / on("cuda"): the device a fingerprint plans for, as $GESTALT_DEVICE sets it."""
    def set_device(name: str) -> None:
        monkeypatch.setenv("GESTALT_DEVICE", name)
    return set_device


# -- fingerprint --------------------------------------------------------------------------------

def test_default_fingerprint_is_the_one_it_always_was(monkeypatch):
    """float32 (the default) adds no key and never asks for the device (a rerun imports no torch
    for it), so every cached trial keeps its key."""
    monkeypatch.delenv("GESTALT_DEVICE", raising=False)
    monkeypatch.setattr(dev, "auto_device", lambda: pytest.fail("device looked up for float32"))
    adapter = build_adapter(replace(VIT, batch_size=8, options={"init_seed": 3}))
    v = importlib.metadata.version
    assert adapter.fingerprint == {
        "source": "timm", "name": "test_vit", "weights": "random", "revision": None, "dtype": "float32",
        "options": {"init_seed": 3}, "library": f"timm=={v('timm')}", "torch": v("torch"), "init_seed": 3,
        "preprocess": adapter._timm_facts()["preprocess"]}


def test_precision_enters_the_fingerprint_as_it_will_run(monkeypatch, on):
    plain = fingerprint_hash(build_adapter(VIT).fingerprint)
    bf16 = build_adapter(replace(VIT, precision="bfloat16"))
    assert bf16.fingerprint["precision"] == "bfloat16"
    assert fingerprint_hash(bf16.fingerprint) != plain
    on("cpu")  # auto on a CPU is float32: the same trials as before
    assert fingerprint_hash(build_adapter(replace(VIT, precision="auto")).fingerprint) == plain
    on("cuda")
    for supported, expect in ((True, "bfloat16"), (False, "float16")):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda s=supported: s)
        assert build_adapter(replace(VIT, precision="auto")).fingerprint["precision"] == expect
    # half-precision weights set the precision themselves: no autocast, dtype is in the fingerprint
    half = build_adapter(replace(VIT, dtype="bfloat16", precision="auto")).fingerprint
    assert "precision" not in half and half["dtype"] == "bfloat16"


def test_placement_decides_over_the_planned_device(on):
    on("cuda")
    adapter = build_adapter(replace(VIT, precision="auto"))
    adapter._placed = "cpu"  # what to("cpu") records, without moving any weights
    assert "precision" not in adapter.fingerprint


def test_batch_size_is_not_in_any_fingerprint(tmp_path):
    from tests import tiny_vlms

    a = build_adapter(replace(VIT, batch_size=1))
    b = build_adapter(replace(VIT, batch_size="auto", options={"max_batch_size": 64}))
    assert fingerprint_hash(a.fingerprint) == fingerprint_hash(b.fingerprint)
    path = tiny_vlms.build_llava(tmp_path / "llava")
    vlm = ModelSpec(id="v", source="hf-vlm", name=str(path))
    c = build_adapter(replace(vlm, batch_size=2))
    d = build_adapter(replace(vlm, batch_size="auto", options={"max_batch_size": 4}))
    assert fingerprint_hash(c.fingerprint) == fingerprint_hash(d.fingerprint)
    assert "precision" not in c.fingerprint
    assert build_adapter(replace(vlm, precision="float16")).fingerprint["precision"] == "float16"


# -- autocast -----------------------------------------------------------------------------------

def test_bfloat16_autocast_runs_the_forward_pass_in_bfloat16():
    seen = []
    plain, bf16 = build_adapter(VIT), build_adapter(replace(VIT, precision="bfloat16"))
    for adapter in (plain, bf16):
        forward = adapter._forward

        def spy(model, batch, forward=forward):
            seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu"))
            return forward(model, batch)
        adapter._forward = spy
    images = _images(4)
    a, b = plain.embed(images), bf16.embed(images)
    assert seen == [False, torch.bfloat16]
    assert a.dtype == b.dtype == np.float32
    assert not np.array_equal(a, b)  # bfloat16 products really ran ...
    np.testing.assert_allclose(a, b, atol=0.1, rtol=0.1)  # ... and answer close to float32


def test_a_vlm_generates_under_autocast(tmp_path):
    from tests import tiny_vlms

    path = tiny_vlms.build_llava(tmp_path / "llava")
    adapter = build_adapter(ModelSpec(id="v", source="hf-vlm", name=str(path), precision="bfloat16",
                                      batch_size="auto"))
    model = adapter.load()
    seen = []
    generate = model.generate

    def spy(**kwargs):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return generate(**kwargs)
    model.generate = spy
    out = adapter.generate_many(_images(3), ["How many?"] * 3, {"max_new_tokens": 3})
    assert seen == [torch.bfloat16] and len(out) == 3 and all(g.text is not None for g in out)


# -- batch_size auto ----------------------------------------------------------------------------

def _oom_above(adapter, limit, tried):
    forward = adapter._forward

    def fake(model, batch):
        tried.append(len(batch))
        if len(batch) > limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (fake)")
        return forward(model, batch)
    adapter._forward = fake


def test_batch_auto_halves_on_out_of_memory_and_keeps_the_size():
    images = _images(20)
    one = build_adapter(replace(VIT, batch_size=1)).embed(images)
    adapter = build_adapter(replace(VIT, batch_size="auto"))
    tried: list[int] = []
    _oom_above(adapter, 5, tried)
    got = adapter.embed(images)
    assert tried[:4] == [20, 10, 5, 5]  # 32 on a CPU, 20 left: 20 -> 10 -> 5, then 5s
    assert adapter._sizer.size == 5
    np.testing.assert_allclose(got, one, atol=1e-5)
    tried.clear()
    adapter.embed(images[:7])
    assert tried == [5, 2]  # the size that worked is kept


def test_out_of_memory_at_one_or_at_a_fixed_size_names_the_model():
    auto = build_adapter(replace(VIT, id="big-vit", batch_size="auto"))
    _oom_above(auto, 0, [])
    with pytest.raises(ModelError, match="'big-vit'.*even at batch size 1"):
        auto.embed(_images(3))
    fixed = build_adapter(replace(VIT, id="big-vit", batch_size=4))
    _oom_above(fixed, 2, [])
    with pytest.raises(ModelError, match="'big-vit'.*batch_size 3.*batch_size: auto"):
        fixed.embed(_images(3))


def test_a_vlm_batch_backs_off_too(monkeypatch):
    from harness.models.base import Generation
    from harness.models.hf_vlm import HFVLM

    adapter = HFVLM(ModelSpec(id="v", source="hf-vlm", name="unused", batch_size="auto"))
    sizes = []

    def fake(images, prompts, settings):
        sizes.append(len(images))
        if len(images) > 3:
            raise torch.cuda.OutOfMemoryError("fake")
        return [Generation(text=p) for p in prompts]
    monkeypatch.setattr(adapter, "_generate_batch", fake)
    prompts = [str(i) for i in range(7)]
    assert [g.text for g in adapter.generate_many(_images(7), prompts, {})] == prompts
    assert sizes == [7, 3, 3, 1]


def test_the_runner_hands_auto_models_their_largest_batch():
    assert dev.chunk_size(replace(VIT, batch_size=12)) == 12
    assert dev.chunk_size(replace(VIT, batch_size="auto")) == dev.AUTO_MAX_BATCH
    assert dev.chunk_size(replace(VIT, batch_size="auto", options={"max_batch_size": 64})) == 64


# -- channels-last ------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["lenet", "colnet", "mlp"])
def test_channels_last_leaves_the_bar_chart_cnns_answers(monkeypatch, arch):
    """place() as on CUDA (channels-last for conv nets), run on the CPU, where torch has NHWC
    kernels too: the same predictions as the plain layout."""
    from harness.models.regressors import DEFAULTS, _build_net

    torch.manual_seed(0)
    net = _build_net(arch, 1, 40, 60, dict(DEFAULTS)).eval()
    x = torch.rand(6, 1, 40, 60) - 0.5
    with torch.inference_mode():
        plain = net(x)
        monkeypatch.setattr(dev, "is_cuda", lambda device: True)
        fast = dev.place(net, "cpu")(x.contiguous(memory_format=torch.channels_last))
    conv = [p for p in net.parameters() if p.dim() == 4]
    assert dev.is_conv_net(net) == (arch != "mlp")
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in conv)
    torch.testing.assert_close(fast, plain, atol=1e-5, rtol=1e-5)


def test_channels_last_is_for_cnns_only():
    import timm

    assert dev.is_conv_net(timm.create_model("test_resnet", pretrained=False))
    assert not dev.is_conv_net(timm.create_model("test_vit", pretrained=False))  # one conv: patches


def test_cnn_regressors_refuse_half_precision():
    with pytest.raises(ModelError, match="'bars'.*float32"):
        build_adapter(ModelSpec(id="bars", source="cnn", name="lenet", precision="bfloat16"))
    build_adapter(ModelSpec(id="bars", source="cnn", name="lenet", precision="auto",
                            batch_size="auto", options={"max_batch_size": 64}))


# -- recipes ------------------------------------------------------------------------------------

RECIPE = """\
name: gpu
models:
  - id: m1
    source: timm
    name: test_vit
    weights: random
{extra}
tasks: [closure.nat.silhouette]
"""


def _recipe(tmp_path, extra):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(extra="\n".join(f"    {line}" for line in extra.splitlines())))
    return load_recipe(path)


def test_recipe_accepts_batch_size_auto_and_precision(tmp_path):
    from harness.run import model_specs

    r = _recipe(tmp_path, "batch_size: auto\nprecision: auto")
    assert (r.models[0].batch_size, r.models[0].precision) == ("auto", "auto")
    spec = model_specs(r)[0]
    assert (spec.batch_size, spec.precision) == ("auto", "auto")
    assert _recipe(tmp_path, "batch_size: 8").models[0].batch_size == 8
    assert _recipe(tmp_path, "").models[0].precision == "float32"


@pytest.mark.parametrize("extra, message", [
    ("batch_size: big", r"r\.yaml:7: models\.0\.batch_size: .*integer from 1 to 65536 or 'auto', got 'big'"),
    ("batch_size: 0", r"models\.0\.batch_size: .*got 0"),
    ("precision: fp8", r"r\.yaml:7: models\.0\.precision: .*'float32', 'auto', 'bfloat16' or 'float16'"),
    ("dtype: bfloat16\nprecision: float16", r"models\.0: .*dtype bfloat16 .* precision float16 .* set one"),
])
def test_recipe_refuses_bad_values_clearly(tmp_path, extra, message):
    with pytest.raises(RecipeError, match=message):
        _recipe(tmp_path, extra)


def _cuda_branches(monkeypatch):
    """The CUDA-only branches, run on the CPU: is_cuda says yes and pinning is the identity (it
    needs a driver); what remains is the real layout, copies and casts of the GPU path."""
    for module in (dev, harness.models.encoders, harness.models.regressors, harness.models.hf_vlm):
        monkeypatch.setattr(module, "is_cuda", lambda device: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self)


def test_the_cuda_path_leaves_a_cnn_encoders_embeddings(monkeypatch):
    spec = ModelSpec(id="r", source="timm", name="test_resnet", weights="random", batch_size=3)
    images = _images(5, size=64)
    plain = build_adapter(spec)
    expect = plain.embed(images)
    _cuda_branches(monkeypatch)
    fast = build_adapter(spec)
    fast._model, fast._transform = plain._model, plain._transform
    fast.to("cpu")  # place(): channels-last, as on CUDA
    assert next(p for p in fast._model.parameters() if p.dim() == 4).is_contiguous(
        memory_format=torch.channels_last)
    np.testing.assert_allclose(fast.embed(images), expect, atol=1e-5)


def test_the_cuda_path_prepares_bar_charts_alike(monkeypatch):
    from harness.models.regressors import CNNRegressor

    model = CNNRegressor(ModelSpec(id="bars", source="cnn", name="lenet"))
    charts = np.random.default_rng(0).integers(0, 255, (4, 20, 30, 3), dtype=np.uint8)
    plain = model._tensor(charts, "cpu")
    _cuda_branches(monkeypatch)
    fast = model._tensor(charts, "cpu")  # uint8 across, cast after the copy, channels-last
    assert fast.is_contiguous(memory_format=torch.channels_last) and fast.dtype == torch.float32
    assert torch.equal(fast, plain)


# -- a roster: one model in memory at a time ------------------------------------------------------

def test_each_models_weights_are_released_when_its_battery_ends(tmp_path, monkeypatch):
    """A roster runs one model at a time: when a battery ends its model's weights are dropped
    (and on CUDA the cache is emptied), so the next model finds the memory free rather than
    every model of a full roster held until the recipe ends."""
    import gc
    import weakref

    from harness.models.encoders import TimmEncoder
    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from tests.conftest import MIRROR

    loaded: dict[str, weakref.ref] = {}
    alive_when: dict[str, list[str]] = {}
    real_load, real_embed = TimmEncoder._load, TimmEncoder.embed

    def load(self):
        model, transform = real_load(self)
        loaded[self.spec.id] = weakref.ref(model)
        return model, transform

    def embed(self, images):
        gc.collect()  # what the harness still references, not when the collector runs
        alive_when[self.spec.id] = sorted(k for k, ref in loaded.items() if ref() is not None)
        return real_embed(self, images)

    monkeypatch.setattr(TimmEncoder, "_load", load)
    monkeypatch.setattr(TimmEncoder, "embed", embed)
    emptied = []
    monkeypatch.setattr(harness.trials.runner, "free_device_memory", lambda device: emptied.append(device))
    path = tmp_path / "roster.yaml"
    path.write_text(f"""name: roster
models:
  - {{id: a, source: timm, name: test_vit, weights: random, batch_size: 40}}
  - {{id: b, source: timm, name: test_vit, weights: random, batch_size: 40}}
tasks: [closure.nat.silhouette]
data: {{mirror: {MIRROR}}}
runtime: {{device: cpu, progress: false}}
tracking: {{enabled: false}}
output_dir: {tmp_path / "out"}
""")
    results = run_recipe(load_recipe(path), echo=lambda *_: None)
    assert [r.model_id for r in results] == ["a", "b"] and not any(r.failed for r in results)
    assert alive_when == {"a": ["a"], "b": ["b"]}  # a's weights were gone before b embedded
    gc.collect()
    assert loaded["b"]() is None
    assert emptied == ["cpu", "cpu"]


def test_freeing_device_memory_empties_the_cuda_cache_and_leaves_a_cpu_alone(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    dev.free_device_memory("cpu")
    dev.free_device_memory(None)
    assert emptied == []
    dev.free_device_memory("cuda:0")
    assert emptied == [True]


def test_a_released_regressor_answers_again_from_its_checkpoint(tmp_path):
    from harness.models.regressors import CNNRegressor

    spec = ModelSpec(id="r", source="cnn", name="mlp", options={"max_epochs": 1, "hidden": 8})
    model = build_adapter(spec).to("cpu")
    assert isinstance(model, CNNRegressor)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (24, 20, 20), dtype=np.uint8)
    y = rng.random(24).astype(np.float32)

    class Data:
        targets = y

        def __len__(self):
            return len(x)

        def images(self, idx):
            return x[idx]

    model.fit(Data(), Data())
    before = model.predict(x)
    model.save(tmp_path / "r.pt")
    model.release()
    with pytest.raises(ModelError, match="not trained"):
        model.predict(x)
    assert np.array_equal(model.load(tmp_path / "r.pt").predict(x), before)


def test_a_battery_runs_with_the_long_lived_heap_frozen(tmp_path, monkeypatch):
    """While a battery runs, the objects alive when it started (modules, the plan: most of the
    heap) are out of the cyclic collector's full passes, which otherwise walk all of them at
    whatever moment the battery's allocations trigger one. Between batteries one collection
    frees what the last model left in reference cycles before the next loads; after the last
    none is made, and the process's collector is as it was."""
    import gc
    import weakref

    from harness.models.encoders import TimmEncoder
    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from tests.conftest import MIRROR

    seen: dict[str, tuple[int, list[str]]] = {}
    cyclic: dict[str, weakref.ref] = {}
    collections: list[int] = []
    real_embed, real_collect = TimmEncoder.embed, gc.collect

    def embed(self, images):
        if self.spec.id not in cyclic:  # a cycle through the model: only the collector frees it
            self.load().cycle = self._model
            cyclic[self.spec.id] = weakref.ref(self._model)
        seen[self.spec.id] = (gc.get_freeze_count(), sorted(k for k, r in cyclic.items() if r() is not None))
        return real_embed(self, images)

    monkeypatch.setattr(TimmEncoder, "embed", embed)
    monkeypatch.setattr(gc, "collect", lambda *a: (collections.append(1), real_collect(*a))[1])

    def run(models):
        path = tmp_path / "roster.yaml"
        entries = "".join(f"  - {{id: {m}, source: timm, name: test_vit, weights: random, batch_size: 40}}\n"
                          for m in models)
        path.write_text(f"name: roster\nmodels:\n{entries}tasks: [closure.nat.silhouette]\n"
                        f"data: {{mirror: {MIRROR}}}\nruntime: {{device: cpu, progress: false}}\n"
                        f"tracking: {{enabled: false}}\noutput_dir: {tmp_path / 'out'}\n")
        seen.clear(), collections.clear()
        run_recipe(load_recipe(path), echo=lambda *_: None)

    run(["a", "b"])
    assert all(frozen > 10_000 for frozen, _ in seen.values()), seen
    assert seen["b"][1] == ["b"]  # a's cycle was collected before b ran
    assert len(collections) == 1 and gc.get_freeze_count() == 0
    run(["c"])
    assert collections == [] and gc.get_freeze_count() == 0
    gc.disable()  # a process that manages its collector itself is left alone
    try:
        run(["d"])
        assert seen["d"][0] == 0 and gc.get_freeze_count() == 0 and not gc.isenabled()
    finally:
        gc.enable()
