"""The built image, run as a user runs it: `gestalt recipe quick.yaml` with no network, as uid
10001, a temporary folder at /workspace; the same scores as bare metal; `gestalt recipe
loaders.yaml` on the hub weights baked from a local hub, offline, with no warning; no machine file
in any layer.

The image comes from `docker/build.sh --recipe recipes/quick.yaml --recipe recipes/loaders.yaml
--hub URL` with URL a local hub (tests/local_hub.py) serving stand-ins of loaders.yaml's models
(tests/hub_standins.py); .ci/run builds it and names it in $GESTALT_TEST_IMAGE. Started with
`podman run`; where this machine's sandbox refuses podman's defaults (crun and cgroups v1+v2, no
CAP_SYS_RESOURCE for its ulimits) the same `podman run` with runc, cgroupfs and the machine's own
limits.
"""

import hashlib
import json
import os
import re
import resource
import subprocess
import tarfile
from functools import cache
from pathlib import Path

import pytest

from harness.recipes import load_recipe
from tests import hub_standins
from tests.conftest import REPO
from tests.test_full_rehearsal import SMALL

pytestmark = pytest.mark.slow
IMAGE = os.environ.get("GESTALT_TEST_IMAGE")
UID = 10001

if not IMAGE:
    if os.environ.get("CI"):
        raise RuntimeError("GESTALT_TEST_IMAGE is not set: .ci/run builds the image first")
    pytest.skip("no image built (bash docker/build.sh, then GESTALT_TEST_IMAGE=NAME)",
                allow_module_level=True)


@cache
def podman() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(podman and its global options, `run` options): plain podman where it starts, else this
    sandbox's runc + cgroupfs with ulimits it may set."""
    probe = subprocess.run(["podman", "run", "--rm", "--network", "none", IMAGE, "--help"],
                           capture_output=True, text=True, check=False, timeout=300)
    if probe.returncode == 0:
        return ("podman",), ()
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return (("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"),
            ("--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"))


def run_image(*args, workspace: Path | None = None, entrypoint: str | None = None, timeout=1800):
    base, limits = podman()
    cmd = [*base, "run", "--rm", "--network", "none", "--user", f"{UID}:{UID}", *limits]
    if workspace is not None:
        cmd += ["-v", f"{workspace}:/workspace"]
    if entrypoint:
        cmd += ["--entrypoint", entrypoint]
    return subprocess.run([*cmd, IMAGE, *args], capture_output=True, text=True, check=False, timeout=timeout)


