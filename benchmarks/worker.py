"""Worker benchmark: routine deliveries per second for ONE worker process, and its peak RSS.

Pre-enqueues ``--count`` deliveries exactly as the receiver does
(``webhook.events.parse_delivery`` + ``foundation.inbox.enqueue.DeliveryQueue.enqueue``: each goes
to its work item's inbox, the first activation queues one wake-up job), built from the
real GitHub fixture payloads, then runs one worker in burst mode and times it.

The mix is "routine" traffic (nothing enrolled, so no GitHub calls; every delivery is
read, routed, and dropped or ignored):

- 80% ``issue_comment``/``created`` (the three fixture variants) on non-enrolled issues
  (issue number rewritten) -> label check (and a JSON parse when the body could carry
  the label);
- 8% ``push`` -> config route (shared inbox ``~``);
- 6% ``status`` -> CI result recorded (shared inbox ``~``);
- 6% ``check_run``/``completed`` with a pull request (number rewritten) -> CI result
  recorded, state lookup.

Two distributions over work items, each with ``--count`` deliveries:

- **spread**: the comments and check runs over ``--work-items`` (default 1000) issues,
  about one or two deliveries per work item -- every work item is a separate lock and
  ready-list entry (the worst case for per-work-item overhead);
- **dense**: the same over ``--dense-items`` (default 10) issues, ~100+ per work item.

Workers compared (each on its own copy of the queue; counts differ to bound time):

- ``the-loop worker --burst`` (``workers.worker.LoopWorker``), ``--count`` deliveries,
  both distributions;
- ``rq worker --burst -w stock_rq.SimpleWorker`` (RQ's stock in-process worker running the
  same wake-up job; ``benchmarks/stock_rq.py`` only hands it the processor),
  ``--compare-count``, spread;
- ``rq worker --burst -w stock_rq.Worker`` (RQ's stock forking ``rq.Worker``: one fork per
  wake-up job), ``--fork-count``, spread.

Timing: a poller (every 5 ms) notes when the RQ queue first gets shorter (the wake-up
job taken) and when the process exits; ``rate = count / (exit - first dequeue)``. Also
reported: ``count / (wall - startup)`` with startup = wall time of the same command on an
empty queue. Peak RSS from ``/usr/bin/time -v`` (max over the process and its children).
Every delivery must be handled (record deleted, nothing failed, no inbox left) or the run
is flagged.

The worker needs transports for GitHub and Slack to start; routine deliveries use neither
beyond reading the repository config once per process, so the run gets dummy tokens and
a loopback fake GitHub API answering 404 (its request count is reported per run). The
worker's metrics port is turned off (``THE_LOOP_WORKER_METRICS_PORT=0``).

Redis: DB 13, keys carry a unique token and are deleted afterwards (never FLUSHDB).

    .venv/bin/python benchmarks/worker.py [--count 3000] [--compare-count 1500] [--json out]
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common as c
import redis

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import Keys
from webhook.events import parse_delivery

TIME = "/usr/bin/time"


class FakeGitHub:
    """A loopback stand-in for the GitHub API: every request gets 404 Not Found (so the
    worker finds no repository config files and caches that), and is counted. Routine
    deliveries should cost about two requests per repository per worker process."""

    def __init__(self) -> None:
        self.requests: dict[str, int] = {}
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                key = f"{self.command} {self.path.split('?')[0]}"
                fake.requests[key] = fake.requests.get(key, 0) + 1
                body = b'{"message": "Not Found", "documentation_url": ""}'
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take_counts(self) -> dict[str, int]:
        counts, self.requests = self.requests, {}
        return counts

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _load(rel: str) -> dict:
    return json.loads((c.FIXTURES / rel).read_bytes())


def build_deliveries(count: int, work_items: int, token: str,
                     tag: str = "") -> list[tuple[dict, bytes]]:
    """``count`` (headers, body) pairs in the routine mix (see module docstring)."""
    comments = [_load(f"issue_comment/{n}") for n in (
        "created.payload.json", "created.1.payload.json",
        "created.with-organization.payload.json")]
    pushes = [_load("push/1.payload.json"), _load("push/with-installation.payload.json")]
    statuses = [_load("status/payload.json"), _load("status/with-installation.payload.json")]
    checks = [_load("check_run/completed.payload.json"),
              _load("check_run/completed.1.payload.json")]
    out = []
    for i in range(count):
        slot = i % 50
        number = 1 + (i * 7919) % work_items  # spread, but each item seen several times
        if slot < 40:
            event, doc = "issue_comment", comments[i % 3]
            doc["issue"]["number"] = number
        elif slot < 44:
            event, doc = "push", pushes[i % 2]
        elif slot < 47:
            event, doc = "status", statuses[i % 2]
        else:
            event, doc = "check_run", checks[i % 2]
            doc["check_run"]["pull_requests"][0]["number"] = number
        body = json.dumps(doc, indent=2).encode()
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": f"{token}{tag}-{i}",
                   "Content-Type": "application/json"}
        out.append((headers, body))
    return out


def enqueue_all(conn: redis.Redis, queue: DeliveryQueue,
                deliveries: list[tuple[dict, bytes]]) -> float:
    t0 = time.perf_counter()
    for headers, body in deliveries:
        if not queue.enqueue(parse_delivery(headers, body)):
            raise SystemExit("worker bench: a delivery id was seen already")
    return time.perf_counter() - t0


def _time_v(path: Path) -> dict[str, float]:
    text = path.read_text(errors="replace") if path.exists() else ""
    out: dict[str, float] = {}
    for label, key in (("Maximum resident set size (kbytes)", "max_rss_kib"),
                       ("User time (seconds)", "user_s"), ("System time (seconds)", "sys_s"),
                       ("Voluntary context switches", "voluntary_cs")):
        m = re.search(re.escape(label) + r":\s*([\d.]+)", text)
        if m:
            out[key] = float(m.group(1))
    return out


def run_burst(argv: list[str], env: dict[str, str], conn: redis.Redis, queue_key: str,
              workers_set: str, count: int, scratch: Path, label: str) -> dict[str, Any]:
    """Run ``argv`` (a burst worker) once; time it from the queue's point of view (the
    first dequeue: the RQ queue gets shorter than it was at the start)."""
    time_file = scratch / f"{label}.time"
    log_file = scratch / f"{label}.log"
    use_time = os.access(TIME, os.X_OK)
    full = [TIME, "-v", "-o", str(time_file), *argv] if use_time else argv
    seen_workers: set[str] = set()
    marks: dict[str, float] = {}
    stop = threading.Event()
    queued_jobs = conn.llen(queue_key)

    def poll() -> None:
        while not stop.is_set():
            n = conn.llen(queue_key)
            now = time.perf_counter()
            if "first" not in marks and n < queued_jobs:
                marks["first"] = now
            if "empty" not in marks and n == 0:
                marks["empty"] = now
            seen_workers.update(
                m.decode() if isinstance(m, bytes) else m for m in conn.smembers(workers_set))
            stop.wait(0.005)

    with open(log_file, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, env=env, cwd=c.REPO, stdout=log, stderr=subprocess.STDOUT)
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            rc = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        t_exit = time.perf_counter()
        stop.set()
        poller.join()
    result: dict[str, Any] = {
        "returncode": rc, "wall_s": round(t_exit - t0, 3),
        **_time_v(time_file), "worker_keys": sorted(seen_workers),
    }
    if count and "first" in marks:
        result["startup_s"] = round(marks["first"] - t0, 3)
        result["drain_s"] = round(t_exit - marks["first"], 3)
        result["rate"] = round(count / (t_exit - marks["first"]), 1)
    if rc != 0 or (count and "first" not in marks):
        result["log_tail"] = log_file.read_text(errors="replace").splitlines()[-10:]
    return result


def check_handled(conn: redis.Redis, prefix: str, queue_name: str, ids: list[str]) -> dict:
    keys = Keys(prefix, queue_name)
    pipe = conn.pipeline(transaction=False)
    for delivery_id in ids:
        pipe.exists(keys.delivery(delivery_id))
    left = sum(pipe.execute())
    pipe = conn.pipeline(transaction=False)
    for ref in conn.smembers(keys.inboxes):
        pipe.llen(keys.inbox(ref.decode()))
    return {
        "records_left": left,
        "inbox_entries_left": sum(pipe.execute()),
        "ready_left": conn.llen(keys.ready),
        "failed_deliveries": conn.hlen(keys.failed),
        "rq_failed": conn.zcard(f"rq:failed:{queue_name}"),
        "queue_left": conn.llen(f"rq:queue:{queue_name}"),
    }


def first_failure(conn: redis.Redis, queue_name: str) -> str | None:
    """The last line of the first RQ-failed job's exception, to say why a run failed."""
    ids = conn.zrange(f"rq:failed:{queue_name}", 0, 0)
    if not ids:
        return None
    from rq.job import Job

    try:
        job_id = ids[0].decode() if isinstance(ids[0], bytes) else str(ids[0])
        result = Job.fetch(job_id, connection=conn).latest_result()
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        return f"could not read the failure ({type(exc).__name__})"
    text = (getattr(result, "exc_string", None) or "").strip()
    return text.splitlines()[-1] if text else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="Worker benchmark (one burst worker process).")
    p.add_argument("--count", type=int, default=3000,
                   help="deliveries for each the-loop worker run (default 3000)")
    p.add_argument("--compare-count", type=int, default=1500,
                   help="deliveries for stock rq SimpleWorker (default 1500; 0 skips)")
    p.add_argument("--fork-count", type=int, default=1500,
                   help="deliveries for stock forking rq Worker (default 1500; 0 skips)")
    p.add_argument("--work-items", type=int, default=1000,
                   help="distinct issues the comments are spread over (default 1000)")
    p.add_argument("--dense-items", type=int, default=10,
                   help="distinct issues of the dense run (default 10; 0 skips it)")
    p.add_argument("--wait-quiet", type=float, default=0.0,
                   help="before each measured run, wait up to this many seconds for the "
                        "machine to be < 25%% busy (default 0: only record how busy it was)")
    p.add_argument("--json", help="also write the result object to this file")
    args = p.parse_args(argv)

    token = c.new_token()
    queue_name = f"{token}-q"
    prefix = token
    conn = redis.Redis.from_url(c.BENCH_REDIS_URL)
    conn.ping()
    created_globals = c.absent_globals(conn)
    dq = DeliveryQueue(conn, queue_name=queue_name, prefix=prefix)
    # The worker refuses to start without the transports its graph needs (GitHub, Slack).
    # Routine deliveries call neither (beyond reading the repository config once), so
    # they get dummy tokens (not credentials) and GitHub a loopback fake answering 404.
    github = FakeGitHub()
    env = c.clean_env(REDIS_URL=c.BENCH_REDIS_URL, THE_LOOP_QUEUE=queue_name,
                      THE_LOOP_REDIS_PREFIX=prefix, THE_LOOP_LOG_LEVEL="WARNING",
                      THE_LOOP_WORKER_METRICS_PORT="0",
                      GH_TOKEN="bench-dummy-token", THE_LOOP_GITHUB_TRANSPORT="api",
                      THE_LOOP_GITHUB_API_URL=github.url,
                      THE_LOOP_GITHUB_RETRIES="0", THE_LOOP_GITHUB_TIMEOUT="1",
                      THE_LOOP_SLACK_TOKEN="xoxb-bench-dummy")
    rq_bin = str(c.VENV_BIN / "rq")
    loop_cmd = [str(c.VENV_BIN / "the-loop"), "worker", "--burst"]
    # (label, count, command, work items)
    variants = [
        ("the-loop LoopWorker", args.count, loop_cmd, args.work_items),
        (f"the-loop, {args.dense_items} items", args.count if args.dense_items else 0,
         loop_cmd, args.dense_items),
        ("rq SimpleWorker", args.compare_count,
         [rq_bin, "worker", "--burst", "--quiet", "-P", str(c.REPO / "benchmarks"),
          "-w", "stock_rq.SimpleWorker",
          "-u", c.BENCH_REDIS_URL, "-n", f"{token}-simple", queue_name], args.work_items),
        ("rq Worker (fork)", args.fork_count,
         [rq_bin, "worker", "--burst", "--quiet", "-P", str(c.REPO / "benchmarks"),
          "-w", "stock_rq.Worker", "-u", c.BENCH_REDIS_URL,
          "-n", f"{token}-fork", queue_name], args.work_items),
    ]
    scratch = Path(tempfile.mkdtemp(prefix="the-loop-wbench-"))
    mix: dict[str, int] = {}
    for headers, _ in build_deliveries(args.count, args.work_items, token):
        mix[headers["X-GitHub-Event"]] = mix.get(headers["X-GitHub-Event"], 0) + 1
    result: dict[str, Any] = {
        "machine": c.machine(),
        "settings": {"count": args.count, "compare_count": args.compare_count,
                     "fork_count": args.fork_count, "work_items": args.work_items,
                     "dense_items": args.dense_items, "mix": mix, "log_level": "WARNING",
                     "redis": c.BENCH_REDIS_URL.rsplit("@", 1)[-1]},
        "runs": {},
    }
    worker_keys: set[str] = set()
    workers_set = f"rq:workers:{queue_name}"
    try:
        for n, (label, count, cmd, items) in enumerate(variants):
            if count <= 0 or items <= 0:
                continue
            # Startup + shutdown on an empty queue (imports, graph load, registration).
            empty = run_burst(cmd, env, conn, dq.queue_key, workers_set, 0, scratch,
                              f"{label}-empty")
            worker_keys.update(empty.pop("worker_keys"))  # type: ignore[arg-type]
            github.take_counts()
            batch = build_deliveries(count, items, token, tag=f"r{n}")
            enqueue_s = enqueue_all(conn, dq, batch)
            busy = c.wait_quiet(args.wait_quiet)
            run = run_burst(cmd, env, conn, dq.queue_key, workers_set, count, scratch,
                            label.replace(" ", "_"))
            worker_keys.update(run.pop("worker_keys"))  # type: ignore[arg-type]
            run["count"] = count
            run["work_items"] = items
            run["github_requests"] = github.take_counts()
            run["machine_busy_pct_before"] = busy
            run["enqueue_rate"] = round(count / enqueue_s, 1)
            run["empty_queue_wall_s"] = empty["wall_s"]
            run["empty_queue_max_rss_kib"] = empty.get("max_rss_kib")
            working = run["wall_s"] - empty["wall_s"]  # type: ignore[operator]
            run["rate_wall_minus_startup"] = round(count / working, 1) if working > 0 else None
            if "user_s" in run:
                cpu = run["user_s"] + run["sys_s"] - empty.get("user_s", 0) - empty.get("sys_s", 0)
                run["cpu_ms_per_delivery"] = round(1000 * cpu / count, 3)
            run["check"] = check_handled(conn, prefix, queue_name,
                                         [h["X-GitHub-Delivery"] for h, _ in batch])
            run["ok"] = run["returncode"] == 0 and not any(run["check"].values())
            if run["check"]["rq_failed"]:
                run["first_failure"] = first_failure(conn, queue_name)
            result["runs"][label] = run
            print(f"  worker {label:24s}: {run.get('rate')} deliveries/s, peak RSS "
                  f"{(run.get('max_rss_kib') or 0) / 1024:.1f} MiB, ok={run['ok']}",
                  file=sys.stderr)
            c.cleanup_redis(conn, token, tuple(worker_keys))
    finally:
        github.close()
        c.cleanup_redis(conn, token, tuple(worker_keys), created_globals)
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"{'worker (one process, burst)':<28}{'n':>6}{'deliv/s':>10}{'wall-startup':>14}"
             f"{'CPU ms/del':>12}{'peak RSS MiB':>14}{'startup s':>11}  ok"]
    for label, run in result["runs"].items():
        lines.append(
            f"{label:<28}{run['count']:>6}{run.get('rate', '-'):>10}"
            f"{str(run.get('rate_wall_minus_startup', '-')):>14}"
            f"{str(run.get('cpu_ms_per_delivery', '-')):>12}"
            f"{(run.get('max_rss_kib') or 0) / 1024:>14.1f}"
            f"{run['empty_queue_wall_s']:>11}  {run['ok']}")
    return lines


if __name__ == "__main__":
    res = main()
    print("\n".join(summary_lines(res)))
