#!/usr/bin/env bash
# `make run`: the receiver (gunicorn), one worker and `the-loop runner`, against GitHub
# when credentials are configured, else against the embedded sandbox (`the-loop sandbox`:
# a local GitHub stand-in that sends signed deliveries to the receiver, with the demo
# agent as the harness). Starts Redis if it is not answering. Says which mode it chose
# and why, in one line; in sandbox mode it also prints the dashboard's URL and how to sign
# in (a token written to the sandbox directory), and the git remote the person pushes
# with. Every process runs in its own process group; Ctrl-C or SIGTERM stops every group
# it started.
set -euo pipefail
set -m  # job control: each background process gets its own process group
cd "$(dirname "$0")/.."
BIN=.venv/bin
DEV=.dev
mkdir -p "$DEV"
pids=()

stop() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for _ in $(seq 1 150); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# .env (written by `the-loop app create`) holds the App's credentials.
if [ -f .env ]; then set -a; . ./.env; set +a; fi

REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export REDIS_URL
if ! "$BIN/python" -c 'import redis, sys; redis.Redis.from_url(sys.argv[1]).ping()' "$REDIS_URL" >/dev/null 2>&1; then
  echo "the-loop: Redis is not answering at $REDIS_URL; starting redis-server"
  redis-server --port "$("$BIN/python" -c 'import sys, urllib.parse as u; print(u.urlsplit(sys.argv[1]).port or 6379)' "$REDIS_URL")" \
    --save "" --appendonly no >"$DEV/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 50); do
    "$BIN/python" -c 'import redis, sys; redis.Redis.from_url(sys.argv[1]).ping()' "$REDIS_URL" >/dev/null 2>&1 && break
    sleep 0.1
  done
fi

PORT=${PORT:-8080}
export PORT
export THE_LOOP_LOG_FORMAT="${THE_LOOP_LOG_FORMAT:-text}"
export THE_LOOP_HOST="${THE_LOOP_HOST:-127.0.0.1}"

mode=${THE_LOOP_MODE:-}
if [ -z "$mode" ]; then
  if [ -n "${THE_LOOP_GITHUB_APP_ID:-}" ] && [ -n "${THE_LOOP_GITHUB_PRIVATE_KEY:-}${THE_LOOP_GITHUB_PRIVATE_KEY_PATH:-}" ]; then
    mode=github; why="THE_LOOP_GITHUB_APP_ID and a private key are set"
  elif [ -n "${GH_TOKEN:-}${GITHUB_TOKEN:-}" ]; then
    mode=github; why="a token is set (GH_TOKEN or GITHUB_TOKEN)"
  else
    mode=sandbox; why="no GitHub credentials (THE_LOOP_GITHUB_APP_ID + a key, or GH_TOKEN; \`the-loop app create\` registers an App)"
  fi
else
  why="THE_LOOP_MODE=$mode"
fi

case "$mode" in
  sandbox)
    # Point the-loop at the sandbox: its API, git URL, a local App key, the harness (the
    # port: THE_LOOP_SANDBOX_PORT, read by the sandbox commands themselves); it also sets
    # sandbox_git_remote and sandbox_api_token_file, printed below.
    eval "$("$BIN/the-loop" sandbox prepare --dir "${THE_LOOP_SANDBOX_DIR:-$DEV/sandbox}")"
    # The dashboard's token goes to the receiver alone (beside any of THE_LOOP_API_TOKENS).
    api_tokens="$(cat "$sandbox_api_token_file")${THE_LOOP_API_TOKENS:+,$THE_LOOP_API_TOKENS}"
    unset GH_TOKEN GITHUB_TOKEN THE_LOOP_GITHUB_PRIVATE_KEY THE_LOOP_GITHUB_TRANSPORT
    echo "the-loop: mode: sandbox, because $why; GitHub stand-in on $THE_LOOP_SANDBOX_URL"
    ;;
  github)
    if [ -z "${THE_LOOP_WEBHOOK_SECRET:-}" ]; then
      [ -s "$DEV/webhook-secret" ] || "$BIN/python" -c 'import secrets; print(secrets.token_hex(32))' > "$DEV/webhook-secret"
      THE_LOOP_WEBHOOK_SECRET=$(cat "$DEV/webhook-secret")
      export THE_LOOP_WEBHOOK_SECRET
      echo "the-loop: THE_LOOP_WEBHOOK_SECRET not set; using the development secret in $DEV/webhook-secret"
    fi
    echo "the-loop: mode: GitHub, because $why"
    ;;
  *) echo "the-loop: THE_LOOP_MODE must be sandbox or github, got '$mode'" >&2; exit 2 ;;
esac

"$BIN/the-loop" graph validate
if [ "$mode" = sandbox ]; then
  "$BIN/the-loop" sandbox --webhook-url "http://127.0.0.1:$PORT/webhook" &
  pids+=($!)
fi
THE_LOOP_API_TOKENS="${api_tokens:-${THE_LOOP_API_TOKENS:-}}" \
  "$BIN/the-loop" serve --port "$PORT" --host "$THE_LOOP_HOST" &
pids+=($!)
"$BIN/the-loop" worker &
pids+=($!)
if [ "$mode" = sandbox ] || [ -n "${THE_LOOP_HARNESS:-}" ]; then
  "$BIN/the-loop" runner &
  pids+=($!)
fi
echo "the-loop: receiver on http://127.0.0.1:$PORT/webhook (process groups: ${pids[*]})"
if [ "$mode" = sandbox ]; then
  echo "the-loop: dashboard on http://127.0.0.1:$PORT/ui/ (sign in at http://127.0.0.1:$PORT/ui/login with the token in $sandbox_api_token_file)"
  echo "the-loop: git remote (pushes as $THE_LOOP_SANDBOX_USER): $sandbox_git_remote"
  echo "the-loop: try: $BIN/the-loop sandbox issue create 'Add a login page' --label the-loop"
fi
# Any process ending stops them all (the trap).
wait -n
