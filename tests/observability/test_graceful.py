"""Real processes: ``the-loop worker`` finishes its current job on SIGTERM and exits 0;
``the-loop serve`` (gunicorn, 2 workers) merges its workers' counters at /metrics, logs
JSON lines, and stops cleanly on SIGTERM, removing its metrics directory."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from rq import Queue
from rq.job import Job, JobStatus

from tests.conftest import REPO_ROOT, load_fixture, sign_body
from tests.observability.helpers import free_port, samples, value, wait_until
from tests.support.processes import start, stop

BIN = Path(sys.executable).parent
SLOW_SECONDS = 3.0
SECRET = "graceful-secret-4d2a"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


def _env(ns, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("THE_LOOP_", "PROMETHEUS_")) and k not in (
               "GH_TOKEN", "GITHUB_TOKEN", "REDIS_URL")}
    env.update({
        "REDIS_URL": ns.url,
        "THE_LOOP_REDIS_PREFIX": ns.prefix,
        "THE_LOOP_QUEUE": ns.queue_name,
        "THE_LOOP_LOG_FORMAT": "json",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH"))
                                      if p),
    })
    env.update(extra)
    return env


def _json_lines(path: Path) -> list[dict]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object


def test_worker_finishes_the_current_job_on_sigterm_and_exits_0(redis_ns, tmp_path):
    port = free_port()
    env = _env(
        redis_ns,
        # A transport must be configured for the worker to start; nothing calls it here.
        GH_TOKEN="test-token-never-sent",
        THE_LOOP_GITHUB_API_URL="http://127.0.0.1:9/api/v3",
        THE_LOOP_SLACK_TRANSPORT="webhook",
        THE_LOOP_SLACK_WEBHOOK_URL="https://hooks.slack.com/services/T0/B0/test",
        THE_LOOP_WORKER_METRICS_PORT=str(port),
        THE_LOOP_HOST="127.0.0.1",
    )
    out = tmp_path / "worker.out"
    proc = start([str(BIN / "the-loop"), "worker"], env, out)
    try:
        def metrics_up() -> bool:
            assert proc.poll() is None, f"worker exited early:\n{out.read_text()}"
            return _get(f"http://127.0.0.1:{port}/metrics")[0] == 200

        wait_until(metrics_up, what="the worker's metrics port")
        status, text = _get(f"http://127.0.0.1:{port}/metrics")
        assert "# TYPE the_loop_job_duration_seconds histogram" in text

        marker = f"{redis_ns.prefix}:slow-job-done"
        job_id = redis_ns.new_id()
        Queue(redis_ns.queue_name, connection=redis_ns.client).enqueue(
            "tests.observability.jobs.slow_job", marker, SLOW_SECONDS, job_id=job_id,
            job_timeout=60)
        wait_until(lambda: Job.fetch(job_id, connection=redis_ns.client).get_status()
                   == JobStatus.STARTED, what="the job to start")
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=SLOW_SECONDS + 20)
        stopped_after = time.monotonic() - signalled
    finally:
        stop(proc)  # whatever happened, nothing of its group is left

    log = out.read_text()
    assert returncode == 0, log
    assert redis_ns.client.get(marker) == b"done", log  # the job ran to its end
    assert Job.fetch(job_id, connection=redis_ns.client).get_status() == JobStatus.FINISHED
    assert SLOW_SECONDS / 2 <= stopped_after < SLOW_SECONDS + 15  # it waited for the job
    lines = _json_lines(out)
    assert any("warm shut down requested" in line["message"].lower() for line in lines)
    assert any(line.get("delivery_id") == job_id for line in lines)
    assert "test-token-never-sent" not in log


def test_web_merges_worker_counters_logs_json_and_stops_on_sigterm(redis_ns, tmp_path):
    port = free_port()
    env = _env(redis_ns, THE_LOOP_WEBHOOK_SECRET=SECRET, THE_LOOP_WEB_WORKERS="2")
    out = tmp_path / "web.out"
    proc = start([str(BIN / "the-loop"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                 env, out)
    url = f"http://127.0.0.1:{port}"
    metrics_dir = Path(tempfile.gettempdir()) / f"the-loop-metrics-{proc.pid}"
    body = load_fixture("issues", "opened")
    deliveries = [redis_ns.new_id() for _ in range(6)]
    try:
        def ready() -> bool:
            assert proc.poll() is None, f"serve exited early:\n{out.read_text()}"
            return _get(f"{url}/readyz")[0] == 200

        wait_until(ready, what="the receiver's /readyz")
        assert metrics_dir.is_dir()
        for delivery in deliveries:  # one connection each: both workers take some
            request = urllib.request.Request(f"{url}/webhook", data=body, method="POST",
                                             headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": "issues",
                "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": sign_body(body, SECRET),
            })
            with urllib.request.urlopen(request, timeout=5) as response:
                assert response.status == 202
        for _ in range(4):  # whichever worker answers the scrape, the totals are merged
            status, text = _get(f"{url}/metrics")
            assert status == 200
            parsed = samples(text)
            assert value(parsed, "the_loop_webhook_deliveries_total", event="issues",
                         action="opened", code="202") == len(deliveries)
            assert value(parsed, "the_loop_queue_depth", queue=redis_ns.queue_name) == len(
                deliveries)
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=35)
    finally:
        stop(proc)  # whatever happened, nothing of its group is left

    log = out.read_text()
    assert returncode == 0, log
    assert not metrics_dir.exists()
    lines = _json_lines(out)
    queued = {line["delivery_id"]: line for line in lines
              if line["logger"] == "the_loop.webhook"}
    assert set(deliveries) <= queued.keys()
    assert all(queued[d]["work_item"] == "github:Codertocat/Hello-World#1" for d in deliveries)
    assert any(line["logger"] == "gunicorn.error" and "Shutting down" in line["message"]
               for line in lines)
    assert SECRET not in log
    assert json.loads(body)["issue"]["title"] not in log
