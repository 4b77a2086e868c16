"""A run is read room by room: ``harness/run.py`` holds the spine (the recipe's batteries in
order, and what happens when one ends) in no more than 400 lines; planning, preflight, the money
side, a battery's up-to-date check and the terminal's answer each live in a module of their own,
none over 600 lines, no function in them over 80 (a longer one reads as steps with names)."""

import ast

from tests.conftest import REPO

ROOMS = [REPO / "harness" / f"{name}.py" for name in ("run", "planning", "preflight", "money", "up_to_date")]
ROOMS.append(REPO / "harness" / "reports" / "terminal.py")


def test_the_run_is_its_spine_only():
    assert len((REPO / "harness" / "run.py").read_text().splitlines()) <= 400


def test_no_room_of_the_run_over_600_lines():
    long = {p.name: n for p in ROOMS if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def test_no_function_of_the_run_over_80_lines():
    long = {f"{p.name}:{node.name}": node.end_lineno - node.lineno + 1
            for p in ROOMS for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > 80}
    assert long == {}
