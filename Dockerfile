# syntax=docker/dockerfile:1.10
# gestalt image: the pinned stack, source data and model weights baked in; runs offline.
#   bash docker/build.sh                      (Docker where an engine runs, else buildah; see docs/docker.md)
#   docker run --gpus all --ipc=host -v "$PWD:/workspace" gestalt recipe full.yaml
# PyPI's Linux torch wheel ships the CUDA user-space libraries itself, so a plain Python base is
# enough; the host needs only the NVIDIA driver and the NVIDIA Container Toolkit.
# Pin it by digest for releases (python:3.11-slim-bookworm@sha256:...). docker/build.sh passes a
# local debootstrap base here where the official one cannot be pulled.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS deps
# Same script and variables as a bare-metal install (docker/install.sh), minus dev extras and -e.
ENV GESTALT_VENV=/opt/venv GESTALT_EXTRAS="" GESTALT_EDITABLE=0 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml ./
COPY docker/install.sh docker/
# The heavy layer (torch with its CUDA libraries), cached until pyproject.toml or install.sh change.
# The build machine's pip configuration and CA bundle are secrets (empty when it has none), and the
# local wheel folders they name are bind mounts (docker/build.sh): none of them lands in a layer.
RUN --mount=type=cache,id=gestalt-pip,target=/root/.cache/pip \
    --mount=type=secret,id=pip_conf,target=/run/secrets/pip.conf \
    --mount=type=secret,id=ca_bundle,target=/run/secrets/ca.crt \
    --mount=type=secret,id=pip_constraints,target=/run/secrets/pip-constraints.txt \
    if [ -s /run/secrets/pip.conf ]; then export PIP_CONFIG_FILE=/run/secrets/pip.conf; fi && \
    if [ -s /run/secrets/ca.crt ]; then export PIP_CERT=/run/secrets/ca.crt; fi && \
    bash docker/install.sh deps

FROM deps AS builder
COPY README.md ./
COPY harness harness/
# harness/shipped_recipes links here: the recipes ship as package data (`gestalt recipe full.yaml`).
COPY recipes recipes/
# Dependencies are in place: this adds the project alone (seconds, a small layer).
RUN --mount=type=cache,id=gestalt-pip,target=/root/.cache/pip \
    --mount=type=secret,id=pip_conf,target=/run/secrets/pip.conf \
    --mount=type=secret,id=ca_bundle,target=/run/secrets/ca.crt \
    --mount=type=secret,id=pip_constraints,target=/run/secrets/pip-constraints.txt \
    if [ -s /run/secrets/pip.conf ]; then export PIP_CONFIG_FILE=/run/secrets/pip.conf; fi && \
    if [ -s /run/secrets/ca.crt ]; then export PIP_CERT=/run/secrets/ca.crt; fi && \
    bash docker/install.sh env

FROM builder AS assets
ENV HF_HOME=/opt/gestalt/cache/hf TORCH_HOME=/opt/gestalt/cache/torch \
    GESTALT_CLIP_CACHE=/opt/gestalt/cache/clip GESTALT_DATA=/opt/gestalt/data
# Whose weights are baked (one recipe or several, space-separated): docker/build.sh --recipe FILE.
ARG GESTALT_FETCH_RECIPE=recipes/full.yaml
# The hub they come from, for this step only (docker/build.sh --hub URL: a cluster's mirror, or
# CI's local hub of stand-ins); unset, huggingface.co. The runtime stage never sees it.
ARG HF_ENDPOINT=""
# Source data comes from a mirror folder given at build time (--build-context mirror=DIR) when
# it holds files, else by URL; either way every file is sha256-checked into GESTALT_DATA.
# Gated hub repos: --secret id=hf_token,src=FILE (never lands in a layer). The chmod: huggingface_hub
# writes some cache files owner-only, which the runtime user (not their owner) could not read.
RUN --mount=type=bind,from=mirror,target=/mnt/mirror \
    --mount=type=secret,id=hf_token,target=/run/secrets/hf_token \
    --mount=type=secret,id=ca_bundle,target=/run/secrets/ca.crt \
    if [ -n "$(ls -A /mnt/mirror)" ]; then export GESTALT_MIRROR=/mnt/mirror; fi && \
    if [ -s /run/secrets/hf_token ]; then HF_TOKEN=$(cat /run/secrets/hf_token); export HF_TOKEN; fi && \
    if [ -s /run/secrets/ca.crt ]; then export SSL_CERT_FILE=/run/secrets/ca.crt; fi && \
    if [ -z "$HF_ENDPOINT" ]; then unset HF_ENDPOINT; fi && \
    install -d /opt/gestalt && bash docker/install.sh assets && \
    chmod -R a+rX /opt/gestalt

# On top of the builder, not a copy of its venv: the multi-GB torch layer is stored once and stays
# cached between builds.
FROM builder AS runtime
LABEL org.opencontainers.image.title="gestalt" \
      org.opencontainers.image.description="Does a vision model see like a person?"
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin gestalt && \
    install -d -o 10001 -g 10001 /workspace
# Weights and data stay root-owned: read-only for the runtime user.
COPY --from=assets /opt/gestalt /opt/gestalt
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PAGER=cat \
    HF_HOME=/opt/gestalt/cache/hf TORCH_HOME=/opt/gestalt/cache/torch \
    GESTALT_CLIP_CACHE=/opt/gestalt/cache/clip GESTALT_DATA=/opt/gestalt/data \
    GESTALT_OFFLINE=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    MLFLOW_TRACKING_URI=sqlite:////workspace/mlflow.db
USER 10001:10001
WORKDIR /workspace
ENTRYPOINT ["gestalt"]
CMD ["--help"]
