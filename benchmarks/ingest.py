"""Ingest benchmark: the-loop's receiver side by side with a bare Flask app, a floor app
and @octokit/webhooks (Node).

The Python apps run under gunicorn with the same settings (``-c python:the_loop.gunicorn_conf``,
``THE_LOOP_WEB_WORKERS`` workers, its gevent worker class) on free loopback ports; the receiver
is started exactly as in production (``the-loop serve``), the baseline is
``benchmarks/bare_app.py`` (verify the signature, answer 202), the floor
``benchmarks/floor_app.py`` (verify, one ``SET`` of the body in Redis, answer 202: the
least a receiver that stores a delivery before answering does), the Node peer
``benchmarks/node_peer/server.mjs`` (one process). The body is the real
15,500-byte ``issue_comment``/``created`` delivery, signed; every request has a unique
``X-GitHub-Delivery``, so every receiver request is a real dedupe + enqueue.

Phases (load always from a separate process, only to 127.0.0.1, bounded in time):

1. warm-up, then ``--rounds`` x (receiver, bare) max-throughput runs of ``--seconds``
   with wrk (order alternates per round to cancel drift); rps = mean over rounds;
2. a fixed ``--rate`` (default 500 req/s) open-loop run of ``--rate-seconds`` against
   each app with benchmarks/openloop.py: p50/p99 latency from the scheduled send time;
3. RSS (VmRSS now, VmHWM peak) of the gunicorn master and each worker (/proc).

Redis: DB 13 (``THE_LOOP_BENCH_REDIS_URL``), a unique prefix and queue name; the keys
created are checked (queued count = requests answered 202) and deleted after each phase.

    .venv/bin/python benchmarks/ingest.py [--seconds 8] [--rounds 2] [--rate 500] [--json out]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as c
import redis

from webhook.signature import sign

HERE = Path(__file__).resolve().parent
WRK_SCRIPT = HERE / "wrk_webhook.lua"
EVENT = "issue_comment"


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


class App:
    """One gunicorn master and its workers."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], port: int,
                 log_dir: Path, *, single_process: bool = False) -> None:
        self.name = name
        self.single_process = single_process
        self.port = port
        self.url = f"http://127.0.0.1:{port}/webhook"
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, env=env, cwd=c.REPO, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def workers(self) -> list[int]:
        """The processes serving requests: gunicorn's workers, or the peer itself."""
        return [self.proc.pid] if self.single_process else c.children(self.proc.pid)

    def cpu_seconds(self) -> float:
        ticks = sum(_cpu_ticks(p) for p in self.workers())
        return ticks / os.sysconf("SC_CLK_TCK")

    def rss(self) -> dict[str, Any]:
        workers = [{"pid": p, **c.proc_status(p)} for p in self.workers()]
        return {"master": c.proc_status(self.proc.pid), "workers": workers}

    def wait_ready(self, n_workers: int, post: Callable[[str], int],
                   timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                status = post(self.url)
                ready = self.single_process or len(self.workers()) >= n_workers
                if status in (200, 202) and ready:
                    return
                last = status
            except OSError as exc:
                last = exc
            time.sleep(0.1)
        self.stop()
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise SystemExit(f"{self.name} did not start ({last!r}); log tail:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _post_once(body: bytes, signature: str, id_prefix: str,
               event: str = EVENT) -> Callable[[str], int]:
    counter = iter(range(10**9))

    def post(url: str) -> int:
        req = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "X-GitHub-Event": event,
            "X-GitHub-Delivery": f"{id_prefix}-ready-{next(counter)}",
            "X-Hub-Signature-256": signature,
        })
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    return post


