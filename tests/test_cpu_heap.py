"""A torch model on a CPU runs with glibc's heap kept (harness.models.device.keep_cpu_heap): the
memory a forward pass frees serves the next one instead of being unmapped and page-faulted in
again. Each case runs in its own interpreter, since the setting is process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Places a small CNN the way every torch adapter does, then allocates and frees a 64 MiB tensor
# (the size of one EfficientNet activation at a batch of 40) and reports what glibc did with it.
PROBE = """
import ctypes, json, sys
import torch
from harness.models.device import keep_cpu_heap, place

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
place(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 3)), "cpu")
before = libc.mallinfo2().hblkhd
x = torch.ones(64 << 20, dtype=torch.uint8)
mapped = libc.mallinfo2().hblkhd - before
del x
print(json.dumps({"kept": keep_cpu_heap(), "mmapped": mapped, "free_in_heap": libc.mallinfo2().fordblks}))
"""


def probe(**env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator: Linux only")
def test_a_model_on_the_cpu_keeps_the_heap_it_frees():
    kept = probe(GESTALT_CPU_HEAP="keep")
    assert kept["kept"] is True
    assert kept["mmapped"] == 0  # served from the heap, not a fresh mapping
    assert kept["free_in_heap"] >= 64 << 20  # and still there for the next batch once freed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator: Linux only")
def test_system_leaves_glibc_defaults():
    system = probe(GESTALT_CPU_HEAP="system")
    assert system["kept"] is False
    assert system["mmapped"] >= 64 << 20  # glibc's default: a block this large is its own mapping
    assert system["free_in_heap"] < 64 << 20  # and unmapped when freed


def test_an_unknown_setting_stops_the_run_before_its_first_trial(tmp_path):
    from tests.test_noop_rerun import write

    recipe = write(tmp_path)
    out = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(recipe)], cwd=REPO,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "GESTALT_CPU_HEAP": "off",
                              "GESTALT_CACHE": str(tmp_path / "cache")})
    assert out.returncode != 0
    assert "$GESTALT_CPU_HEAP='off': expected keep (the default) or system" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "out").exists()
