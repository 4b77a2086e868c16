"""docs/human-references.md's table is what the scorers give now: generated, never pasted."""

import importlib.util

from tests.conftest import REPO


def load_generator():
    spec = importlib.util.spec_from_file_location("human_references_doc", REPO / "docs" / "human_references.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_table_is_what_the_code_gives(monkeypatch):
    from tests.conftest import MIRROR

    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    generator = load_generator()
    assert generator.main(["--check"]) == 0, "run: .venv/bin/python docs/human_references.py"


def test_a_stale_table_is_caught(monkeypatch, tmp_path):
    from tests.conftest import MIRROR

    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    generator = load_generator()
    stale = tmp_path / "human-references.md"
    stale.write_text(generator.PAGE.read_text().replace("| 0.641 |", "| 0.640 |"))
    monkeypatch.setattr(generator, "PAGE", stale)
    assert generator.main(["--check"]) == 1
