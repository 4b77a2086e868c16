"""benchmarks/overhead.py's own arithmetic: the order-statistic interval of the median pair, and
the check that both sides made the same model calls (what lets the ``model`` ratio be read as
the machine's speed). The timings themselves are the benchmark's business, never a test's."""

import math

import torch

from benchmarks.overhead import ModelCalls, median_interval, same_inputs


def test_median_interval_is_the_order_statistics_that_enclose_the_median():
    # 7 pairs: only the lowest and highest enclose the median with >= 90%: 1 - 2/2^7 = 98.4%
    lo, hi, coverage = median_interval([1.04, 0.99, 1.10, 1.01, 1.02, 0.97, 1.03])
    assert (lo, hi) == (0.97, 1.10) and math.isclose(coverage, 1 - 2 / 2 ** 7)
    # 15 values: k = 4 keeps 1 - 2 P(Bin(15, 1/2) < 4) = 96.5% >= 90%; k = 5 gives 88.2% < 90%
    lo, hi, coverage = median_interval([float(v) for v in range(15)])
    assert (lo, hi) == (3.0, 11.0)
    assert math.isclose(coverage, 1 - 2 * sum(math.comb(15, i) for i in range(4)) / 2 ** 15)


def _sides(bare_inputs, gestalt_inputs):
    """Two sides' timed reps, as main() keeps them: (wall, phases, model seconds, call signatures)."""
    calls = ModelCalls()
    sides = {}
    for side, inputs in (("bare", bare_inputs), ("gestalt", gestalt_inputs)):
        net = torch.nn.Conv2d(3, 4, 3)
        net.forward = calls.timed(net.forward)
        calls.task = "task"
        reps = []
        for x in inputs:
            _, seconds, signatures = calls.measured(lambda x=x, net=net: [net(b) for b in x])
            reps.append((0.0, {}, seconds, signatures))
        sides[side] = reps
    return sides


def test_same_inputs_on_both_sides_says_so():
    batches = [[torch.zeros(2, 3, 8, 8), torch.zeros(1, 3, 8, 8)]] * 2
    with torch.inference_mode():
        verdict = same_inputs(_sides(batches, batches), ["task"])
    assert verdict.startswith("the same on both sides, 2 calls a rep in 2 kinds")
    assert "no grad, inference mode" in verdict


def test_a_different_shape_or_memory_layout_is_named():
    bare = [[torch.zeros(2, 3, 8, 8)]]
    assert same_inputs(_sides(bare, [[torch.zeros(2, 3, 9, 8)]]), ["task"]).startswith("DIFFER (2 signatures)")
    channels_last = [[torch.zeros(2, 3, 8, 8).to(memory_format=torch.channels_last)]]
    verdict = same_inputs(_sides(bare, channels_last), ["task"])
    assert "channels_last" in verdict and "contiguous" in verdict
    # the same tensors run in another grad mode are other calls too
    with torch.no_grad():
        other_mode = _sides(bare, bare)["gestalt"]
    assert same_inputs({"bare": _sides(bare, bare)["bare"], "gestalt": other_mode}, ["task"]).startswith("DIFFER")
