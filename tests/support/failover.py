"""The failover proof, shared by ``tests/e2e/test_failover.py`` (in ``make test``) and
``benchmarks/failover.py`` (figures): a Redis primary SIGKILLed while deliveries stream in.

It starts, all on loopback, a replicated Redis (:class:`tests.support.sentinel.
ReplicatedRedis`: a primary, one replica, three Sentinels), the loopback fake GitHub (the
workers'), the App's webhook as GitHub keeps it (:class:`the_loop.sandbox.github.
SandboxGitHub`: its delivery log, ``GET /app/hook/deliveries``, and its redeliveries), two
receivers (``the-loop serve``: gunicorn, as in production) and two ``the-loop worker``
processes, every one of them finding the primary through the Sentinels
(``THE_LOOP_REDIS_SENTINELS``). Then:

1. each work item is enrolled (its ``issues`` ``labeled`` delivery) and processed;
2. ``posts`` signed ``issue_comment`` deliveries (plain remarks, each advancing its work
   item: a ``delivery.received`` entry in its log) are sent at ``rate`` per second,
   alternating between the receivers, each once (an answer other than 2xx is not sent
   again here: redelivering those is the reconciler's job). Each post's outcome (the
   receiver's status, 0 when not reached) is logged in the App's delivery log as the
   sandbox logs its own deliveries (:meth:`~the_loop.sandbox.fakegithub.http.
   HttpFakeGitHub.log_delivery`): GitHub's record of what it delivered. The test's own
   senders post, not the sandbox's one delivery thread, so that the load keeps its rate
   through the receivers' stalls at the kill;
3. when ``kill_at`` of them were sent, the primary is SIGKILLed (with ``lag_answers``,
   the replica is first paused, SIGSTOP, until that many more deliveries were answered,
   and resumed after the kill); the Sentinels promote the replica, so what it had not
   received is gone; the killed node is started
   again as the new primary's replica (as its pod would be), so that
   ``THE_LOOP_RECEIVER_REPLICAS=1`` can be met again;
4. once everything accepted is processed (or ``timeout``), each delivery's fate is read
   from the new primary: how many ``delivery.received`` entries it left (0: lost, 2:
   processed twice) and, for the refused ones, whether a "seen" marker or a record of it
   was kept (a kept marker would make its redelivery a duplicate: dropped);
5. with ``redeliver``, once the replica is in sync again, the reconciler
   (:class:`workers.reconcile.Reconciler`, as a worker runs it: the delivery log read over
   loopback HTTP with the App's JWT) asks GitHub to redeliver what it recorded as failed
   (``POST /app/hook/deliveries/{id}/attempts``) or what has no "seen" marker in Redis;
   the fake posts each once to the first receiver (GitHub's one webhook URL), same
   ``X-GitHub-Delivery``, logged with ``redelivery: true``, and each must then be
   processed once too; a second run must ask nothing.

A delivery "answered 2xx" is acknowledged: 202 (queued) or 200 (already seen: the
receiver's retry of a script whose first answer the dying primary swallowed).
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import Keys
from foundation.redis import SERVICE, connect
from foundation.settings import GitHubSettings
from integrations.github import GitHubClients
from integrations.hook_deliveries import AppHookDeliveries
from tests.conftest import sign_body
from tests.support import processes
from tests.support.faults import (
    APPROVER,
    BIN,
    SECRET,
    Post,
    Scenario,
    Stack,
    _comment,
    _enrol,
    _free_port,
    ref,
)
from tests.support.sentinel import ReplicatedRedis, wait_until
from the_loop.sandbox.fakegithub.http import serve
from the_loop.sandbox.github import SandboxGitHub
from workers.reconcile import ReconcileKeys, Reconciler

#: What a plain remark says (it advances its work item, decides nothing).
REMARK = "Looks reasonable so far."


@dataclass
class Plan:
    """What to send and when to kill.

    Attributes:
        replicas: ``THE_LOOP_RECEIVER_REPLICAS``.
        posts: comment deliveries sent (after the enrolments).
        items: work items.
        rate: deliveries sent per second.
        kill_at: share of ``posts`` sent when the primary is SIGKILLed.
        replicas_timeout_ms: ``THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS``.
        lag_answers: answers to wait for while the replica is paused before the kill
            (0, the default: no pause, the replica as far behind as loopback makes it).
            On loopback the paused replica still finds the whole stream in its socket
            buffer when it resumes, so the pause loses nothing with replicas 0; with 1 it
            makes the WAITs time out (503, taken back). Runs with a pause have left the
            workers meeting Redis protocol errors for minutes after the promotion (not
            yet understood): it is off in the test.
        redeliver: run the reconciler at the end (step 5).
        timeout: seconds to wait for everything accepted to be processed.
        senders: concurrent senders (keep-alive connections).
    """

    replicas: int
    posts: int = 600
    items: int = 20
    rate: float = 100.0
    kill_at: float = 0.5
    replicas_timeout_ms: int = 500
    lag_answers: int = 0
    redeliver: bool = True
    timeout: float = 240.0
    senders: int = 8


@dataclass
class Answer:
    delivery: str
    item: int
    status: int
    sent_at: float
    seconds: float


@dataclass
class Result:
    """What one run measured and found."""

    plan: Plan
    answers: list[Answer] = field(default_factory=list)
    killed_at: float = 0.0
    promoted_after: float = 0.0
    resynced_after: float = 0.0
    first_processed_after: float | None = None
    received: collections.Counter[str] = field(default_factory=collections.Counter)
    #: refused deliveries of which the new primary keeps a "seen" marker, unprocessed
    refused_kept: list[str] = field(default_factory=list)
    #: refused deliveries processed before any redelivery (a worker had them, or the
    #: primary died after writing them: their redelivery is then a duplicate)
    refused_processed: list[str] = field(default_factory=list)
    #: acknowledged, not processed once everything accepted was (before step 5): lost
    lost: list[str] = field(default_factory=list)
    #: the reconciler's first run: guid -> reason (``failed``/``unreceived``) it asked
    asked: dict[str, str] = field(default_factory=dict)
    #: its second run's (``None``: not run)
    asked_again: dict[str, str] | None = None
    #: guid -> attempts logged with ``redelivery: true``
    redeliveries: collections.Counter[str] = field(default_factory=collections.Counter)
    #: the receivers' status -> redelivery attempts answered so
    redelivered: collections.Counter[int] = field(default_factory=collections.Counter)
    settled: bool = False
    elapsed: float = 0.0

    @property
    def acknowledged(self) -> list[str]:
        return [a.delivery for a in self.answers if a.status in (200, 202)]

    @property
    def refused(self) -> list[str]:
        return [a.delivery for a in self.answers if a.status not in (200, 202)]

    @property
    def twice(self) -> list[str]:
        return sorted(d for d, n in self.received.items() if n > 1)

    def figures(self) -> dict[str, Any]:
        statuses = collections.Counter(a.status for a in self.answers)
        refused = self.refused
        return {
            "replicas": self.plan.replicas, "posts": self.plan.posts,
            "answers_while_replica_paused": self.plan.lag_answers,
            "rate_per_s": self.plan.rate,
            "answered": {str(k): v for k, v in sorted(statuses.items())},
            "acknowledged": len(self.acknowledged), "lost_acknowledged": len(self.lost),
            "processed_twice": len(self.twice), "refused": len(refused),
            "refused_processed_anyway": len(self.refused_processed),
            "refused_marker_kept": len(self.refused_kept),
            "reconciler_asked": dict(collections.Counter(self.asked.values())),
            "reconciler_asked_again": None if self.asked_again is None
            else len(self.asked_again),
            "redelivered": dict(self.redelivered),
            "promoted_after_s": round(self.promoted_after, 2),
            "resynced_after_s": round(self.resynced_after, 2),
            "first_processed_after_kill_s": None if self.first_processed_after is None
            else round(self.first_processed_after, 2),
            "settled": self.settled, "elapsed_s": round(self.elapsed, 1),
        }


def _post(session: requests.Session, url: str, post: Post, hooks: SandboxGitHub) -> int:
    """Post ``post`` once to the receiver at ``url`` and log the attempt in ``hooks``'s
    delivery log; returns the receiver's status (0: not reached)."""
    headers = {"Content-Type": "application/json", "X-GitHub-Event": post.event,
               "X-GitHub-Delivery": post.delivery,
               "X-Hub-Signature-256": sign_body(post.body, SECRET)}
    started = time.monotonic()
    try:
        status = session.post(f"{url}/webhook", data=post.body, headers=headers,
                              timeout=15).status_code
    except requests.RequestException:
        status = 0
    payload = json.loads(post.body)
    hooks.log_delivery(post.delivery, post.event, payload.get("action"), status,
                       body=post.body, duration=round(time.monotonic() - started, 3),
                       installation_id=hooks.installation_id,
                       repository_id=(payload.get("repository") or {}).get("id"))
    return status


