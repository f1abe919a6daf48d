"""Slow clients vs signed deliveries: the receiver's answer latency at a fixed rate, with
and without unauthenticated connections trickling their requests.

The receiver runs as in production (``the-loop serve``: gunicorn with
the_loop/gunicorn_conf.py, ``--web-workers`` processes, default 2). Two phases, each
``--seconds`` long, sending ``--rate`` signed ``issues.opened`` deliveries a second
open-loop (request *i* at ``t0 + i/rate``, each on a new connection, client timeout
10 s as GitHub's):

1. **quiet**: nothing else;
2. **slow**: ``--slow`` (default 20) slow clients (tests/support/slow_clients.py), half
   sending their headers and half their body one byte every ``--interval`` seconds; one
   the server cuts off is replaced at once, so ``--slow`` are open the whole phase.

``latency_ms`` is measured from the scheduled send time to the answer (p50/p99/max);
``not_202`` counts answers other than 202 (0 = a timeout or a refused connection).
Redis: DB 13 (``THE_LOOP_BENCH_REDIS_URL``), a unique prefix; its keys are deleted
afterwards.

    .venv/bin/python benchmarks/slow_clients.py [--rate 20] [--seconds 10] [--slow 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _common as c
import redis
from ingest import App

from tests.conftest import load_fixture
from tests.support.slow_clients import Trickler, tricklers
from webhook.signature import sign

SECRET = "slow-clients-bench-secret"




def phase(url: str, body: bytes, rate: float, seconds: float, prefix: str) -> dict[str, Any]:
    """Send ``rate`` x ``seconds`` deliveries open-loop; latency from the schedule."""
    n = int(rate * seconds)
    results: list[tuple[int, float]] = []
    lock = threading.Lock()
    signature = sign(body, SECRET)

    def send(i: int, at: float) -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": f"{prefix}-{i}", "X-Hub-Signature-256": signature})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status = answer.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = 0
        with lock:
            results.append((status, 1000 * (time.monotonic() - at)))

    t0 = time.monotonic() + 0.2
    with ThreadPoolExecutor(max_workers=64) as pool:
        for i in range(n):
            pool.submit(send, i, t0 + i / rate)
    latencies = [ms for _, ms in results]
    return {"sent": n, "not_202": sum(1 for s, _ in results if s != 202),
            "latency_ms": {k: c.percentile(latencies, q)
                           for k, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="Receiver latency with slow clients.")
    p.add_argument("--rate", type=float, default=20.0, help="deliveries/s (default 20)")
    p.add_argument("--seconds", type=float, default=10.0, help="per phase (default 10)")
    p.add_argument("--slow", type=int, default=20, help="slow clients (default 20)")
    p.add_argument("--interval", type=float, default=2.0,
                   help="seconds between two bytes of a slow client (default 2)")
    p.add_argument("--web-workers", type=int, default=2, help="gunicorn processes (2)")
    p.add_argument("--gunicorn-args", default="",
                   help="extra gunicorn settings (GUNICORN_CMD_ARGS), e.g. "
                        "'--worker-class sync' for the comparison with the former worker")
    p.add_argument("--json", help="also write the result object to this file")
    args = p.parse_args(argv)

    token = c.new_token()
    conn = redis.Redis.from_url(c.BENCH_REDIS_URL)
    conn.ping()
    env = c.clean_env(REDIS_URL=c.BENCH_REDIS_URL, THE_LOOP_REDIS_PREFIX=token,
                      THE_LOOP_QUEUE=f"{token}-q", THE_LOOP_WEBHOOK_SECRET=SECRET,
                      THE_LOOP_WEB_WORKERS=str(args.web_workers), THE_LOOP_LOG_LEVEL="WARNING")
    if args.gunicorn_args:
        env["GUNICORN_CMD_ARGS"] = args.gunicorn_args
    body = load_fixture("issues", "opened")
    port = c.free_port()
    log_dir = Path(tempfile.mkdtemp(prefix="the-loop-slow-"))
    app = App("receiver", [str(c.VENV_BIN / "the-loop"), "serve", "--port", str(port),
                           "--host", "127.0.0.1"], env, port, log_dir)
    result: dict[str, Any] = {"machine": c.machine(), "code": c.code_version(),
                              "settings": vars(args)}
    stop = threading.Event()
    cut_off = [0]
    try:
        c.wait_http_ok(f"http://127.0.0.1:{port}/readyz")
        busy = c.wait_quiet(0)
        result["quiet"] = phase(app.url, body, args.rate, args.seconds, f"{token}-q")
        result["quiet"]["machine_busy_pct_before"] = busy

        pool = tricklers(port, args.slow, body, args.interval)

        def keep_open() -> None:  # the attacker reconnects whatever is cut off
            while not stop.wait(0.1):
                for i, trickler in enumerate(pool):
                    if trickler.closed.is_set():
                        cut_off[0] += 1
                        pool[i] = Trickler(port, trickler.head, trickler.tail, args.interval)
                        pool[i].start()

        for trickler in pool:
            trickler.start()
        keeper = threading.Thread(target=keep_open, daemon=True)
        keeper.start()
        time.sleep(1.0)
        busy = c.wait_quiet(0)
        result["slow"] = phase(app.url, body, args.rate, args.seconds, f"{token}-s")
        result["slow"]["machine_busy_pct_before"] = busy
        result["slow"]["slow_clients_cut_off"] = cut_off[0]
        stop.set()
        keeper.join()
        for trickler in pool:
            trickler.stop.set()
    finally:
        stop.set()
        app.stop()
        c.cleanup_redis(conn, token)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    res = main()
    for name in ("quiet", "slow"):
        r = res[name]
        print(f"{name:6s}: {r['sent']} sent, {r['not_202']} not 202, latency p50 "
              f"{r['latency_ms']['p50']} ms, p99 {r['latency_ms']['p99']} ms, max "
              f"{r['latency_ms']['max']} ms", file=sys.stderr)
    print(json.dumps(res))
