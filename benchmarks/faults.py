"""The fault campaign as data: each fault of docs/reliability.md, injected ``--tries`` times, counted.

Every scenario runs the silhouette battery as a user runs it (``gestalt recipe`` in a fresh
process, answered by the fake vendor on 127.0.0.1 or read from the published decisions), breaks it
one way, and counts what a rerun left wrong:

- ``lost``: trials that have no record after the rerun;
- ``duplicated``: trials recorded twice, or asked of the model twice;
- ``tracebacks``: Python tracebacks printed, where one line was promised;
- ``silent_changes``: results that differ from what was run, with nothing said: scores other than
  an uninterrupted run's, records re-scored or asked again without a word, an original folder
  changed by a rerun in its copy, a wrong option or a misplaced key accepted;
- ``unexpected``: tries whose exit status, message or runs were not the ones promised.

One row per scenario goes to ``benchmarks/results/faults.csv``; docs/reliability.md shows what
``--table`` prints from it (tests/test_faults_benchmark.py checks it is not stale). The faults'
moments come from ``--seed``. The disk scenario mounts a small tmpfs where it may (as root) and
otherwise fails the record writes as a full disk fails them, in-process; the row says which.

    GESTALT_MIRROR=../shared/sources PYTHONPATH=$PWD .venv/bin/python benchmarks/faults.py [--tries 3]
"""

from __future__ import annotations

import argparse
import csv
import errno
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from unittest import mock

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
if os.environ.get("GESTALT_MIRROR"):  # the result-folder runs start in their own folder
    os.environ["GESTALT_MIRROR"] = str(Path(os.environ["GESTALT_MIRROR"]).resolve())

from overhead import machine  # noqa: E402 - the CPU, cores and OS a row was measured on

from harness.exit_status import Exit  # noqa: E402
from tests import lifecycle as life  # noqa: E402
from tests.fake_vendor_server import FakeVendorServer  # noqa: E402
from tests.reliability import test_recipe_mutator as mutator  # noqa: E402
from tests.test_record_proofs import rewrite_answers  # noqa: E402
from tests.test_result_folder import RECIPE, RECORDS, drop_records, hashes, run  # noqa: E402
from tests.test_tracking_outage import _point_at, _Stderr  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "faults.csv"
COLUMNS = ("scenario", "fault", "tries", "lost", "duplicated", "tracebacks", "silent_changes", "unexpected",
           "exit_codes", "seconds", "date", "machine")
MUTATIONS_PER_TRY = 50
RUNS_PER_TRY = 2  # real runs of the small recipe's mutations, each some 15-50 s on 2 cores
# what a run of a recipe may end with (harness/exit_status.py); a mutation that fails a
# process, the store or the disk of a run is none of them
PROMISED = {Exit.DONE, Exit.BAD_INPUT, Exit.PARTLY_RAN, Exit.NOTHING_RAN}


@dataclass
class Tally:
    """What the tries of one scenario left wrong, and the exit statuses they saw."""

    tries: int = 0
    lost: int = 0
    duplicated: int = 0
    tracebacks: int = 0
    silent_changes: int = 0
    unexpected: int = 0
    exit_codes: set[int] = field(default_factory=set)
    note: str = ""  # how the fault was made, where it was not made as the scenario says

    def trials(self, ids: list[str], expected: int = life.TRIALS) -> None:
        self.lost += expected - len(set(ids))
        self.duplicated += len(ids) - len(set(ids))

    def exits(self, *procs) -> None:
        for p in procs:
            self.exit_codes.add(p.returncode)
            self.tracebacks += p.stderr.count("Traceback")

    def expect(self, holds: bool) -> None:
        self.unexpected += not holds


def _ids(folder: Path, model: str = "fake-api") -> list[str]:
    return [r["trial_id"] for r in life.record_lines(folder, model)]


def _scores(folder: Path, run_id: str) -> str:
    from harness.tracking.batteries import logged_intervals
    from harness.tracking.store import open_store

    open_store(f"sqlite:///{folder}/mlflow.db", "life")
    return json.dumps(logged_intervals(run_id), sort_keys=True)


def _fresh(tmp: Path, name: str) -> Path:
    folder = tmp / name
    folder.mkdir()
    return folder


# -- the scenarios: each takes (tries, rng, tmp) and returns its tally -------------------------------

