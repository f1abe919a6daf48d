"""The reaper's round and the stranded-inbox listing, against the number of work items
ever seen (most done, a few active).

For each size N (default 100 and 100,000) it runs the real protocol on the real Redis
(database 13, its own prefix): N work items each get a delivery through the receiver's
enqueue script (``DeliveryQueue.put``, pipelined) and a worker's drain steps
(``Inboxes.step``: take it, finish it), so their inboxes are empty and their refs are as
the drain left them; then a few active ones (``--active``, default 10) are added: some
waiting on the ready list, some held by a live worker's lock, one backing off, and one
whose worker died mid-claim (its lock still there, the worker registered and no longer
beating). Then:

* **round, ms**: wall time of one full :meth:`foundation.inbox.reaper.Reaper.reap` (beat,
  due retries, the inbox sweep, RQ's registries, the wake-up check), median of
  ``--rounds`` rounds (the reaper's round lock is cleared between them; the dead
  worker's inbox is stranded again before each: its lock put back and its ref taken off
  the ready list, so every round has one to find);
* **round with every ref indexed, ms**: the same round when the index also holds the N
  done refs -- what the drain left before it removed a ref whose inbox it emptied (the
  sweep then visited every work item seen since the last round); measured the same
  number of times, the refs put back before each; then the plain round again (**after
  those**: the index set had held N refs);
* the median, minimum and maximum of each (the minimum is the figure least disturbed by
  other load on a shared machine);
* **listing S stranded inboxes, ms** (``--stranded``, default 10,000): S inboxes with a
  delivery, a free lock and on no ready list, listed once per ref with
  ``mark_ready(strict=True)`` (an ``LPOS`` over the growing ready list each: the previous
  way) and in one ``list_stranded`` call (the ready list read once), side by side.

Every key carries the run's token and is deleted afterwards (never FLUSHDB).

    .venv/bin/python benchmarks/reaper.py [--sizes 100,100000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from typing import Any

import _common as c
import redis

from foundation.inbox.dead import Deliveries
from foundation.inbox.drain import Inboxes
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.reaper import Reaper
from foundation.inbox.record import DeliveryRecord
from foundation.settings import WorkerSettings
from workers.state import RedisStateStore

BODY = b'{"action": "opened"}'


def ref(token: str, n: int) -> str:
    return f"github:{token}/repo#{n}"


def record(token: str, n: int, k: int = 0) -> DeliveryRecord:
    return DeliveryRecord(delivery_id=f"{token}-{n}-{k}", event="issues", action="opened",
                          received_at=time.time(), installation_id=None,
                          repository=f"{token}/repo", work_item=ref(token, n), body=BODY)


class Setup:
    """One size's Redis namespace and the protocol's objects on it."""

    def __init__(self, conn: redis.Redis, token: str) -> None:
        self.conn, self.token = conn, token
        self.settings = WorkerSettings(prefix=f"{token}-p", queue=f"{token}-q",
                                       lock_timeout=300, worker_ttl=30, reap_interval=5.0)
        self.queue = DeliveryQueue(conn, queue_name=self.settings.queue,
                                   prefix=self.settings.prefix)
        self.inboxes = Inboxes(conn, self.settings)
        self.keys = self.inboxes.keys
        self.deliveries = Deliveries(conn, self.settings,
                                     RedisStateStore(conn, self.settings.prefix), self.inboxes)
        self.reaper = Reaper(self.deliveries, f"{token}-live")
        self.reaper.register()

    def enqueue(self, first: int, last: int) -> None:
        """One delivery for each work item ``first..last`` (the receiver's script,
        pipelined 1,000 at a time)."""
        keys = self.keys
        script = self.queue._script
        for start in range(first, last + 1, 1000):
            with self.conn.pipeline(transaction=False) as pipe:
                for n in range(start, min(start + 1000, last + 1)):
                    rec = record(self.token, n)
                    script(keys=(keys.seen(rec.delivery_id), keys.delivery(rec.delivery_id),
                                 keys.inbox(rec.work_item), keys.ready, keys.inboxes,
                                 keys.wake),
                           args=(rec.delivery_id, rec.work_item, 3600, 30000,
                                 f"{rec.delivery_id}-wake", *rec.to_redis()),
                           client=pipe)
                pipe.execute()

    def drain_all(self) -> int:
        """A worker's drain of the ready list, one step per delivery; returns how many."""
        token, handled = f"{self.token}-drainer|x", 0
        step = self.inboxes.step(token, ready=100)
        while step.what == "ok":
            handled += 1
            step = self.inboxes.step(token, done=(step.ref, step.delivery_id, True, True,
                                                  "release"), ready=100)
        return handled

    def strand(self, n: int) -> None:
        """Work item ``n`` as a worker that died mid-claim left it: its lock held by a
        registered worker that no longer beats, its ref on no ready list."""
        self.conn.sadd(self.keys.workers, f"{self.token}-dead")  # a round forgets it
        self.conn.set(self.keys.lock(ref(self.token, n)), f"{self.token}-dead|abc", px=300000)
        self.conn.lrem(self.keys.ready, 0, ref(self.token, n))

    def round_ms(self) -> float:
        self.conn.delete(self.keys.reaper)
        start = time.perf_counter()
        self.reaper.reap()
        return 1000 * (time.perf_counter() - start)


