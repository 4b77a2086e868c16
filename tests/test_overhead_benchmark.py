"""benchmarks/overhead.py's own arithmetic: the order-statistic interval of the median pair, and
the check that both sides made the same model calls (what lets the ``model`` ratio be read as
the machine's speed), and what else the machine did beside each side (/proc/stat). The timings
themselves are the benchmark's business, never a test's."""

import math
import threading

import pytest
import torch

from benchmarks.overhead import Machine, ModelCalls, machine_beside, median_interval, same_inputs, verdict


def test_median_interval_is_the_order_statistics_that_enclose_the_median():
    # 7 pairs: only the lowest and highest enclose the median with >= 90%: 1 - 2/2^7 = 98.4%
    lo, hi, coverage = median_interval([1.04, 0.99, 1.10, 1.01, 1.02, 0.97, 1.03])
    assert (lo, hi) == (0.97, 1.10) and math.isclose(coverage, 1 - 2 / 2 ** 7)
    # 15 values: k = 4 keeps 1 - 2 P(Bin(15, 1/2) < 4) = 96.5% >= 90%; k = 5 gives 88.2% < 90%
    lo, hi, coverage = median_interval([float(v) for v in range(15)])
    assert (lo, hi) == (3.0, 11.0)
    assert math.isclose(coverage, 1 - 2 * sum(math.comb(15, i) for i in range(4)) / 2 ** 15)


def test_a_row_is_decided_only_by_an_interval_of_ninety_percent():
    for n in (7, 16):
        lo, hi, coverage = median_interval([0.97 + 0.001 * i for i in range(n)])
        assert verdict(lo, hi, coverage) == "under 1.05"
    assert verdict(1.06, 1.20, 0.984) == "over 1.05"
    assert verdict(0.99, 1.06, 0.984) == "across 1.05 (undecided)"
    # 1 to 4 pairs: the widest interval, the lowest and highest pair, encloses the median with
    # 0%, 50%, 75%, 87.5%: no verdict, however far from 1.05 the pairs lie
    for n in (1, 2, 3, 4):
        lo, hi, coverage = median_interval([1.20 + 0.01 * i for i in range(n)])
        assert math.isclose(coverage, 1 - 2 / 2 ** n)
        assert verdict(lo, hi, coverage) == "too few pairs to decide"


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


def test_a_python_thread_alive_beside_the_calls_is_named():
    bare = [[torch.zeros(2, 3, 8, 8)]]
    with torch.inference_mode():
        alone = _sides(bare, bare)
        # threads other tests left behind count too: the line names how many there were
        alive = threading.active_count()
        assert f"{alive} Python thread{'s' if alive > 1 else ''} alive" in same_inputs(alone, ["task"])
        stop = threading.Event()
        beside = threading.Thread(target=stop.wait)  # e.g. a figure-saving or prefetching thread
        beside.start()
        try:
            with_thread = _sides(bare, bare)["gestalt"]
        finally:
            stop.set()
            beside.join()
    verdict = same_inputs({"bare": alone["bare"], "gestalt": with_thread}, ["task"])
    assert verdict.startswith("DIFFER (2 signatures)"), verdict


def test_machine_reads_steal_and_the_other_processes_cpu_from_proc_stat():
    before = Machine.cpu_line("cpu  100 5 50 9000 10 1 2 30 0 0\ncpu0 50 2 25 4500 5 0 1 15 0 0\n")
    assert before == {"user": 100, "nice": 5, "system": 50, "idle": 9000, "iowait": 10, "irq": 1,
                      "softirq": 2, "steal": 30}
    after = {**before, "user": 400, "system": 150, "steal": 80, "idle": 9100}
    # 100 ticks a second: 4 s busy (3 user + 1 system), of which this process used 2.5 s
    assert Machine.between(before, after, own_cpu=2.5, ticks_per_s=100) == {"steal": 0.5, "others": 1.5}
    # the process's own counter a few ticks ahead of the machine's: nothing else ran, not less
    assert Machine.between(before, after, own_cpu=4.03, ticks_per_s=100)["others"] == 0.0
    with pytest.raises(ValueError, match="no 'cpu ' line"):
        Machine.cpu_line("cpu0 1 2 3 4 5 6 7 8\n")