def kill_mid_run(tries: int, rng: random.Random, tmp: Path) -> Tally:
    """SIGKILL at a random moment of a run (start-up, mid-trial, while MLflow logs), then a rerun:
    every trial once, one FINISHED run, scores byte-identical to an uninterrupted run's."""
    t = Tally()
    with FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.03) as server:
        reference = _fresh(tmp, "reference")
        t0 = time.time()
        done = life.gestalt(life.api_recipe(reference, server.url, batch_size=2))
        duration = time.time() - t0
        (ref,) = life.battery_runs(reference)
        expected = _scores(reference, ref.info.run_id)
        for k in range(tries):
            folder = _fresh(tmp, f"killed{k}")
            path = life.api_recipe(folder, server.url, batch_size=2)
            proc = life.start(path)
            time.sleep(rng.uniform(0, duration))
            proc.kill()
            proc.communicate()
            rerun = life.gestalt(path)
            t.tries += 1
            t.exits(rerun)
            t.trials(_ids(folder))
            runs = life.battery_runs(folder)
            t.expect(done.returncode == rerun.returncode == 0 and [r.info.status for r in runs] == ["FINISHED"])
            t.silent_changes += len(runs) == 1 and _scores(folder, runs[0].info.run_id) != expected
    return t


def kill_store_creation(tries: int, rng: random.Random, tmp: Path) -> Tally:
    """SIGKILL of a fresh folder's first run within 2.5 s of its MLflow store appearing (the
    schema migrations), then a rerun that must finish: every trial once, one FINISHED run."""
    t = Tally()
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        for k in range(tries):
            folder = _fresh(tmp, f"first{k}")
            path = life.api_recipe(folder, server.url)
            life.kill_while_the_store_is_made(path, folder, rng.uniform(0, 2.5))
            rerun = life.gestalt(path)
            t.tries += 1
            t.exits(rerun)
            t.trials(_ids(folder))
            t.expect(rerun.returncode == 0 and [r.info.status for r in life.battery_runs(folder)] == ["FINISHED"])
    return t


def _reference_scores(tmp: Path, url: str, models: tuple[str, ...] = ("fake-api",)) -> dict[str, str]:
    """Model -> the scores of an uninterrupted run of the battery, answered by ``url``."""
    folder = _fresh(tmp, "reference")
    done = life.gestalt(life.api_recipe(folder, url, models=models))
    if done.returncode != 0:
        raise SystemExit(f"faults.py: the uninterrupted run failed:\n{done.stderr[-2000:]}")
    return {m: _scores(folder, life.battery_runs(folder, m)[0].info.run_id) for m in models}


def _changed_scores(folder: Path, expected: dict[str, str]) -> int:
    """How many of the models' finished battery runs in ``folder`` logged other scores than ``expected``."""
    return sum(_scores(folder, r.info.run_id) != expected[m]
               for m in expected for r in life.battery_runs(folder, m) if r.info.status == "FINISHED")


def two_processes(tries: int, rng: random.Random, tmp: Path) -> Tally:
    """Two ``gestalt recipe`` processes started together on one fresh folder, two batteries:
    each trial asked of the model and recorded once, one FINISHED run per battery, scores an
    uninterrupted run's."""
    models = ("fake-api", "fake-api-2")
    t = Tally()
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        expected = _reference_scores(tmp, server.url, models)
    for k in range(tries):
        folder = _fresh(tmp, f"pair{k}")
        with FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.01) as server:
            path = life.api_recipe(folder, server.url, models=models)
            procs = [life.start(path), life.start(path)]
            outs = [p.communicate(timeout=900) for p in procs]
            requests = len(server.requests)
        t.tries += 1
        for p, (_, err) in zip(procs, outs):
            t.exit_codes.add(p.returncode)
            t.tracebacks += err.count("Traceback")
        for m in models:
            t.trials(_ids(folder, m))
        t.duplicated += max(0, requests - life.TRIALS * len(models))
        statuses = sorted(r.info.status for r in life.runs(folder))
        t.expect([p.returncode for p in procs] == [0, 0] and statuses == ["FINISHED"] * len(models))
        t.silent_changes += _changed_scores(folder, expected)
    return t


