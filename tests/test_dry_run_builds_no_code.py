"""``--dry-run`` runs no code the recipe names: a ``source: python`` entry is built (its module
imported, its callable called) on a run only; the dry run checks the name's shape and says why
the model's readouts and cached trials are not known."""

import pytest

from harness.cli import main
from tests.test_own_models import TASK, write_recipe

MODULE = '''
from pathlib import Path


class Rule:
    def generate(self, image, prompt, settings):
        return "dog"


def build(marker):
    Path(marker).write_text("built")
    return Rule()
'''


def dry_run(path, capsys) -> str:
    main(["recipe", str(path), "--dry-run"])
    return capsys.readouterr().out


def test_a_dry_run_does_not_call_os_system(tmp_path, capsys):
    marker = tmp_path / "ran"
    path = write_recipe(tmp_path, [{"id": "cmd", "source": "python", "name": "os:system",
                                    "options": {"command": f"touch {marker}"}}])
    out = dry_run(path, capsys)
    assert not marker.exists()
    (line,) = [x for x in out.splitlines() if "not built" in x]
    assert "runs system of os" in line and "a dry run does not" in line and TASK in line, line


def test_a_python_model_is_built_on_a_run_not_on_its_dry_run(tmp_path, capsys):
    from harness.recipes import load_recipe
    from harness.run import preflight

    (tmp_path / "mine.py").write_text(MODULE)
    marker = tmp_path / "built"
    path = write_recipe(tmp_path, [{"id": "mine", "source": "python", "name": f"{tmp_path / 'mine.py'}:build",
                                    "options": {"marker": str(marker)}}])
    assert "not built" in dry_run(path, capsys)
    assert not marker.exists()
    [p], _, _ = preflight(load_recipe(path))  # what a run plans with
    assert marker.read_text() == "built" and p.adapter.capabilities == {"generate"}


@pytest.mark.parametrize("name, said", [("os.system", "must be 'module:callable'"),
                                        ("no/such/file.py:build", "module file no/such/file.py not found")])
def test_a_dry_run_still_refuses_a_name_of_the_wrong_shape(tmp_path, capsys, name, said):
    path = write_recipe(tmp_path, [{"id": "bad", "source": "python", "name": name}])
    with pytest.raises(SystemExit) as e:
        main(["recipe", str(path), "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and said in err and "'bad'" in err and "\n" not in err, err