def run_wrk(app: App, seconds: float, threads: int, connections: int, body_file: Path,
            signature: str, id_prefix: str, event: str = EVENT) -> dict[str, Any]:
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{round(seconds)}s",
            "--timeout", "10s", "-s", str(WRK_SCRIPT), app.url,
            "--", str(body_file), signature, event, id_prefix]
    cpu0 = app.cpu_seconds()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
    cpu1 = app.cpu_seconds()
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("JSON ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    result = json.loads(line[5:])
    duration = result["duration_us"] / 1e6
    result["rps"] = round(result["requests"] / duration, 1)
    result["app_cpu_s"] = round(cpu1 - cpu0, 2)
    result["app_cpu_us_per_request"] = round((cpu1 - cpu0) / max(result["requests"], 1) * 1e6)
    return result


class Sampler:
    """Once a second: whole-machine CPU busy % and the app's workers' CPU % (of one
    CPU), to tell a stall caused by other load on the machine from one in the app."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        total0, idle0 = c.cpu_ticks()
        app0 = self.app.cpu_seconds()
        while not self._stop.wait(1.0):
            total1, idle1 = c.cpu_ticks()
            app1 = self.app.cpu_seconds()
            busy = 100 * (1 - (idle1 - idle0) / max(total1 - total0, 1))
            self.samples.append((round(busy, 1), round(100 * (app1 - app0), 1)))
            total0, idle0, app0 = total1, idle1, app1

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_openloop(app: App, rate: float, seconds: float, body_file: Path, signature: str,
                 id_prefix: str) -> dict[str, Any]:
    argv = [c.PYTHON, str(HERE / "openloop.py"), "--url", app.url, "--rate", str(rate),
            "--seconds", str(seconds), "--body", str(body_file), "--signature", signature,
            "--event", EVENT, "--id-prefix", id_prefix]
    cpu0 = app.cpu_seconds()
    with Sampler(app) as sampler:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    cpu1 = app.cpu_seconds()
    if out.returncode != 0:
        raise SystemExit(f"openloop failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["app_cpu_pct"] = round(100 * (cpu1 - cpu0) / result["duration_s"], 1)
    # Per second: [machine busy %, app workers' CPU % of one CPU] (client start-up first).
    result["cpu_by_second"] = sampler.samples
    return result


def redis_cpu(conn: redis.Redis) -> float:
    info = conn.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


NODE_PEER = HERE / "node_peer"
#: The apps the receiver is compared with (those that ran).
PEERS = ("bare", "floor", "node")
#: The payloads of the side-by-side runs: event and fixture (15.5 KB and 31.9 KB).
PAYLOADS = (
    ("issue_comment", c.ISSUE_COMMENT),
    ("pull_request", c.FIXTURES / "pull_request" / "labeled.with-organization.payload.json"),
)


def node_peer_argv() -> list[str] | None:
    """``node benchmarks/node_peer/server.mjs``, after ``npm ci`` installed the pinned
    ``@octokit/webhooks`` (package-lock.json) when node_modules is missing; None when
    node or npm is not installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        return None
    if not (NODE_PEER / "node_modules" / "@octokit" / "webhooks").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=NODE_PEER,
                       check=True, timeout=300)
    return [node, str(NODE_PEER / "server.mjs")]


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="Ingest benchmark: receiver vs a bare Flask "
                                            "app and @octokit/webhooks (Node).")
    p.add_argument("--seconds", type=float, default=6.0,
                   help="duration of each max-throughput run (default 6)")
    p.add_argument("--rounds", type=int, default=3,
                   help="max-throughput rounds: each runs every app on every payload, "
                        "the apps' order rotating per round (default 3)")
    p.add_argument("--rate", type=float, default=500.0, help="fixed rate, req/s (default 500)")
    p.add_argument("--rate-seconds", type=float, default=10.0,
                   help="duration of each fixed-rate run (default 10; 0 skips that phase)")
    p.add_argument("--connections", type=int, default=8, help="wrk connections (default 8)")
    p.add_argument("--threads", type=int, default=1, help="wrk threads (default 1)")
    p.add_argument("--web-workers", type=int,
                   default=int(os.environ.get("THE_LOOP_WEB_WORKERS") or 4),
                   help="gunicorn workers for both Python apps ($THE_LOOP_WEB_WORKERS or 4)")
    p.add_argument("--log-level", default=os.environ.get("THE_LOOP_LOG_LEVEL") or "INFO",
                   help="receiver THE_LOOP_LOG_LEVEL (default INFO, as in production)")
    p.add_argument("--payload", action="append",
                   help="EVENT=PATH of a payload (repeatable; default the 15.5 KB "
                        "issue_comment and the 31.9 KB pull_request fixtures)")
    p.add_argument("--no-node", action="store_true",
                   help="leave out the Node peer (also left out when node is missing)")
    p.add_argument("--no-floor", action="store_true",
                   help="leave out the floor app (benchmarks/floor_app.py)")
    p.add_argument("--wait-quiet", type=float, default=0.0,
                   help="before each measured phase, wait up to this many seconds for the "
                        "machine to be < 25%% busy (default 0: only record how busy it was)")
    p.add_argument("--json", help="also write the result object to this file")
    args = p.parse_args(argv)

    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get update && apt-get install -y wrk")
    payloads = [(e, Path(f)) for e, f in (x.split("=", 1) for x in args.payload)] \
        if args.payload else list(PAYLOADS)
    token = c.new_token()
    secret = secrets.token_hex(32)
    signatures = {event: sign(path.read_bytes(), secret) for event, path in payloads}
    conn = redis.Redis.from_url(c.BENCH_REDIS_URL)
    conn.ping()
    queue_name = f"{token}-q"

    def queued() -> int:
        """Deliveries in the run's inboxes (every 202 appended one)."""
        return sum(conn.llen(k) for k in conn.scan_iter(match=f"{token}:inbox:*", count=500))
    env = c.clean_env(
        REDIS_URL=c.BENCH_REDIS_URL,
        THE_LOOP_WEBHOOK_SECRET=secret,
        THE_LOOP_QUEUE=queue_name,
        THE_LOOP_REDIS_PREFIX=token,
        THE_LOOP_WEB_WORKERS=str(args.web_workers),
        THE_LOOP_LOG_LEVEL=args.log_level,
    )
    node_argv = None if args.no_node else node_peer_argv()
    log_dir = Path(tempfile.mkdtemp(prefix="the-loop-bench-"))
    apps: dict[str, App] = {}
    result: dict[str, Any] = {
        "machine": c.machine(),
        "code": c.code_version(),
        "settings": {
            "payloads": {e: {"path": str(f.relative_to(c.REPO)) if f.is_relative_to(c.REPO)
                             else str(f), "bytes": f.stat().st_size} for e, f in payloads},
            "web_workers": args.web_workers,
            "gunicorn_config": "python:the_loop.gunicorn_conf",
            "gunicorn_cmd_args": os.environ.get("GUNICORN_CMD_ARGS"),
            "receiver_log_level": args.log_level, "wrk_threads": args.threads,
            "wrk_connections": args.connections, "seconds": args.seconds,
            "rounds": args.rounds, "rate": args.rate, "rate_seconds": args.rate_seconds,
            "node_peer": bool(node_argv), "redis": c.BENCH_REDIS_URL.rsplit("@", 1)[-1],
        },
    }
    try:
        # the-loop serve execs gunicorn, so the Popen pid is the gunicorn master.
        port = c.free_port()
        apps["receiver"] = App(
            "receiver", [str(c.VENV_BIN / "the-loop"), "serve", "--port", str(port),
                         "--host", "127.0.0.1"], env, port, log_dir)
        bare_port = c.free_port()
        apps["bare"] = App(
            "bare", [c.PYTHON, "-m", "gunicorn", "-c", "python:the_loop.gunicorn_conf",
                     "--bind", f"127.0.0.1:{bare_port}", "--pythonpath", str(HERE),
                     "bare_app:app"], env, bare_port, log_dir)
        if not args.no_floor:
            floor_port = c.free_port()
            apps["floor"] = App(
                "floor", [c.PYTHON, "-m", "gunicorn", "-c", "python:the_loop.gunicorn_conf",
                          "--bind", f"127.0.0.1:{floor_port}", "--pythonpath", str(HERE),
                          "floor_app:app"], env, floor_port, log_dir)
        if node_argv:
            node_port = c.free_port()
            apps["node"] = App("node", node_argv, {**env, "PORT": str(node_port)},
                               node_port, log_dir, single_process=True)
        first_event, first_path = payloads[0]
        post = _post_once(first_path.read_bytes(), signatures[first_event], token,
                          first_event)
        for app in apps.values():
            app.wait_ready(args.web_workers, post)

        # Warm-up (imports, first EVALSHA/SCRIPT LOAD in each worker, V8's JIT), not recorded.
        for name, app in apps.items():
            for event, path in payloads:
                run_wrk(app, 2, args.threads, args.connections, path, signatures[event],
                        f"{token}-warm-{name}", event)
        c.cleanup_redis(conn, token)

        names = list(apps)
        by_payload: dict[str, Any] = {}
        for event, _ in payloads:
            by_payload[event] = {"runs": {n: [] for n in names},
                                 **{f"{kind}_{peer}": [] for peer in PEERS
                                    for kind in ("ratio", "cpu_ratio")},
                                 "floor_ratio_bare": []}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for event, path in payloads:
                rps: dict[str, float] = {}
                cpu: dict[str, float] = {}
                for name in order:
                    busy = c.wait_quiet(args.wait_quiet)
                    rcpu0 = redis_cpu(conn)
                    run = run_wrk(apps[name], args.seconds, args.threads, args.connections,
                                  path, signatures[event], f"{token}-r{r}-{name}", event)
                    run["redis_cpu_s"] = round(redis_cpu(conn) - rcpu0, 2)
                    run["machine_busy_pct_before"] = busy
                    if name == "receiver":
                        # Every 202 is one delivery in an inbox; wrk counts answered requests.
                        run["queued"] = queued()
                    if name in ("receiver", "floor"):
                        c.cleanup_redis(conn, token)
                    by_payload[event]["runs"][name].append(run)
                    rps[name] = run["rps"]
                    cpu[name] = run["app_cpu_us_per_request"]
                    print(f"  ingest {event:14s} {name:8s} round {r + 1}: {run['rps']:8.1f} "
                          f"req/s (CPU {run['app_cpu_us_per_request']} us/req, "
                          f"machine {busy}% busy before)", file=sys.stderr)
                # Ratios within one round: the apps ran back to back on the same load.
                entry = by_payload[event]
                for peer in PEERS:
                    if rps.get(peer):
                        entry[f"ratio_{peer}"].append(round(rps["receiver"] / rps[peer], 3))
                    # The same comparison by CPU per request (peer's / receiver's): what
                    # the throughput ratio would be if every peer were CPU-bound; it moves
                    # far less with the machine's other load than requests/s do.
                    if cpu.get(peer) and cpu.get("receiver"):
                        entry[f"cpu_ratio_{peer}"].append(round(cpu[peer] / cpu["receiver"], 3))
                # The floor against the bare app: the most any receiver that stores each
                # delivery before answering could reach.
                if rps.get("floor") and rps.get("bare"):
                    entry["floor_ratio_bare"].append(round(rps["floor"] / rps["bare"], 3))
        all_bare: list[float] = []
        all_node: list[float] = []
        all_floor: list[float] = []
        all_floor_bare: list[float] = []
        for entry in by_payload.values():
            for name in names:
                entry[f"{name}_rps"] = _median([x["rps"] for x in entry["runs"][name]])
                entry[f"{name}_cpu_us_per_request"] = _median(
                    [x["app_cpu_us_per_request"] for x in entry["runs"][name]])
            all_bare += entry["ratio_bare"]
            all_node += entry["ratio_node"]
            all_floor += entry["ratio_floor"]
            all_floor_bare += entry["floor_ratio_bare"]
            for key in [f"{kind}_{peer}" for peer in PEERS for kind in ("ratio", "cpu_ratio")] \
                    + ["floor_ratio_bare"]:
                entry[f"{key}_median"] = _median(entry[key])
        first = by_payload[first_event]
        result["throughput"] = {
            "receiver_rps": first["receiver_rps"], "bare_rps": first["bare_rps"],
            "node_rps": first.get("node_rps"),
            "ratio": _median(all_bare), "ratio_node": _median(all_node),
            "ratio_floor": _median(all_floor), "floor_ratio_bare": _median(all_floor_bare),
            "by_payload": by_payload,
        }
        result["rss_after_throughput_kib"] = {k: a.rss() for k, a in apps.items()}

        fixed: dict[str, dict[str, Any]] = {}
        for name in ("receiver", "bare") if args.rate_seconds > 0 else ():
            busy = c.wait_quiet(args.wait_quiet)
            fixed[name] = run_openloop(apps[name], args.rate, args.rate_seconds, first_path,
                                       signatures[first_event], f"{token}-fixed-{name}")
            fixed[name]["machine_busy_pct_before"] = busy
            if name == "receiver":
                fixed[name]["queued"] = queued()
                c.cleanup_redis(conn, token)
            lat = fixed[name]["latency_ms"]
            print(f"  fixed {args.rate:g} req/s {name:8s}: p50 {lat['p50']} ms, "
                  f"p99 {lat['p99']} ms, achieved {fixed[name]['achieved_rate']} req/s",
                  file=sys.stderr)
        result["fixed_rate"] = fixed
        result["rss_kib"] = {k: a.rss() for k, a in apps.items() if k in ("receiver", "bare")}
    finally:
        for app in apps.values():
            app.stop()
        c.cleanup_redis(conn, token)
        result["receiver_log_tail"] = (
            (log_dir / "receiver.log").read_text(errors="replace").splitlines()[-3:]
            if (log_dir / "receiver.log").exists() else [])
        shutil.rmtree(log_dir, ignore_errors=True)

    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A compact human-readable summary of :func:`main`'s result."""
    t = result["throughput"]
    lines = [f"{'ingest (median of rounds)':<34}{'receiver':>10}{'bare':>10}{'node':>10}"
             f"{'floor':>10}{'/bare':>8}{'/node':>8}{'/floor':>8}"]
    for event, e in t["by_payload"].items():
        size = result["settings"]["payloads"][event]["bytes"]
        lines.append(
            f"{f'{event} ({size / 1000:.1f} KB), req/s':<34}{e['receiver_rps']:>10}"
            f"{e['bare_rps']:>10}{e.get('node_rps') or '-':>10}{e.get('floor_rps') or '-':>10}"
            f"{e['ratio_bare_median'] or 0:>8.1%}{e['ratio_node_median'] or 0:>8.1%}"
            f"{e['ratio_floor_median'] or 0:>8.1%}")
        lines.append(f"{'  per-round ratios /bare, /node':<34}{e['ratio_bare']} {e['ratio_node']}")
        lines.append(f"{'  floor / bare per round':<34}{e['floor_ratio_bare']}")
        lines.append(
            f"{'  CPU us/req; CPU ratio /bare, /node':<34}{e['receiver_cpu_us_per_request']:>10}"
            f"{e['bare_cpu_us_per_request']:>10}{e.get('node_cpu_us_per_request') or '-':>10}"
            f"{e.get('floor_cpu_us_per_request') or '-':>10}"
            f"{e['cpu_ratio_bare_median'] or 0:>8.1%}{e['cpu_ratio_node_median'] or 0:>8.1%}"
            f"{e['cpu_ratio_floor_median'] or 0:>8.1%}")
    lines.append(f"{'all rounds: median /bare, /node':<34}{t['ratio'] or 0:>8.1%}"
                 f"{t['ratio_node'] or 0:>8.1%}")
    lines.append(f"{'all rounds: /floor; floor / bare':<34}{t['ratio_floor'] or 0:>8.1%}"
                 f"{t['floor_ratio_bare'] or 0:>8.1%}")
    f = result["fixed_rate"]
    if f:
        rate = result["settings"]["rate"]
        for key in ("p50", "p99", "max"):
            lines.append(f"{f'latency @{rate:g} req/s {key}, ms':<34}"
                         f"{f['receiver']['latency_ms'][key]:>10}{f['bare']['latency_ms'][key]:>10}")
    for name, rss in result["rss_kib"].items():
        lines.append(f"{f'{name} worker RSS now/peak MiB':<34}" + "  ".join(
            f"{w.get('VmRSS', 0) / 1024:.1f}/{w.get('VmHWM', 0) / 1024:.1f}"
            for w in rss["workers"]))
    return lines


if __name__ == "__main__":
    res = main()
    print("\n".join(summary_lines(res)))
