"""The report's modules each hold one job and stay readable: none over 600 lines, no function in
them over 80 (a longer one reads as steps with names)."""

import ast

from tests.conftest import REPO

REPORTS = sorted((REPO / "harness" / "reports").glob("*.py"))


def test_no_report_module_over_600_lines():
    long = {p.name: n for p in REPORTS if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def test_no_report_function_over_80_lines():
    long = {f"{p.name}:{node.name}": node.end_lineno - node.lineno + 1
            for p in REPORTS for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > 80}
    assert long == {}
