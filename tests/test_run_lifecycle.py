"""MLflow runs that tell the truth: one run per battery across reruns, kills and interrupts;
SIGTERM and Ctrl-C end in one line with the run FAILED; a battery with no answer fails; the MLflow
store is created once when processes start together. The battery is the silhouette task answered
by the fake vendor (no model weights); subprocesses only where a signal must reach one."""

import contextlib
import json
import multiprocessing as mp
import signal
import time

import pytest

from harness.exit_status import Exit
from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer


@pytest.fixture
def server():
    with FakeVendorServer(key=life.KEY, answer=life.answer) as s:
        yield s


def wait_for_records(folder, proc, at_least=10, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline and len(life.record_lines(folder)) < at_least:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)


def test_records_are_counted_from_whole_lines_while_a_battery_appends(tmp_path):
    # CI once read a record half-appended by the battery under test, and failed on it
    path = tmp_path / "out" / "fake-api" / "records" / f"{life.TASK}.jsonl"
    path.parent.mkdir(parents=True)
    whole = [{"trial_id": f"t{i}", "cache_key": "k"} for i in range(2)]
    line = json.dumps({"trial_id": "t2", "cache_key": "k"}) + "\n"
    path.write_text("".join(json.dumps(r) + "\n" for r in whole) + line[:20])
    assert life.record_lines(tmp_path) == whole
    with open(path, "a") as f:
        f.write(line[20:])
    assert [r["trial_id"] for r in life.record_lines(tmp_path)] == ["t0", "t1", "t2"]


@contextlib.contextmanager
def killed_mid_battery(tmp_path):
    """A slow fake vendor and a battery SIGKILLed once its first records are written; yields the
    recipe's path with the vendor still up."""
    with FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.05) as slow:
        path = life.api_recipe(tmp_path, slow.url, batch_size=1)
        proc = life.start(path)
        wait_for_records(tmp_path, proc)
        proc.kill()
        proc.communicate()
        yield path


def gestalt_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("gestalt")]


def test_unchanged_rerun_is_up_to_date_and_creates_no_run(tmp_path, server):
    path = life.api_recipe(tmp_path, server.url)
    code, first, err = life.cli(path)
    assert code == 0, err[-2000:]
    (run,) = life.runs(tmp_path)
    code, again, err = life.cli(path)
    assert code == 0, err[-2000:]
    assert f"fake-api: up to date: run {run.info.run_id}" in again
    assert "0 new trials, 0 model calls" in again
    table = [x for x in first.splitlines() if "kappa_pairwise" in x]
    assert table and table == [x for x in again.splitlines() if "kappa_pairwise" in x]  # logged scores shown
    assert [r.info.run_id for r in life.runs(tmp_path)] == [run.info.run_id]
    assert len(server.requests) == life.TRIALS

    code, forced, err = life.cli(path, "--new-run")
    assert code == 0, err[-2000:]
    assert "up to date" not in forced
    assert len(life.runs(tmp_path)) == 2 and len(server.requests) == life.TRIALS


def test_missing_trials_finish_the_same_run(tmp_path, server):
    """Records gone after the run finished are refused (asked again, a sampling model answers
    otherwise); asked again on request, in the same run."""
    path = life.api_recipe(tmp_path, server.url)
    assert life.cli(path)[0] == 0
    (run,) = life.runs(tmp_path)
    records = tmp_path / "out/fake-api/records" / f"{life.TASK}.jsonl"
    records.write_text("".join(records.read_text().splitlines(keepends=True)[:50]))
    code, out, err = life.cli(path)
    assert code == 2 and "30 of the 80 records" in err and len(server.requests) == life.TRIALS, err[-2000:]
    code, out, err = life.cli(path, "--rescore")
    assert code == 0, err[-2000:]
    assert f"continuing run {run.info.run_id}" in out and "30 new trials" in out
    (after,) = life.runs(tmp_path)
    assert after.info.run_id == run.info.run_id and after.info.status == "FINISHED"
    assert after.data.metrics[f"{life.TASK}/n"] == life.TRIALS


