"""Fenced writes on the real Redis: a write to a work item's state or log lands only
while the writer still holds the work item's lock, and a copy of a write that reaches
Redis twice (a retry, and the first attempt arriving late off a silently dropped
connection) or late lands once, never over newer state."""

from __future__ import annotations

import json

import pytest

from foundation.inbox.keys import Keys
from foundation.redis import scripts
from graph.state import WorkItemState
from tests.workers.test_reliability import (
    REF,
    comment_payload,
    deliver,
    enrol_payload,
    env,  # noqa: F401  (the fixture)
    received,
    work,
)
from workers.state import SCRIPTS, LockLost, RedisStateStore, StateKeys


def state(node: str) -> WorkItemState:
    return WorkItemState(ref=REF, graph_digest="g", current_node=node)


@pytest.fixture
def two_workers(redis_ns):
    """Two workers' stores (separate processes in life), and the lock key of REF."""
    lock = Keys(redis_ns.prefix).lock(REF)
    first = RedisStateStore(redis_ns.client, redis_ns.prefix)
    second = RedisStateStore(redis_ns.client, redis_ns.prefix)
    return first, second, lock, redis_ns.client


def test_a_save_by_a_worker_whose_lock_was_taken_over_is_refused_and_newer_state_stays(
        two_workers):
    """Given worker A holds the work item's lock and saved its state
    When the lock is taken over by worker B, which saves newer state, and A then saves
      state, records an effect and appends an event
    Then each of A's writes raises LockLost, and B's state, outbox and log stay as B
      left them."""
    a, b, lock, client = two_workers
    client.set(lock, "worker-a|1")
    a.fence(REF, "worker-a|1")
    a.save(state("requirements"))
    client.set(lock, "worker-b|2")  # A looked dead: the reaper freed it, B took it
    b.fence(REF, "worker-b|2")
    newer = state("requirements-approval")
    newer.effects = {"e1": {"status": "done"}}
    newer.effects_reset = True
    b.save(newer)
    b.append_event(REF, "delivery.received", {}, "d-b")

    late = state("requirements")
    late.effects = {"e1": {"status": "pending"}}
    with pytest.raises(LockLost) as refused:
        a.save(late)
    assert refused.value.ref == REF
    with pytest.raises(LockLost):
        a.save_effect(late, "e1")
    with pytest.raises(LockLost):
        a.append_event(REF, "delivery.received", {}, "d-a")

    stored = b.load(REF)
    assert stored is not None
    assert stored.current_node == "requirements-approval"
    assert stored.effects == {"e1": {"status": "done"}}
    assert [e.caused_by for e in b.events(REF)] == ["d-b"]
    assert [e.caused_by for e in b.caused_by(REF, "d-a")] == []


def test_a_write_under_a_freed_lock_is_refused(two_workers):
    """Given worker A's lock was freed (the reaper judged A dead) and nobody took it yet
    When A saves
    Then the save is refused: a free lock is not A's either."""
    a, _, lock, client = two_workers
    client.set(lock, "worker-a|1")
    a.fence(REF, "worker-a|1")
    a.save(state("requirements"))
    client.delete(lock)
    with pytest.raises(LockLost):
        a.save(state("design"))
    assert a.load(REF).current_node == "requirements"


def test_an_operators_write_without_a_lock_still_lands(two_workers):
    """Given no worker holds the work item (an operator's command: `graph force` takes
      no lock)
    When the command's store saves and appends, unfenced
    Then both land."""
    operator, _, _, _ = two_workers
    operator.save(state("design"))
    operator.append_event(REF, "graph.forced", {"to": "design"})
    assert operator.load(REF).current_node == "design"
    assert [e.type for e in operator.events(REF)] == ["graph.forced"]


def _append_args(keys: StateKeys, envelope_id: str, n: int, token: str = "worker-a|1"):
    envelope = json.dumps({"id": envelope_id, "type": "delivery.received", "data": {},
                           "caused_by": "d1", "at": 0.0})
    return dict(keys=[Keys(keys.prefix).lock(REF), keys.fence(REF), keys.events(REF),
                      keys.event_types(REF), keys.events_by("d1", REF)],
                args=[token, token, n, envelope, "delivery.received", 60])


def test_a_replayed_append_lands_once(redis_ns):
    """Given a worker holding the lock appends an entry
    When the very same append reaches Redis again (redis-py retried it after a timeout
      and the first attempt, held up on a dropped connection, arrived too)
    Then the log and its delivery index hold the entry once, and the copy is answered
      with the entry's sequence number as the first was."""
    keys = StateKeys(redis_ns.prefix)
    redis_ns.client.set(Keys(redis_ns.prefix).lock(REF), "worker-a|1")
    append = scripts.register(redis_ns.client, SCRIPTS, "fence", "append_event")
    first = append(**_append_args(keys, "ev1", 7))
    copy = append(**_append_args(keys, "ev1", 7))
    assert [first[0], copy[0]] == [b"ok", b"done"]
    assert int(first[1]) == int(copy[1]) == 1
    assert redis_ns.client.llen(keys.events(REF)) == 1
    assert redis_ns.client.llen(keys.events_by("d1", REF)) == 1


