"""Reliability campaign: SIGKILL a first `gestalt recipe` while it creates the local MLflow store.

MLflow's schema migrations take a second or more; a process killed among them used to leave a
half-migrated store that every later run failed on. Each kill lands at a random moment (from
GESTALT_RELIABILITY_SEED) within 2.5 s of the database file appearing, on a fresh folder; the
rerun must finish: every trial recorded once, one FINISHED run, no traceback. The same for a
first run against an empty PostgreSQL database."""

import os
import random
import time

import pytest

from tests import lifecycle as life
from tests.fake_vendor_server import FakeVendorServer

KILLS = int(os.environ.get("GESTALT_RELIABILITY_KILLS", "3"))
SEED = int(os.environ.get("GESTALT_RELIABILITY_SEED", "0"))


@pytest.mark.slow
def test_a_first_run_killed_while_creating_the_store_is_followed_by_a_rerun_that_finishes(tmp_path):
    rng = random.Random(SEED)
    finished = lost = duplicated = tracebacks = 0
    left = []
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        for k in range(KILLS):
            folder = tmp_path / f"kill{k}"
            folder.mkdir()
            path = life.api_recipe(folder, server.url)
            life.kill_while_the_store_is_made(path, folder, rng.uniform(0, 2.5))
            left.append(sorted(p.name for p in folder.iterdir() if p.name.startswith("mlflow.db")))
            rerun = life.gestalt(path)
            runs = life.runs(folder)
            ids = [r["trial_id"] for r in life.record_lines(folder)]
            finished += rerun.returncode == 0 and [r.info.status for r in runs] == ["FINISHED"]
            lost += life.TRIALS - len(set(ids))
            duplicated += len(ids) - len(set(ids))
            tracebacks += rerun.stderr.count("Traceback")
    print(f"\n{KILLS} kills while the store was created: {finished} reruns finished, {lost} lost, "
          f"{duplicated} duplicated, {tracebacks} tracebacks (seed {SEED}; left: {left})")
    assert finished == KILLS and lost == 0 and duplicated == 0 and tracebacks == 0, rerun.stderr[-3000:]


@pytest.mark.slow
def test_a_first_run_killed_while_migrating_an_empty_postgresql_database_is_followed_by_a_rerun_that_finishes(
        tmp_path):
    """PostgreSQL's schema changes are transactional: a kill leaves a migration undone, not half done."""
    from urllib.parse import urlparse

    import psycopg2
    import yaml

    from tests.servers import postgres_server

    rng = random.Random(SEED)
    finished = tracebacks = 0
    with postgres_server(tmp_path) as database, FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        parts = urlparse(database)
        admin = psycopg2.connect(host=parts.hostname, port=parts.port, user=parts.username, dbname="postgres")
        admin.autocommit = True
        for k in range(KILLS):
            folder = tmp_path / f"kill{k}"
            folder.mkdir()
            with admin.cursor() as cur:
                cur.execute(f"CREATE DATABASE first{k}")
            path = life.api_recipe(folder, server.url)
            recipe = yaml.safe_load(path.read_text())
            recipe["tracking"]["uri"] = parts._replace(path=f"/first{k}").geturl()
            path.write_text(yaml.safe_dump(recipe, sort_keys=False))
            proc = life.start(path)
            deadline = time.time() + 300
            with psycopg2.connect(host=parts.hostname, port=parts.port, user=parts.username,
                                  dbname=f"first{k}") as watch:
                watch.autocommit = True
                while proc.poll() is None and time.time() < deadline:
                    with watch.cursor() as cur:  # the migrations have begun once a table is there
                        cur.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
                        if cur.fetchone()[0]:
                            break
                    time.sleep(0.02)
            time.sleep(rng.uniform(0, 2.5))
            proc.kill()
            proc.communicate()
            rerun = life.gestalt(path)
            finished += rerun.returncode == 0 and len(life.record_lines(folder)) == life.TRIALS
            tracebacks += rerun.stderr.count("Traceback")
        admin.close()
    print(f"\n{KILLS} kills while an empty PostgreSQL database was migrated: {finished} reruns finished, "
          f"{tracebacks} tracebacks (seed {SEED})")
    assert finished == KILLS and tracebacks == 0, rerun.stderr[-3000:]
