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


@pytest.fixture(scope="session")
def vlat(sources):
    """CHART-6 VLAT items (shared by the extraction and scoring tests)."""
    from harness.stimuli.registry import TASKS

    return TASKS["literacy.chart.vlat"].build(sources)


@pytest.fixture(scope="session")
def holf(sources):
    from harness.stimuli.registry import TASKS

    return TASKS["literacy.chart.holf"].build(sources)