def tracking_restart(tries: int, rng: random.Random, tmp: Path) -> Tally:
    """The tracking server lost at the 10th record and back on the same address 3 s after the run
    says so: the run finishes, saying once that it is retrying; every trial once, one FINISHED run."""
    from mlflow import MlflowClient

    from tests.servers import TcpProxy, mlflow_server

    for name in [k for k in os.environ if k.startswith("MLFLOW_HTTP_REQUEST")]:
        del os.environ[name]  # MLflow's own retry settings would change what a lost server looks like
    t = Tally()
    for k in range(tries):
        folder, store = _fresh(tmp, f"served{k}"), _fresh(tmp, f"store{k}")
        with FakeVendorServer(key=life.KEY, answer=life.answer, delay_s=0.05) as slow, mlflow_server(store) as uri:
            proxy = TcpProxy(int(uri.rsplit(":", 1)[1]))
            path = life.api_recipe(folder, slow.url, batch_size=1)
            _point_at(path, f"http://127.0.0.1:{proxy.port}")
            proc = life.start(path, "--tracking.outage_budget_s=600")
            err = _Stderr(proc)
            deadline = time.time() + 300
            while time.time() < deadline and proc.poll() is None and len(life.record_lines(folder)) < 10:
                time.sleep(0.02)
            proxy.down()
            while time.time() < deadline and proc.poll() is None and not any(
                    "not answering" in line for _, line in err.lines):
                time.sleep(0.1)
            time.sleep(3)
            proxy.up()
            proc.wait(timeout=600)
            text = err.text()
            client = MlflowClient(f"http://127.0.0.1:{proxy.port}")
            runs = client.search_runs([client.get_experiment_by_name("life").experiment_id],
                                      "tags.`gestalt.model` != ''")
            proxy.down()
        t.tries += 1
        t.exit_codes.add(proc.returncode)
        t.tracebacks += text.count("Traceback")
        t.trials(_ids(folder))
        said = sum("not answering" in line for line in text.splitlines())
        t.expect(proc.returncode == 0 and said == 1 and [r.info.status for r in runs] == ["FINISHED"])
    return t


def _finished_folder(tmp: Path) -> Path:
    """A result folder (recipe, ./mlflow.db, ./mlartifacts, ./out) after one run of the published
    decisions on the silhouettes, its paths relative to itself."""
    a = _fresh(tmp, "A")
    (a / "recipe.yaml").write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    done = run(a, tmp / "cache")
    if done.returncode != 0:
        raise SystemExit(f"faults.py: the result folder's first run failed:\n{done.stderr[-2000:]}")
    return a


def _decisions(folder: Path) -> list[str]:
    return [r["trial_id"] for r in life.whole_records(folder / RECORDS)]


def records_rewritten(tries: int, rng: random.Random, tmp: Path) -> Tally:
    """Ten records of a finished battery rewritten as valid lines with other answers and fresh
    checksums: the rerun must name them and score nothing (exit 2), the file left as it was."""
    t = Tally()
    a = _finished_folder(tmp)
    expected = len(_decisions(a))
    for k in range(tries):
        b = tmp / f"edited{k}"
        subprocess.run(["cp", "-a", str(a), str(b)], check=True)
        path = b / RECORDS
        records = [json.loads(x) for x in path.read_text().splitlines()]
        # in the file's order, as the refusal names them
        changed = rewrite_answers([records[i] for i in sorted(rng.sample(range(len(records)), 10))])
        path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
        edited = path.read_bytes()
        rerun = run(b, tmp / "cache")
        t.tries += 1
        t.exits(rerun)
        t.trials(_decisions(b), expected)
        t.silent_changes += rerun.returncode == 0 or path.read_bytes() != edited
        named = [x for x in rerun.stderr.splitlines() if "10 record(s) changed" in x]
        t.expect(rerun.returncode == 2 and len(named) == 1 and changed[0] in named[0])
    return t


def copy_rerun(tries: int, rng: random.Random, tmp: Path) -> Tally:
    """``cp -a A B``, records removed from B, a rerun in B: refused in one line naming what is
    missing (exit 2), the records left as they were; then with ``--rescore`` B gets its trials
    back. A stays byte-identical (its files' bytes and modification times) throughout."""
    t = Tally()
    a = _finished_folder(tmp)
    expected = len(_decisions(a))
    before = hashes(a)
    for k in range(tries):
        b = tmp / f"copy{k}"
        subprocess.run(["cp", "-a", str(a), str(b)], check=True)
        drop_records(b, keep=rng.randrange(0, 40))
        dropped = (b / RECORDS).read_bytes()
        refused = run(b, tmp / "cache")
        # a rerun that asks the gone trials again scores other answers of a model that samples
        asked_again = refused.returncode == 0 or (b / RECORDS).read_bytes() != dropped
        rescored = run(b, tmp / "cache", "--rescore")
        t.tries += 1
        t.exits(refused, rescored)
        t.trials(_decisions(b), expected)
        t.silent_changes += asked_again + (hashes(a) != before)
        named = [x for x in refused.stderr.splitlines() if "missing" in x and "--rescore" in x]
        t.expect(refused.returncode == 2 and len(named) == 1 and rescored.returncode == 0)
    return t


