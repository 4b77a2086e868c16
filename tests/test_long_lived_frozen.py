"""A battery runs with the heap it found frozen out of the cyclic collector, and one full
collection follows only a battery that called its model: a rerun of a long roster, every trial
recorded, pays none (each costs a walk of the whole heap once torch and MLflow are in it)."""

import gc

import pytest

from harness.models.device import long_lived_frozen


@pytest.fixture
def collections(monkeypatch):
    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or 0)
    return calls


def test_the_heap_is_frozen_during_the_battery_and_thawed_after(collections):
    assert gc.get_freeze_count() == 0
    with long_lived_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0 and collections == []


def test_a_battery_that_called_its_model_is_followed_by_one_collection(collections):
    with long_lived_frozen() as after:
        after.collect = True
    assert len(collections) == 1


def test_an_up_to_date_rerun_of_a_roster_collects_nothing(tmp_path, collections, monkeypatch):
    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from tests.conftest import MIRROR

    (tmp_path / "rule.py").write_text("class Rule:\n    def embed(self, images):\n"
                                      "        import numpy as np\n"
                                      "        return np.stack([np.asarray(i.convert('RGB'), float).mean((0, 1))"
                                      " for i in images])\n\n\ndef build(k=0):\n    return Rule()\n")
    (tmp_path / "r.yaml").write_text(
        "name: roster\ntasks: [similarity.chart.mark_color]\nmodels:\n"
        + "".join(f"  - {{id: m{k}, source: python, name: 'rule.py:build', options: {{k: {k}}}}}\n" for k in range(3))
        + f"runtime: {{progress: false, device: cpu}}\ndata: {{mirror: '{MIRROR}'}}\n"
        f"tracking: {{enabled: false}}\noutput_dir: '{tmp_path / 'out'}'\n"
        "bootstrap: {n_boot: 100, n_boot_kappa: 100}\n")
    monkeypatch.chdir(tmp_path)
    first = run_recipe(load_recipe(tmp_path / "r.yaml"), echo=lambda s: None)
    assert len(collections) == 2  # after the first two batteries, each of which called its model
    collections.clear()
    again = run_recipe(load_recipe(tmp_path / "r.yaml"), echo=lambda s: None)
    assert [r.new_trials for r in again] == [0, 0, 0] and [r.new_trials > 0 for r in first] == [True] * 3
    assert collections == []
