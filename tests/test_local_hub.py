"""The local model hub (tests/local_hub.py) answers huggingface_hub's own client as the hub does:
repo info with siblings, tree listings, resolve with ETag/X-Repo-Commit/linked size, the hub's
404 error codes, and a pinned commit that is not a git commit of ours."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.local_hub import local_hub

COMMIT = "0123456789abcdef0123456789abcdef01234567"
WEIGHTS = bytes(range(256)) * 40

CLIENT = """
import sys
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
commit = sys.argv[1]
info = HfApi().model_info("org/model", revision="main")
print("sha", info.sha, sorted(s.rfilename for s in info.siblings))
path = snapshot_download("org/model", revision=commit)
print("snapshot", path)
print("config", open(hf_hub_download("org/model", "config.json", revision=commit)).read())
for call, error in ((lambda: hf_hub_download("org/model", "absent.json", revision=commit), EntryNotFoundError),
                    (lambda: hf_hub_download("org/other", "config.json", revision=commit), RepositoryNotFoundError),
                    (lambda: HfApi().model_info("org/model", revision="f" * 40), RevisionNotFoundError)):
    try:
        call()
    except error:
        print("raised", error.__name__)
"""


@pytest.fixture
def hub(tmp_path):
    folder = tmp_path / "root" / "org" / "model" / COMMIT
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "vit"}')
    (folder / "sub" / "model.safetensors").write_bytes(WEIGHTS)
    with local_hub(tmp_path / "root", tmp_path / "requests.log") as url:
        yield url, tmp_path


def test_huggingface_hub_fetches_a_pinned_snapshot_and_gets_the_hubs_errors(hub):
    url, tmp = hub
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=url, HF_HOME=str(tmp / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1")
    done = subprocess.run([sys.executable, "-c", CLIENT, COMMIT], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"sha {COMMIT} ['config.json', 'sub/model.safetensors']" in out
    snapshot = tmp / "hf-home" / "hub" / "models--org--model" / "snapshots" / COMMIT
    assert f"snapshot {snapshot}" in out
    assert (snapshot / "sub" / "model.safetensors").read_bytes() == WEIGHTS
    # an LFS file's blob is stored under its sha256 (the X-Linked-Etag), as from the hub
    blob = (snapshot / "sub" / "model.safetensors").resolve()
    assert blob.name == hashlib.sha256(WEIGHTS).hexdigest()
    assert 'config {"model_type": "vit"}' in out
    assert out.count("raised") == 3, out
    assert "raised EntryNotFoundError" in out and "raised RepositoryNotFoundError" in out
    assert "raised RevisionNotFoundError" in out
    requests = (tmp / "requests.log").read_text()
    assert f"GET /api/models/org/model/tree/{COMMIT}" in requests
    assert f"HEAD /org/model/resolve/{COMMIT}/sub/model.safetensors" in requests
