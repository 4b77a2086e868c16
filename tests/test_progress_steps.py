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


class Asked:
    """A timer that records the delay each step asked for and never fires."""

    delays: list[float] = []

    def __init__(self, interval, function, args=()):
        Asked.delays.append(interval)
        self.daemon = True

    def start(self):
        pass

    def cancel(self):
        pass


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(progress, "_clock", lambda: now[0])
    monkeypatch.setattr(progress.threading, "Timer", Asked)
    monkeypatch.setattr(Asked, "delays", [])
    return now


def test_quick_steps_back_to_back_are_one_silence(clock):
    """Two steps of 0.6 x the limit each, with nothing shown between them: the second says its line
    when the run's silence, not its own time, reaches the limit."""
    progress.heard()
    with progress.slow_step("drawing the stimuli", shown=True):
        clock[0] += 0.6 * progress.SLOW_STEP_S
    with progress.slow_step("loading the model", shown=True):
        pass
    assert Asked.delays == pytest.approx([progress.SLOW_STEP_S, 0.4 * progress.SLOW_STEP_S])


def test_a_step_after_a_long_silence_says_its_line_at_once(clock):
    progress.heard()
    clock[0] += 3 * progress.SLOW_STEP_S
    with progress.slow_step("scoring", shown=True):
        pass
    assert Asked.delays == [0.0]


def test_a_line_shown_starts_the_silence_again(clock, monkeypatch):
    said = []
    monkeypatch.setattr(progress, "_say", said.append)
    progress.heard()
    clock[0] += 0.9 * progress.SLOW_STEP_S
    progress._speak("scoring ...")  # the line a timer says
    with progress.slow_step("logging", shown=True):
        pass
    assert said == ["scoring ..."]
    assert Asked.delays == [progress.SLOW_STEP_S]


def test_a_line_the_run_echoes_and_a_closed_trial_bar_start_the_silence_again(monkeypatch, write_recipe):
    """run_recipe's own lines and the end of each trial bar count as shown: the step after them
    waits the whole limit."""
    events = []
    monkeypatch.setattr(progress, "heard", lambda: events.append("heard"))
    monkeypatch.setattr("harness.run.heard", progress.heard)
    monkeypatch.setattr("harness.trials.runner.heard", progress.heard)
    recipe = write_recipe([MNV2], [SERIES], task_options=SMALL,
                          runtime={"processes": 1, "device": "cpu", "progress": True})
    run_recipe(load_recipe(recipe), echo=lambda line: events.append("line"))
    assert events[0] == "heard"  # the command line
    assert all(b == "heard" for a, b in zip(events, events[1:]) if a == "line")
    assert events.count("heard") >= events.count("line") + 2  # and the closed bar
