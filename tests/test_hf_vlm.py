"""The ``hf-vlm:`` adapter and the prompt readouts, through tiny random LLaVA, Qwen2-VL and Idefics3
models saved to disk and loaded by the adapter exactly like hub snapshots (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import replace

import pytest
from PIL import Image

from harness.models.base import ModelError, ModelSpec
from harness.models.hf_vlm import HFVLM, chat
from harness.models.registry import build_adapter
from harness.readouts.parse import parse_integer, parse_label
from harness.readouts.prompt import PERMUTATIONS, PromptChoice, PromptCount, PromptLabel, PromptNumber
from harness.readouts.registry import get_readout
from harness.stimuli import mark_color, silhouette
from harness.stimuli.base import Prompt, Stimulus, StimulusSet
from tests import tiny_vlms

ARCHS = list(tiny_vlms.BUILDERS)
IMAGES = [Image.new("RGB", (64, 48), (220, 20, 20)), Image.new("RGB", (40, 40), (20, 20, 220)),
          Image.new("RGB", (112, 56), (20, 180, 20))]
GREEDY = {"max_new_tokens": 6, "temperature": 0.0}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_vlms")
    dirs = {arch: build(root / arch) for arch, build in tiny_vlms.BUILDERS.items()}
    dirs["llava_says_2"] = tiny_vlms.build_llava(root / "llava_says_2", answer="2")
    dirs["qwen2_vl_says_cat"] = tiny_vlms.build_qwen2_vl(root / "qwen2_vl_says_cat", answer="A cat.")
    return dirs


@pytest.fixture(scope="module")
def adapters(model_dirs):
    return {arch: build_adapter(ModelSpec(id=arch, source="hf-vlm", name=str(d), batch_size=4))
            for arch, d in model_dirs.items()}


def synthetic_stimset(response_space: str, prompt: Prompt, options: tuple, n: int = 3) -> StimulusSet:
    stimuli = [Stimulus(f"item{i}", "test", options[0] if options else 1, IMAGES[i % len(IMAGES)])
               for i in range(n)]
    return StimulusSet(task_id="closure.nat.synthetic", version="1", response_space=response_space,
                       stimuli=stimuli, human_ref_id="none", prompt=prompt, options=options)


def reference_generation(model_dir, image, prompt, max_new_tokens):
    """Independent of the adapter: render the chat template to text, then run the processor."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(images=[image], text=[text], return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)[0].strip()


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_matches_a_direct_transformers_call(arch, adapters, model_dirs):
    prompt = mark_color.PROMPT.text
    gen = adapters[arch].generate(IMAGES[0], prompt, GREEDY)
    assert gen.error is None and isinstance(gen.text, str)
    assert gen.text == reference_generation(model_dirs[arch], IMAGES[0], prompt, 6)
    assert 1 <= gen.usage["output_tokens"] <= 6 and gen.usage["input_tokens"] > len(prompt.split())
    assert gen.latency_s > 0


@pytest.mark.parametrize("arch", ARCHS)
def test_image_comes_before_the_prompt(arch, adapters):
    adapter = adapters[arch]
    adapter.load()
    processor = adapter._processor
    text = processor.apply_chat_template(chat("PROMPT_TEXT", IMAGES[0]), add_generation_prompt=True)
    image_token = {"llava": "<image>", "qwen2_vl": "<|image_pad|>", "idefics3": "<image>"}[arch]
    assert -1 < text.index(image_token) < text.index("PROMPT_TEXT")


@pytest.mark.parametrize("arch", ARCHS)
def test_left_padded_batch_answers_as_single_items(arch, adapters):
    # Images of different sizes give Qwen2-VL prompts of different lengths, so padding is exercised.
    prompts = [silhouette.PROMPT.text, mark_color.PROMPT.text, "How many?"]
    batched = adapters[arch].generate_many(IMAGES, prompts, GREEDY)
    single = [adapters[arch].generate(im, p, GREEDY) for im, p in zip(IMAGES, prompts)]
    assert [g.text for g in batched] == [g.text for g in single]
    assert [g.usage for g in batched] == [g.usage for g in single]


def test_max_new_tokens_bounds_the_answer(adapters):
    for n in (1, 3):
        gen = adapters["llava"].generate(IMAGES[1], "How many?", {"max_new_tokens": n})
        assert gen.usage["output_tokens"] <= n


def test_dtype_and_device_map_options(model_dirs):
    # The GPU path in miniature: half-precision weights placed by accelerate, pixels cast to match.
    spec = ModelSpec(id="b", source="hf-vlm", name=str(model_dirs["llava_says_2"]), dtype="bfloat16",
                     options={"device_map": "cpu", "generation": {"max_new_tokens": 5}})
    adapter = build_adapter(spec)
    gen = adapter.generate(IMAGES[0], mark_color.PROMPT.text, GREEDY)
    import torch

    assert adapter._model.dtype == torch.bfloat16 and gen.text == "2"


def test_sampling_is_reproducible_by_seed(adapters):
    settings = {"max_new_tokens": 8, "temperature": 1.5, "seed": 3}
    a = adapters["idefics3"].generate(IMAGES[2], "How many?", settings)
    b = adapters["idefics3"].generate(IMAGES[2], "How many?", settings)
    assert a.text == b.text


