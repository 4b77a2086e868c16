import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# the memo of stimulus hashes and timm facts (harness.memo): one per test session, not ~/.cache
os.environ.setdefault("GESTALT_CACHE", tempfile.mkdtemp(prefix="gestalt-memo-"))

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("GESTALT_MIRROR", REPO.parent / "shared" / "sources"))



def require(found: object, what: str) -> None:
    """Skip a test whose system package is absent on a laptop; in CI (.ci/run installs them all,
    CI=true) the same absence fails it, so nothing is skipped there by accident."""
    if found is None:
        msg = f"{what} not found (.ci/run installs it from Debian's packages)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)

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


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory):
    """``gestalt recipe recipes/quick.yaml`` on the CPU as the README runs it (minutes of real
    encoders), once for every test that reads it: the folder (./mlflow.db, ./out), the command,
    its environment and the finished first run. A test that reruns it uses the same store."""
    import subprocess
    import sys
    from types import SimpleNamespace

    folder = tmp_path_factory.mktemp("quick")
    env = {k: v for k, v in os.environ.items() if k != "GESTALT_THINGS_IMAGES"}  # things: unavailable
    env.update(HF_HUB_OFFLINE="1", GESTALT_MIRROR=str(MIRROR), MLFLOW_TRACKING_URI=f"sqlite:///{folder}/mlflow.db")
    cmd = [sys.executable, "-m", "harness.cli", "recipe", str(REPO / "recipes/quick.yaml"),
           f"--output_dir={folder / 'out'}"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder, timeout=3600)
    assert first.returncode == 0, first.stderr[-3000:]
    return SimpleNamespace(folder=folder, cmd=cmd, env=env, first=first)


@pytest.fixture
def write_recipe(tmp_path):
    """A recipe file for a battery test: ``write_recipe(models, tasks, **sections)`` writes
    ``<tmp>/<name>.yaml`` with the source mirror, a tracking store and output folder under tmp,
    no progress bars and small bootstraps; any section given replaces the default."""
    import yaml

    def write(models: list[dict], tasks: list[str], name: str = "battery", **sections) -> Path:
        recipe = {"name": name, "models": models, "tasks": tasks,
                  "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
                  "runtime": {"processes": 1, "device": "cpu", "progress": False},
                  "data": {"mirror": str(MIRROR)},
                  "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": name},
                  "output_dir": str(tmp_path / "out"), **sections}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        return path

    return write
