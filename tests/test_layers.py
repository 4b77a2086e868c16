"""The data flows one way: no module imports a later stage, no two modules import each other
(directly or around a circle), and scoring never imports torch.

Every import counts, relative ones (``from .. import x``, ``from . import y``) and those made
lazily inside a function alike: a lazy import still runs, only later."""

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

STAGES = ["sources", "stimuli", "models", "readouts", "trials", "scores", "tracking", "reports"]
# import no stage; every stage may use them
BASE = {"errors", "exit_status", "lazy", "memo", "own_files", "version", "shipped", "options"}
# Everything else at the top of harness/ (cli, run, recipes, the Python API) orchestrates the
# stages and sits above them, and so does the package itself: ``harness/__init__.py`` exposes the
# Python API, so a stage that imports ``harness`` points back up at the top.
TOP_LEVEL = len(STAGES) + 1


def module_name(path: Path, root: Path = REPO) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted((REPO / "harness").rglob("*.py"))}


def level(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return TOP_LEVEL  # the package root
    if parts[1] in STAGES:
        return 1 + STAGES.index(parts[1])
    return 0 if parts[1] in BASE else TOP_LEVEL


def imports(path: Path, modules=MODULES, root: Path = REPO) -> set[str]:
    """The harness modules a file imports, relative imports resolved, each import to the module
    it names: ``from .figures import style`` -> ``harness.reports.figures``, ``from . import
    figures`` -> ``harness.reports.figures``, ``from .. import version`` -> ``harness.version``,
    ``from .. import __version__`` -> ``harness`` (the package root)."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "harness"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "harness":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
    return out


GRAPH = {name: imports(path) for name, path in MODULES.items()}


def arrows_up(graph=GRAPH) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if level(b) > level(a))


def circles(graph=GRAPH) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_module_imports_a_later_stage_or_the_top():
    assert arrows_up() == []


def test_no_import_circles():
    assert circles() == []


def test_relative_and_lazy_imports_are_seen(tmp_path):
    """The checks see each form of import a stage module can write, and would fail on each."""
    pkg = tmp_path / "harness"
    (pkg / "models").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "version.py").write_text("")
    (pkg / "models" / "__init__.py").write_text("")
    (pkg / "models" / "a.py").write_text(
        "from .. import __version__\n"
        "from . import b\n"
        "def f():\n    from ..tracking.mlflow_run import x\n    import harness.reports.figures\n")
    (pkg / "models" / "b.py").write_text("from .a import f\nfrom .. import version\n")
    fake = {f"harness.{m}": pkg for m in ("version", "models", "models.a", "models.b",
                                          "tracking.mlflow_run", "reports.figures")}
    fake["harness"] = pkg
    a = imports(pkg / "models" / "a.py", fake, tmp_path)
    b = imports(pkg / "models" / "b.py", fake, tmp_path)
    assert a == {"harness", "harness.models.b", "harness.tracking.mlflow_run", "harness.reports.figures"}
    assert b == {"harness.models.a", "harness.version"}
    graph = {"harness.models.a": a, "harness.models.b": b}
    assert arrows_up(graph) == ["harness.models.a -> harness",
                                "harness.models.a -> harness.reports.figures",
                                "harness.models.a -> harness.tracking.mlflow_run"]
    assert circles(graph) == [["harness.models.a", "harness.models.b"]]


def test_every_module_is_checked():
    assert len(MODULES) > 60 and {m.split(".")[1] for m in MODULES if "." in m} >= set(STAGES) | {"cli", "run"}
    assert sum(map(len, GRAPH.values())) > 200


def test_scores_package_imports_no_torch():
    modules = [module_name(p) for p in (REPO / "harness/scores").glob("*.py")]
    code = (f"import sys\nfor m in {modules!r}:\n    __import__(m)\n"
            "print(sorted(k for k in ('torch', 'timm', 'transformers') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
