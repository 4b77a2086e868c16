"""A result folder (recipe, ./mlflow.db, ./mlartifacts, ./out) is one self-contained thing: copied
(``cp -a A B``), moved, or reached through another path (a symlink, as a container's mount), a
rerun there reads and writes only that folder. The store's recorded artifact locations are
rewritten to the folder the store is opened in; the original stays byte-identical."""

import hashlib
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from tests.conftest import MIRROR, REPO

SILHOUETTES = "geirhos-silhouettes"
RECIPE = {"name": "folder",
          "models": [{"id": "alexnet", "source": "decisions", "family": "cnn",
                      "name": f"{SILHOUETTES}:raw-data/silhouette-filled-experiment/*_alexnet_session_1.csv",
                      "options": {"images": f"{SILHOUETTES}:stimuli/filled-silhouettes"}}],
          "tasks": ["closure.nat.silhouette"],
          "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
          "runtime": {"processes": 1, "device": "cpu", "progress": False},
          # relative to the folder: the recipe travels with it
          "tracking": {"uri": "sqlite:///mlflow.db", "experiment": "folder"},
          "output_dir": "out"}
RECORDS = Path("out/alexnet/records/closure.nat.silhouette.jsonl")


def run(folder: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    """``gestalt recipe recipe.yaml ARGS`` in ``folder``, as a user there runs it."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(GESTALT_MIRROR=str(MIRROR), GESTALT_CACHE=str(cache), PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "harness.cli", "recipe", "recipe.yaml", *args], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=900)


def rerun(folder: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    res = run(folder, cache, *args)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def hashes(folder: Path) -> dict[str, tuple[str, int]]:
    """Each file's sha256 and modification time: a write of the same bytes shows too."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def locations(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as con:
        return ([r[0] for r in con.execute("SELECT artifact_location FROM experiments")]
                + [r[0] for r in con.execute("SELECT artifact_uri FROM runs")])


def drop_records(folder: Path, keep: int = 30) -> None:
    """Lines gone after the run finished: a rerun asks them again with --rescore only."""
    path = folder / RECORDS
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) > keep
    path.write_text("".join(lines[:keep]))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Folder A after one run of the recipe in it; a stimulus-hash memo outside it."""
    tmp = tmp_path_factory.mktemp("folders")
    a = tmp / "A"
    a.mkdir()
    (a / "recipe.yaml").write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    rerun(a, tmp / "cache")
    assert all(loc.startswith((a / "mlartifacts").as_uri()) for loc in locations(a / "mlflow.db"))
    return tmp, a


def check_own(folder: Path, elsewhere: Path) -> None:
    """Every recorded location is inside ``folder`` (as it resolves), none names ``elsewhere``."""
    own = (folder.resolve() / "mlartifacts").as_uri()
    found = locations(folder / "mlflow.db")
    assert found and all(loc.startswith(own) for loc in found), found
    assert not any(str(elsewhere) + "/" in loc for loc in found)


@pytest.mark.slow
def test_a_rerun_in_a_copy_leaves_the_original_byte_identical(finished):
    tmp, a = finished
    before = hashes(a)
    b = tmp / "B"
    subprocess.run(["cp", "-a", str(a), str(b)], check=True)
    drop_records(b)
    res = rerun(b, tmp / "cache", "--rescore")
    assert "50 new trials" in res.stdout
    assert hashes(a) == before
    check_own(b, a)


@pytest.mark.slow
def test_a_moved_folder_does_not_recreate_its_old_path(finished):
    tmp, a = finished
    before = hashes(a)
    old, new = tmp / "moved-from", tmp / "moved-to"
    subprocess.run(["cp", "-a", str(a), str(old)], check=True)
    # the copy first runs where it was made (its store now names that path), then moves
    rerun(old, tmp / "cache")
    old.rename(new)
    drop_records(new)
    rerun(new, tmp / "cache", "--rescore")
    assert not old.exists()
    check_own(new, old)
    assert hashes(a) == before


@pytest.mark.slow
def test_a_folder_reached_through_another_path_writes_only_itself(finished):
    """As a container mounting the folder elsewhere: the path the store was made at is gone,
    the folder is reached through a symlink."""
    tmp, a = finished
    before = hashes(a)
    made, real, mount = tmp / "made-at", tmp / "real", tmp / "mount"
    subprocess.run(["cp", "-a", str(a), str(made)], check=True)
    rerun(made, tmp / "cache")
    made.rename(real)
    mount.symlink_to(real, target_is_directory=True)
    drop_records(mount)
    rerun(mount, tmp / "cache", "--rescore")
    assert not made.exists()
    check_own(mount, made)
    assert hashes(a) == before


def test_opening_a_moved_store_points_its_artifacts_at_its_own_folder(tmp_path):
    """No battery: a store with a run and an artifact, moved; opened at its new path, MLflow
    writes the next artifact there and the old path is not made again."""
    import mlflow

    from harness.tracking.store import open_store

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    open_store(f"sqlite:///{old}/mlflow.db", "moving")
    with mlflow.start_run() as run:
        mlflow.log_dict({"a": 1}, "first.json")
    old.rename(new)
    # as in the rerun's new process: no run's artifact location remembered from before the move
    mlflow.tracking._tracking_service.utils._artifact_repos_cache.clear()
    open_store(f"sqlite:///{new}/mlflow.db", "moving")
    with mlflow.start_run(run_id=run.info.run_id):
        mlflow.log_dict({"b": 2}, "second.json")
    assert not old.exists()
    arts = new / "mlartifacts" / run.info.run_id / "artifacts"
    assert sorted(p.name for p in arts.iterdir()) == ["first.json", "second.json"]
    check_own(new, old)


def test_a_read_only_store_pointing_elsewhere_stops_in_one_line(tmp_path, monkeypatch):
    """A store that must be repaired but cannot be written is refused, naming both folders."""
    from harness.errors import GestaltError
    from harness.tracking.store import check_tracking_server, open_store

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    open_store(f"sqlite:///{old}/mlflow.db", "moving")
    old.rename(new)
    connect = sqlite3.connect
    # read-only as a mount is (a chmod does not stop root, who runs these tests in CI)
    monkeypatch.setattr(sqlite3, "connect", lambda db, **kw: connect(f"file:{db}?mode=ro", uri=True))
    with pytest.raises(GestaltError) as e:
        check_tracking_server(f"sqlite:///{new}/mlflow.db")
    assert str(old) in str(e.value) and str(new) in str(e.value) and "\n" not in str(e.value)
    assert not old.exists()
