"""ruff and mypy over harness/, as configured in pyproject.toml (docs/design.md, "Checks"), and no
process words (tracker numbers, the repository's own commits, work-log wording) anywhere."""

import re
import subprocess
import sys
import tomllib

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


def test_mypy_checks_every_module_of_harness():
    """The check above covers all of harness/: no module is exempted or has its errors ignored."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["harness"]
    assert config.get("overrides", []) == []


# What a reader of the product cannot follow: a tracker's numbers, the repository's own commits,
# a log of how the work went. Code, docs and tests say why in the product's and the papers' terms.
PROCESS_WORDS = re.compile(
    r"\bissues?\s*#\s*\d+|\bissues?\s+\d+|\b(?:commit|at)\s+(?=[0-9a-f]*\d)[0-9a-f]{7,12}\b"
    r"|\b(?:this|previous|earlier|last|next) session\b|(?-i:\bTODO\b)|\bthis (?:work|change|commit|PR)\b"
    r"|\bpull request\b|\bdefects?\s+\d+", re.IGNORECASE)
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt", ".json"}
SCANNED = ["harness", "tests", "docs", "benchmarks", "recipes", "examples", "mlflow", "docker", ".ci",
           "README.md", "Dockerfile", "pyproject.toml"]


def process_words(root=REPO) -> list[str]:
    out = []
    for top in SCANNED:
        path = root / top
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            if f.suffix not in TEXT and f.name not in {"Dockerfile", "run"}:
                continue
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                if m := PROCESS_WORDS.search(line):
                    out.append(f"{f.relative_to(root)}:{n}: {m.group(0)!r}: {line.strip()[:100]}")
    return out


def test_no_process_words_in_code_docs_or_tests():
    assert process_words() == []


def test_process_words_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    # each word split in two here, so that this file passes its own test
    (tmp_path / "docs" / "a.md").write_text("\n".join([
        "fine: start_new_session, session_1.csv, scope='session', commit 3dab8e83b6ac559b847b7c6e2f24d1faa95a4507",
        "Issue" " 17 says", "as in issue" " #4", "measured at" " 6f39a73 today", "see commit" " 596a3ea",
        "before this" " work", "as defect" " 4 showed"]))
    found = process_words(tmp_path)
    assert [f.split(":")[1] for f in found] == ["2", "3", "4", "5", "6", "7"], found