def test_a_late_copy_of_an_older_append_is_skipped(redis_ns):
    """Given a worker's append 7 and then its append 8 landed
    When a copy of append 7 arrives after them
    Then it is skipped: the log holds two entries, in the order written."""
    keys = StateKeys(redis_ns.prefix)
    redis_ns.client.set(Keys(redis_ns.prefix).lock(REF), "worker-a|1")
    append = scripts.register(redis_ns.client, SCRIPTS, "fence", "append_event")
    append(**_append_args(keys, "ev1", 7))
    append(**_append_args(keys, "ev2", 8))
    assert append(**_append_args(keys, "ev1", 7)) == [b"stale"]
    log = [json.loads(e)["id"] for e in redis_ns.client.lrange(keys.events(REF), 0, -1)]
    assert log == ["ev1", "ev2"]


def test_a_late_copy_of_an_older_save_never_overwrites_a_newer_one(redis_ns):
    """Given a worker's save 5 (node a) and then its save 6 (node b) landed
    When a copy of save 5 arrives after them
    Then the state stays at node b."""
    keys = StateKeys(redis_ns.prefix)
    lock = Keys(redis_ns.prefix).lock(REF)
    redis_ns.client.set(lock, "worker-a|1")
    save = scripts.register(redis_ns.client, SCRIPTS, "fence", "save_state")
    fixed = [lock, keys.fence(REF), keys.state(REF), keys.effects(REF),
             keys.events(REF), keys.event_types(REF), keys.due]

    def copy(n: int, node: str) -> list[bytes]:
        return save(keys=fixed, args=["worker-a|1", "worker-a|1", n,
                                      state(node).to_json(effects=False), "", "", REF, ""])

    copy(5, "a")
    copy(6, "b")
    assert copy(5, "a") == [b"stale"]
    assert RedisStateStore(redis_ns.client, redis_ns.prefix).load(REF).current_node == "b"


def test_a_drain_whose_lock_is_taken_over_mid_delivery_stops_and_acknowledges_nothing(
        env):  # noqa: F811  (the fixture)
    """Given an enrolled work item and a comment delivery being handled
    When another worker takes the work item's lock over while the delivery is handled
    Then the handler's save is refused, the delivery is neither acknowledged nor
      retried nor parked (it stays at the inbox head, its record kept, the state as the
      enrolment left it), and once the other worker lets go it is handled exactly once."""
    gh, processor, queue, ns = env
    first = deliver(queue, ns, "issues", enrol_payload())
    work(ns, processor)
    before = processor.store.load(REF)
    second = deliver(queue, ns, "issue_comment", comment_payload("Codertocat", "/approve"))
    save = processor.store.save

    def taken_over(state):
        # The reaper judged this worker dead and another worker took the lock.
        ns.client.set(processor.keys.lock(REF), "another-worker|x")
        save(state)

    processor.store.save = taken_over
    handled = processor.drain(REF)
    assert [(h.delivery_id, h.outcome) for h in handled] == [(second, "lost")]
    assert ns.client.lrange(processor.keys.inbox(REF), 0, -1) == [second.encode()]
    assert ns.client.exists(processor.keys.delivery(second))
    assert not ns.client.exists(processor.keys.backoff(REF))
    assert processor.deliveries.failed() == []
    after = processor.store.load(REF)
    assert (after.current_node, after.decision_count) == (before.current_node,
                                                          before.decision_count)

    processor.store.save = save
    ns.client.delete(processor.keys.lock(REF))  # the other worker let go
    assert [h.outcome for h in processor.drain(REF)] == ["advanced"]
    assert received(processor) == [first, second]
    assert processor.store.load(REF).current_node == "design"


def test_unreadable_state_is_moved_aside_only_by_the_locks_holder(two_workers):
    """Given an unreadable state record and worker A holding the work item's lock
    When A moves it aside, and later, after worker B took the lock over and saved new
      state, A tries to move the state aside again
    Then the first move keeps the record under its quarantine key, and the second is
      refused with B's state left in place."""
    a, b, lock, client = two_workers
    client.set(lock, "worker-a|1")
    a.fence(REF, "worker-a|1")
    client.set(a.state_key(REF), "not json")
    aside = a.quarantine(REF)
    assert aside is not None and client.get(aside) == b"not json"
    assert not client.exists(a.state_key(REF))
    assert a.quarantine(REF) is None  # nothing left to move

    client.set(lock, "worker-b|2")
    b.fence(REF, "worker-b|2")
    b.save(state("design"))
    with pytest.raises(LockLost):
        a.quarantine(REF)
    assert b.load(REF).current_node == "design"