def _tmpfs(mount: Path, size: str) -> bool:
    mount.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True).returncode == 0


def full_disk(tries: int, rng: random.Random, tmp: Path) -> Tally:
    """The whole result folder on a 1.4, 1.1 or 0.8 MB tmpfs (by turns): one line naming the
    folder, exit 1; the rerun once there is room finishes with every trial once and an
    uninterrupted run's scores. Without the privilege to mount, the record writes fail as a full
    disk fails them (ENOSPC), in-process."""
    t = Tally()
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        expected = _reference_scores(tmp, server.url)
        for k in range(tries):
            mount = tmp / f"disk{k}"
            size = ("1400k", "1100k", "800k")[k % 3]
            if _tmpfs(mount, size):
                try:
                    path = life.api_recipe(mount, server.url)
                    recipe = yaml.safe_load(path.read_text())
                    recipe["tracking"]["uri"], recipe["output_dir"] = "sqlite:///mlflow.db", "out"
                    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
                    first = _recipe_in(mount, path)
                    subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
                    rerun = _recipe_in(mount, path)
                    t.exits(first, rerun)
                    t.trials(_ids(mount))
                    lines = [x for x in first.stderr.splitlines() if x.startswith("gestalt")]
                    t.expect(first.returncode == 1 and len(lines) == 1 and rerun.returncode == 0
                             and lines[0].startswith(f"gestalt: error: no space left on {mount}"))
                    t.silent_changes += _changed_scores(mount, expected)
                finally:
                    subprocess.run(["umount", "-l", str(mount)], check=True)
            else:
                t.note = " (simulated where no tmpfs could be mounted: records fail with ENOSPC)"
                code, err, again = _simulated_full_disk(mount, server.url)
                t.exit_codes |= {code, again}
                t.tracebacks += err.count("Traceback")
                t.trials(_ids(mount))
                t.expect(code == 1 and len(err.strip().splitlines()) == 1 and "no space left on" in err
                         and again == 0)
                t.silent_changes += _changed_scores(mount, expected)
            t.tries += 1
    return t


def _recipe_in(folder: Path, path: Path) -> subprocess.CompletedProcess:
    """``gestalt recipe PATH`` started in ``folder``, whose relative store and output it names."""
    return subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(path)], env=life.env(), cwd=folder,
                          capture_output=True, text=True, errors="replace", timeout=600)


def _simulated_full_disk(folder: Path, url: str) -> tuple[int, str, int]:
    """The fourth append of records fails with ENOSPC; then a rerun with the disk writable.
    (first exit status, its stderr, the rerun's exit status)"""
    from harness.trials.records import RecordStore

    path = life.api_recipe(folder, url)
    append, calls = RecordStore.append, []

    def fills(self, records):
        calls.append(len(records))
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        append(self, records)

    with mock.patch.object(RecordStore, "append", fills):
        code, _, err = life.cli(path)
    again, _, _ = life.cli(path)
    return code, err, again