@pytest.mark.slow
@pytest.mark.parametrize("killed_where", ["this machine", "another machine"])
def test_killed_run_is_continued_not_duplicated(tmp_path, killed_where):
    """Continued wherever the killed process ran: a SLURM job requeued onto another node after its
    node died, or a new container (another host name) on the same mounted folder. There the
    dead process's host and pid say nothing; the battery's folder, whose lock the rerun holds,
    does."""
    with killed_mid_battery(tmp_path) as path:
        (killed,) = life.runs(tmp_path)
        assert killed.info.status == "RUNNING"  # what SIGKILL leaves
        if killed_where == "another machine":
            from mlflow import MlflowClient

            client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
            client.set_tag(killed.info.run_id, "gestalt.host", "node-that-died")
            client.set_tag(killed.info.run_id, "gestalt.pid", "1")  # a container's first process; alive here
        code, out, err = life.cli(path)
    assert code == 0, err[-2000:]
    assert f"continuing run {killed.info.run_id}" in out
    (run,) = life.runs(tmp_path)
    assert run.info.run_id == killed.info.run_id and run.info.status == "FINISHED"
    ids = [r["trial_id"] for r in life.record_lines(tmp_path)]
    assert len(ids) == life.TRIALS == len(set(ids))


@pytest.mark.slow
def test_abandoned_run_of_a_changed_battery_is_marked_failed(tmp_path):
    with killed_mid_battery(tmp_path) as path:
        code, out, err = life.cli(path, "--bootstrap.n_boot=300")  # another battery: scores will differ
    assert code == 0, err[-2000:]
    assert "was abandoned by a killed process; marked FAILED" in out
    status = {r.info.status: r for r in life.runs(tmp_path)}
    assert set(status) == {"FAILED", "FINISHED"}
    assert status["FAILED"].data.tags["gestalt.outcome"] == "abandoned"


@pytest.mark.slow
@pytest.mark.parametrize("sig,code,says", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_sigterm_and_ctrl_c_mark_the_run_failed_in_one_line(tmp_path, sig, code, says):
    with FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.05) as slow:
        path = life.api_recipe(tmp_path, slow.url, batch_size=1)
        proc = life.start(path)
        wait_for_records(tmp_path, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == code, err
        assert "Traceback" not in err
        (line,) = gestalt_lines(err)
        (run,) = life.runs(tmp_path)
        assert says in line and f"run {run.info.run_id} of fake-api marked FAILED" in line
        assert run.info.status == "FAILED" and run.data.tags["gestalt.outcome"] == "interrupted"
        code, _, err = life.cli(path)  # the rerun continues that run
    assert code == 0, err[-2000:]
    (after,) = life.runs(tmp_path)
    assert after.info.run_id == run.info.run_id and after.info.status == "FINISHED"


def test_battery_with_every_trial_null_fails(tmp_path, server):
    server.revoked.add("sk-dead-key-000000000000")  # a key that dies after the check, during the battery
    code, _, err = life.cli(life.api_recipe(tmp_path, server.url), key="sk-dead-key-000000000000")
    assert code == Exit.NEEDS_CHANGE  # the key must change: a requeued job would fail the same way
    (line,) = gestalt_lines(err)
    assert "fake-api" in line and "every one of 80 trials null" in line and "FAILED" in line
    (run,) = life.runs(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["gestalt.outcome"].startswith("every one of 80 trials null")


def test_model_calls_count_requests(tmp_path, server):
    from harness.recipes import load_recipe
    from harness.run import run_recipe

    path = life.api_recipe(tmp_path, server.url, batch_size=8, tracking=False)
    with pytest.MonkeyPatch.context() as mp_:
        mp_.setenv(life.ENV_KEY, life.KEY)
        (result,) = run_recipe(load_recipe(path), echo=lambda *_: None)
    assert result.model_calls == len(server.requests) == life.TRIALS


def _open_store(uri, start):
    from harness.tracking.store import open_store

    start.wait()
    open_store(uri, "together")


def test_store_is_created_once_when_processes_start_together(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_open_store, args=(uri, start)) for _ in range(4)]
    for p in procs:
        p.start()
    time.sleep(3)  # let every process import MLflow before they race
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    from mlflow import MlflowClient

    assert [e.name for e in MlflowClient(uri).search_experiments()].count("together") == 1