def user_folder(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    os.chown(ws, UID, UID)  # what a user's own folder is: theirs
    return ws


def scores(store: Path) -> dict[str, dict[str, float]]:
    """Run name -> MLflow metrics of every finished model run in a store (the scores, with
    intervals); the experiment's summary run holds figures, not scores."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{store}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return {r.info.run_name: dict(r.data.metrics) for r in runs
            if r.info.status == "FINISHED" and r.data.tags.get("gestalt.summary") != "true"}


@pytest.mark.timeout(3 * 1800)  # a quick run of about 5 min idle in the image (bare metal's is shared)
def test_quick_recipe_offline_as_the_user_equals_bare_metal(tmp_path, quick_run):
    ws = user_folder(tmp_path)
    done = run_image("recipe", "quick.yaml", "--runtime.progress=false", workspace=ws)
    assert done.returncode == 0, done.stderr[-3000:]
    # said once, whichever way it learnt there is no GPU (no driver in the container, or torch)
    assert re.search(r"device auto: (no GPU driver on this machine|no CUDA GPU visible to torch); "
                     r"running on the CPU", done.stderr), done.stderr[-3000:]
    assert "huggingface.co" not in done.stderr
    made = [p for p in ws.rglob("*")]
    assert (ws / "mlflow.db").is_file() and list((ws / "outputs" / "quick").rglob("*.jsonl")), made
    assert {(p.stat().st_uid, p.stat().st_gid) for p in made} == {(UID, UID)}

    bare = quick_run.folder
    in_image, on_metal = scores(ws / "mlflow.db"), scores(bare / "mlflow.db")
    assert set(in_image) == set(on_metal) and len(on_metal) == 3
    for run, metrics in on_metal.items():
        assert in_image[run] == pytest.approx(metrics, rel=1e-9, abs=1e-12), run


@pytest.mark.timeout(3 * 600)  # six small models at small task sizes: about 4 min idle on 2 cores
def test_loaders_recipe_offline_as_the_user_on_the_read_only_hub_cache(tmp_path):
    """One model of each full.yaml loader kind, from the hub cache baked at build time, run as the
    image's user with no network: every battery finishes with scores, each open VLM answers through
    its own processor and chat template, and huggingface_hub, reading a cache it does not own and
    cannot write, warns about nothing (an owner-only file would be "Ignoring corrupted tree cache
    file ... Permission denied" on every load)."""
    recipe = load_recipe(REPO / "recipes" / "loaders.yaml")
    models = [m.id for m in recipe.models]
    cache = run_image("-c", "import os; h = os.environ['HF_HOME'] + '/hub'; "
                      "print(os.path.isdir(h) and sorted(os.listdir(h)), os.access(h, os.W_OK))",
                      entrypoint="python", timeout=300)
    assert cache.returncode == 0 and cache.stdout.strip().endswith("False"), cache.stdout + cache.stderr
    if "models--llava-hf--llava-1.5-7b-hf" not in cache.stdout and not os.environ.get("CI"):
        pytest.skip("the image holds no loaders.yaml weights (built without --recipe recipes/loaders.yaml)")

    ws = user_folder(tmp_path)
    done = run_image("recipe", "loaders.yaml", *SMALL, workspace=ws)
    assert done.returncode == 0, done.stderr[-4000:]
    for sign in ("Ignoring corrupted", "Permission denied", "huggingface.co", "Traceback"):
        assert sign not in done.stderr, done.stderr[-4000:]
    assert [line for line in done.stderr.splitlines() if "warn" in line.lower()] == []
    finished = scores(ws / "mlflow.db")
    assert sorted(finished) == sorted(models) and all(finished.values()), (finished.keys(), done.stderr[-4000:])
    off = []
    for model_id in [m.id for m in recipe.models if m.source == "hf-vlm"]:  # stand-ins answer ANSWER
        records = [json.loads(line) for path in (ws / "outputs" / "loaders" / model_id / "records").glob("*.jsonl")
                   for line in path.read_text().splitlines()]
        off += [f"{model_id}: {r.get('raw_output')!r} {r.get('parse_status')}" for r in records
                if r.get("raw_output") != hub_standins.ANSWER or r.get("parse_status") != "ok"] or \
            ([] if records else [f"{model_id}: no records"])
    assert off == []


def test_hub_stays_offline_in_the_image():
    done = run_image("-c", "import huggingface_hub.constants as c; print(c.HF_HUB_OFFLINE)",
                     entrypoint="python", timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_help_tasks_recipes_and_a_bad_recipe_in_the_image(tmp_path):
    help_ = run_image("--help", timeout=300)
    assert help_.returncode == 0 and "recipe" in help_.stdout + help_.stderr, help_.stderr  # fire: stderr
    tasks = run_image("tasks", timeout=300)
    assert tasks.returncode == 0 and "closure.nat.silhouette" in tasks.stdout, tasks.stderr
    recipes = run_image("recipes", timeout=300)
    assert recipes.returncode == 0 and "quick  " in recipes.stdout, recipes.stderr
    ws = user_folder(tmp_path)
    quick = (REPO / "recipes" / "quick.yaml").read_text()
    (ws / "bad.yaml").write_text(quick.replace("\nseed: 0\n", "\nsed: 0\n"))  # a typo
    bad = run_image("recipe", "bad.yaml", workspace=ws, timeout=300)
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.startswith("gestalt: error:") and bad.stderr.count("\n") == 1, bad.stderr
    assert "bad.yaml" in bad.stderr and "sed" in bad.stderr


def machine_files() -> dict[str, Path]:
    """sha256 -> the build machine's files that must never be in a layer: pip's configuration
    files, the CA bundle and constraints they name, the local wheels."""
    named = [Path("/etc/pip.conf"), Path("/etc/xdg/pip/pip.conf"), Path("/etc/xdg/pip/constraints.txt"),
             Path.home() / ".config/pip/pip.conf", Path.home() / ".pip/pip.conf"]
    for var in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CONFIG_FILE"):
        if os.environ.get(var):
            named.append(Path(os.environ[var]))
    for folder in (Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels")),):
        if folder.is_dir():
            named += sorted(p for p in folder.iterdir() if p.is_file() and p.stat().st_size < 1 << 28)
    return {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in named if p.is_file()}


MACHINE_DIRS = ("opt/wheels/", "opt/pypi/", "opt/pypi-more/", "etc/xdg/pip/", "run/secrets/")


def test_no_machine_file_in_any_layer():
    """Every layer of the saved image, read as a stream: no file of the build machine by path
    (pip config, secrets, local wheel folders) or by content (same size, same sha256)."""
    secrets = machine_files()
    sizes = {p.stat().st_size for p in secrets.values()}
    assert secrets, "this machine has no pip configuration or CA bundle to look for"
    base, _ = podman()
    save = subprocess.Popen([*base, "save", "--format", "docker-archive", IMAGE], stdout=subprocess.PIPE)
    found, layers, files = [], 0, 0
    with tarfile.open(fileobj=save.stdout, mode="r|") as archive:
        for member in archive:
            if not (member.isfile() and member.name.endswith(".tar")):  # legacy names link to layers
                continue
            layers += 1
            with tarfile.open(fileobj=archive.extractfile(member), mode="r|") as layer:
                for entry in layer:
                    name = entry.name.lstrip("./")
                    files += entry.isfile()
                    if name in ("etc/pip.conf",) or name.startswith(MACHINE_DIRS) and entry.isfile():
                        found.append(f"{member.name}: {name}")
                    elif entry.isfile() and entry.size in sizes:
                        digest = hashlib.sha256(layer.extractfile(entry).read()).hexdigest()
                        if digest in secrets:
                            found.append(f"{member.name}: {name} = {secrets[digest]}")
    assert save.wait() == 0
    assert layers >= 3 and files > 1000, (layers, files)
    assert found == []
