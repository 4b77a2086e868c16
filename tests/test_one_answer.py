"""One answer on every surface: the terminal's paired rank groups and its digits are the summary
run's (``rank_groups.json``), the report's and the registry scorecard's, after a recipe, after
`gestalt report` and after a rerun; a rerun with nothing changed draws no summary again and
imports no report."""

import html
import json
import os
import re
import shlex
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from harness.scores.ranking import CORRECTION
from tests.conftest import MIRROR, REPO
from tests.test_rank_groups import CONSTANT

SIL = "closure.nat.silhouette"
NOOP = """
import json, sys
from harness.cli import main
try:
    main(["recipe", sys.argv[1]])
except SystemExit as e:
    assert not e.code, e.code
print(json.dumps({"report": "harness.reports.report" in sys.modules, "matplotlib": "matplotlib" in sys.modules}))
"""


def cli(*args, env, script=None):
    cmd = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "harness.cli", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def terminal_rows(stdout: str, task: str) -> list[list[str]]:
    """[task, letters, model, value [lo, hi]] of the terminal's ranked rows of ``task``."""
    block = stdout[stdout.index("rank groups per task"):]
    block = block[block.index(f"\n{task}  ") + 1:].split("\n  groups:")[0]
    rows = []
    for line in block.splitlines()[1:]:
        m = re.match(r"  (\S+)\s+(\S+)\s+(-?\d\S* \[\S+, \S+\])", line)
        if m:
            rows.append([task, m.group(1), m.group(2), m.group(3)])
    return rows


def summary_groups(uri: str, experiment: str) -> tuple[dict, object]:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([exp.experiment_id], "tags.`gestalt.summary` = 'true'")
    path = client.download_artifacts(run.info.run_id, "rank_groups.json")
    return json.loads(open(path).read()), run


@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("answer")
    models = [{"id": "shape-rule", "source": "python", "name": str(REPO / "examples/rule_based.py") + ":build"}]
    for answer in ("knife", "dog"):
        (tmp / f"{answer}.py").write_text(CONSTANT.format(answer=answer))
        models.append({"id": f"always-{answer}", "source": "python", "name": f"{tmp}/{answer}.py:build"})
    uri = f"sqlite:///{tmp}/mlflow.db"
    recipe = {"name": "answer", "models": models, "tasks": [SIL],
              "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
              "runtime": {"processes": 1, "device": "cpu", "progress": False},
              "data": {"mirror": str(MIRROR)}, "tracking": {"uri": uri, "experiment": "answer"},
              "output_dir": str(tmp / "out")}
    path = tmp / "answer.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    first = cli("recipe", str(path), env=env)
    after_first, run_first = summary_groups(uri, "answer")
    noop = cli(str(path), env=env, script=NOOP)
    after_noop, run_noop = summary_groups(uri, "answer")
    cli("report", "--experiment", "answer", "--out", str(tmp / "report"), "--uri", uri, env=env)
    after_report, _ = summary_groups(uri, "answer")
    again = cli("recipe", str(path), env=env)
    after_again, _ = summary_groups(uri, "answer")
    return SimpleNamespace(tmp=tmp, uri=uri, path=path, env=env, first=first, noop=noop, again=again,
                           summaries=[after_first, after_noop, after_report, after_again],
                           runs=(run_first, run_noop))


def test_every_surface_shows_the_terminals_groups_and_digits(answered):
    rows = terminal_rows(answered.first.stdout, SIL)
    assert {r[2] for r in rows} == {"shape-rule", "always-knife", "always-dog"}, answered.first.stdout
    assert terminal_rows(answered.again.stdout, SIL) == rows
    for stored in answered.summaries:  # after the recipe, its rerun, the report and the recipe again
        assert [[g["task"], g["groups"], g["model"], g["shown"]] for g in stored["groups"]] == rows
        assert "paired bootstrap" in stored["method"] and "NOT PAIRED" not in stored["method"]
        assert CORRECTION in stored["method"]  # the summary run names the letters' correction
    index = (answered.tmp / "report" / "index.html").read_text()
    assert "NOT PAIRED" not in index and "paired bootstrap" in index and html.escape(CORRECTION) in index
    for _task, letters, model, shown in rows:
        assert f"<td>{letters}</td><td>{model}</td><td>{shown}</td>" in index
        value, ci = shown.split(" ", 1)
        assert f"| {value} {ci} |" in (answered.tmp / "report" / "scores.md").read_text()
    # the registry scorecard: the same value and interval digits
    from harness.tracking.scorecards import scorecard_markdown

    from mlflow import MlflowClient

    rid = re.search(r"shape-rule ([0-9a-f]{32})", answered.first.stdout).group(1)
    intervals = json.loads(open(MlflowClient(answered.uri).download_artifacts(rid, "intervals.json")).read())
    card = scorecard_markdown("shape-rule", rid, intervals)
    value, ci = next(r[3] for r in rows if r[2] == "shape-rule").split(" ", 1)
    assert f"**{value}**" in card or f"&ensp;{value}&ensp;" in card, card
    assert ci in card


def test_a_noop_rerun_draws_no_summary_and_imports_no_report(answered):
    from harness.tracking.batteries import drawn_summary

    shown = json.loads(answered.noop.stdout.strip().splitlines()[-1])
    assert shown == {"report": False, "matplotlib": False}
    first, noop = answered.runs
    assert noop.info.end_time == first.info.end_time  # not logged again
    url = f"/runs/{first.info.run_id}"
    for out in (answered.first.stdout, answered.noop.stdout, answered.again.stdout):
        assert re.search(rf"^summary  \S+{url} ", out, re.M), out[-1500:]
    assert "drawing the experiment's summary run" in answered.first.stderr
    assert "drawing" not in answered.noop.stderr
    # runs drawn from anything else: drawn again
    assert drawn_summary(answered.uri, "answer", "0" * 64) is None
    assert drawn_summary(answered.uri, "answer", answered.summaries[0]["fingerprint"]) is not None


def test_registering_the_summary_run_suggests_a_battery_run_that_registers(answered):
    summary = answered.runs[0].info.run_id
    refused = subprocess.run([sys.executable, "-m", "harness.cli", "register", summary, "--uri", answered.uri],
                             capture_output=True, text=True, env=answered.env, cwd=REPO, timeout=600)
    assert refused.returncode == 2, refused.stderr
    err = refused.stderr.strip()
    assert f"run {summary} is the experiment's summary run, not a model's battery run" in err, err
    assert "(status FINISHED)" not in err
    suggested = shlex.split(re.search(r"`gestalt (register [^`]+)`", err).group(1))
    done = cli(*suggested, "--uri", answered.uri, env=answered.env)
    assert "gestalt-scorecard-" in done.stdout
