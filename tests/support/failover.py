"""The failover proof, shared by ``tests/e2e/test_failover.py`` (in ``make test``) and
``benchmarks/failover.py`` (figures): a Redis primary SIGKILLed while deliveries stream in.

It starts, all on loopback, a replicated Redis (:class:`tests.support.sentinel.
ReplicatedRedis`: a primary, one replica, three Sentinels), the loopback fake GitHub, two
receivers (``the-loop serve``: gunicorn, as in production) and two ``the-loop worker``
processes, every one of them finding the primary through the Sentinels
(``THE_LOOP_REDIS_SENTINELS``). Then:

1. each work item is enrolled (its ``issues`` ``labeled`` delivery) and processed;
2. ``posts`` signed ``issue_comment`` deliveries (plain remarks, each advancing its work
   item: a ``delivery.received`` entry in its log) are sent at ``rate`` per second,
   alternating between the receivers, each once (an answer other than 2xx is not sent
   again here: redelivering those is the reconciler's job);
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
5. with ``redeliver``, the refused deliveries are sent again, as GitHub's redelivery (or
   the reconciler's) sends them, and must then be processed once too.

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

from foundation.inbox.keys import Keys
from foundation.redis import SERVICE, connect
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
        redeliver: send the refused deliveries again at the end (step 5).
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
    def lost(self) -> list[str]:
        """Acknowledged, never processed."""
        return [d for d in self.acknowledged if self.received[d] == 0]

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
            "redelivered": dict(self.redelivered),
            "promoted_after_s": round(self.promoted_after, 2),
            "resynced_after_s": round(self.resynced_after, 2),
            "first_processed_after_kill_s": None if self.first_processed_after is None
            else round(self.first_processed_after, 2),
            "settled": self.settled, "elapsed_s": round(self.elapsed, 1),
        }


def _post(session: requests.Session, url: str, post: Post) -> int:
    headers = {"Content-Type": "application/json", "X-GitHub-Event": post.event,
               "X-GitHub-Delivery": post.delivery,
               "X-Hub-Signature-256": sign_body(post.body, SECRET)}
    try:
        return session.post(f"{url}/webhook", data=post.body, headers=headers,
                            timeout=15).status_code
    except requests.RequestException:
        return 0


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
        wait_until(lambda: requests.get(f"{urls[1]}/readyz", timeout=1).status_code == 200,
                   30, "the second receiver ready")
        client = connect(rs.env["REDIS_URL"], SERVICE, sentinel=rs.sentinel)
        store = RedisStateStore(client, prefix)

        # 1. Enrol every work item, and wait until each is processed.
        with requests.Session() as session:
            for item in range(1, plan.items + 1):
                post = Post(item, f"{token}-{item:03d}-000", "issues",
                            json.dumps(_enrol(item)).encode())
                status = _post(session, urls[item % 2], post)
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
                    status = _post(session, urls[k % 2], posts[k])
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

        # 5. The refused ones sent again (the reconciler's redelivery), then processed.
        if plan.redeliver and result.refused:
            again = {p.delivery: p for p in posts}
            with requests.Session() as session:
                for n, delivery in enumerate(result.refused):
                    status = 0
                    for _ in range(50):
                        status = _post(session, urls[n % 2], again[delivery])
                        if status in (200, 202):
                            break
                        wait_until(lambda: rs.in_sync(rs.primary_port), 30, "the replica")
                    result.redelivered[status] += 1
            everything = {p.delivery for p in posts}
            try:
                wait_until(lambda: everything <= set(_received(store, plan.items))
                           and _idle(client, prefix, queue, plan.items), plan.timeout,
                           "every redelivered delivery processed")
            except AssertionError:
                result.settled = False
            result.received = _received(store, plan.items)
    finally:
        result.elapsed = time.monotonic() - started
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
