#!/usr/bin/env bash
# Run the team's MLflow tracking server. Settings come from the environment, then from
# mlflow/server.env (copy server.env.example); a variable already set in the environment wins.
# Extra arguments go to `mlflow server` unchanged (e.g. --allowed-hosts mlflow.lab.example).
#
#   GESTALT_MLFLOW_ENV_FILE   settings file (default mlflow/server.env; empty = none)
#   GESTALT_MLFLOW_DATA       state directory for the defaults below
#                             (default ${XDG_DATA_HOME:-~/.local/share}/gestalt/mlflow)
#   GESTALT_MLFLOW_BACKEND    backend store (default sqlite:///$GESTALT_MLFLOW_DATA/mlflow.db;
#                             teams: postgresql+psycopg2://user:password@host:5432/mlflow)
#   GESTALT_MLFLOW_ARTIFACTS  artifact destination, served through the server
#                             (default $GESTALT_MLFLOW_DATA/artifacts; or s3://bucket/prefix)
#   GESTALT_MLFLOW_HOST       interface to bind (default 127.0.0.1; 0.0.0.0 for a team)
#   GESTALT_MLFLOW_PORT       port (default 5000)
#   GESTALT_MLFLOW_WORKERS    worker processes (default 1)
#   GESTALT_MLFLOW_BIN        mlflow executable (default .venv/bin/mlflow, else mlflow on PATH)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SETTINGS=(GESTALT_MLFLOW_DATA GESTALT_MLFLOW_BACKEND GESTALT_MLFLOW_ARTIFACTS GESTALT_MLFLOW_HOST
  GESTALT_MLFLOW_PORT GESTALT_MLFLOW_WORKERS GESTALT_MLFLOW_BIN)

die() {
  echo "serve.sh: $*" >&2
  exit 1
}

load_env_file() {
  local file=$1 name
  local -A caller=()
  [[ -n $file ]] || return 0
  if [[ ! -f $file ]]; then
    [[ $file == "$REPO/mlflow/server.env" ]] && return 0 # the default file is optional
    die "settings file $file not found (GESTALT_MLFLOW_ENV_FILE)"
  fi
  for name in "${SETTINGS[@]}"; do
    [[ -v $name ]] && caller[$name]=${!name}
  done
  # shellcheck disable=SC1090  # the file is chosen at run time
  source "$file"
  for name in "${!caller[@]}"; do
    printf -v "$name" '%s' "${caller[$name]}"
  done
}

load_env_file "${GESTALT_MLFLOW_ENV_FILE-$REPO/mlflow/server.env}"

data=${GESTALT_MLFLOW_DATA:-${XDG_DATA_HOME:-$HOME/.local/share}/gestalt/mlflow}
backend=${GESTALT_MLFLOW_BACKEND:-sqlite:///$data/mlflow.db}
artifacts=${GESTALT_MLFLOW_ARTIFACTS:-$data/artifacts}
mlflow_bin=${GESTALT_MLFLOW_BIN:-}
if [[ -z $mlflow_bin ]]; then
  mlflow_bin=$REPO/.venv/bin/mlflow
  [[ -x $mlflow_bin ]] || mlflow_bin=$(command -v mlflow) ||
    die "no mlflow executable: run 'bash docker/install.sh dev' or set GESTALT_MLFLOW_BIN"
fi

case $backend in
  postgresql://*)
    # SQLAlchemy 2 maps a bare postgresql:// to psycopg 3, which is not installed.
    die "use postgresql+psycopg2://... for GESTALT_MLFLOW_BACKEND (got a bare postgresql:// URI)" ;;
  sqlite:///*) mkdir -p "$(dirname "${backend#sqlite:///}")" ;;
esac
[[ $artifacts == *://* ]] || mkdir -p "$artifacts"

# Background jobs serve MLflow's GenAI features (judges, trace roll-ups), which gestalt does not
# use; off by default, they would add seven worker processes.
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}
# MLflow's usage telemetry (posted to its servers) stays off unless the caller turns it on.
export MLFLOW_DISABLE_TELEMETRY=${MLFLOW_DISABLE_TELEMETRY:-true}
# Through the environment, not argv: a PostgreSQL URI carries a password that `ps` would show.
export MLFLOW_BACKEND_STORE_URI=$backend
# exec: the server keeps this script's PID and process group, so callers can stop it by PID.
exec "$mlflow_bin" server \
  --serve-artifacts --artifacts-destination "$artifacts" \
  --host "${GESTALT_MLFLOW_HOST:-127.0.0.1}" \
  --port "${GESTALT_MLFLOW_PORT:-5000}" \
  --workers "${GESTALT_MLFLOW_WORKERS:-1}" \
  "$@"