def test_machine_beside_prints_each_sides_reps_or_says_it_could_not():
    quiet, busy = {"steal": 0.0, "others": 0.04}, {"steal": 1.25, "others": 3.0}
    line = machine_beside({"bare": [quiet, busy], "gestalt": [busy, quiet]})
    assert "steal bare 0.0, 1.2, gestalt 1.2, 0.0" in line
    assert "other processes' CPU bare 0.0, 3.0, gestalt 3.0, 0.0" in line
    assert machine_beside({"bare": [None], "gestalt": [quiet]}).endswith("not measured (no /proc/stat)")


def test_spare_cpus_second_process_saves_a_pickled_figure_as_a_run_saves_it(tmp_path):
    """benchmarks/spare_cpu.py hands its second process the figures pickled: the PNG that process
    writes at the lowest priority is byte for byte the one a run writes (what it times is the
    same work)."""
    import multiprocessing
    import pickle

    import matplotlib.pyplot as plt

    import harness.reports.figures  # noqa: F401 - as in a run's process: the figures' dpi
    from benchmarks.spare_cpu import POLICIES, saver
    from harness.tracking.mlflow_run import _savefig

    fig, ax = plt.subplots()
    ax.imshow([[0.0, 1.0], [0.5, 0.25]], cmap="Blues")
    ax.set_title("closure.nat.silhouette")
    _savefig(fig, tmp_path / "here.png")
    context = multiprocessing.get_context("spawn")  # as the benchmark starts it
    ours, theirs = context.Pipe()
    process = context.Process(target=saver, args=(theirs, POLICIES[-1]))
    process.start()
    try:
        assert ours.recv() == "ready"
        ours.send([(pickle.dumps(fig), str(tmp_path / "there.png"))])
        assert ours.recv() == "saved"
        ours.send(None)
        process.join(60)
        assert process.exitcode == 0
    finally:
        process.kill()
        plt.close(fig)
    assert (tmp_path / "there.png").read_bytes() == (tmp_path / "here.png").read_bytes()


def test_results_are_appended_as_csv_rows_with_date_and_machine(tmp_path):
    import csv

    from benchmarks.overhead import RESULT_COLUMNS, machine, write_results

    row = {"bare_s": 3.671, "gestalt_s": 4.384, "fastest": 1.1942, "median": 1.114, "paired": 1.192,
           "model": 1.123, "beside": 1.07, "intervals": {"paired": (1.012, 1.296), "model": (0.93, 1.228),
                                                          "beside": (1.055, 1.093)}, "coverage": 0.984}
    path = tmp_path / "results" / "overhead.csv"
    write_results(path, {"silhouette": row}, reps=7, calibrate=False, date="2026-12-03T08:30Z", where="a box")
    write_results(path, {"silhouette": row, "mark_color": row}, reps=7, calibrate=True)
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == list(RESULT_COLUMNS) and len(rows) == 3  # one header, three rows
    assert rows[0] == {"date": "2026-12-03T08:30Z", "machine": "a box", "reps": "7", "calibrate": "False",
                       "row": "silhouette", "bare_s": "3.67", "gestalt_s": "4.38", "fastest": "1.194",
                       "median": "1.114", "paired": "1.192", "model": "1.123", "beside": "1.070",
                       "paired_low": "1.012", "paired_high": "1.296", "model_low": "0.930",
                       "model_high": "1.228", "beside_low": "1.055", "beside_high": "1.093"}
    assert rows[1]["machine"] == machine() and "cores" in machine() and rows[2]["calibrate"] == "True"
