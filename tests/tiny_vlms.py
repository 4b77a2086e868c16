"""Tiny random image-text-to-text models, built in code and saved with ``save_pretrained``.

No hub access: the tokenizers are byte-level BPE trained here on a few sentences, the configs
are a few dozen parameters wide (reference/offline-models.md section 3). Each builder writes a
complete model directory (config, weights, processor, chat template) that
``AutoModelForImageTextToText``/``AutoProcessor.from_pretrained`` load, exactly like a hub
snapshot, so the ``hf-vlm`` adapter is tested through its real loading path.
"""

from __future__ import annotations

from pathlib import Path

import torch

CORPUS = [
    "What object is shown in this black silhouette? Choose exactly one: airplane, bear, bicycle, "
    "bird, boat, bottle, car, cat, chair, clock, dog, elephant, keyboard, knife, oven, truck.",
    "Three colored chart marks are shown, numbered 1, 2 and 3. Which one is the odd one out "
    "(least similar in color to the other two)? Answer 1, 2, or 3.",
    "How many distinct color series (groups of same-colored points) are in this scatterplot? "
    "Answer with a single integer.",
    "The answer is 2. I think 3, not 1. One. Two. Three. 0 1 2 3 4 5 6 7 8 9 10 11 12 42%",
    "USER: ASSISTANT: User: Assistant: system user assistant",
]

TINY_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                   image_size=32, patch_size=8)
TINY_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)

LLAVA_TEMPLATE = (
    "{% for m in messages %}{{ m['role'].upper() }}: {% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}{% endfor %} "
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)
QWEN2VL_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}:{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


def make_tokenizer(extra_special=(), vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<unk>", "<pad>", "<s>", "</s>", *extra_special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   bos_token="<s>", eos_token="</s>")


def _token_ids(tok) -> dict:
    return dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id)


def _save(model, processor, out: Path, answer: str | None = None) -> Path:
    """Write the model dir. With ``answer``, the saved generation config biases greedy decoding
    to emit exactly that text and stop (``sequence_bias``), so parsing can be tested end to end
    through a real model; the weights stay random."""
    if answer is not None:
        tok = processor.tokenizer
        ids = tok.encode(answer, add_special_tokens=False)
        seqs = [ids[:i + 1] for i in range(len(ids))] + [ids + [tok.eos_token_id]]
        model.generation_config.sequence_bias = [[seq, 50.0 * (i + 1)] for i, seq in enumerate(seqs)]
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_llava(out: Path, answer: str | None = None, vision: dict | None = None,
                text: dict | None = None) -> Path:
    """``vision``/``text`` override the tiny configs (benchmarks/overhead.py builds a wider one)."""
    from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor)

    torch.manual_seed(0)
    tok = make_tokenizer(["<image>"])
    vision = {**TINY_VISION, **(vision or {})}
    side = vision["image_size"]
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**vision),
        text_config=LlamaConfig(**{**TINY_TEXT, **(text or {})}, num_key_value_heads=2, **_token_ids(tok)),
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default", vision_feature_layer=-1,
    )
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": side},
                                           crop_size={"height": side, "width": side}),
        tokenizer=tok, patch_size=vision["patch_size"], vision_feature_select_strategy="default",
        image_token="<image>",
        num_additional_image_tokens=1, chat_template=LLAVA_TEMPLATE,
    )
    return _save(LlavaForConditionalGeneration(config).eval(), processor, out, answer)


def build_qwen2_vl(out: Path, answer: str | None = None) -> Path:
    from transformers import (Qwen2VLConfig, Qwen2VLForConditionalGeneration,
                              Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor)

    torch.manual_seed(0)
    specials = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
                "<|im_start|>", "<|im_end|>"]
    tok = make_tokenizer(specials)
    ids = {t: tok.convert_tokens_to_ids(t) for t in specials}
    config = Qwen2VLConfig(
        text_config=dict(**TINY_TEXT, num_key_value_heads=1, max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [2, 3, 3]}, **_token_ids(tok)),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    pixels = dict(min_pixels=56 * 56, max_pixels=112 * 112)
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(**pixels, patch_size=14, merge_size=2,
                                              temporal_patch_size=2),
        tokenizer=tok, video_processor=Qwen2VLVideoProcessor(**pixels),
        chat_template=QWEN2VL_TEMPLATE,
    )
    return _save(Qwen2VLForConditionalGeneration(config).eval(), processor, out, answer)


def build_idefics3(out: Path, answer: str | None = None) -> Path:
    from transformers import (Idefics3Config, Idefics3ForConditionalGeneration,
                              Idefics3ImageProcessor, Idefics3Processor)

    torch.manual_seed(0)
    tok = make_tokenizer(["<image>", "<fake_token_around_image>", "<global-img>",
                          "<end_of_utterance>", "<video>", "<|im_start|>"]
                         + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)])
    config = Idefics3Config(
        vision_config=TINY_VISION, text_config=dict(model_type="llama", **TINY_TEXT, **_token_ids(tok)),
        scale_factor=2, image_token_id=tok.convert_tokens_to_ids("<image>"),
    )
    processor = Idefics3Processor(
        image_processor=Idefics3ImageProcessor(size={"longest_edge": 64},
                                               max_image_size={"longest_edge": 32},
                                               do_image_splitting=True),
        tokenizer=tok, image_seq_len=(32 // 8) ** 2 // 4, chat_template=IDEFICS3_TEMPLATE,
    )
    return _save(Idefics3ForConditionalGeneration(config).eval(), processor, out, answer)


BUILDERS = {"llava": build_llava, "qwen2_vl": build_qwen2_vl, "idefics3": build_idefics3}