def mutated_recipes(tries: int, rng: random.Random, tmp: Path) -> Tally:
    """Seeded mutations of the shipped recipes and a small one (text: a deleted, repeated or
    swapped line, a stray token, a typo in a key, a byte changed, a cut; tree: a wrong value, a
    misspelt or missing key): each loads, or is refused in one line naming the file; never a
    traceback. One that loads is planned as ``gestalt recipe --dry-run`` plans it, which ends 0
    or names what stops it in one ``gestalt:`` line, so a mutation the loader lets through and a
    later step trips on shows. One that puts a key where the recipe has none (a typo, a line
    moved to another section) must be refused: loaded, it is a silent change. Its one line may
    name another of the mutation's faults first (the misspelt key's missing original).

    Half the mutations are of the small recipe. Of each try's that plan (dry run 0), ``RUNS_PER_TRY`` drawn
    by the seed are run for real as ``gestalt recipe``, each in a fresh folder, so a setting
    that passes the plan and trips once work began (the store, the output folder) shows: a
    traceback, or a status other than 0, 2, 3, 4 or one without its ``gestalt:`` line, is
    counted. The shipped recipes' mutations are only dry-run: a real run would load their models."""
    shipped = [p.read_text() for p in sorted((REPO / "recipes").glob("*.yaml"))]
    cases, small = [], []
    # half of the small recipe, so that each try has more that plan than it runs
    for base in (mutator.SMALL if rng.random() < 0.5 else rng.choice(shipped)
                 for _ in range(tries * MUTATIONS_PER_TRY)):
        data = mutator.text_mutation(base, rng) if rng.random() < 0.6 else mutator.tree_mutation(base, rng)
        cases.append((data, _new_key(base, data)))
        small.append(base == mutator.SMALL)
    planned: list[int] = []
    t = _load_each(tmp, cases, names_key=False, planned=planned)
    ran = 0
    for k in range(tries):
        runnable = [i for i in planned if small[i] and i // MUTATIONS_PER_TRY == k]
        for i in sorted(rng.sample(runnable, min(RUNS_PER_TRY, len(runnable)))):
            _run_for_real(t, cases[i][0], _fresh(tmp, f"run{i:05d}"))
            ran += 1
    t.note = f" ({ran} ran)"
    return t


def _run_for_real(t: Tally, data: bytes, folder: Path) -> None:
    """``gestalt recipe`` of the recipe ``data`` in ``folder``, its exit status and tracebacks counted."""
    path = folder / "recipe.yaml"
    path.write_bytes(data)
    try:
        done = _recipe_in(folder, path)
    except subprocess.TimeoutExpired:  # a hang: neither a result nor a line saying why not
        t.expect(False)
        return
    t.exits(done)
    said = any(x.startswith("gestalt: ") for x in done.stderr.splitlines())
    t.expect(done.returncode in PROMISED and (done.returncode == Exit.DONE or said))


def _new_key(base: str, data: bytes) -> str | None:
    """The dotted place of the first key ``data`` holds in a mapping of ``base`` that ``base``
    has not; None where there is none or ``data`` is no YAML at all."""
    try:
        tree = yaml.safe_load(data)
    except (yaml.YAMLError, ValueError, RecursionError):  # a refusal the loader words itself
        return None
    return next(_new_keys(yaml.safe_load(base), tree, ()), None)


def _new_keys(base, tree, at: tuple) -> Iterator[str]:
    if isinstance(base, dict) and isinstance(tree, dict):
        for k, v in tree.items():
            if k in base:
                yield from _new_keys(base[k], v, (*at, k))
            else:
                yield ".".join(map(str, (*at, k)))
    elif isinstance(base, list) and isinstance(tree, list) and len(base) == len(tree):
        # an item removed or added moves those after it: the next one's keys are not new ones
        for i, (b, v) in enumerate(zip(base, tree)):
            yield from _new_keys(b, v, (*at, i))


def mutated_options(tries: int, rng: random.Random, tmp: Path) -> Tally:
    """Every option of the shipped recipes (models' options and generation settings, task options
    and their readouts) set once to each wrong type or out-of-range value: each refused at load as
    ``file:line: key: ...``; one that loads is a silent change. The same list at every ``--tries``."""
    cases = []
    for source, key, bad in mutator.shipped_option_mutations():
        data = yaml.safe_load(source.read_text())
        node = data
        for part in key[:-1]:
            node = node[part]
        node[key[-1]] = bad
        cases.append((yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode(), ".".join(map(str, key))))
    return _load_each(tmp, cases)


def _load_each(tmp: Path, cases, names_key: bool = True, planned: list[int] | None = None) -> Tally:
    """Load each (recipe bytes, key it must be refused on or None): a refusal is exit 2, a
    recipe that loads exit 0, anything else a traceback. With ``names_key`` the refusal's one
    line names the file's line and the key, else the file. Given ``planned``, each recipe that
    loads is then dry-run in this process (its exit status counted instead), and the index of
    each that plans (exit 0) is added to it."""
    from harness.errors import GestaltError
    from harness.recipes import load_recipe

    t = Tally()
    for k, (data, key) in enumerate(cases):
        path = tmp / f"m{k:05d}.yaml"
        path.write_bytes(data)
        t.tries += 1
        try:
            load_recipe(path)
            t.silent_changes += key is not None
            if planned is not None:
                code, _, err = life.cli(path, "--dry-run")
                t.exit_codes.add(code)
                t.tracebacks += err.count("Traceback")
                t.expect(code == 0 or any(x.startswith("gestalt: ") for x in err.splitlines()))
                if code == 0:
                    planned.append(k)
            else:
                t.exit_codes.add(0)
        except GestaltError as e:
            t.exit_codes.add(2)
            message = str(e)
            named = (message.startswith(f"{path}:") and f": {key}" in message if key and names_key
                     else message.startswith(str(path)))
            t.expect("\n" not in message and named)
        except Exception:  # noqa: BLE001 - the defect this scenario counts
            t.tracebacks += 1
    return t


SCENARIOS: dict[str, tuple[str, Callable[[int, random.Random, Path], Tally]]] = {
    "kill-mid-run": ("SIGKILL at a random moment of a run, then a rerun", kill_mid_run),
    "kill-store-creation": ("SIGKILL of a first run while its MLflow store is created, then a rerun",
                            kill_store_creation),
    "two-processes": ("two processes started together on one fresh folder", two_processes),
    "tracking-restart": ("the tracking server lost mid-run, back on its address 3 s later", tracking_restart),
    "records-rewritten": ("10 records rewritten with other answers and fresh checksums, then a rerun",
                          records_rewritten),
    "copy-rerun": ("`cp -a A B`, records removed from B, a rerun in B refused, then one with --rescore; "
                   "A must stay byte-identical", copy_rerun),
    "full-disk": ("the result folder on a 1.4/1.1/0.8 MB disk, then a rerun with room", full_disk),
    "mutated-recipes": (f"mutated recipes, {MUTATIONS_PER_TRY} per try, each that loads dry-run, up to "
                        f"{RUNS_PER_TRY} a try of the small recipe's that plan run for real", mutated_recipes),
    "mutated-options": ("every shipped option set to a wrong type or value", mutated_options),
}


def measure(name: str, tries: int, seed: int) -> dict:
    what, scenario = SCENARIOS[name]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"faults-{name}-") as tmp:
        cache = Path(tmp) / "memo"
        with mock.patch.dict(os.environ, {"GESTALT_CACHE": str(cache)}):
            t = scenario(tries, random.Random(seed), Path(tmp))
    return {"scenario": name, "fault": what + t.note, "tries": t.tries, "lost": t.lost, "duplicated": t.duplicated,
            "tracebacks": t.tracebacks, "silent_changes": t.silent_changes, "unexpected": t.unexpected,
            "exit_codes": " ".join(str(c) for c in sorted(t.exit_codes)),
            "seconds": round(time.perf_counter() - start), "date": date.today().isoformat(), "machine": machine()}


