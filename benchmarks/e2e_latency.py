"""End-to-end latency: from the receiver's 202 to the first visible write on GitHub.

Real processes: the receiver (``the-loop serve``: gunicorn with the_loop/gunicorn_conf.py)
and ONE worker (``the-loop worker``), against the loopback fake GitHub
(``the_loop/sandbox/fakegithub/http/``, served from this process). An open-loop client
sends ``--rate`` signed ``issues.labeled`` deliveries a second for ``--seconds``, each
adding the enrolment label (``the-loop``) to a new issue, so each one enrols a work item
whose first node writes its ``phase:`` label. Request *i* is sent at ``t0 + i/rate``
whatever happened before, each on a new connection (as GitHub delivers).

- **latency** = (arrival at the fake of the first write -- POST, PUT, PATCH or DELETE --
  for that issue) - (the moment the client read the receiver's 202). Both clocks are
  this process's ``time.monotonic``; the fake's HTTP server runs in a thread here, the
  client's requests in others (20 a second: a small share of one CPU).
- ``answer_ms``: the receiver's own time to the 202, from the scheduled send.
- The write budget is out of reach (``THE_LOOP_GITHUB_WRITES_PER_MINUTE`` = 1,000,000,
  read and write intervals 0): the throttle is off, as the target says.

Redis: DB 13 (``THE_LOOP_BENCH_REDIS_URL``), a unique prefix and queue name; afterwards
only keys containing the run's token are deleted, plus its RQ worker keys.

    .venv/bin/python benchmarks/e2e_latency.py [--rate 20] [--seconds 15] [--json out]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
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
from turns import private_key

from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from webhook.signature import sign

REPO = "Codertocat/Hello-World"
SECRET = "e2e-bench-secret"
_WRITES = ("POST", "PUT", "PATCH", "DELETE")


class FirstWrites:
    """WSGI middleware in front of the fake: the monotonic time of the first write
    request to each issue (``/repos/OWNER/NAME/issues/N/...``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.first: dict[int, tuple[float, str]] = {}
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        now = time.monotonic()
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
        if method in _WRITES and "/issues/" in path:
            number = path.split("/issues/", 1)[1].split("/", 1)[0]
            if number.isdigit():
                with self.lock:
                    self.first.setdefault(int(number), (now, f"{method} {path}"))
        return self.app(environ, start_response)


def delivery(number: int) -> bytes:
    """The ``issues.labeled`` fixture for issue ``number``, adding the enrolment label."""
    from tests.conftest import load_fixture

    payload = json.loads(load_fixture("issues", "labeled"))
    payload["label"] = c.gh_label("the-loop")
    payload["issue"]["labels"].append(c.gh_label("the-loop"))
    payload["issue"]["number"] = number
    payload["installation"] = {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}
    return json.dumps(payload).encode()




def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="202 -> first GitHub write, one worker.")
    p.add_argument("--rate", type=float, default=20.0, help="deliveries/s (default 20)")
    p.add_argument("--seconds", type=float, default=15.0, help="duration (default 15)")
    p.add_argument("--warmup", type=int, default=10,
                   help="deliveries sent at the rate before the measured ones and not "
                        "counted (default 10)")
    p.add_argument("--profile", metavar="FILE",
                   help="record the worker with py-spy (if installed) into FILE, "
                        "collapsed stacks (py-spy's 'raw' format)")
    p.add_argument("--json", help="also write the result object to this file")
    args = p.parse_args(argv)

    token = c.new_token()
    key = private_key()
    fake = HttpFakeGitHub(app_key=key)
    fake.add_repo(REPO, default_branch="master")
    fake.add_file(REPO, ".the-loop/collaborators.yaml",
                  "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n")
    writes = FirstWrites(fake.app.wsgi_app)
    fake.app.wsgi_app = writes  # type: ignore[method-assign]
    api_url, stop_fake = serve(fake)
    conn = redis.Redis.from_url(c.BENCH_REDIS_URL)
    conn.ping()
    env = c.clean_env(
        REDIS_URL=c.BENCH_REDIS_URL, THE_LOOP_REDIS_PREFIX=token, THE_LOOP_QUEUE=f"{token}-q",
        THE_LOOP_WEBHOOK_SECRET=SECRET, THE_LOOP_GITHUB_API_URL=api_url,
        THE_LOOP_GITHUB_APP_ID="1", THE_LOOP_GITHUB_PRIVATE_KEY=key,
        THE_LOOP_GITHUB_WRITE_INTERVAL="0", THE_LOOP_GITHUB_READ_INTERVAL="0",
        THE_LOOP_GITHUB_WRITES_PER_MINUTE="1000000",
        THE_LOOP_GITHUB_WRITES_PER_HOUR="1000001",
        THE_LOOP_LOG_LEVEL="WARNING", THE_LOOP_WORKER_METRICS_PORT="0")
    log_dir = Path(tempfile.mkdtemp(prefix="the-loop-e2e-"))
    port = c.free_port()
    receiver = App("receiver", [str(c.VENV_BIN / "the-loop"), "serve", "--port", str(port),
                                "--host", "127.0.0.1"], env, port, log_dir)
    worker = App("worker", [str(c.VENV_BIN / "the-loop"), "worker"], env, 0, log_dir,
                 single_process=True)
    n_warm, n = args.warmup, int(args.rate * args.seconds)
    bodies = [delivery(1000 + i) for i in range(n_warm + n)]
    answered: dict[int, tuple[int, float, float]] = {}
    result: dict[str, Any] = {"machine": c.machine(), "code": c.code_version(),
                              "settings": {"rate": args.rate, "seconds": args.seconds,
                                           "warmup": n_warm, "workers": 1}}

    def send(index: int, at: float) -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        body = bodies[index]
        request = urllib.request.Request(receiver.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": f"{token}-{index}",
            "X-Hub-Signature-256": sign(body, SECRET)})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status = answer.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = 0
        answered[1000 + index] = (status, time.monotonic(), at)

    try:
        c.wait_http_ok(receiver.url.replace("/webhook", "/readyz"))
        time.sleep(2.0)  # the worker registers with RQ and waits on the queue
        busy = c.wait_quiet(0)
        cpu0 = worker.cpu_seconds()
        spy = None
        if args.profile:
            spy = subprocess.Popen(
                [str(c.VENV_BIN / "py-spy"), "record", "--pid", str(worker.proc.pid),
                 "--format", "raw", "--output", args.profile, "--rate", "250",
                 "--duration", str(int(args.seconds + 2)), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.monotonic() + 0.5
        with ThreadPoolExecutor(max_workers=64) as pool:
            for i in range(n_warm + n):
                pool.submit(send, i, t0 + i / args.rate)
        settle = time.monotonic() + 15
        while time.monotonic() < settle and len(writes.first) < len(answered):
            time.sleep(0.1)
        cpu1 = worker.cpu_seconds()
        if spy is not None:
            spy.wait(timeout=60)
        latencies, answers, missing = [], [], []
        for i in range(n_warm, n_warm + n):
            number = 1000 + i
            status, at, scheduled = answered.get(number, (0, 0.0, 0.0))
            answers.append(1000 * (at - scheduled))
            first = writes.first.get(number)
            if status != 202 or first is None:
                missing.append(number)
                continue
            latencies.append(1000 * (first[0] - at))
        result.update({
            "machine_busy_pct_before": busy,
            "measured": n, "missing": len(missing),
            "first_write": next(iter(writes.first.values()))[1] if writes.first else None,
            "latency_ms": {
                **{k: c.percentile(latencies, q) for k, q in
                   (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))},
                "mean": round(statistics.fmean(latencies), 2) if latencies else None},
            "answer_ms": {"p50": c.percentile(answers, 0.5), "p99": c.percentile(answers, 0.99)},
            "worker_cpu_ms_per_delivery": round(1000 * (cpu1 - cpu0) / (n_warm + n), 2),
            "github_requests_per_delivery": round(len(fake.requests) / (n_warm + n), 2),
            # The issue-level requests of the first measured delivery, in order.
            "github_issue_requests_of_one": [
                f"{r.method} {r.path}" for r in fake.requests
                if f"/issues/{1000 + n_warm}/" in r.path + "/"],
        })
    finally:
        worker.stop()
        receiver.stop()
        stop_fake()
        result["worker_log_tail"] = (log_dir / "worker.log").read_text(
            errors="replace").splitlines()[-5:] if (log_dir / "worker.log").exists() else []
        workers = [k.decode() for k in conn.smembers("rq:workers") if token in k.decode()]
        c.cleanup_redis(conn, token, tuple(workers))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    res = main()
    lat = res.get("latency_ms", {})
    print(f"202 -> first write, {res['settings']['rate']:g}/s, 1 worker: "
          f"p50 {lat.get('p50')} ms, p90 {lat.get('p90')} ms, p99 {lat.get('p99')} ms, "
          f"max {lat.get('max')} ms; missing {res.get('missing')} of {res.get('measured')}; "
          f"receiver answer p50/p99 {res.get('answer_ms')}; worker CPU "
          f"{res.get('worker_cpu_ms_per_delivery')} ms/delivery; machine "
          f"{res.get('machine_busy_pct_before')}% busy before",
          file=sys.stderr)
    print(json.dumps(res))
