"""Stand-ins for every hub model of ``recipes/full.yaml``, built here (no weights committed) into a
local hub's folder (:mod:`tests.local_hub`) at the recipe's exact repo ids and pinned commits.

Each stand-in has its pinned snapshot's architecture (config ``model_type`` and ``architectures``),
image-processor class, chat template and special tokens, with random weights; where the loader
reads sizes from the config (transformers) the sizes are tiny, where the architecture fixes them
(timm, by name) they are the real ones. The VLM stand-ins answer ``ANSWER`` (their generation
config biases greedy decoding to it, :func:`tests.tiny_vlms._save`), which every Gestalt prompt
parses (a label and a count), so the readouts' parse path runs.

``python -m tests.hub_standins ROOT`` builds them all (what the rehearsal's fixture does);
``python -m tests.hub_standins ROOT RECIPE`` those of another recipe's hub models (.ci/run: the
image's loaders.yaml).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from harness.recipes import load_recipe
from tests import tiny_vlms
from tests.conftest import REPO

FULL = REPO / "recipes" / "full.yaml"
ANSWER = "cat 2"  # a silhouette label and a mark-color or series-count number
TINY_VIT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                image_size=32, patch_size=8)
TINY_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 vocab_size=99, max_position_embeddings=64, bos_token_id=0, eos_token_id=1, pad_token_id=1)

# The pinned snapshots' chat templates (their chat_template.json), transcribed.
LLAVA_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}"
    "{% endif %}{# Render all images first #}{% for content in message['content'] | selectattr('type', "
    "'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}{# Render all text next #}{% if message['role'] != "
    "'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}{% else %}{% for content in message['content'] | selectattr("
    "'type', 'equalto', 'text') %}{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)
QWEN2VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in "
    "messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful "
    "assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type']"
    " == 'image' or 'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value"
    " + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|>"
    "<|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = "
    "video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|>"
    "<|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]"
    "['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if "
    "line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def _timm(out: Path, name: str) -> None:
    """timm's hub layout: ``model.safetensors`` (timm reads it before ``pytorch_model.bin``) and
    ``config.json`` with the architecture and its pretrained config."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out / "model.safetensors")
    cfg = model.pretrained_cfg
    (out / "config.json").write_text(json.dumps({
        "architecture": name.split(".")[0], "num_classes": model.num_classes,
        "num_features": model.num_features, "pretrained_cfg": {k: cfg[k] for k in (
            "tag", "input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std", "num_classes")
            if k in cfg}}, indent=2, default=list))


def _hf(out: Path, model, processor) -> None:
    torch.manual_seed(0)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)


def _dinov2(out: Path) -> None:
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    vit = {k: v for k, v in TINY_VIT.items() if k != "intermediate_size"}
    _hf(out, Dinov2Model(Dinov2Config(**vit, mlp_ratio=2)),
        BitImageProcessor(size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32},
                          do_convert_rgb=True, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]))


def _mae(out: Path) -> None:
    from transformers import ViTImageProcessor, ViTMAEConfig, ViTMAEForPreTraining

    config = ViTMAEConfig(**TINY_VIT, decoder_hidden_size=32, decoder_num_hidden_layers=1,
                          decoder_num_attention_heads=2, decoder_intermediate_size=64)
    _hf(out, ViTMAEForPreTraining(config), ViTImageProcessor(size={"height": 32, "width": 32}))


def _beit(out: Path) -> None:
    from transformers import BeitConfig, BeitForMaskedImageModeling, BeitImageProcessor

    config = BeitConfig(**TINY_VIT, vocab_size=64, use_mask_token=True, use_shared_relative_position_bias=True,
                        use_absolute_position_embeddings=False, use_mean_pooling=False)
    _hf(out, BeitForMaskedImageModeling(config),
        BeitImageProcessor(size={"height": 32, "width": 32}, do_center_crop=False,
                           image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5]))


def _ijepa(out: Path) -> None:
    from transformers import IJepaConfig, IJepaModel, ViTImageProcessor

    _hf(out, IJepaModel(IJepaConfig(**TINY_VIT)), ViTImageProcessor(size={"height": 32, "width": 32}))


def _clip(out: Path) -> None:
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    config = CLIPConfig(text_config=TINY_TEXT, vision_config=TINY_VIT, projection_dim=16)
    _hf(out, CLIPModel(config), CLIPImageProcessor(size={"shortest_edge": 32},
                                                   crop_size={"height": 32, "width": 32}))


def _siglip(out: Path) -> None:
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    config = SiglipConfig(text_config=TINY_TEXT, vision_config=TINY_VIT)
    _hf(out, SiglipModel(config), SiglipImageProcessor(size={"height": 32, "width": 32}))


def _vlm(build: Callable[..., Path], template: str) -> Callable[[Path], None]:
    def standin(out: Path) -> None:
        build(out, answer=ANSWER)
        (out / "chat_template.jinja").write_text(template)
        for stale in ("chat_template.json",):  # one template, the snapshot's
            (out / stale).unlink(missing_ok=True)

    return standin


# full.yaml's hub models by name (timm: architecture; hf and hf-vlm: repo id)
BUILDERS: dict[str, Callable[[Path], None]] = {
    "facebook/dinov2-base": _dinov2,
    "facebook/vit-mae-base": _mae,
    "microsoft/beit-base-patch16-224-pt22k": _beit,
    "facebook/ijepa_vith14_1k": _ijepa,
    "openai/clip-vit-base-patch16": _clip,
    "google/siglip-base-patch16-224": _siglip,
    "HuggingFaceTB/SmolVLM-256M-Instruct": _vlm(tiny_vlms.build_idefics3, SMOLVLM_TEMPLATE),
    "Qwen/Qwen2-VL-2B-Instruct": _vlm(tiny_vlms.build_qwen2_vl, QWEN2VL_TEMPLATE),
    "llava-hf/llava-1.5-7b-hf": _vlm(tiny_vlms.build_llava, LLAVA_TEMPLATE),
}


def hub_models(recipe_path: Path = FULL) -> dict[str, tuple[str, str, str]]:
    """The recipe's hub models: id -> (source, name, hub repo id), in recipe order."""
    models = {}
    for m in load_recipe(recipe_path).models:
        if m.source in ("hf", "hf-vlm"):
            models[m.id] = (m.source, m.name, m.name)
        elif m.source == "timm" and m.weights == "hub":
            import timm

            models[m.id] = (m.source, m.name, timm.models.get_pretrained_cfg(m.name).hf_hub_id)
    return models


def build(root: Path, recipe_path: Path = FULL) -> dict[str, Path]:
    """Build every hub model of the recipe under ``root/<repo id>/<pinned commit>/``; returns the
    snapshot folder per model id. A hub model without a stand-in is an error naming it."""
    recipe = {m.id: m for m in load_recipe(recipe_path).models}
    built = {}
    for model_id, (source, name, repo) in hub_models(recipe_path).items():
        folder = root / repo / str(recipe[model_id].revision)
        if source == "timm":
            builder: Callable[[Path], None] = lambda out, name=name: _timm(out, name)  # noqa: E731
        elif name in BUILDERS:
            builder = BUILDERS[name]
        else:
            raise KeyError(f"{recipe_path}: model {model_id!r} ({name}) has no stand-in in {__file__}")
        builder(folder)
        built[model_id] = folder
    return built


if __name__ == "__main__":
    for model_id, folder in build(Path(sys.argv[1]), *map(Path, sys.argv[2:3])).items():
        print(f"{model_id}: {folder}")