def read(path: Path = RESULTS) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def write(rows: list[dict], path: Path) -> None:
    """Rows replace those of the same scenario; the file keeps SCENARIOS' order."""
    kept = {r["scenario"]: r for r in (read(path) if path.exists() else [])}
    kept.update({r["scenario"]: r for r in rows})
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(kept[name] for name in SCENARIOS if name in kept)


def table(rows: list[dict]) -> str:
    """Markdown: one line per scenario, then where and when it was measured."""
    out = ["| fault | tries | lost | duplicated | tracebacks | silent changes | unexpected | exit statuses |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    out += [f"| {r['fault']} | {r['tries']} | {r['lost']} | {r['duplicated']} | {r['tracebacks']} "
            f"| {r['silent_changes']} | {r['unexpected']} | {r['exit_codes']} |" for r in rows]
    where = sorted({(r["machine"], r["date"]) for r in rows})
    return "\n".join(out) + "\n\n" + " ".join(f"Measured on {m}, {d}." for m, d in where) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tries", type=int, default=3, help="faults injected per scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    ap.add_argument("--csv", type=Path, default=RESULTS)
    ap.add_argument("--table", action="store_true", help="print the markdown table of --csv and stop")
    args = ap.parse_args(argv)
    if args.table:
        sys.stdout.write(table(read(args.csv)))
        return
    for name in args.scenarios:
        row = measure(name, args.tries, args.seed)
        write([row], args.csv)  # after every scenario: a stopped run keeps what it measured
        print(" ".join(f"{k}={row[k]}" for k in COLUMNS[:10] if k != "fault"), file=sys.stderr)


if __name__ == "__main__":
    main()