def _reconciler(client: Any, prefix: str, queue: str, api_url: str, env: dict[str, str]
                ) -> Reconciler:
    """The reconciler a worker of this stack runs (:func:`the_loop.wiring.reconciler`'s
    parts), reading the App's delivery log at ``api_url`` with the App's id and key in
    ``env``."""
    github = GitHubSettings(api_url=api_url, app_id=int(env["THE_LOOP_GITHUB_APP_ID"]),
                            private_key=env["THE_LOOP_GITHUB_PRIVATE_KEY"], retries=0,
                            read_interval=0.0, write_interval=0.0)
    seen = DeliveryQueue(client, queue_name=queue, prefix=prefix).seen
    return Reconciler(client, ReconcileKeys(prefix),
                      AppHookDeliveries(GitHubClients(github).for_app()), seen,
                      interval=600, owner="failover-test")


def _received(store: Any, items: int) -> collections.Counter[str]:
    """Delivery id -> its ``delivery.received`` entries, over every work item's log."""
    counts: collections.Counter[str] = collections.Counter()
    for item in range(1, items + 1):
        for entry in store.events(ref(item)):
            if entry.type == "delivery.received" and entry.caused_by:
                counts[entry.caused_by] += 1
    return counts


def _first_after(store: Any, items: int, since: float) -> float | None:
    """Seconds from ``since`` to the first ``delivery.received`` entry stamped after it
    (the first delivery processed on the new primary), or ``None``."""
    stamps = [e.at for item in range(1, items + 1) for e in store.events(ref(item))
              if e.type == "delivery.received" and e.at > since]
    return min(stamps) - since if stamps else None


