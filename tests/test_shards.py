"""A roster spread over independent jobs: `--shard I/N` deals whole model
batteries to job I of N; N jobs logging to one MLflow server on PostgreSQL make the same report as
one job."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.run import PlanError, parse_shard, shard_of
from tests.conftest import MIRROR, require
from tests.servers import client_env, mlflow_server, postgres_bindir, postgres_server

MODELS = [{"id": f"vit-{i}", "source": "timm", "name": "test_vit", "weights": "random", "batch_size": 40}
          for i in range(5)]


def test_shards_cover_the_roster_once_and_bad_shards_are_refused():
    planned = list(range(7))
    jobs = [shard_of(planned, (i, 3)) for i in range(3)]  # type: ignore[arg-type]
    assert sorted(x for job in jobs for x in job) == planned
    assert jobs == [[0, 3, 6], [1, 4], [2, 5]]
    assert shard_of(planned, None) == planned  # type: ignore[arg-type]
    assert parse_shard("2/3") == (2, 3)
    for bad in ("3/3", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(PlanError, match="--shard"):
            parse_shard(bad)


@pytest.mark.parametrize("shard, share", [("1/2", "vit-1, vit-3"), ("5/6", "no model")])
def test_a_dry_run_of_a_shard_names_its_share_as_the_run_does(tmp_path, capsys, shard, share):
    """A job's plan says which batteries it would run, before a cluster's allocation is spent on
    a shard with nothing to do (N larger than the roster)."""
    from harness.cli import main

    main(["recipe", str(_recipe(tmp_path, "dry")), "--dry-run", f"--shard={shard}"])
    out = capsys.readouterr().out
    assert f"shard {shard}: {share} (of 5 models)" in out.splitlines()
    assert [line.split()[1] for line in out.splitlines() if line.startswith("model ")] == \
        [m for m in share.split(", ") if m.startswith("vit")]


def _recipe(tmp_path: Path, name: str) -> Path:
    recipe = {"name": "sharded", "tasks": ["closure.nat.silhouette"], "models": MODELS,
              "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
              "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
              "output_dir": str(tmp_path / name / "out"), "tracking": {"experiment": name}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _gestalt(uri: str, *args: str, cwd: Path) -> subprocess.Popen:
    env = dict(client_env(uri), HF_HUB_OFFLINE="1", GESTALT_MIRROR=str(MIRROR))
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=1200)
    assert proc.returncode == 0, err[-3000:]
    return out


def _scores(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return sorted(({k: v for k, v in row.items() if k != "run_id"} for row in csv.DictReader(fh)),
                      key=lambda r: (r["model"], r["task"], r["score"]))


@pytest.mark.slow
def test_three_shards_in_parallel_report_as_one_job(tmp_path):
    require(postgres_bindir(), "PostgreSQL server binaries (postgresql)")
    (tmp_path / "server").mkdir()
    (tmp_path / "pg").mkdir()
    with postgres_server(tmp_path / "pg") as dsn, mlflow_server(tmp_path / "server", dsn) as uri:
        single = _recipe(tmp_path, "single")
        _finish(_gestalt(uri, "recipe", str(single), cwd=tmp_path))
        sharded = _recipe(tmp_path, "sharded")
        jobs = [_gestalt(uri, "recipe", str(sharded), f"--shard={i}/3", cwd=tmp_path) for i in range(3)]
        outs = [_finish(job) for job in jobs]
        assert [o.splitlines()[0] for o in outs] == [
            "shard 0/3: vit-0, vit-3 (of 5 models)", "shard 1/3: vit-1, vit-4 (of 5 models)",
            "shard 2/3: vit-2 (of 5 models)"]
        for name in ("single", "sharded"):
            _finish(_gestalt(uri, "report", f"--experiment={name}", f"--out={tmp_path / name / 'report'}",
                             cwd=tmp_path))

        import mlflow

        mlflow.set_tracking_uri(uri)
        runs = mlflow.search_runs(experiment_names=["sharded"], filter_string="tags.`gestalt.model` != ''",
                                  output_format="list")  # not the experiment's summary run
    # one FINISHED run per model battery, each trial computed once (by the job that owns it)
    assert sorted(r.info.run_name for r in runs) == [m["id"] for m in MODELS]
    assert {r.info.status for r in runs} == {"FINISHED"}
    for m in MODELS:
        lines = (tmp_path / "sharded/out" / m["id"] / "records/closure.nat.silhouette.jsonl").read_text()
        ids = [json.loads(x)["trial_id"] for x in lines.splitlines()]
        assert len(ids) == len(set(ids)) == 80
    single_rows = _scores(tmp_path / "single/report/scores.csv")
    assert single_rows and _scores(tmp_path / "sharded/report/scores.csv") == single_rows
