"""The worker's monitor sweep against the number of work items, the previous way (SCAN of
every state, each loaded) and through the state store's index ``P:state-due``, paired in
one run.

For each size N (default 100 and 100,000) on the real Redis (database 13, a prefix of its
own): N work item states wait at a gate with ``freshness`` (``requirements-approval``,
72 h), written as a version before the index left them (pipelined ``SET``s, no index
entry); ``--due`` of them (default 10) entered it 73 h ago (stale: a reminder is due),
the others an hour ago. Then:

* **backfill, ms**: the one-time build of the index from every state
  (:meth:`workers.state.RedisStateStore.backfill`, one ``SCAN``: what the first sweep
  after an upgrade, or after a graph whose freshness changed, does);
* **sweep (index), ms**: one :meth:`workers.monitors.MonitorSweep.sweep`, ``--rounds``
  times, the due items' entries put back at their due time before each (so every round
  finds them: the reminder deliveries are queued the first time, then seen already); the
  run checks each round moved every due entry to its next period and left none due;
* **sweep (SCAN, previous), ms**: the previous sweep's loop as it was (``SCAN``
  ``P:state:*``, load each state, check it, queue what is due), ``--old-rounds`` times;
* **SCAN alone, ms**: only the ``SCAN`` of ``P:state:*`` (no state read): the floor of
  the previous way;
* each check that both ways found the same due refs.

Medians and minimums are printed (the machine is shared). Every key carries the run's
token and is deleted afterwards (never FLUSHDB).

    .venv/bin/python benchmarks/sweep.py [--sizes 100,100000] [--due 10] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import _common as c
import redis

from foundation.inbox.enqueue import DeliveryQueue
from graph.model import Graph, Status
from graph.monitors import due_reminder
from graph.refs import RefError, WorkItemRef
from graph.state import StateError, WorkItemState
from the_loop.graphs import load_graph
from workers.monitors import MonitorSweep
from workers.state import RedisStateStore

GATE = "requirements-approval"
HOUR = 3600.0


def ref(token: str, n: int) -> str:
    return f"github:{token}/repo#{n}"


def seed(conn: redis.Redis, store: RedisStateStore, graph: Graph, token: str, size: int,
         due: int, now: float) -> list[str]:
    """``size`` waiting states, the first ``due`` stale; returns the stale refs."""
    stale = []
    with conn.pipeline(transaction=False) as pipe:
        for n in range(1, size + 1):
            state = WorkItemState(ref(token, n), graph.digest, graph.start)
            state.enter(GATE, via="pass")
            state.status = Status.WAITING
            state.visit_started = now - (73 * HOUR if n <= due else HOUR)
            if n <= due:
                stale.append(state.ref)
            pipe.set(store.state_key(state.ref), state.to_json(effects=False))
            if n % 1000 == 0:
                pipe.execute()
        pipe.execute()
    return stale


def previous_sweep(sweep: MonitorSweep, now: float) -> list[str]:
    """The sweep before the index (its loop as it was): every state scanned and loaded.
    Returns the refs found due (queued now or before)."""
    store, queued = sweep.store, []
    keys = store.keys
    for key in store.redis.scan_iter(match=keys.state_match, count=500):
        ref_ = (key.decode() if isinstance(key, bytes) else str(key)).removeprefix(
            keys.state_prefix)
        try:
            state = store.load(ref_)
            parsed = WorkItemRef.parse(ref_)
        except (StateError, RefError):
            continue
        if state is None:
            continue
        period = due_reminder(state, sweep.graph, now)
        if period is not None:
            sweep._remind(ref_, parsed, state, period, now)  # seen already after the first
            queued.append(ref_)
    return queued


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return 1000 * (time.perf_counter() - start), out


def stats(name: str, values: list[float]) -> dict[str, float]:
    return {f"{name}_ms_median": round(statistics.median(values), 2),
            f"{name}_ms_min": round(min(values), 2)}


def measure(conn: redis.Redis, graph: Graph, size: int, due: int, rounds: int,
            old_rounds: int) -> dict[str, Any]:
    token = c.new_token()
    prefix = f"{token}-p"
    try:
        store = RedisStateStore(conn, prefix)
        inbox = DeliveryQueue(conn, queue_name=f"{token}-q", prefix=prefix)
        now = time.time()
        sweep = MonitorSweep(store, graph, inbox, clock=lambda: now)
        t0 = time.perf_counter()
        stale = seed(conn, store, graph, token, size, due, now)
        seed_s = time.perf_counter() - t0
        busy = c.cpu_busy_pct(0.5)
        backfill_ms, indexed = timed(lambda: store.backfill(graph.digest, sweep.next_look))
        due_at = {r: now - HOUR for r in stale}  # 72 h after they entered: due since 1 h
        next_period = {r: now + 71 * HOUR for r in stale}  # the end of their second
        new, found_new = [], []
        for _ in range(rounds):
            conn.zadd(store.keys.due, due_at)
            ms, _queued = timed(sweep.sweep)
            new.append(ms)
            # Found and handled: each moved on to its next period, the rest never due.
            found_new.append(all(conn.zscore(store.keys.due, r) == at
                                 for r, at in next_period.items())
                             and conn.zcount(store.keys.due, "-inf", now) == 0)
        old, found_old = [], []
        for _ in range(old_rounds):
            ms, found = timed(lambda: previous_sweep(sweep, now))
            old.append(ms)
            found_old.append(sorted(found) == sorted(stale))
        scans = [timed(lambda: sum(1 for _ in conn.scan_iter(
            match=store.keys.state_match, count=500)))[0] for _ in range(old_rounds)]
        return {"work_items": size, "due": due, "indexed": indexed,
                "seed_s": round(seed_s, 1), "backfill_ms": round(backfill_ms, 1),
                **stats("sweep_index", new), **stats("sweep_scan_previous", old),
                **stats("scan_alone", scans),
                "index_found_the_due_ones_every_round": all(found_new),
                "previous_found_the_due_ones_every_round": all(found_old),
                "machine_busy_pct_before": busy}
    finally:
        c.cleanup_redis(conn, token)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,100000",
                        help="work items (comma-separated; default 100,100000)")
    parser.add_argument("--due", type=int, default=10, help="stale work items among them")
    parser.add_argument("--rounds", type=int, default=15, help="sweeps through the index")
    parser.add_argument("--old-rounds", type=int, default=3,
                        help="sweeps the previous way (and SCANs alone) per size")
    args = parser.parse_args()
    logging.getLogger("the_loop.monitors").setLevel(logging.WARNING)
    conn = redis.Redis.from_url(c.BENCH_REDIS_URL, socket_timeout=120)
    graph = load_graph()
    result: dict[str, Any] = {"machine": c.machine(), "code": c.code_version(), "sizes": []}
    for size in (int(x) for x in args.sizes.split(",")):
        row = measure(conn, graph, size, args.due, args.rounds, args.old_rounds)
        result["sizes"].append(row)
        print(json.dumps(row), flush=True)
    c.RESULTS.mkdir(exist_ok=True)
    (c.RESULTS / "sweep.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
