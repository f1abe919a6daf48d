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


def _waiting(ref, graph, node, entered):
    state = WorkItemState(ref, graph.digest, graph.start)
    state.enter(node, via="pass")
    state.status = Status.WAITING
    state.visit_started = entered
    return state


def test_the_sweep_loads_only_the_waiting_items_its_index_has_due(redis_ns):
    """Given a stale waiting item, a fresh one and a running one
    When the sweep runs after the first has gone stale
    Then it reads only the stale one (through ``P:state-due``), reminds it, and moves its
    entry to the end of the next freshness period."""
    graph = load_graph()
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    entered = 1_700_000_000.0
    store.save(_waiting(REF, graph, "requirements-approval", entered))
    fresh = "github:Codertocat/Hello-World#2"
    store.save(_waiting(fresh, graph, "design-approval", entered + HOUR / 2))
    running = WorkItemState("github:Codertocat/Hello-World#3", graph.digest, graph.start)
    store.save(running)
    loaded = []
    load = store.load
    store.load = lambda ref: loaded.append(ref) or load(ref)
    clock = [entered + HOUR]
    inbox = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    sweep = MonitorSweep(store, graph, inbox, clock=lambda: clock[0])
    assert sweep.sweep() == []
    index = store.keys.due
    assert redis_ns.client.zscore(index, REF) == entered + 72 * HOUR
    assert redis_ns.client.zscore(index, fresh) == entered + 72.5 * HOUR
    assert redis_ns.client.zscore(index, running.ref) is None
    loaded.clear()
    clock[0] = entered + 72.2 * HOUR
    assert sweep.sweep() == [REF]
    assert loaded == [REF]  # the fresh and the running item were never read
    assert redis_ns.client.zscore(index, REF) == entered + 144 * HOUR
    loaded.clear()
    assert sweep.sweep() == [] and loaded == []  # nothing due until the next period


def test_a_saved_state_that_stops_waiting_leaves_the_index(redis_ns):
    graph = load_graph()
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    state = _waiting(REF, graph, "requirements-approval", 1_700_000_000.0)
    store.save(state)
    assert redis_ns.client.zscore(store.keys.due, REF) == 1_700_000_000.0
    state.status = Status.ESCALATED  # still waiting (for an operator)
    store.save(state)
    assert redis_ns.client.zscore(store.keys.due, REF) == 1_700_000_000.0
    state.status = Status.DONE
    store.save(state)
    assert redis_ns.client.zscore(store.keys.due, REF) is None
    state.status = Status.WAITING
    store.save(state)
    assert store.quarantine(REF) is not None  # its record set aside: out of the index
    assert redis_ns.client.zscore(store.keys.due, REF) is None


def test_the_sweep_keeps_an_entry_a_save_changed_meanwhile(redis_ns):
    """The sweep moves an entry only from the score it read: a save in between (the item
    entered its gate again) keeps its own."""
    graph = load_graph()
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    store.save(_waiting(REF, graph, "requirements-approval", 1_700_000_000.0))
    [(ref, seen)] = store.due(1_700_000_001.0, 10)
    store.save(_waiting(REF, graph, "requirements-approval", 1_700_000_500.0))
    assert not store.reschedule(ref, seen, 1_800_000_000.0)
    assert redis_ns.client.zscore(store.keys.due, REF) == 1_700_000_500.0


def test_states_saved_before_the_index_existed_are_indexed_once(redis_ns):
    """Given states written without an index entry (by a version before it)
    When the first sweep runs
    Then it indexes every waiting one from one SCAN, notes the graph's digest, finds the
    stale one; a later sweep does not scan again."""
    graph = load_graph()
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    entered = 1_700_000_000.0
    for ref, at in ((REF, entered), ("github:Codertocat/Hello-World#2", entered + 72 * HOUR)):
        redis_ns.client.set(store.state_key(ref), _waiting(
            ref, graph, "requirements-approval", at).to_json(effects=False))
    assert not redis_ns.client.exists(store.keys.due)
    inbox = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    sweep = MonitorSweep(store, graph, inbox, clock=lambda: entered + 73 * HOUR)
    assert sweep.sweep() == [REF]
    assert redis_ns.client.get(store.keys.due_backfilled) == graph.digest.encode()
    assert redis_ns.client.zscore(store.keys.due, "github:Codertocat/Hello-World#2") \
        == entered + 144 * HOUR

    def scan_again(*args, **kwargs):
        raise AssertionError("scanned every state again")

    store.backfill = scan_again
    assert sweep.sweep() == []
