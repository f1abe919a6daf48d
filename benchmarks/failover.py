"""What a durable 202 costs, and what a Redis failover costs: the receiver with
``THE_LOOP_RECEIVER_REPLICAS`` 0 and 1 side by side, then the failover run of
:mod:`tests.support.failover` at full size.

    .venv/bin/python benchmarks/failover.py                # both parts, the defaults below
    .venv/bin/python benchmarks/failover.py --no-failover  # the receiver part only
    .venv/bin/python benchmarks/failover.py --posts 2000 --json

1. **Receiver latency and throughput, replicas 0 vs 1 (paired).** One replicated Redis on
   loopback (a primary, one replica, three Sentinels: :mod:`tests.support.sentinel`); two
   receivers started as in production (``the-loop serve``, gunicorn, ``--web-workers``
   each), both finding the primary through the Sentinels, one with
   ``THE_LOOP_RECEIVER_REPLICAS=0``, one with ``=1``. No worker runs: the deliveries stay
   queued. Each of ``--rounds`` rounds measures both, the order alternating per round:

   - **open loop**: ``--rate`` signed ``issue_comment`` deliveries per second (15.5 KB,
     each its own delivery id) for ``--seconds``, latency p50/p99 (ms) of each answer;
   - **closed loop**: ``--connections`` keep-alive clients sending back to back for
     ``--seconds``: deliveries answered 202 per second, latency p50/p99.

   The load comes from Python threads (``http.client``) on the same 2 CPUs; it caps the
   closed-loop figure for both alike, so the *ratio* is the figure to read. Medians over
   rounds are reported, and the per-round lists.
2. **Failover** (``--posts`` at ``--failover-rate``/s, primary SIGKILLed halfway, two
   receivers, two workers), once with replicas 1 and once with 0: seconds until the
   Sentinels promoted the replica, seconds from the primary's death to the first delivery
   processed on the new primary (the first ``delivery.received`` stamped after the kill),
   answers by status, acknowledged deliveries lost and processed twice, and what the
   reconciler then asked GitHub to redeliver (the fake GitHub's delivery log).

Every Redis process is the run's own, on free loopback ports, stopped at the end (nothing
touches the shared Redis).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks._common import (  # noqa: E402
    ISSUE_COMMENT,
    clean_env,
    code_version,
    free_port,
    machine,
    new_token,
    percentile,
    wait_http_ok,
)

SECRET = "failover-bench-secret"


def _signature(body: bytes) -> str:
    from tests.conftest import sign_body

    return sign_body(body, SECRET)


class Receiver:
    """``the-loop serve`` on a free port against the replicated set."""

    def __init__(self, rs: Any, replicas: int, workers: int, token: str, logs: Path) -> None:
        from tests.support import processes
        from tests.support.faults import BIN

        self.replicas = replicas
        self.port = free_port()
        self.prefix = f"{token}-r{replicas}"
        env = clean_env(**rs.env, THE_LOOP_WEBHOOK_SECRET=SECRET,
                        THE_LOOP_REDIS_PREFIX=self.prefix, THE_LOOP_QUEUE=self.prefix,
                        THE_LOOP_RECEIVER_REPLICAS=str(replicas),
                        THE_LOOP_WEB_WORKERS=str(workers), THE_LOOP_LOG_LEVEL="WARNING")
        self.proc = processes.start(
            [str(BIN / "the-loop"), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env, logs / f"receiver-{replicas}.out")
        if not wait_http_ok(f"http://127.0.0.1:{self.port}/readyz", 60):
            raise SystemExit(f"receiver (replicas={replicas}) never became ready; see {logs}")

    def stop(self) -> None:
        from tests.support import processes

        processes.stop(self.proc)


def _load(port: int, body: bytes, signature: str, prefix: str, seconds: float,
          connections: int, rate: float | None) -> dict[str, Any]:
    """Send for ``seconds``: at ``rate``/s spread over the connections (open loop), or back
    to back on each (closed loop, ``rate`` None). Returns counts and latencies (ms)."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    start = time.monotonic() + 0.1
    end = start + seconds
    cursor = [0]

    def client(n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        mine: list[float] = []
        seen: dict[int, int] = {}
        while True:
            with lock:
                k = cursor[0]
                cursor[0] += 1
            if rate is not None:
                due = start + k / rate
                if due >= end:
                    break
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            elif time.monotonic() >= end:
                break
            headers = {"Content-Type": "application/json", "X-GitHub-Event": "issue_comment",
                       "X-GitHub-Delivery": f"{prefix}-{k}", "X-Hub-Signature-256": signature}
            began = time.perf_counter()
            try:
                conn.request("POST", "/webhook", body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
                status = 0
            mine.append((time.perf_counter() - began) * 1000)
            seen[status] = seen.get(status, 0) + 1
        conn.close()
        with lock:
            latencies.extend(mine)
            for status, count in seen.items():
                statuses[status] = statuses.get(status, 0) + count

    threads = [threading.Thread(target=client, args=(n,)) for n in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = max(time.monotonic() - start, 1e-9)
    return {"statuses": statuses, "accepted_per_s": round(statuses.get(202, 0) / took, 1),
            "p50_ms": percentile(latencies, 0.50), "p99_ms": percentile(latencies, 0.99)}


def _drop(rs: Any, prefix: str) -> None:
    """Delete one receiver's keys (its prefix and its RQ queue) on the run's own Redis."""
    client = rs.node(rs.primary_port)
    batch = []
    for key in client.scan_iter(match=f"*{prefix}*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            client.unlink(*batch)
            batch = []
    if batch:
        client.unlink(*batch)


def receiver_part(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    from tests.support.sentinel import ReplicatedRedis

    body = ISSUE_COMMENT.read_bytes()
    signature = _signature(body)
    token = new_token()
    rounds: dict[str, dict[int, list[dict[str, Any]]]] = {"open": {0: [], 1: []},
                                                          "closed": {0: [], 1: []}}
    with ReplicatedRedis() as rs:
        receivers = {r: Receiver(rs, r, args.web_workers, token, logs) for r in (0, 1)}
        try:
            for n in range(args.rounds):
                order = (0, 1) if n % 2 == 0 else (1, 0)
                for replicas in order:
                    rec = receivers[replicas]
                    # Warm the connections and the script up, then measure.
                    _load(rec.port, body, signature, f"{rec.prefix}-w{n}", 0.5,
                          args.connections, None)
                    rounds["open"][replicas].append(_load(
                        rec.port, body, signature, f"{rec.prefix}-o{n}", args.seconds,
                        args.connections, args.rate))
                    rounds["closed"][replicas].append(_load(
                        rec.port, body, signature, f"{rec.prefix}-c{n}", args.seconds,
                        args.connections, None))
                    _drop(rs, rec.prefix)
        finally:
            for rec in receivers.values():
                rec.stop()

    def median(kind: str, replicas: int, key: str) -> float | None:
        values = [r[key] for r in rounds[kind][replicas] if r[key] is not None]
        return round(statistics.median(values), 2) if values else None

    out: dict[str, Any] = {"rounds": args.rounds, "seconds": args.seconds,
                           "connections": args.connections, "open_rate_per_s": args.rate,
                           "web_workers": args.web_workers}
    for kind in ("open", "closed"):
        for replicas in (0, 1):
            out[f"{kind}_replicas{replicas}"] = {
                key: median(kind, replicas, key)
                for key in ("p50_ms", "p99_ms", "accepted_per_s")}
            out[f"{kind}_replicas{replicas}"]["per_round"] = rounds[kind][replicas]
        zero, one = out[f"{kind}_replicas0"], out[f"{kind}_replicas1"]
        if zero["accepted_per_s"] and one["accepted_per_s"]:
            out[f"{kind}_throughput_ratio_1_over_0"] = round(
                one["accepted_per_s"] / zero["accepted_per_s"], 3)
    return out


def failover_part(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    from tests.support.failover import Plan, run

    out = {}
    for replicas in (1, 0):
        plan = Plan(replicas=replicas, posts=args.posts, rate=args.failover_rate,
                    items=args.items, timeout=600.0)
        where = logs / f"failover-{replicas}"
        where.mkdir(parents=True, exist_ok=True)
        result = run(plan, where, new_token())
        out[f"replicas{replicas}"] = result.figures()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rate", type=float, default=100.0, help="open-loop deliveries/s")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--posts", type=int, default=2000, help="failover: deliveries")
    parser.add_argument("--failover-rate", type=float, default=100.0)
    parser.add_argument("--items", type=int, default=20, help="failover: work items")
    parser.add_argument("--no-failover", action="store_true")
    parser.add_argument("--no-receiver", action="store_true")
    parser.add_argument("--logs", type=Path, help="keep the processes' logs here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    figures: dict[str, Any] = {"machine": machine(), "code": code_version()}
    with tempfile.TemporaryDirectory(prefix="the-loop-bench-failover-") as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        if not args.no_receiver:
            figures["receiver"] = receiver_part(args, logs)
        if not args.no_failover:
            figures["failover"] = failover_part(args, logs)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for part in ("receiver", "failover"):
            for key, value in figures.get(part, {}).items():
                if isinstance(value, dict):
                    value = {k: v for k, v in value.items() if k != "per_round"}
                print(f"{part}.{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
