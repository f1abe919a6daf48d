#!/usr/bin/env bash
# `make run`: start Redis if it is not answering, then the webhook receiver (gunicorn)
# and one RQ worker. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

if ! redis-cli ping >/dev/null 2>&1; then
  echo "the-loop: Redis is not answering; starting redis-server"
  redis-server --daemonize yes --save "" --appendonly no
  for _ in $(seq 1 50); do redis-cli ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

if [ -z "${THE_LOOP_WEBHOOK_SECRET:-}" ]; then
  mkdir -p .dev
  [ -s .dev/webhook-secret ] || "$BIN/python" -c 'import secrets; print(secrets.token_hex(32))' > .dev/webhook-secret
  THE_LOOP_WEBHOOK_SECRET=$(cat .dev/webhook-secret)
  export THE_LOOP_WEBHOOK_SECRET
  echo "the-loop: THE_LOOP_WEBHOOK_SECRET not set; using the development secret in .dev/webhook-secret"
fi

if [ -z "${THE_LOOP_GITHUB_APP_ID:-}${GH_TOKEN:-}${GITHUB_TOKEN:-}${THE_LOOP_GITHUB_TRANSPORT:-}" ] \
   && ! command -v gh >/dev/null 2>&1; then
  # No way to reach GitHub: say so, and run the worker acknowledge-only (explicit `none`).
  export THE_LOOP_GITHUB_TRANSPORT=none
  echo "the-loop: no GitHub credentials (THE_LOOP_GITHUB_APP_ID + THE_LOOP_GITHUB_PRIVATE_KEY, or GH_TOKEN) and no gh; the worker will acknowledge deliveries but cannot advance work items"
fi

PORT=${PORT:-8080}
export PORT
# Plain log lines in a terminal (the image and the chart keep the default, JSON lines);
# the worker's metrics listen on loopback like the receiver.
export THE_LOOP_LOG_FORMAT="${THE_LOOP_LOG_FORMAT:-text}"
export THE_LOOP_HOST="${THE_LOOP_HOST:-127.0.0.1}"
"$BIN/the-loop" graph validate
"$BIN/the-loop" worker &
worker=$!
"$BIN/the-loop" serve --port "$PORT" --host "$THE_LOOP_HOST" &
web=$!
# Stop both on Ctrl-C or SIGTERM; waiting in the background lets the trap run at once.
stop() { kill -TERM "$web" "$worker" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT INT TERM
echo "the-loop: receiver on http://127.0.0.1:$PORT/webhook (web pid $web, worker pid $worker)"
echo "the-loop: try: THE_LOOP_WEBHOOK_SECRET=\$(cat .dev/webhook-secret) $BIN/the-loop replay tests/fixtures/github-webhooks --url http://127.0.0.1:$PORT/webhook"
wait -n "$web" "$worker"
