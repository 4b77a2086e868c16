# syntax=docker/dockerfile:1.10
# gestalt image: the pinned stack, source data and model weights baked in; runs offline.
#   docker build -t gestalt .
#   docker run --gpus all --ipc=host -v "$PWD:/workspace" gestalt recipe /opt/gestalt/recipes/full.yaml
# PyPI's Linux torch wheel ships the CUDA user-space libraries itself, so a plain Python base is
# enough; the host needs only the NVIDIA driver and the NVIDIA Container Toolkit.
# Builder and runtime must share this image: /opt/venv's interpreter is a link into it.
# Pin it by digest for releases (python:3.11-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
# Same script and variables as a bare-metal install (docker/install.sh), minus dev extras and -e.
ENV GESTALT_VENV=/opt/venv GESTALT_EXTRAS="" GESTALT_EDITABLE=0 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY docker/install.sh docker/
COPY harness harness/
RUN --mount=type=cache,target=/root/.cache/pip \
    bash docker/install.sh env

FROM builder AS assets
ENV HF_HOME=/opt/gestalt/cache/hf TORCH_HOME=/opt/gestalt/cache/torch \
    GESTALT_CLIP_CACHE=/opt/gestalt/cache/clip GESTALT_DATA=/opt/gestalt/data
COPY recipes recipes/
# Gated hub repos: docker build --secret id=hf_token,env=HF_TOKEN ... (never lands in a layer).
RUN --mount=type=secret,id=hf_token,env=HF_TOKEN \
    install -d /opt/gestalt && bash docker/install.sh assets

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="gestalt" \
      org.opencontainers.image.description="Does a vision model see like a person?"
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin gestalt && \
    install -d -o 10001 -g 10001 /workspace
COPY --from=builder /opt/venv /opt/venv
# Weights and data stay root-owned: read-only for the runtime user.
COPY --from=assets /opt/gestalt /opt/gestalt
# Shipped recipes: docker run ... gestalt recipe /opt/gestalt/recipes/full.yaml
COPY recipes /opt/gestalt/recipes
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PAGER=cat \
    HF_HOME=/opt/gestalt/cache/hf TORCH_HOME=/opt/gestalt/cache/torch \
    GESTALT_CLIP_CACHE=/opt/gestalt/cache/clip GESTALT_DATA=/opt/gestalt/data \
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    MLFLOW_TRACKING_URI=sqlite:////workspace/mlflow.db
USER 10001:10001
WORKDIR /workspace
ENTRYPOINT ["gestalt"]
CMD ["--help"]
