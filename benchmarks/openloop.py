"""Fixed-rate (open-loop) HTTP load generator for benchmarks/ingest.py.

wrk2 (wrk with a constant request rate) is not packaged in Debian, and plain wrk is
closed-loop: a slow response delays the next request, which hides queueing ("coordinated
omission"). This client sends request i at ``t0 + i / rate`` whatever happened to the
earlier ones, each on its own new connection (as GitHub delivers, and as gunicorn's sync
worker answers anyway: it closes every connection), and records for every request:

- ``latency``: response complete minus the *scheduled* send time (includes any queueing,
  in the server or in this client: the conservative figure);
- ``service``: response complete minus the actual connect/send start;
- ``lag``: actual start minus scheduled start (how late this client itself was).

One process, one thread, a plain ``selectors`` loop over non-blocking sockets (asyncio
streams cost about 0.6 ms of CPU per connection here, which on a 2-core machine takes
CPU from the server under test; this loop costs a fraction of that). It reports its own
CPU use and achieved rate, so one can check it was not the bottleneck. Prints one JSON
object on stdout.

    python benchmarks/openloop.py --url http://127.0.0.1:8000/webhook --rate 500 \\
        --seconds 10 --body FILE --signature sha256=... --event issue_comment --id-prefix X
"""

from __future__ import annotations

import argparse
import errno
import json
import resource
import selectors
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

MAX_IN_FLIGHT = 2000


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n * q / 100)
    return sorted_values[int(min(rank, len(sorted_values))) - 1]


def summarize_ms(values: list[float]) -> dict[str, float]:
    values = sorted(v * 1000 for v in values)
    return {
        "p50": round(percentile(values, 50), 3),
        "p90": round(percentile(values, 90), 3),
        "p99": round(percentile(values, 99), 3),
        "p99_9": round(percentile(values, 99.9), 3),
        "max": round(values[-1], 3) if values else float("nan"),
    }


class Request:
    __slots__ = ("i", "scheduled", "started", "out", "inbuf", "sock", "connected")

    def __init__(self, i: int, scheduled: float, started: float, out: bytes,
                 sock: socket.socket) -> None:
        self.i = i
        self.scheduled = scheduled
        self.started = started
        self.out = memoryview(out)
        self.inbuf = bytearray()
        self.sock = sock
        self.connected = False


def _complete(buf: bytearray) -> int | None:
    """The status code once ``buf`` holds a whole response (headers + Content-Length
    bytes), else None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buf[:end]).decode("latin-1").split("\r\n")
    length = 0
    for line in head[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if len(buf) < end + 4 + length:
        return None
    return int(head[0].split()[1])


def run(args: argparse.Namespace) -> dict[str, Any]:
    with open(args.body, "rb") as f:
        body = f.read()
    parts = urlsplit(args.url)
    addr = (parts.hostname or "127.0.0.1", parts.port or 80)
    template = (
        f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {addr[0]}:{addr[1]}\r\n"
        "User-Agent: GitHub-Hookshot/bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-GitHub-Event: {args.event}\r\n"
        f"X-Hub-Signature-256: {args.signature}\r\n"
        f"X-GitHub-Delivery: {args.id_prefix}-%d\r\n\r\n"
    )
    total = int(args.rate * args.seconds)
    interval = 1.0 / args.rate
    sel = selectors.DefaultSelector()
    latencies: list[float] = []
    services: list[float] = []
    lags: list[float] = []
    statuses: dict[str, int] = {}
    errors: dict[str, int] = {}
    in_flight: dict[int, Request] = {}
    by_second: dict[int, list[float]] = {}
    max_in_flight = 0

    def fail(req: Request, reason: str) -> None:
        errors[reason] = errors.get(reason, 0) + 1
        sel.unregister(req.sock)
        req.sock.close()
        del in_flight[req.i]

    def start(i: int, scheduled: float) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.perf_counter()
        err = sock.connect_ex(addr)
        req = Request(i, scheduled, started, (template % i).encode("ascii") + body, sock)
        in_flight[i] = req
        if err not in (0, errno.EINPROGRESS):
            sel.register(sock, selectors.EVENT_WRITE, req)
            fail(req, f"connect:{errno.errorcode.get(err, err)}")
            return
        sel.register(sock, selectors.EVENT_WRITE, req)

    def on_event(req: Request, mask: int) -> None:
        sock = req.sock
        if mask & selectors.EVENT_WRITE:
            if not req.connected:  # first writable event: did the connect succeed?
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    fail(req, f"connect:{errno.errorcode.get(err, err)}")
                    return
                req.connected = True
            try:
                sent = sock.send(req.out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                fail(req, f"send:{type(exc).__name__}")
                return
            req.out = req.out[sent:]
            if not req.out:
                sel.modify(sock, selectors.EVENT_READ, req)
            return
        try:
            chunk = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            fail(req, f"recv:{type(exc).__name__}")
            return
        if chunk:
            req.inbuf += chunk
        status = _complete(req.inbuf)
        if status is None:
            if not chunk:
                fail(req, "closed-early")
            return
        done = time.perf_counter()
        sel.unregister(sock)
        sock.close()
        del in_flight[req.i]
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        latencies.append(done - req.scheduled)
        by_second.setdefault(int(req.scheduled - t0), []).append(done - req.scheduled)
        services.append(done - req.started)
        lags.append(req.started - req.scheduled)

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter() + 0.05
    deadline = t0 + args.seconds + args.timeout
    i = 0
    send_end = t0
    while True:
        now = time.perf_counter()
        while i < total and t0 + i * interval <= now:
            if len(in_flight) >= MAX_IN_FLIGHT:
                raise SystemExit(f"openloop: more than {MAX_IN_FLIGHT} requests in flight")
            start(i, t0 + i * interval)
            i += 1
            max_in_flight = max(max_in_flight, len(in_flight))
            if i == total:
                send_end = time.perf_counter()
        if i >= total and not in_flight:
            break
        if now > deadline:
            for req in list(in_flight.values()):
                fail(req, "timeout")
            break
        wait = (t0 + i * interval - now) if i < total else 0.05
        if in_flight or wait > 0:
            for key, mask in sel.select(max(wait, 0)):
                on_event(key.data, mask)
    end = time.perf_counter()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {
        "target_rate": args.rate,
        "scheduled": total,
        "completed": len(latencies),
        "send_rate": round(total / max(send_end - t0, 1e-9), 1),
        "achieved_rate": round(len(latencies) / (end - t0), 1),
        "duration_s": round(end - t0, 3),
        "statuses": statuses,
        "errors": errors,
        "max_in_flight": max_in_flight,
        "client_cpu_pct_of_one_core": round(100 * cpu / (end - t0), 1),
        "latency_ms": summarize_ms(latencies),
        "service_ms": summarize_ms(services),
        "lag_ms": summarize_ms(lags),
        # Per second of the schedule: [requests, p50 ms, p99 ms, max ms] (finds stalls).
        "latency_by_second": {
            str(s): [len(v), *(summarize_ms(v)[k] for k in ("p50", "p99", "max"))]
            for s, v in sorted(by_second.items())
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--rate", type=float, default=500.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--body", required=True)
    p.add_argument("--signature", required=True)
    p.add_argument("--event", default="issue_comment")
    p.add_argument("--id-prefix", required=True)
    p.add_argument("--timeout", type=float, default=10.0,
                   help="give up on requests still open this long after the last send")
    args = p.parse_args(argv)
    print(json.dumps(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