def run(plan: Plan, logs: Path, token: str) -> Result:
    """The whole run (see the module docstring); processes and Redis are stopped at the
    end whatever happens."""
    from workers.state import RedisStateStore

    result = Result(plan)
    prefix = queue = f"the-loop-failover-{token}"
    rs = ReplicatedRedis()
    rs.start()
    stack: Stack | None = None
    second: Any = None
    hooks: SandboxGitHub | None = None
    stop_hooks: Any = None
    started = time.monotonic()
    try:
        sc = Scenario(items=plan.items, posts=plan.items, duplicate_share=0.0, workers=2)
        stack = Stack(sc, rs.env["REDIS_URL"], prefix, queue, logs)
        stack.env.update(rs.env)
        stack.env.update({
            "THE_LOOP_RECEIVER_REPLICAS": str(plan.replicas),
            "THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS": str(plan.replicas_timeout_ms),
            "THE_LOOP_WEB_WORKERS": "1",
            # A failover takes the primary away for about a second: not a dead worker.
            "THE_LOOP_WORKER_TTL": "10", "THE_LOOP_LOCK_TIMEOUT": "30",
        })
        stack.start()
        port = _free_port()
        second = processes.start(
            [str(BIN / "the-loop"), "serve", "--port", str(port), "--host", "127.0.0.1"],
            stack.env, logs / "web-2.out")
        urls = [stack.url, f"http://127.0.0.1:{port}"]
        # The App's webhook: its delivery log, and redeliveries posted (once each, as
        # GitHub does) to the first receiver.
        hooks = SandboxGitHub(webhook_url=f"{urls[0]}/webhook", secret=SECRET,
                              app_id=int(stack.env["THE_LOOP_GITHUB_APP_ID"]),
                              app_key=stack.env["THE_LOOP_GITHUB_PRIVATE_KEY"],
                              delivery_attempts=1)
        hooks_url, stop_hooks = serve(hooks)
        hooks.start_delivering()
        wait_until(lambda: requests.get(f"{urls[1]}/readyz", timeout=1).status_code == 200,
                   30, "the second receiver ready")
        client = connect(rs.env["REDIS_URL"], SERVICE, sentinel=rs.sentinel)
        store = RedisStateStore(client, prefix)

        # 1. Enrol every work item, and wait until each is processed.
        with requests.Session() as session:
            for item in range(1, plan.items + 1):
                post = Post(item, f"{token}-{item:03d}-000", "issues",
                            json.dumps(_enrol(item)).encode())
                status = _post(session, urls[item % 2], post, hooks)
                if status != 202:
                    raise AssertionError(f"enrolment of item {item} answered {status}")
        wait_until(lambda: len(_received(store, plan.items)) == plan.items, 120,
                   "every work item enrolled")

        # 2. The comments, at plan.rate per second, each once.
        posts = [Post(k % plan.items + 1, f"{token}-{k % plan.items + 1:03d}-{k + 1:04d}",
                      "issue_comment",
                      json.dumps(_comment(k % plan.items + 1, k + 1, APPROVER, "User",
                                          REMARK)).encode())
                 for k in range(plan.posts)]
        lock = threading.Lock()
        cursor = [0]
        begin = time.monotonic() + 0.2

        def sender() -> None:
            with requests.Session() as session:
                while True:
                    with lock:
                        k = cursor[0]
                        cursor[0] += 1
                    if k >= len(posts):
                        return
                    due = begin + k / plan.rate
                    pause = due - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)  # pacing the load, not waiting for an event
                    sent = time.monotonic()
                    wall = time.time()
                    status = _post(session, urls[k % 2], posts[k], hooks)
                    with lock:
                        result.answers.append(Answer(posts[k].delivery, posts[k].item, status,
                                                     wall, time.monotonic() - sent))

        threads = [threading.Thread(target=sender, daemon=True) for _ in range(plan.senders)]
        for t in threads:
            t.start()
        # 3. The kill, once kill_at of the posts were sent.
        wait_until(lambda: len(result.answers) >= plan.kill_at * plan.posts, 120,
                   "the first half sent")
        if plan.lag_answers:
            rs.pause_replica()
            behind = len(result.answers) + plan.lag_answers
            try:
                wait_until(lambda: len(result.answers) >= behind, 60,
                           "answers while the replica lags")
            finally:
                result.killed_at = time.time()
                killed = time.monotonic()
                rs.kill_primary()
                rs.resume_replica()
        else:
            result.killed_at = time.time()
            killed = time.monotonic()
            rs.kill_primary()
        rs.wait_promoted()
        result.promoted_after = time.monotonic() - killed
        rs.restart_old_primary()
        result.resynced_after = time.monotonic() - killed
        for t in threads:
            t.join(timeout=plan.posts / plan.rate + 120)

        # 4. Everything acknowledged processed (or the timeout), nothing pending.
        acknowledged = set(result.acknowledged)

        def settled() -> bool:
            result.received = _received(store, plan.items)
            return acknowledged <= set(result.received) and _idle(client, prefix, queue,
                                                                  plan.items)

        try:
            wait_until(settled, plan.timeout, "every acknowledged delivery processed")
            result.settled = True
        except AssertionError:
            result.settled = False
        result.first_processed_after = _first_after(store, plan.items, result.killed_at)
        keys = Keys(prefix, queue)
        result.refused_kept = [d for d in result.refused if not result.received[d]
                               and client.exists(keys.seen(d))]
        result.refused_processed = [d for d in result.refused if result.received[d]]

        result.lost = [d for d in result.acknowledged if result.received[d] == 0]

        # 5. The reconciler asks GitHub for what it recorded as failed (or what has no
        # record), once the replica is back (WAIT 1 can be met), then runs again.
        if plan.redeliver:
            wait_until(lambda: rs.in_sync(rs.primary_port), 30, "the replica in sync")
            reconciler = _reconciler(client, prefix, queue, hooks_url, stack.env)
            first = reconciler.run()
            result.asked = dict(first.asked)
            if first.outcome != "done" or first.errors:
                raise AssertionError(f"the reconciler's run: {first}")
            if not hooks.wait_delivered(60):
                raise AssertionError("the redeliveries were not all posted")
            everything = {p.delivery for p in posts}
            try:
                wait_until(lambda: everything <= set(_received(store, plan.items))
                           and _idle(client, prefix, queue, plan.items), plan.timeout,
                           "every redelivered delivery processed")
            except AssertionError:
                result.settled = False
            result.received = _received(store, plan.items)
            again = reconciler.run()
            result.asked_again = dict(again.asked)
            if not hooks.wait_delivered(60):
                raise AssertionError("the redeliveries were not all posted")
            for attempt in hooks.hook_log:
                if attempt.redelivery:
                    result.redeliveries[attempt.guid] += 1
                    result.redelivered[attempt.status_code] += 1
    finally:
        result.elapsed = time.monotonic() - started
        if hooks is not None:
            hooks.stop_delivering()
        if stop_hooks is not None:
            stop_hooks()
        if second is not None:
            processes.stop(second)
        if stack is not None:
            stack.stop()
        rs.stop()
    return result


def _idle(client: Any, prefix: str, queue: str, items: int) -> bool:
    """Nothing queued, in an inbox, started or waiting for a retry."""
    keys = Keys(prefix, queue)
    with client.pipeline(transaction=False) as pipe:
        for item in range(1, items + 1):
            pipe.llen(keys.inbox(ref(item)))
        pipe.llen(f"rq:queue:{queue}")
        pipe.zcard(f"rq:wip:{queue}")
        pipe.zcard(keys.retry)
        return not any(pipe.execute())


def logs_root() -> Path | None:
    """``THE_LOOP_E2E_LOGS``: where to keep the processes' logs (else a temporary
    folder)."""
    keep = os.environ.get("THE_LOOP_E2E_LOGS")
    return Path(keep) if keep else None
