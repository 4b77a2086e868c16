import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("GESTALT_MIRROR", REPO.parent / "shared" / "sources"))


@pytest.fixture(scope="session")
def sources():
    from harness.sources import Sources

    return Sources(mirror=MIRROR)
