# the-loop: one image for the webhook receiver (default command) and the RQ worker (with
# Node.js and Mermaid's parser, for lint-artifacts), and a second one (target `runner`)
# for the harness runner, which adds git, Node.js and the harness CLIs.
#
#   docker build -t the-loop:0.1.0 .
#   docker build --target runner -t the-loop-runner:0.1.0 .
#   docker run -p 8080:8080 -e THE_LOOP_WEBHOOK_SECRET=... -e REDIS_URL=... the-loop:0.1.0
#   docker run -e REDIS_URL=... -e THE_LOOP_GITHUB_APP_ID=... ... the-loop:0.1.0 the-loop worker
#   docker run -e REDIS_URL=... -e THE_LOOP_HARNESS=claude-code -e ANTHROPIC_API_KEY=... \
#     -v loop-work:/var/lib/the-loop ... the-loop-runner:0.1.0
#
# Every Python stage uses the same base image, so the virtual environment built in the
# first one (whose interpreter links to /usr/local/bin/python3.11) runs unchanged in the
# receiver/worker image and in the runner image: the same package in both.
# The build context is an allowlist (.dockerignore): only what `pip install .` needs.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# Node.js for the harness CLIs: the official image of the same Debian release as the
# Python base (bookworm), so its binary runs there. Debian's own nodejs is 18 on bookworm
# (20 on trixie), below what @anthropic-ai/claude-code requires (engines: node >= 22).
ARG NODE_IMAGE=node:22-bookworm-slim
# The harness CLIs, pinned. harness.version (runner.harness.version in the chart) must be
# the version these print with --version; bump both together.
ARG CLAUDE_CODE_VERSION=2.1.332
ARG CODEX_VERSION=0.171.0

# The dashboard draws graphs with Mermaid's browser build, from the npm package pinned in
# tools/mermaid (the same pin as `make venv`), installed without scripts; only that one
# file goes on, into the virtual environment, where the receiver serves it from
# (<venv>/mermaid, as `make venv` lays it out). Nothing is fetched at run time.
FROM ${NODE_IMAGE} AS dashboard
ENV NPM_CONFIG_UPDATE_NOTIFIER=false
WORKDIR /mermaid
COPY tools/mermaid/package.json tools/mermaid/package-lock.json tools/mermaid/.npmrc ./
RUN npm ci --no-audit --no-fund --ignore-scripts --loglevel=error \
 && test -s node_modules/mermaid/dist/mermaid.min.js

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
COPY --from=dashboard /mermaid/node_modules/mermaid/dist/mermaid.min.js \
     /opt/the-loop/mermaid/node_modules/mermaid/dist/mermaid.min.js

# The harness CLIs from npm, into their own prefix (/opt/harness), with no install scripts
# run (--ignore-scripts). Each package ships its native binary as an optional dependency
# for the build's platform. @openai/codex has no install script; @anthropic-ai/claude-code
# has one, install.cjs, which copies that native binary over its bin/claude.exe
# placeholder: it is run explicitly, from the pinned package, and no other script is.
# claude-code >= 2.1.198 declares Node >= 22 (a plain npm install on Node 20 falls back
# to 2.1.197), yet the copied native binary needs no Node: `make venv` installs the same
# pins this way under Debian's Node 20 (tools/agents/).
FROM ${NODE_IMAGE} AS harness
ARG CLAUDE_CODE_VERSION
ARG CODEX_VERSION
ENV NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    NPM_CONFIG_AUDIT=false
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN npm install --global --prefix /opt/harness --ignore-scripts \
      "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" "@openai/codex@${CODEX_VERSION}" \
 && node /opt/harness/lib/node_modules/@anthropic-ai/claude-code/install.cjs \
 && HOME=/tmp /opt/harness/bin/claude --version | grep -F "${CLAUDE_CODE_VERSION}" \
 && HOME=/tmp /opt/harness/bin/codex --version | grep -F "${CODEX_VERSION}" \
 && npm cache clean --force \
 && rm -rf /tmp/.claude* /tmp/.codex