def test_identity_without_loading_weights(model_dirs, tmp_path):
    spec = ModelSpec(id="q", source="hf-vlm", name=str(model_dirs["qwen2_vl"]), dtype="bfloat16",
                     options={"processor_kwargs": {"max_pixels": 12544}})
    adapter = build_adapter(spec)
    fp, version = adapter.fingerprint, adapter.model_version
    assert adapter._model is None  # check, fingerprint and model_version loaded nothing
    assert fp["dtype"] == "bfloat16" and fp["options"] == {"processor_kwargs": {"max_pixels": 12544}}
    assert version.startswith(f"{spec.name}@local-")
    # Changing the model dir changes its identity.
    copy = tmp_path / "copy"
    shutil.copytree(model_dirs["qwen2_vl"], copy)
    cfg = json.loads((copy / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(json.dumps({**cfg, "repetition_penalty": 1.05}))
    assert HFVLM(replace(spec, name=str(copy))).fingerprint["local_sha256"] != fp["local_sha256"]
    hub = HFVLM(ModelSpec(id="h", source="hf-vlm", name="Qwen/Qwen2-VL-2B-Instruct", revision="895c3a4"))
    assert hub.model_version == "Qwen/Qwen2-VL-2B-Instruct@895c3a4"
    assert hub.fingerprint["revision"] == "895c3a4"


def test_check_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="not in the local Hugging Face cache"):
        build_adapter(ModelSpec(id="m", source="hf-vlm", name="nobody/no-such-vlm", revision="abc"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ModelError, match="not an image-text-to-text model"):
        build_adapter(ModelSpec(id="m", source="hf-vlm", name=str(tmp_path)))
    with pytest.raises(ModelError, match="options.device: unknown hf-vlm option"):
        build_adapter(ModelSpec(id="m", source="hf-vlm", name=str(tmp_path), options={"device": "cuda"}))
    with pytest.raises(ModelError, match="dtype"):
        build_adapter(ModelSpec(id="m", source="hf-vlm", name=str(tmp_path), dtype="float8"))


# -- prompt readouts through the real adapter -------------------------------------------------

def test_prompt_choice_end_to_end(adapters):
    stimset = synthetic_stimset("choice", mark_color.PROMPT, (1, 2, 3))
    readout = get_readout("prompt_choice")(stimset)
    responses = readout.respond(adapters["llava_says_2"], stimset.stimuli)
    assert [(r.response, r.parse_status, r.raw_output) for r in responses] == [(2, "ok", "2")] * 3
    assert all(r.usage["output_tokens"] == 2 for r in responses)  # "2" and end of sequence
    assert readout.settings == {"readout": "prompt_choice", "max_new_tokens": 40, "temperature": 0.0,
                                "top_p": None, "seed": 0, "all_permutations": False}


def test_prompt_count_respects_options(adapters):
    prompt = Prompt("similarity.chart.series_count.v1", "How many distinct color series (groups of "
                    "same-colored points) are in this scatterplot? Answer with a single integer.")
    ok = PromptCount(synthetic_stimset("count", prompt, tuple(range(1, 21))))
    assert {r.response for r in ok.respond(adapters["llava_says_2"], ok.stimset.stimuli)} == {2}
    narrow = PromptCount(synthetic_stimset("count", prompt, tuple(range(5, 21))))
    assert {r.parse_status for r in narrow.respond(adapters["llava_says_2"], narrow.stimset.stimuli)} \
        == {"null:out_of_options"}


@pytest.mark.parametrize("arch", ARCHS + ["qwen2_vl_says_cat"])
def test_prompt_label_parses_what_the_model_said(arch, adapters):
    stimset = synthetic_stimset("label", silhouette.PROMPT, silhouette.CLASSES)
    responses = PromptLabel(stimset, max_new_tokens=8).respond(adapters[arch], stimset.stimuli)
    for r in responses:
        expected = parse_label(r.raw_output, silhouette.CLASSES)
        assert (r.response, r.parse_status) == (expected.value, expected.status)
    if arch == "qwen2_vl_says_cat":
        assert [r.response for r in responses] == ["cat"] * 3


def test_prompt_number_range(adapters):
    prompt = Prompt("bars.v1", "What percentage is the smaller marked bar of the larger?")
    stimset = synthetic_stimset("scalar", prompt, ())
    assert {r.response for r in PromptNumber(stimset).respond(adapters["llava_says_2"], stimset.stimuli)} == {2}
    tight = PromptNumber(stimset, lo=10, hi=90)
    assert {r.parse_status for r in tight.respond(adapters["llava_says_2"], stimset.stimuli)} == \
        {"null:out_of_range"}


def test_readout_validation():
    choice = synthetic_stimset("choice", mark_color.PROMPT, (1, 2, 3))
    with pytest.raises(ValueError, match="no option"):
        PromptChoice(choice, max_tokens=10)
    with pytest.raises(ValueError, match="response space"):
        PromptLabel(choice)
    with pytest.raises(ValueError, match="needs a prompt"):
        PromptChoice(replace(choice, prompt=None))
    with pytest.raises(ValueError, match="montage parts"):
        PromptChoice(choice, all_permutations=True)


def test_all_permutations_maps_answers_back_to_montage_numbering(sources, adapters):
    """The rigged model always names position 2; across the six orders that position holds each
    montage part twice, so the recorded (montage-numbered) answers cover 1, 2, 3 twice each."""
    full = mark_color.build(sources, seed=0)
    stimset = replace(full, stimuli=full.stimuli[:2])
    readout = PromptChoice(stimset, all_permutations=True, n_reps=2)
    assert readout.n_reps == 12
    model = adapters["llava_says_2"]
    for stim in stimset.stimuli:
        answers, shown = Counter(), set()
        for rep in range(len(PERMUTATIONS)):
            readout.rep = rep
            (r,) = readout.respond(model, [stim])
            assert r.extras["presented_response"] == 2 and r.parse_status == "ok"
            perm = r.extras["permutation"]
            assert r.response == perm[1] + 1
            answers[r.response] += 1
            shown.add(tuple(perm))
        assert answers == {1: 2, 2: 2, 3: 2} and len(shown) == 6


def test_permuted_montage_shows_the_parts_in_the_new_order(sources):
    from harness.stimuli.montage import montage_of

    stim = mark_color.build(sources, seed=0).stimuli[5]
    readout = PromptChoice(replace(mark_color.build(sources, seed=0), stimuli=[stim]), all_permutations=True)
    image, info = readout.present(stim, 0)
    assert info == {"permutation": [0, 1, 2]} and image.tobytes() == stim.image.tobytes()
    image, info = readout.present(stim, 5)  # (2, 1, 0): the order reversed
    assert info["permutation"] == [2, 1, 0]
    assert image.tobytes() == montage_of(stim.part_sources[::-1]).tobytes()
    assert image.tobytes() != stim.image.tobytes()


def test_transparent_images_are_shown_on_white(adapters):
    from harness.models.base import Generation, ModelAdapter

    class Recorder(ModelAdapter):
        def __init__(self):
            pass

        def generate(self, image, prompt, settings):
            self.seen = image
            return Generation(text="2")

    rgba = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    stimset = synthetic_stimset("choice", mark_color.PROMPT, (1, 2, 3), n=1)
    stimset.stimuli[0].image_source = rgba
    model = Recorder()
    (r,) = PromptChoice(stimset).respond(model, stimset.stimuli)
    assert model.seen.mode == "RGB" and model.seen.getpixel((0, 0)) == (255, 255, 255)
    assert parse_integer(r.raw_output, (1, 2, 3)).value == r.response == 2


@pytest.mark.parametrize("progress", [False, True])
def test_transformers_loading_bar_follows_runtime_progress(model_dirs, write_recipe, progress):
    """transformers draws a "Loading weights" bar at each load; with `runtime.progress: false`
    (a batch job's log) a run draws no bar at all. With it on, the bar is there: this test sees it."""
    import os
    import subprocess
    import sys

    path = write_recipe([{"id": "tiny-vlm", "source": "hf-vlm", "name": str(model_dirs["qwen2_vl_says_cat"]),
                          "family": "vlm", "batch_size": 16, "generation": {"max_new_tokens": 4}}],
                        ["closure.nat.silhouette"], runtime={"device": "cpu", "progress": progress},
                        tracking={"enabled": False})
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    res = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path)], capture_output=True,
                         text=True, env={**env, "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    bars = "\n".join(line for line in res.stderr.replace("\r", "\n").splitlines() if "it/s" in line
                     or "trial/s" in line or "Loading weights" in line)
    if progress:
        assert "Loading weights" in bars and "tiny-vlm closure.nat.silhouette" in bars
    else:
        assert bars == ""