def measure_size(conn: redis.Redis, size: int, active: int, rounds: int) -> dict[str, Any]:
    token = c.new_token()
    s = Setup(conn, token)
    try:
        t0 = time.perf_counter()
        s.enqueue(1, size)
        handled = s.drain_all()
        seeded_s = time.perf_counter() - t0
        # The few active ones: waiting, held by a live worker, backing off, crashed.
        s.enqueue(size + 1, size + active)  # all on the ready list, waiting, but ...
        live, backoff, crashed = size + active - 2, size + active - 1, size + active
        conn.lrem(s.keys.ready, 0, ref(token, live))
        conn.set(s.keys.lock(ref(token, live)), f"{token}-live|abc", px=300000)
        conn.lrem(s.keys.ready, 0, ref(token, backoff))
        conn.set(s.keys.backoff(ref(token, backoff)), record(token, backoff).delivery_id,
                 px=300000)
        conn.sadd(s.keys.workers, f"{token}-dead")
        indexed_after_drain = int(conn.scard(s.keys.inboxes))
        busy = c.cpu_busy_pct(0.5)
        done_refs = [ref(token, n) for n in range(1, size + 1)]
        plain, everything, after, found = [], [], [], []

        def stranded_round() -> float:
            s.strand(crashed)
            ms = s.round_ms()
            found.append(conn.lpos(s.keys.ready, ref(token, crashed)) is not None)
            return ms

        for _ in range(rounds):
            plain.append(stranded_round())
        for _ in range(rounds):
            for start in range(0, len(done_refs), 10_000):
                conn.sadd(s.keys.inboxes, *done_refs[start:start + 10_000])
            everything.append(stranded_round())
        for _ in range(rounds):
            after.append(stranded_round())
        return {
            "known_work_items": size + active, "done": handled,
            "active": active, "indexed_after_drain": indexed_after_drain,
            "seed_s": round(seeded_s, 1),
            "round_ms_median": round(statistics.median(plain), 2),
            "round_ms_min": round(min(plain), 2),
            "round_ms_max": round(max(plain), 2),
            "round_every_ref_indexed_ms_median": round(statistics.median(everything), 2),
            "round_every_ref_indexed_ms_min": round(min(everything), 2),
            "round_after_those_ms_median": round(statistics.median(after), 2),
            "round_after_those_ms_min": round(min(after), 2),
            "crashed_inbox_found_every_round": all(found),
            "machine_busy_pct_before": busy,
        }
    finally:
        c.cleanup_redis(conn, token)


def measure_listing(conn: redis.Redis, stranded: int) -> dict[str, Any]:
    out: dict[str, Any] = {"stranded": stranded, "machine_busy_pct_before": c.cpu_busy_pct(0.5)}
    for way in ("one mark_ready per ref", "one list_stranded call"):
        token = c.new_token()
        s = Setup(conn, token)
        try:
            refs = [ref(token, n) for n in range(1, stranded + 1)]
            with conn.pipeline(transaction=False) as pipe:
                for r in refs:
                    pipe.rpush(s.keys.inbox(r), "d")
                pipe.execute()
            start = time.perf_counter()
            if way == "one list_stranded call":
                listed = len(s.inboxes.list_stranded(refs))
            else:
                listed = sum(s.inboxes.mark_ready(r, strict=True) for r in refs)
            out[f"{way}, ms"] = round(1000 * (time.perf_counter() - start), 1)
            assert listed == stranded == conn.llen(s.keys.ready)
        finally:
            c.cleanup_redis(conn, token)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,100000",
                        help="work items seen (comma-separated; default 100,100000)")
    parser.add_argument("--active", type=int, default=10, help="active work items")
    parser.add_argument("--rounds", type=int, default=15, help="rounds measured per size")
    parser.add_argument("--stranded", type=int, default=10_000,
                        help="stranded inboxes for the listing comparison")
    args = parser.parse_args()
    logging.getLogger("the_loop.worker").setLevel(logging.ERROR)  # its "ready again" lines
    conn = redis.Redis.from_url(c.BENCH_REDIS_URL, socket_timeout=60)
    result: dict[str, Any] = {"machine": c.machine(), "code": c.code_version(), "sizes": []}
    for size in (int(x) for x in args.sizes.split(",")):
        row = measure_size(conn, size, args.active, args.rounds)
        result["sizes"].append(row)
        print(json.dumps(row), flush=True)
    if args.stranded:
        result["listing"] = measure_listing(conn, args.stranded)
        print(json.dumps(result["listing"]), flush=True)
    c.RESULTS.mkdir(exist_ok=True)
    (c.RESULTS / "reaper.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