# Mermaid's parser for lint-artifacts' diagram checks (the shipped graph's design node):
# the npm packages pinned by tools/mermaid/package-lock.json, installed with npm ci and no
# install scripts, on the same Node.js image as the harness CLIs. The worker image gets
# them at /opt/the-loop/mermaid (<venv>/mermaid, where the hook looks) and Node's binary.
FROM ${NODE_IMAGE} AS mermaid
ENV NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    NPM_CONFIG_AUDIT=false
WORKDIR /opt/mermaid
COPY tools/mermaid/package.json tools/mermaid/package-lock.json tools/mermaid/.npmrc ./
RUN npm ci --ignore-scripts --omit=dev \
 && test -f node_modules/mermaid/package.json \
 && test -f node_modules/linkedom/package.json \
 && npm cache clean --force

# The runner: `the-loop runner` runs agent turns (RQ queue <queue>-turns). git for the
# per-work-item checkouts, tmux for runner.mode tmux, tini as PID 1 so that processes a
# harness leaves behind are reaped (a zombie would otherwise keep its process group alive).
FROM ${PYTHON_IMAGE} AS runner
ARG CLAUDE_CODE_VERSION
ARG CODEX_VERSION
LABEL org.opencontainers.image.title="the-loop-runner" \
      org.opencontainers.image.description="the-loop's harness runner: agent turns with Claude Code or Codex" \
      org.opencontainers.image.licenses="MIT" \
      io.the-loop.harness.claude-code="${CLAUDE_CODE_VERSION}" \
      io.the-loop.harness.codex="${CODEX_VERSION}"
# Debian's packages of the base image's release, with its security updates: the release
# is pinned by PYTHON_IMAGE, not each package (old package versions leave the mirror).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git libstdc++6 tini tmux \
 && rm -rf /var/lib/apt/lists/*
# The same uid/gid as the receiver/worker image. HOME is the harness's home (Claude Code
# keeps its session transcripts under ~/.claude/projects); the workspaces hold one git
# checkout per work item. Both are volumes: writable with a read-only root filesystem.
RUN groupadd --system --gid 10001 the-loop \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /var/lib/the-loop/home --shell /usr/sbin/nologin the-loop \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/the-loop \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/the-loop/home /var/lib/the-loop/workspaces
COPY --from=harness /usr/local/bin/node /usr/local/bin/node
COPY --from=harness /opt/harness /opt/harness
COPY --from=builder /opt/the-loop /opt/the-loop
RUN ln -s /opt/harness/bin/claude /usr/local/bin/claude \
 && ln -s /opt/harness/bin/codex /usr/local/bin/codex
ENV PATH=/opt/the-loop/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/the-loop/home \
    THE_LOOP_WORKSPACE_DIR=/var/lib/the-loop/workspaces \
    DISABLE_AUTOUPDATER=1
VOLUME ["/var/lib/the-loop/home", "/var/lib/the-loop/workspaces"]
WORKDIR /var/lib/the-loop/workspaces
USER 10001:10001
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["the-loop", "runner"]

# The receiver and the worker: the default target (the last stage).
FROM ${PYTHON_IMAGE} AS app
LABEL org.opencontainers.image.title="the-loop" \
      org.opencontainers.image.description="Self-hosted GitHub App: webhook receiver and RQ worker" \
      org.opencontainers.image.licenses="MIT"
# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 the-loop \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin the-loop
COPY --from=builder /opt/the-loop /opt/the-loop
# Node.js and Mermaid's parser: the worker runs lint-artifacts' diagram checks.
COPY --from=mermaid /usr/local/bin/node /usr/local/bin/node
COPY --from=mermaid /opt/mermaid/node_modules /opt/the-loop/mermaid/node_modules
ENV PATH=/opt/the-loop/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PORT=8080
WORKDIR /tmp
USER 10001:10001
EXPOSE 8080
# The receiver (gunicorn). Run the worker from the same image with: the-loop worker
CMD ["the-loop", "serve"]
