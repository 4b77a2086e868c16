"""The chance floor of Haehn's MLAE form, recomputed without the harness's MLAE functions: log2 of
the mean absolute error (in percent) of guesses uniform on [0, 1], plus 1/8, averaged over draws.
It is about 5.0 on GRAPE's test charts, not the 4.7 once quoted."""

import numpy as np
import pytest

from harness.scores import mlae
from harness.stimuli.bars.tasks import build_grape, build_haehn


def uniform_guess_floor(truth, draws=20_000, seed=1):
    guesses = np.random.default_rng(seed).random((draws, len(truth)))
    return float(np.mean(np.log2(100 * np.abs(guesses - truth).mean(axis=1) + 0.125)))


@pytest.mark.parametrize("build, quoted", [(build_grape, "4.995"), (build_haehn, "4.881")])
def test_haehn_form_chance_floor_of_the_type1_test_charts(sources, build, quoted):
    stimset = build(sources, seed=0, chart_type=1, n_train=1, n_val=1)
    truth = np.array([float(s.ground_truth) for s in stimset.test if s.meta.get("subset", "test") == "test"])
    assert len(truth) == 1000
    floor = uniform_guess_floor(truth)
    assert floor == pytest.approx(float(quoted), abs=0.002)
    assert mlae.chance_mlae(truth, scale="fraction", form="haehn") == pytest.approx(floor, abs=0.01)
    assert "about 4.7" not in mlae.__doc__ and quoted in mlae.__doc__