HUB_SWITCH = """
import os, sys, warnings
warnings.simplefilter("error")  # the hub warns where the user's variable overrides a switch
{before}
from harness.models.device import hub_progress_bars
with hub_progress_bars(shown=False):
    import transformers.utils.logging as tl
    from huggingface_hub.utils import are_progress_bars_disabled
    inside = (tl.is_progress_bar_enabled(), not are_progress_bars_disabled())
print(inside, (tl.is_progress_bar_enabled(), not are_progress_bars_disabled()))
"""


@pytest.mark.parametrize("before, env, says", [
    ("", None, "(False, False) (True, True)"),  # transformers first imported inside
    ("import transformers.utils.logging", None, "(False, False) (True, True)"),
    ("import transformers.utils.logging as t; t.disable_progress_bar()", None, "(False, False) (False, False)"),
    ("", "0", "(True, True) (True, True)"),  # the user's HF_HUB_DISABLE_PROGRESS_BARS has the last word
    ("", "1", "(False, False) (False, False)"),
])
def test_hub_progress_bars_off_inside_and_as_they_were_after(before, env, says):
    import os
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    if env is not None:
        environ["HF_HUB_DISABLE_PROGRESS_BARS"] = env
    res = subprocess.run([sys.executable, "-c", HUB_SWITCH.format(before=before)], capture_output=True,
                         text=True, env=environ, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == says
