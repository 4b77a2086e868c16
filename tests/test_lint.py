"""ruff and mypy over harness/, as configured in pyproject.toml (docs/design.md, "Checks")."""

import subprocess
import sys

import pytest

from tests.conftest import REPO


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=900)


def test_ruff_is_clean_on_harness():
    res = run("ruff", "check", "harness")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]


@pytest.mark.slow
def test_mypy_is_clean_on_harness():
    res = run("mypy")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
