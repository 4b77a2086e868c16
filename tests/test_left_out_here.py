"""Models that cannot run on this machine are found by preflight and left out with their reason,
before any battery, and the rest run: hub weights not in the cache where the hub is not used
(``HF_HUB_OFFLINE``, or a hub that does not answer a connect), an API model whose key is refused
or whose vendor does not answer (``GESTALT_OFFLINE`` notwithstanding). The run then ends 3 (partly
ran) or 4 (nothing could run here), one line each, never a traceback. Local servers and closed
ports only: no network. Weights too big for the device: tests/test_gpu_fit.py."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
import yaml

import harness.models.hub_cache as hub_cache
from harness.cli import main
from harness.exit_status import Exit
from tests import lifecycle as life
from tests.conftest import REPO
from tests.fake_vendor_server import FakeVendorServer
from tests.local_hub import local_hub
from tests.servers import free_port
from tests.test_exit_statuses import RULE, recipe

ENCODER = {"id": "enc", "source": "hf", "name": "nobody/no-such-encoder", "revision": "a" * 40}
VLM = {"id": "vlm", "source": "hf-vlm", "name": "nobody/no-such-vlm", "revision": "b" * 40}


@pytest.fixture
def no_hub(tmp_path, monkeypatch):
    """An empty hub cache and a hub endpoint nothing listens on; returns the probes made."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.delenv("GESTALT_OFFLINE", raising=False)
    probes = []
    real = hub_cache.unreachable

    def counted(url, *args):
        probes.append(url)
        return real(url, *args)

    monkeypatch.setattr(hub_cache, "unreachable", counted)
    return probes


@pytest.fixture(params=["HF_HUB_OFFLINE=1", "hub closed"])
def hub_off(request, no_hub, monkeypatch):
    from huggingface_hub import constants

    offline = request.param == "HF_HUB_OFFLINE=1"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1" if offline else "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    return no_hub


def last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


def test_a_hub_model_not_cached_is_left_out_by_the_dry_run_and_the_run(tmp_path, hub_off):
    from huggingface_hub import constants

    path = recipe(tmp_path, ENCODER)
    code, out, err = life.cli(path, "--dry-run")
    assert code == Exit.NOTHING_RAN, err[-2000:]
    assert "left out until fixed (1;" in out and constants.HF_HUB_CACHE in out, out[-2000:]
    assert f"nobody/no-such-encoder@{'a' * 40} is not in the local Hugging Face cache" in out
    code, out, err = life.cli(path)
    assert code == Exit.NOTHING_RAN, err[-2000:]
    assert "Traceback" not in out + err and last_line(err).startswith("gestalt: incomplete: 1 model left out: enc")
    assert constants.HF_HUB_CACHE in last_line(err)
    assert len(hub_off) <= 2  # the hub asked at most once a run (none with HF_HUB_OFFLINE=1)


def test_the_model_that_can_run_runs_beside_one_left_out(tmp_path, hub_off):
    code, out, err = life.cli(recipe(tmp_path, RULE, ENCODER))
    assert code == Exit.PARTLY_RAN, err[-2000:]
    assert "Traceback" not in out + err and "80 new trials" in out, out[-2000:]
    assert "1 model left out: enc" in last_line(err)


def test_a_hub_that_does_not_answer_is_named_and_its_reads_are_of_the_cache_only(tmp_path, no_hub, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    code, _, err = life.cli(recipe(tmp_path, RULE, ENCODER))
    assert code == Exit.PARTLY_RAN and "the hub did not answer" in last_line(err), err[-2000:]
    assert no_hub == [hub_cache.endpoint()]  # once for the run
    assert constants.HF_HUB_OFFLINE is False  # as it was, once the run ended


def test_a_model_cached_at_another_commit_is_named_at_the_wrong_commit(tmp_path, no_hub, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    other = "c" * 40
    snapshot = tmp_path / "hf-cache" / "models--nobody--no-such-encoder" / "snapshots" / other
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    code, out, err = life.cli(recipe(tmp_path, ENCODER), "--dry-run")
    assert code == Exit.NOTHING_RAN, err[-2000:]
    assert (f"nobody/no-such-encoder is in the local Hugging Face cache {constants.HF_HUB_CACHE} at the wrong "
            f"commit: {other[:12]}, not the pinned revision {'a' * 40}") in out, out[-2000:]


def test_fetch_without_a_hub_says_one_line_per_model(tmp_path, no_hub, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(SystemExit) as e:
        main(["models", "fetch", recipe(tmp_path, ENCODER, VLM)])
    assert e.value.code == Exit.RERUN_FIXES
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["enc", "vlm"], out
    assert all(": not fetched: " in line and "the hub did not answer" in line for line in lines), out
    assert "Traceback" not in err and last_line(err) == "gestalt: error: 2 of 2 models not fetched (listed above)"


def test_a_model_fetched_at_its_commit_runs_where_the_hub_does_not_answer(tmp_path):
    """Fetched from a local hub, then planned with the hub gone and HF_HUB_OFFLINE unset: the
    cached snapshot is enough, nothing is left out."""
    snapshot = tmp_path / "hub" / "nobody" / "no-such-encoder" / ENCODER["revision"]
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "vit"}')
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (snapshot / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    path = recipe(tmp_path, ENCODER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "GESTALT_OFFLINE"))}
    env["HF_HOME"] = str(tmp_path / "hf-home")

    def gestalt(*args: str, endpoint: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=600, env=dict(env, HF_ENDPOINT=endpoint))

    with local_hub(tmp_path / "hub", tmp_path / "requests.log") as url:
        fetched = gestalt("models", "fetch", path, endpoint=url)
    assert fetched.returncode == 0 and fetched.stdout.startswith("enc: fetched nobody/no-such-encoder@"), fetched
    planned = gestalt("recipe", path, "--dry-run", endpoint=f"http://127.0.0.1:{free_port()}")
    assert planned.returncode == 0 and "left out" not in planned.stdout, (planned.stdout, planned.stderr)


# -- API models: checked before any battery, --offline or not --------------------------------------

@pytest.fixture
def source_data_offline(monkeypatch):
    monkeypatch.setenv("GESTALT_OFFLINE", "1")  # as the image sets it: no source data downloaded


def api_and_rule(tmp_path, url: str):
    path = life.api_recipe(tmp_path, url, tracking=False)
    body = yaml.safe_load(path.read_text())
    body["models"].append(RULE)
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def test_a_refused_key_is_left_out_before_any_battery_offline_or_not(tmp_path, source_data_offline):
    with FakeVendorServer(key=life.KEY) as server:
        code, out, err = life.cli(api_and_rule(tmp_path, server.url), key="sk-dead-key-000000000000")
        assert code == Exit.PARTLY_RAN, err[-2000:]
        assert not server.requests and server.refused == 0  # nothing generated, no battery started
    assert out.index("left out until fixed (1;") < out.index("shape-rule"), out[-3000:]
    assert "1 model left out: fake-api" in last_line(err) and "refused" in last_line(err), err[-2000:]
    assert "sk-dead-key" not in out + err


def test_a_vendor_that_does_not_answer_is_left_out(tmp_path, source_data_offline):
    code, out, err = life.cli(api_and_rule(tmp_path, f"http://127.0.0.1:{free_port()}"))
    assert code == Exit.PARTLY_RAN, err[-2000:]
    assert "Traceback" not in out + err and "could not reach" in last_line(err), err[-2000:]
