"""`gestalt recipe`'s exit statuses, one meaning each, case by case with cheap models: all done,
partly ran, nothing could run here, a failure that needs a change before a rerun; the table in
`gestalt recipe --help` and docs/clusters.md is the one in harness/exit_status.py. A failure a
rerun fixes (1) is checked where its causes are: tests/test_failed_calls.py (failed calls),
tests/test_disk_faults.py, tests/test_tracking_outage.py."""

from __future__ import annotations

import pytest
import yaml

from harness.cli import main
from harness.exit_status import PRECEDENCE, TABLE, Exit, help_text, markdown, recipe_exit
from tests import lifecycle as life
from tests.conftest import MIRROR, REPO

TASK = "closure.nat.silhouette"
RULE = {"id": "shape-rule", "source": "python", "name": str(REPO / "examples/rule_based.py") + ":build"}
CLAUDE = {"id": "claude", "source": "api", "name": "anthropic/claude-3-5-haiku"}  # left out: no key

# a model whose every answer names no class: the same answers again on every rerun
MUTE = '''
class Mute:
    fingerprint = {"rule": "mute", "version": 1}

    def generate(self, image, prompt, settings):
        return "I cannot say."


def build():
    return Mute()
'''


def recipe(tmp_path, *models: dict, tracking: bool = False) -> str:
    body = {"name": "exits", "models": list(models), "tasks": [TASK],
            "bootstrap": {"n_boot": 100, "n_boot_kappa": 100},
            "runtime": {"device": "cpu", "progress": False}, "data": {"mirror": str(MIRROR)},
            "tracking": ({"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "exits"} if tracking
                         else {"enabled": False}),
            "output_dir": str(tmp_path / "out")}
    path = tmp_path / "exits.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return str(path)


def mute(tmp_path) -> dict:
    (tmp_path / "mute.py").write_text(MUTE)
    return {"id": "mute", "source": "python", "name": f"{tmp_path / 'mute.py'}:build"}


@pytest.fixture(autouse=True)
def no_anthropic_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


# -- the table ----------------------------------------------------------------------------------------

def test_every_status_has_one_meaning_and_one_row():
    listed = [s for row in TABLE for s in row.statuses]
    assert sorted(listed) == sorted(Exit) and len(set(listed)) == len(listed)
    assert (Exit.DONE, Exit.BAD_INPUT) == (0, 2)
    assert set(PRECEDENCE) == set(Exit) - {Exit.BAD_INPUT, Exit.INTERRUPTED, Exit.TERMINATED}


def test_docs_hold_the_table_the_code_returns():
    text = (REPO / "docs/clusters.md").read_text()
    assert markdown() in text, f"docs/clusters.md's exit table differs from harness/exit_status.py:\n{markdown()}"


def test_the_recipe_help_prints_the_table(capsys):
    main(["recipe", "--help"])
    out = capsys.readouterr().out
    assert help_text() in out, out
    assert "the exit status is 3" not in out  # the docstring no longer states one case alone


@pytest.mark.parametrize("counts, status", [
    ({}, Exit.DONE),
    ({"finished": 2}, Exit.DONE),
    ({"finished": 1, "left_out": 1}, Exit.PARTLY_RAN),
    ({"left_out": 2}, Exit.NOTHING_RAN),
    ({"finished": 1, "rerun_fixes": 1, "left_out": 1}, Exit.RERUN_FIXES),
    ({"rerun_fixes": 1, "needs_change": 1}, Exit.NEEDS_CHANGE),
    ({"finished": 1, "needs_change": 1, "left_out": 3}, Exit.NEEDS_CHANGE),
])
def test_the_most_pressing_status_wins(counts, status):
    assert recipe_exit(**{"finished": 0, "left_out": 0, "rerun_fixes": 0, "needs_change": 0, **counts}) == status


# -- case by case -------------------------------------------------------------------------------------

def test_all_done_is_0(tmp_path):
    code, out, err = life.cli(recipe(tmp_path, RULE))
    assert code == Exit.DONE, err[-2000:]


def test_one_battery_ran_and_a_model_left_out_is_partly_ran(tmp_path):
    code, out, err = life.cli(recipe(tmp_path, RULE, CLAUDE))
    assert code == Exit.PARTLY_RAN == 3, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("gestalt: incomplete: 1 model left out: claude"), err


def test_every_model_left_out_is_nothing_ran_in_the_run_and_its_dry_run(tmp_path):
    path = recipe(tmp_path, CLAUDE)
    code, out, err = life.cli(path)
    assert code == Exit.NOTHING_RAN == 4, err[-2000:]
    assert "0 new trials" in out and "ANTHROPIC_API_KEY" in err.strip().splitlines()[-1], (out, err)
    code, _, err = life.cli(path, "--dry-run")
    assert code == Exit.NOTHING_RAN, err[-2000:]


def test_every_answer_unparseable_needs_a_change_on_every_rerun(tmp_path):
    path = recipe(tmp_path, mute(tmp_path), tracking=True)
    for _ in range(2):  # the rerun gets the same answers: never a status that invites requeueing
        code, _, err = life.cli(path)
        assert code == Exit.NEEDS_CHANGE == 5, err[-2000:]
        assert "every one of 80 trials null" in err and "FAILED" in err, err[-2000:]


def test_a_battery_that_needs_a_change_outranks_a_model_left_out(tmp_path):
    code, _, err = life.cli(recipe(tmp_path, RULE, mute(tmp_path), CLAUDE))
    assert code == Exit.NEEDS_CHANGE, err[-2000:]
    assert "left out: claude" in err  # still named


def test_hub_weights_not_cached_name_the_cache_folder_looked_in(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from harness.models.base import ModelError, ModelSpec
    from harness.models.registry import build_adapter

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    for spec in (ModelSpec(id="h", source="hf", name="nobody/no-such-encoder"),
                 ModelSpec(id="v", source="hf-vlm", name="nobody/no-such-vlm", revision="abc"),
                 ModelSpec(id="t", source="timm", name="test_vit", weights="hub")):
        with pytest.raises(ModelError, match="not in the local Hugging Face cache") as e:
            build_adapter(spec)
        assert str(tmp_path / "empty-hub") in str(e.value), e.value
