"""The worker's monitor sweep (workers/monitors.py) on the real Redis: a stale gate gets
one reminder delivery per freshness period in its inbox, however often it is swept."""

from __future__ import annotations

from foundation.events import MONITOR_EVENT
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import Keys
from graph.model import Status
from graph.state import WorkItemState
from the_loop.graphs import load_graph
from workers.monitors import MonitorSweep
from workers.router import ROUTES
from workers.state import RedisStateStore

REF = "github:Codertocat/Hello-World#1"
HOUR = 3600.0


def test_a_stale_gate_gets_one_reminder_delivery_per_period(redis_ns):
    graph = load_graph()
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    state = WorkItemState(REF, graph.digest, graph.start)
    state.enter("requirements-approval", via="pass")
    state.status = Status.WAITING
    state.installation_id = 7
    entered = state.visit_started
    store.save(state)
    fresh = WorkItemState("github:Codertocat/Hello-World#2", graph.digest, graph.start)
    fresh.enter("design-approval", via="pass")
    fresh.status = Status.WAITING
    fresh.visit_started = entered + 72 * HOUR  # entered its gate later: still fresh
    store.save(fresh)
    clock = [entered + HOUR]
    inbox = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    sweep = MonitorSweep(store, graph, inbox, clock=lambda: clock[0])
    assert sweep.sweep() == []  # healthy
    clock[0] = entered + 73 * HOUR
    assert sweep.sweep() == [REF]
    assert sweep.sweep() == []  # the same period: the delivery id is seen already
    keys = Keys(redis_ns.prefix)
    assert redis_ns.client.llen(keys.inbox(REF)) == 1
    assert redis_ns.client.llen(keys.inbox("github:Codertocat/Hello-World#2")) == 0
    clock[0] = entered + 145 * HOUR
    assert sorted(sweep.sweep()) == [REF, "github:Codertocat/Hello-World#2"]  # both stale
    assert redis_ns.client.llen(keys.inbox(REF)) == 2
    assert (MONITOR_EVENT, "stale") in ROUTES
