#!/usr/bin/env bash
# Build the gestalt image: `docker build` where a Docker engine answers, else Debian's buildah.
#
# Usage: bash docker/build.sh [--tag NAME] [--recipe FILE]... [--hub URL] [--mirror DIR] [--base IMAGE]
#   --tag     image name (default gestalt; $GESTALT_IMAGE)
#   --recipe  recipe whose model weights are baked, repeatable (default recipes/full.yaml)
#   --hub     model hub the weights come from: a cluster's mirror (default $HF_ENDPOINT, else
#             huggingface.co); used at build time only, the image itself stays offline
#   --mirror  source-data mirror folder baked into the image (default $GESTALT_MIRROR, else
#             ../shared/sources beside the checkout when present, else the releases' URLs)
#   --base    Python base image (default python:3.11-slim-bookworm; where it cannot be pulled,
#             a local Debian bookworm base is made with debootstrap and used instead)
#
# The machine's pip configuration (`pip config list`) and CA bundle reach the RUN steps as build
# secrets, the local folders and files they name as read-only bind mounts: none of them is in any
# layer (tests/test_image.py lists every layer and checks). Layers are cached between builds
# (buildah --layers; pip's cache is a cache mount), so a rebuild redoes only what changed.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

TAG=${GESTALT_IMAGE:-gestalt}
RECIPES=()
HUB=${HF_ENDPOINT:-}
MIRROR=${GESTALT_MIRROR:-}
BASE=python:3.11-slim-bookworm
LOCAL_BASE=localhost/gestalt-base:bookworm
PYTHON=${GESTALT_PYTHON:-python3}

die() {
  echo "build.sh: $*" >&2
  exit 1
}

while (($#)); do
  case $1 in
    --tag) TAG=$2; shift 2 ;;
    --recipe) RECIPES+=("$2"); shift 2 ;;
    --hub) HUB=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --base) BASE=$2; shift 2 ;;
    -h | --help) sed -n '4,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
