"""Whether a model's weights fit its device, judged before they load: the dry run prints each
model's weights at the dtype they load in against the device's memory, and a model that cannot fit
is refused with one line naming the dtype or device that would fit.

Weights here are safetensors headers without their tensors (only the header is read), and the
device's memory is the patched ``device_memory``: no GPU is needed or faked."""

from __future__ import annotations

import json
import struct

import pytest

import harness.models.memory as memory
from harness.cli import main
from harness.exit_status import Exit
from harness.models.memory import GiB, Fit, Stored, stored
from tests.conftest import REPO
from tests.test_contracts import recipe_text

SILHOUETTE = "closure.nat.silhouette"
# a 4 GiB float32 matrix, 1 Gi values: 2 GiB at bfloat16
BIG = {"w": {"dtype": "F32", "shape": [1 << 18, 1 << 12], "data_offsets": [0, 4 << 30]}}


def header_only(path, tensors: dict) -> None:
    """A safetensors file's header, its tensors left out (the fit reads only the header)."""
    header = json.dumps(tensors).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def hf_folder(tmp_path, tensors: dict):
    folder = tmp_path / "encoder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "vit"}))
    header_only(folder / "model.safetensors", tensors)
    return folder


def fit_recipe(tmp_path, sources, folder, device: str = "cpu", extra: str = ""):
    return recipe_text(tmp_path, f"""name: t
models:
  - {{id: big, source: hf, name: {folder}{extra}}}
tasks: [{SILHOUETTE}]
data: {{mirror: {sources.mirror}}}
runtime: {{device: {device}}}
tracking: {{enabled: false}}
output_dir: {tmp_path / 'out'}
""")


@pytest.fixture
def device_gib(monkeypatch):
    """The device's memory, set per test."""
    def set_to(gib: float) -> None:
        monkeypatch.setattr(memory, "device_memory", lambda device: int(gib * GiB))
    return set_to


def test_the_dry_run_prints_each_models_weights_against_its_device(tmp_path, sources, capsys, device_gib):
    device_gib(64)
    main(["recipe", str(fit_recipe(tmp_path, sources, hf_folder(tmp_path, BIG))), "--dry-run"])
    out = capsys.readouterr().out
    # 4 GiB x 1.2 + 1 GiB margin = 5.8 GiB
    assert "  weights: 4.00 GiB at float32, needs >= 5.80 GiB on cpu of 64.00 GiB: fits" in out, out


def test_weights_not_fetched_have_an_unknown_size_not_a_guess(tmp_path, sources, capsys, device_gib):
    device_gib(64)
    folder = hf_folder(tmp_path, BIG)
    (folder / "model.safetensors").unlink()
    main(["recipe", str(fit_recipe(tmp_path, sources, folder)), "--dry-run"])
    assert "  weights: size unknown (not fetched)" in capsys.readouterr().out


def no_load(monkeypatch):
    from harness.models.encoders import HFVisionEncoder

    def refuse(self):
        raise AssertionError("weights loaded before the model was left out")

    monkeypatch.setattr(HFVisionEncoder, "_load", refuse)


def test_a_model_that_cannot_fit_is_left_out_before_loading_naming_the_dtype_that_fits(
        tmp_path, sources, capsys, device_gib, monkeypatch):
    device_gib(5)  # 5.8 GiB needed at float32, 3.4 GiB at bfloat16
    no_load(monkeypatch)
    path = fit_recipe(tmp_path, sources, hf_folder(tmp_path, BIG))
    with pytest.raises(SystemExit) as e:
        main(["recipe", str(path)])
    assert e.value.code == Exit.NOTHING_RAN  # left out as a model without its key is: it runs elsewhere
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.splitlines()[-1].startswith(
        "gestalt: incomplete: 1 model left out: big (weights 4.00 GiB at float32 need >= 5.80 GiB (x1.2 + 1.00 GiB), "
        "cpu has 5.00 GiB; fits at dtype: bfloat16 (2.00 GiB))"), err
    # the dry run shows it and exits as the run would
    with pytest.raises(SystemExit) as e:
        main(["recipe", str(path), "--dry-run"])
    assert e.value.code == Exit.NOTHING_RAN
    out = capsys.readouterr().out
    assert "on cpu of 5.00 GiB: DOES NOT FIT" in out and "fits at dtype: bfloat16" in out, out
    # at bfloat16 it fits, and the plan says so
    main(["recipe", str(fit_recipe(tmp_path, sources, tmp_path / "encoder", extra=", dtype: bfloat16")), "--dry-run"])
    assert "weights: 2.00 GiB at bfloat16, needs >= 3.40 GiB on cpu of 5.00 GiB: fits" in capsys.readouterr().out


