"""Ingest benchmark: the-loop's receiver side by side with a bare Flask app.

Both apps run under gunicorn with the same settings (``-c python:webhook.gunicorn_conf``,
``THE_LOOP_WEB_WORKERS`` workers, sync worker class) on free loopback ports; the receiver
is started exactly as in production (``the-loop serve``), the baseline is
``benchmarks/bare_app.py`` (verify the signature, answer 202). The body is the real
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
                 log_dir: Path) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}/webhook"
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, env=env, cwd=c.REPO, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def workers(self) -> list[int]:
        return c.children(self.proc.pid)

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
                if status in (200, 202) and len(self.workers()) >= n_workers:
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


def _post_once(body: bytes, signature: str, id_prefix: str) -> Callable[[str], int]:
    counter = iter(range(10**9))

    def post(url: str) -> int:
        req = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "X-GitHub-Event": EVENT,
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
            signature: str, id_prefix: str) -> dict[str, Any]:
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{round(seconds)}s",
            "--timeout", "10s", "-s", str(WRK_SCRIPT), app.url,
            "--", str(body_file), signature, EVENT, id_prefix]
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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="Ingest benchmark: receiver vs bare Flask app.")
    p.add_argument("--seconds", type=float, default=8.0,
                   help="duration of each max-throughput run (default 8)")
    p.add_argument("--rounds", type=int, default=2,
                   help="max-throughput rounds per app, alternating (default 2)")
    p.add_argument("--rate", type=float, default=500.0, help="fixed rate, req/s (default 500)")
    p.add_argument("--rate-seconds", type=float, default=10.0,
                   help="duration of each fixed-rate run (default 10)")
    p.add_argument("--connections", type=int, default=8, help="wrk connections (default 8)")
    p.add_argument("--threads", type=int, default=1, help="wrk threads (default 1)")
    p.add_argument("--web-workers", type=int,
                   default=int(os.environ.get("THE_LOOP_WEB_WORKERS") or 2),
                   help="gunicorn workers for both apps ($THE_LOOP_WEB_WORKERS or 2)")
    p.add_argument("--log-level", default=os.environ.get("THE_LOOP_LOG_LEVEL") or "INFO",
                   help="receiver THE_LOOP_LOG_LEVEL (default INFO, as in production)")
    p.add_argument("--payload", default=str(c.ISSUE_COMMENT))
    p.add_argument("--wait-quiet", type=float, default=0.0,
                   help="before each measured phase, wait up to this many seconds for the "
                        "machine to be < 25%% busy (default 0: only record how busy it was)")
    p.add_argument("--json", help="also write the result object to this file")
    args = p.parse_args(argv)

    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get update && apt-get install -y wrk")
    body_file = Path(args.payload)
    body = body_file.read_bytes()
    token = c.new_token()
    secret = secrets.token_hex(32)
    signature = sign(body, secret)
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
    log_dir = Path(tempfile.mkdtemp(prefix="the-loop-bench-"))
    apps: dict[str, App] = {}
    result: dict[str, Any] = {
        "machine": c.machine(),
        "settings": {
            "payload": str(body_file), "payload_bytes": len(body), "event": EVENT,
            "web_workers": args.web_workers, "worker_class": "sync",
            "gunicorn_config": "python:webhook.gunicorn_conf",
            "receiver_log_level": args.log_level, "wrk_threads": args.threads,
            "wrk_connections": args.connections, "seconds": args.seconds,
            "rounds": args.rounds, "rate": args.rate, "rate_seconds": args.rate_seconds,
            "redis": c.BENCH_REDIS_URL.rsplit("@", 1)[-1],
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
            "bare", [c.PYTHON, "-m", "gunicorn", "-c", "python:webhook.gunicorn_conf",
                     "--bind", f"127.0.0.1:{bare_port}", "--pythonpath", str(HERE),
                     "bare_app:app"], env, bare_port, log_dir)
        post = _post_once(body, signature, token)
        for app in apps.values():
            app.wait_ready(args.web_workers, post)

        # Warm-up (imports, first EVALSHA/SCRIPT LOAD in each worker), not recorded.
        for name, app in apps.items():
            run_wrk(app, 2, args.threads, args.connections, body_file, signature,
                    f"{token}-warm-{name}")
        c.cleanup_redis(conn, token)

        runs: dict[str, list[dict[str, Any]]] = {"receiver": [], "bare": []}
        for r in range(args.rounds):
            order = ["receiver", "bare"] if r % 2 == 0 else ["bare", "receiver"]
            for name in order:
                busy = c.wait_quiet(args.wait_quiet)
                rcpu0 = redis_cpu(conn)
                run = run_wrk(apps[name], args.seconds, args.threads, args.connections,
                              body_file, signature, f"{token}-r{r}-{name}")
                run["redis_cpu_s"] = round(redis_cpu(conn) - rcpu0, 2)
                run["redis_cpu_us_per_request"] = round(
                    (redis_cpu(conn) - rcpu0) / max(run["requests"], 1) * 1e6)
                run["machine_busy_pct_before"] = busy
                if name == "receiver":
                    # Every 202 is one delivery in an inbox; wrk counts answered requests.
                    run["queued"] = queued()
                    c.cleanup_redis(conn, token)
                runs[name].append(run)
                print(f"  ingest {name:8s} round {r + 1}: {run['rps']:8.1f} req/s "
                      f"(app CPU {run['app_cpu_us_per_request']} us/req)", file=sys.stderr)
        rps = {k: round(sum(x["rps"] for x in v) / max(len(v), 1), 1) for k, v in runs.items()}
        result["throughput"] = {
            "receiver_rps": rps["receiver"],
            "bare_rps": rps["bare"],
            "ratio": round(rps["receiver"] / rps["bare"], 3) if rps["bare"] else None,
            "runs": runs,
        }
        result["rss_after_throughput_kib"] = {k: a.rss() for k, a in apps.items()}

        fixed: dict[str, dict[str, Any]] = {}
        for name in ("receiver", "bare"):
            busy = c.wait_quiet(args.wait_quiet)
            fixed[name] = run_openloop(apps[name], args.rate, args.rate_seconds, body_file,
                                       signature, f"{token}-fixed-{name}")
            fixed[name]["machine_busy_pct_before"] = busy
            if name == "receiver":
                fixed[name]["queued"] = queued()
                c.cleanup_redis(conn, token)
            lat = fixed[name]["latency_ms"]
            print(f"  fixed {args.rate:g} req/s {name:8s}: p50 {lat['p50']} ms, "
                  f"p99 {lat['p99']} ms, achieved {fixed[name]['achieved_rate']} req/s",
                  file=sys.stderr)
        result["fixed_rate"] = fixed
        result["rss_kib"] = {k: a.rss() for k, a in apps.items()}
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
    f = result["fixed_rate"]
    rss = result["rss_kib"]
    rate = result["settings"]["rate"]
    lines = [
        f"{'ingest':<28}{'receiver':>12}{'bare':>12}",
        f"{'max throughput, req/s':<28}{t['receiver_rps']:>12}{t['bare_rps']:>12}",
        f"{'  ratio receiver/bare':<28}{t['ratio'] or 0:>12.1%}",
    ]
    for key in ("p50", "p99", "max"):
        lines.append(f"{f'latency @{rate:g} req/s {key}, ms':<28}"
                     f"{f['receiver']['latency_ms'][key]:>12}{f['bare']['latency_ms'][key]:>12}")
    lines.append(f"{'  achieved rate, req/s':<28}"
                 f"{f['receiver']['achieved_rate']:>12}{f['bare']['achieved_rate']:>12}")
    for name in ("receiver", "bare"):
        workers = rss[name]["workers"]
        lines.append(f"{f'{name} worker RSS now/peak MiB':<34}" + "  ".join(
            f"{w.get('VmRSS', 0) / 1024:.1f}/{w.get('VmHWM', 0) / 1024:.1f}" for w in workers))
    return lines


if __name__ == "__main__":
    res = main()
    print("\n".join(summary_lines(res)))