((${#RECIPES[@]})) || RECIPES=(recipes/full.yaml)
for recipe in "${RECIPES[@]}"; do
  [[ -f $recipe ]] || die "recipe $recipe not found"
  [[ $recipe != *" "* ]] || die "recipe path '$recipe' has a space (the build names recipes in one argument)"
done
if [[ -z $MIRROR && -d $REPO/../shared/sources ]]; then
  MIRROR=$REPO/../shared/sources
fi
[[ -z $MIRROR || -d $MIRROR ]] || die "mirror $MIRROR is not a folder"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gestalt-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/empty"

# One pip.conf from everything pip reads here (files and PIP_* variables), with the CA bundle as
# a secret; every absolute path it names is bind-mounted read-only at the same place.
"$PYTHON" - "$WORK" <<'EOF'
import configparser, os, re, subprocess, sys
work = sys.argv[1]
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
conf = configparser.ConfigParser(interpolation=None)
conf["global"] = {}
cert = ""
for line in out.splitlines():
    m = re.match(r"^(?::env:|[\w-]+)\.([\w-]+)='(.*)'$", line)
    if m:
        key, value = m.groups()
        if key == "cert":
            cert = value
            continue
        if key == "constraint":  # a file: a secret too (a bind-mounted file leaves its mount point)
            with open(value, "rb") as src, open(os.path.join(work, "constraints"), "wb") as dst:
                dst.write(src.read())
            value = "/run/secrets/pip-constraints.txt"
        conf["global"][key] = value
with open(os.path.join(work, "pip.conf"), "w") as f:
    conf.write(f)
paths = set()
for value in conf["global"].values():
    for word in value.split():
        path = word.removeprefix("file://")
        if path.startswith("/") and os.path.isdir(path):
            path = os.path.realpath(path)
            # a local PEP 503 index (.../simple) links to its wheels beside it
            paths.add(os.path.dirname(path) if os.path.basename(path) == "simple" else path)
with open(os.path.join(work, "mounts"), "w") as f:
    f.write("".join(f"{p}\n" for p in sorted(paths)))
if not os.path.exists(os.path.join(work, "constraints")):
    open(os.path.join(work, "constraints"), "w").close()
with open(os.path.join(work, "cert"), "w") as f:
    f.write(cert or os.environ.get("SSL_CERT_FILE", ""))
EOF
CERT=$(cat "$WORK/cert")
[[ -n $CERT && -f $CERT ]] || { CERT=$WORK/no-ca; : >"$CERT"; }
mapfile -t MOUNTS <"$WORK/mounts"
HF_TOKEN_FILE=$WORK/hf_token
(umask 077; printf '%s' "${HF_TOKEN:-}" >"$HF_TOKEN_FILE")

args=(
  --tag "$TAG"
  --build-arg "GESTALT_FETCH_RECIPE=${RECIPES[*]}"
  --build-context "mirror=${MIRROR:-$WORK/empty}"
  --secret "id=pip_conf,src=$WORK/pip.conf"
  --secret "id=ca_bundle,src=$CERT"
  --secret "id=pip_constraints,src=$WORK/constraints"
  --secret "id=hf_token,src=$HF_TOKEN_FILE"
)

# The hub reaches only the weight-baking step (HF_ENDPOINT there); a hub on this machine's loopback
# needs the build to share its network (buildah's chroot isolation does; docker needs --network host).
hub_network=()
if [[ -n $HUB ]]; then
  args+=(--build-arg "HF_ENDPOINT=$HUB")
  [[ $HUB =~ ^https?://(127\.|localhost[:/]|\[::1\]) ]] && hub_network=(--network host)
fi

start=$SECONDS
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  # BuildKit has no per-build bind mounts of host folders: local wheel folders need buildah.
  ((${#MOUNTS[@]} == 0)) || echo "build.sh: docker cannot mount ${MOUNTS[*]}; pip uses the index only" >&2
  DOCKER_BUILDKIT=1 docker build "${hub_network[@]}" --build-arg "PYTHON_IMAGE=$BASE" "${args[@]}" .
else
  if ! command -v buildah >/dev/null; then
    echo "build.sh: no Docker engine; installing Debian's buildah" >&2
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends buildah podman debootstrap \
      fuse-overlayfs uidmap runc
  fi
  # overlay where the kernel allows it: vfs copies the whole tree for every layer.
  export STORAGE_DRIVER=${STORAGE_DRIVER:-overlay}
  if [[ $BASE == python:3.11-slim-bookworm ]] && ! buildah pull --quiet "docker.io/library/$BASE" >/dev/null 2>&1; then
    if ! buildah inspect --type image "$LOCAL_BASE" >/dev/null 2>&1; then
      command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap
      echo "build.sh: $BASE cannot be pulled; making $LOCAL_BASE with debootstrap" >&2
      rootfs=$WORK/rootfs
      debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,passwd \
        bookworm "$rootfs" http://deb.debian.org/debian
      rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
      ctr=$(buildah from scratch)
      buildah copy --quiet "$ctr" "$rootfs" / >/dev/null
      buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd python3 "$ctr"
      buildah commit --quiet --rm "$ctr" "$LOCAL_BASE" >/dev/null
      rm -rf "$rootfs"
    fi
    BASE=$LOCAL_BASE
  fi
  args+=(--build-arg "PYTHON_IMAGE=$BASE")
  for path in "${MOUNTS[@]}"; do
    args+=(--volume "$path:$path:ro")
  done
  previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$TAG" 2>/dev/null || true)
  buildah build --layers --isolation chroot "${args[@]}" .
  current=$(buildah inspect --type image --format '{{.FromImageID}}' "$TAG")
  # The image this build replaced goes; the cached steps stay (`buildah rmi --prune` would drop
  # them, and with them the torch layer every later build reuses).
  if [[ -n $previous && $previous != "$current" ]]; then
    buildah rmi "$previous" >/dev/null 2>&1 || true
  fi
fi
seconds=$((SECONDS - start))
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  size=$(docker image inspect --format '{{.Size}}' "$TAG")
  store=$(docker info --format '{{.DockerRootDir}}')
else
  size=$(podman image inspect --format '{{.Size}}' "$TAG")
  store=$(buildah info --format '{{.store.GraphRoot}}')
fi
echo "build.sh: built $TAG in $seconds s; image $((size / 1000000)) MB; $store holds $(du -shx "$store" | cut -f1)"