def test_the_model_that_fits_runs_beside_one_too_big(tmp_path, sources, capsys, device_gib, monkeypatch):
    device_gib(5)
    no_load(monkeypatch)
    path = recipe_text(tmp_path, f"""name: t
models:
  - {{id: big, source: hf, name: {hf_folder(tmp_path, BIG)}}}
  - {{id: rule, source: python, name: '{REPO / "examples" / "rule_based.py"}:build'}}
tasks: [{SILHOUETTE}]
data: {{mirror: {sources.mirror}}}
runtime: {{device: cpu, progress: false}}
tracking: {{enabled: false}}
output_dir: {tmp_path / 'out'}
""")
    with pytest.raises(SystemExit) as e:
        main(["recipe", str(path)])
    assert e.value.code == Exit.PARTLY_RAN
    out, err = capsys.readouterr()
    assert "80 new trials" in out and "Traceback" not in err, err
    assert "left out until fixed (1;" in out
    assert "1 model left out: big (weights 4.00 GiB" in err.strip().splitlines()[-1], err


def test_a_model_too_large_at_half_precision_names_the_gpu_it_needs():
    fit = Fit("bfloat16", "cuda", Stored(elements=8 << 30, nbytes=32 << 30), memory=16 * GiB)
    assert fit.fits is False
    assert fit.refusal("vlm") == ("model 'vlm': weights 16.00 GiB at bfloat16 need >= 20.20 GiB (x1.2 + 1.00 GiB), "
                                  "cuda has 16.00 GiB; needs a GPU with >= 20.20 GiB")
    assert Fit("bfloat16", "cuda", fit.stored, 16 * GiB, placed_by_map=True).refusal("vlm") is None


def test_sizes_come_from_headers_and_pickles_without_tensors(tmp_path):
    """Every shard of a sharded checkpoint, a checkpoint's own dtype ("auto"), and torch.save's
    storages read from its pickle."""
    import torch

    header_only(tmp_path / "a.safetensors", {"x": {"dtype": "BF16", "shape": [3, 4], "data_offsets": [0, 24]},
                                             "__metadata__": {"format": "pt"}})
    header_only(tmp_path / "b.safetensors", {"y": {"dtype": "F32", "shape": [5], "data_offsets": [0, 20]}})
    assert stored([tmp_path / "a.safetensors", tmp_path / "b.safetensors"]) == Stored(17, 44)
    assert Fit("auto", "cpu", Stored(17, 44), GiB).weight_bytes == 44
    torch.save({"a": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.float16)}, tmp_path / "c.pt")
    assert stored([tmp_path / "c.pt"]) == Stored(17, 58)
    (tmp_path / "d.pt").write_bytes(b"not a checkpoint")
    assert stored([tmp_path / "d.pt"]) is None


def test_the_docs_state_the_headroom_the_check_uses():
    text = " ".join((REPO / "docs" / "scale.md").read_text().split())
    assert f"**weights x {memory.HEADROOM:g} + {memory.MARGIN // GiB} GiB**" in text


def test_a_small_model_reads_in_mib():
    assert Fit("float32", "cpu", Stored(3_539_036, 14_156_352), 8 * GiB).line() == \
        "weights: 13.5 MiB at float32, needs >= 1.02 GiB on cpu of 8.00 GiB: fits"
