# the-loop: one image for the webhook receiver (default command) and the RQ worker.
#
#   docker build -t the-loop:0.1.0 .
#   docker run -p 8080:8080 -e THE_LOOP_WEBHOOK_SECRET=... -e REDIS_URL=... the-loop:0.1.0
#   docker run -e REDIS_URL=... -e THE_LOOP_GITHUB_APP_ID=... ... the-loop:0.1.0 the-loop worker
#
# Both stages use the same base image, so the virtual environment built in the first one
# (whose interpreter links to /usr/local/bin/python3.11) runs unchanged in the second.
# The build context is an allowlist (.dockerignore): only what `pip install .` needs.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/the-loop
WORKDIR /src
COPY . .
# Every dependency ships wheels for CPython 3.11 on Linux, so no compiler is needed here
# either; the final stage gets only the finished virtual environment.
RUN /opt/the-loop/bin/pip install --no-cache-dir . \
 && /opt/the-loop/bin/the-loop --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="the-loop" \
      org.opencontainers.image.description="Self-hosted GitHub App: webhook receiver and RQ worker" \
      org.opencontainers.image.licenses="MIT"
# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 the-loop \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin the-loop
COPY --from=builder /opt/the-loop /opt/the-loop
ENV PATH=/opt/the-loop/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PORT=8080
WORKDIR /tmp
USER 10001:10001
EXPOSE 8080
# The receiver (gunicorn). Run the worker from the same image with: the-loop worker
CMD ["the-loop", "serve"]
