"""Deliveries that freeze or kill their worker, end to end: gunicorn and two workers as
real processes (restarted when they exit, as a supervisor does), the real Redis and the
loopback fake GitHub. The workers' command parser is poisoned by a marker
(:mod:`tests.support.poison_worker`): one approver comment freezes the interpreter in C
code with its lock held (what a backtracking parser did on 1,800 backticks), another
ends the process at once."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from foundation.inbox.keys import Keys
from tests.e2e.test_end_to_end import (
    BIN,
    REPO,
    REQUIREMENTS,
    comment_payload,
    enrol_payload,
    post,
    running_stack,
    wait_until,
)
from tests.support.poison_worker import EXIT, FREEZE
from tests.support.processes import start, stop

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ATTEMPTS = 3
FAST = {
    # A worker silent for 2 s is dead to the others (and its watchdog ends it).
    "THE_LOOP_WORKER_TTL": "2", "THE_LOOP_REAP_INTERVAL": "0.3",
    "THE_LOOP_LOCK_TIMEOUT": "15", "THE_LOOP_DELIVERY_ATTEMPTS": str(ATTEMPTS),
    "THE_LOOP_DELIVERY_BACKOFF": "0.2", "THE_LOOP_WORKER_METRICS_PORT": "0",
    "THE_LOOP_GITHUB_WRITES_PER_MINUTE": "6000", "THE_LOOP_GITHUB_WRITES_PER_HOUR": "60000",
    "THE_LOOP_LOG_FORMAT": "text",
}


class Supervisor:
    """``count`` poisoned workers, each started again when it exits; records how each
    exited."""

    def __init__(self, env, logs, count=2):
        self.env, self.logs = env, logs
        self.started = 0
        self.exits: list[int] = []
        self.procs = [self._start() for _ in range(count)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        return start([str(BIN / "python"), "-m", "tests.support.poison_worker"], self.env,
                     self.logs / f"worker-{self.started}.out", cwd=ROOT)

    def _watch(self):
        while not self._stop.wait(0.2):
            for i, proc in enumerate(self.procs):
                if proc.poll() is not None:
                    self.exits.append(proc.returncode)
                    self.procs[i] = self._start()

    def stop(self):
        self._stop.set()
        self._thread.join(5)
        for proc in self.procs:
            stop(proc)

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace")
                         for p in sorted(self.logs.glob("worker-*.out")))


def enrol(number):
    p = enrol_payload()
    p["issue"]["number"] = number
    return p


def approval(number, body, cid):
    p = comment_payload("Codertocat", body)
    p["issue"]["number"] = number
    p["comment"]["id"] = cid
    return p


def test_deliveries_that_freeze_or_kill_workers_are_parked_and_stall_nothing_else(
        redis_ns, tmp_path):
    """Given two workers and issues #1 and #3 waiting at requirements-approval
    When an approver's comment on #1 freezes any worker that parses it, one on #3 kills
      any worker that parses it, and then issue #2 is enrolled
    Then #2 is processed while the poisoned deliveries are still going round; each
      poisoned delivery is parked after 3 attempts counted across workers, with a reason
      `the-loop deliveries failed` shows and its work item saying why it is held; frozen
      workers were ended by their watchdog (status 1, tracebacks in their log), killed
      ones exited; and afterwards a new work item is processed as usual."""
    keys = Keys(redis_ns.prefix, redis_ns.queue_name)
    with running_stack(redis_ns, tmp_path, extra_env=FAST, worker=False) as (
            fake, url, env, store, logs):
        for n in (2, 3, 4):
            fake.add_file(REPO, f"specs/{n}/requirements.md", REQUIREMENTS)
        workers = Supervisor(env, logs)
        try:
            for n in (1, 3):
                assert post(url, "issues", enrol(n))[0].status_code == 202
            for n in (1, 3):
                wait_until(lambda n=n: getattr(store.load(f"github:{REPO}#{n}"),
                                               "current_node", None) == "requirements-approval",
                           timeout=60, what=f"#{n} at requirements-approval")
            _, frozen = post(url, "issue_comment", approval(1, f"/approve\n\n{FREEZE}", 71))
            _, killed = post(url, "issue_comment", approval(3, f"/approve\n\n{EXIT}", 73))
            assert post(url, "issues", enrol(2))[0].status_code == 202

            wait_until(lambda: getattr(store.load(f"github:{REPO}#2"), "current_node",
                                       None) == "requirements-approval",
                       timeout=60, what="#2 processed")
            assert not redis_ns.client.hexists(keys.failed, frozen)  # still going round

            def parked():
                return redis_ns.client.hexists(keys.failed, frozen) and \
                    redis_ns.client.hexists(keys.failed, killed)

            wait_until(parked, timeout=180, what="both poisoned deliveries parked")
            listed = subprocess.run([str(BIN / "the-loop"), "deliveries", "failed", "--json"],
                                    env=env, capture_output=True, text=True, timeout=60,
                                    check=True)
            rows = {r["delivery"]: r for r in json.loads(listed.stdout)["failed"]}
            for delivery, number in ((frozen, 1), (killed, 3)):
                assert rows[delivery]["work_item"] == f"github:{REPO}#{number}"
                assert rows[delivery]["attempts"] == ATTEMPTS
                assert f"did not finish in {ATTEMPTS} attempts" in rows[delivery]["reason"]
                state = store.load(f"github:{REPO}#{number}")
                assert state.blocked_by_delivery["delivery"] == delivery
                assert state.current_node == "requirements-approval"  # never decided
            assert 1 in workers.exits and 3 in workers.exits
            assert len(workers.exits) >= 2 * ATTEMPTS
            assert "Timeout" in workers.log() and "in poisoned" in workers.log()

            before = len(workers.exits)
            assert post(url, "issues", enrol(4))[0].status_code == 202
            wait_until(lambda: getattr(store.load(f"github:{REPO}#4"), "current_node",
                                       None) == "requirements-approval",
                       timeout=60, what="#4 processed after the parking")
            time.sleep(0.5)
            assert len(workers.exits) == before  # nothing poisoned is left going round
        finally:
            workers.stop()
