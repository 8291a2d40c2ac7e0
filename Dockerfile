# syntax=docker/dockerfile:1
# olu-worker image: the wheel built from this tree, installed into python:3.11-slim, run as uid 10001.
#   docker build -t olu-worker:0.1.0 .
#   docker run --rm olu-worker:0.1.0 --help
# The install path (build the wheel, install only the wheel, run the entry point) is checked
# without a Docker engine by tests/test_install.py.

ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------- builder: the wheel only
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# Exactly what the wheel is built from (.dockerignore keeps everything else out of the context).
COPY pyproject.toml README.md ./
COPY worker ./worker
RUN python -m pip wheel --no-deps --wheel-dir /dist .

# ---------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    NUMBA_CACHE_DIR=/tmp/numba

RUN groupadd --system --gid 10001 olu \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin olu \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/olu-worker

# Only the wheel (and its dependencies from the package index); no source tree, no tests.
RUN --mount=type=bind,from=builder,source=/dist,target=/dist \
    python -m pip install /dist/olu_worker-*.whl

# A relative file:// state URL (the worker's default) lands here when run outside Kubernetes;
# the Helm chart uses s3:// with a read-only root filesystem and an emptyDir at /tmp.
WORKDIR /var/lib/olu-worker
USER 10001:10001

# /metrics, /healthz, /readyz
EXPOSE 9464

ENTRYPOINT ["olu-worker"]
CMD ["run"]
