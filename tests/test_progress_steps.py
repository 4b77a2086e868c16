"""A first run never sits silent: every step between the trial bars (finding the MLflow run,
drawing stimuli, loading the model, scoring, figures, logging) says what it does once it has
taken longer than ``SLOW_STEP_S``; a quicker step says nothing, and a run without progress
(``runtime.progress: false``, a batch job's log) says none of it."""

import threading

import pytest

from harness.recipes import load_recipe
from harness.run import run_recipe
from harness.trials import progress
from tests.test_noop_rerun import MNV2, SERIES

SMALL = {SERIES: {"n_test": 20, "n_train": 20}}
STEPS = ("mobilenetv2: finding its MLflow run",
         f"mobilenetv2 {SERIES}: drawing the stimuli",
         f"mobilenetv2 {SERIES}: loading the model, preparing the readout",
         f"mobilenetv2 {SERIES}: scoring with bootstrap intervals, drawing figures, logging to MLflow",
         "mobilenetv2: logging the battery to MLflow")


class AtOnce:
    """A timer whose time has always passed: each step's line is said as the step starts."""

    def __init__(self, interval, function, args=()):
        self.function, self.args = function, args
        self.daemon = True

    def start(self):
        self.function(*self.args)

    def cancel(self):
        pass


@pytest.mark.parametrize("shown", [True, False])
def test_every_step_between_the_bars_says_what_it_does(monkeypatch, capfd, write_recipe, shown):
    monkeypatch.setattr(progress.threading, "Timer", AtOnce)
    recipe = write_recipe([MNV2], [SERIES], task_options=SMALL,
                          runtime={"processes": 1, "device": "cpu", "progress": shown})
    run_recipe(load_recipe(recipe), echo=lambda line: None)
    said = [line.removesuffix(" ...") for line in capfd.readouterr().err.splitlines() if line.endswith(" ...")]
    assert said == (list(STEPS) if shown else [])


def test_a_step_says_its_line_once_its_time_has_passed(monkeypatch):
    said, heard = [], threading.Event()
    monkeypatch.setattr(progress, "_say", lambda line: said.append(line) or heard.set())
    monkeypatch.setattr(progress, "SLOW_STEP_S", 0.01)
    with progress.slow_step("scoring", shown=True):
        assert heard.wait(timeout=60)
    assert said == ["scoring ..."]


def test_a_step_that_ends_in_time_says_nothing(monkeypatch):
    said = []
    monkeypatch.setattr(progress, "_say", said.append)
    with progress.slow_step("scoring", shown=True):
        pass
    assert said == []
