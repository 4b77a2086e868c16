"""The data flows one way: no stage imports a later one, and scoring never imports torch."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

STAGES = ["sources", "stimuli", "models", "readouts", "trials", "scores", "tracking", "reports"]
TOP = {"cli", "run", "recipes"}  # orchestration above every stage


def imported_harness_modules(path: Path) -> set[str]:
    """Absolute names of harness modules a file imports (relative imports resolved)."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("harness")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("harness"):
                out.add(name)
                out |= {f"{name}.{a.name}" for a in node.names}
    return out


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


FILES = sorted(p for s in STAGES for p in (REPO / "harness" / s).rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_stage_imports_a_later_one(path):
    own = stage_of(".".join(path.relative_to(REPO).with_suffix("").parts))
    for module in imported_harness_modules(path):
        other = stage_of(module)
        assert other not in TOP, f"{path.name} imports orchestration module {module}"
        if other in STAGES:
            assert STAGES.index(other) <= STAGES.index(own), f"{path.name} ({own}) imports {module} ({other})"


def test_every_stage_module_is_checked():
    assert len(FILES) > 20 and {p.parent.name for p in FILES} >= set(STAGES)


def test_scores_package_imports_no_torch():
    modules = [".".join(p.relative_to(REPO).with_suffix("").parts) for p in (REPO / "harness/scores").glob("*.py")]
    code = (f"import sys\nfor m in {modules!r}:\n    __import__(m)\n"
            "print(sorted(k for k in ('torch', 'timm', 'transformers') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
