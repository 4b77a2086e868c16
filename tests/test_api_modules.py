"""The API models' modules and the task runner each hold one job and stay readable: none over 600
lines, no function in them over 80 (a longer one reads as steps with names)."""

import ast

import pytest

from tests.conftest import REPO

MODULES = [*sorted((REPO / "harness" / "models").glob("api*.py")), REPO / "harness" / "trials" / "runner.py"]


def test_the_api_model_is_split_by_what_changes_together():
    names = {p.stem for p in MODULES}
    assert {"api", "api_openai", "api_anthropic", "api_google", "api_transport"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_module_over_600_lines_and_no_function_over_80(path):
    lines = len(path.read_text().splitlines())
    long = {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80}
    assert lines <= 600 and long == {}, f"{path.name}: {lines} lines, functions over 80: {long}"
