"""Redis Sentinel in the one client builder, and the receiver's durable acknowledgement,
against a real replicated Redis on loopback (:mod:`tests.support.sentinel`: a primary,
one replica, three Sentinels).

The whole-stack failover test (receivers, workers, deliveries) is
``tests/e2e/test_failover.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from foundation.inbox.enqueue import DeliveryQueue, NotReplicatedError
from foundation.inbox.keys import Keys
from foundation.inbox.scripts import Scripts
from foundation.redis import DEQUEUE_TIMEOUT, RECEIVER, SERVICE, HeldConnections, blocking, connect
from tests.conftest import load_fixture
from tests.support.sentinel import ReplicatedRedis, redis_server
from webhook.events import parse_delivery

pytestmark = [pytest.mark.failover,
              pytest.mark.skipif(redis_server() is None, reason="needs redis-server")]

URL = "redis://ignored-host/0"


@pytest.fixture
def replicated() -> Iterator[ReplicatedRedis]:
    """A set of this test's own (it may kill the primary)."""
    with ReplicatedRedis() as rs:
        yield rs


@pytest.fixture(scope="module")
def shared() -> Iterator[ReplicatedRedis]:
    """A set the tests that kill nothing share (each in its own key prefix)."""
    with ReplicatedRedis() as rs:
        yield rs


def _delivery(delivery_id: str):
    return parse_delivery({"X-GitHub-Event": "issues", "X-GitHub-Delivery": delivery_id,
                           "Content-Type": "application/json"},
                          load_fixture("issues", "opened"))


def test_a_sentinel_client_follows_a_failover_without_restart(replicated) -> None:
    """Given a client made from THE_LOOP_REDIS_SENTINELS and scripts it ran on the primary
    When the primary is SIGKILLed and the Sentinels promote the replica
    Then the same client (its pool, held connections and RQ's blocking twin) writes to
      the new primary, and the scripts run there although it never loaded them."""
    client = connect(URL, SERVICE, sentinel=replicated.sentinel)
    held = HeldConnections(connect(URL, RECEIVER, sentinel=replicated.sentinel))
    twin = blocking(client, DEQUEUE_TIMEOUT)
    script = client.register_script("return redis.call('INCR', KEYS[1])")
    key = f"sentinel-test-{uuid.uuid4().hex}"
    assert script(keys=[key]) == 1
    assert held.run_script(script, (key,), ()) == 2
    assert twin.incr(key) == 3
    assert client.connection_pool.connection_kwargs["socket_timeout"] == SERVICE.socket_timeout
    assert twin.connection_pool.connection_kwargs["socket_timeout"] == \
        SERVICE.socket_timeout + DEQUEUE_TIMEOUT
    # Replicated before the kill, so the count survives it.
    assert replicated.node(replicated.primary_port).wait(1, 2000) == 1
    old = replicated.kill_primary()
    replicated.wait_promoted()
    assert replicated.primary_port != old
    new = replicated.node(replicated.primary_port)
    assert new.script_exists(script.sha) == [False]  # scripts are not replicated

    def after(call):
        for _ in range(20):  # the first commands may still meet the dead primary
            try:
                return call()
            except redis.ConnectionError:
                continue
        raise AssertionError("the client never reached the new primary")

    assert after(lambda: script(keys=[key])) == 4
    assert after(lambda: held.run_script(script, (key,), ())) == 5
    assert after(lambda: twin.incr(key)) == 6
    assert int(new.get(key)) == 6


def test_wait_acknowledges_a_delivery_held_by_the_replica(shared) -> None:
    """With THE_LOOP_RECEIVER_REPLICAS=1 the enqueue returns only once the replica holds
    the delivery's record, inbox entry and marker."""
    client = connect(URL, RECEIVER, sentinel=shared.sentinel)
    prefix = f"t{uuid.uuid4().hex}"
    queue = DeliveryQueue(client, queue_name=prefix, prefix=prefix, replicas=1,
                          replicas_timeout_ms=2000)
    delivery = _delivery(f"{prefix}-1")
    assert queue.enqueue(delivery) is True
    replica = shared.node(shared.replica_port)
    keys = Keys(prefix, prefix)
    # No wait here: WAIT returned, so the replica has applied the write already.
    assert replica.exists(keys.seen(delivery.delivery_id), keys.delivery(delivery.delivery_id)) \
        == 2
    assert replica.lrange(keys.inbox(delivery.work_item), 0, -1) == \
        [delivery.delivery_id.encode()]
    assert queue.enqueue(delivery) is False  # a duplicate writes nothing and waits for none


def test_too_few_replicas_take_the_delivery_back(shared) -> None:
    """Given two replicas required and one present
    When a delivery is enqueued
    Then NotReplicatedError says 1 of 2, and nothing of it is left on the primary (no
      record, no inbox entry, no marker), so its redelivery is accepted as new."""
    client = connect(URL, RECEIVER, sentinel=shared.sentinel)
    prefix = f"t{uuid.uuid4().hex}"
    strict = DeliveryQueue(client, queue_name=prefix, prefix=prefix, replicas=2,
                           replicas_timeout_ms=100)
    delivery = _delivery(f"{prefix}-1")
    with pytest.raises(NotReplicatedError) as caught:
        strict.enqueue(delivery)
    assert (caught.value.acknowledged, caught.value.required, caught.value.taken_back) == \
        (1, 2, True)
    primary = shared.node(shared.primary_port)
    keys = Keys(prefix, prefix)
    assert primary.exists(keys.seen(delivery.delivery_id),
                          keys.delivery(delivery.delivery_id)) == 0
    # Its inbox back as it was: empty, not ready, not indexed, no wake-up pending or queued.
    assert primary.exists(keys.inbox(delivery.work_item), keys.ready, keys.inboxes,
                          keys.wake, strict.queue_key) == 0
    lenient = DeliveryQueue(client, queue_name=prefix, prefix=prefix, replicas=1)
    assert lenient.enqueue(delivery) is True


def test_a_delivery_a_worker_took_is_not_taken_back(shared) -> None:
    """unqueue.lua leaves a delivery whose record a drain step marked started (or already
    deleted when done): a worker has it, and its redelivery must stay a duplicate."""
    client = connect(URL, SERVICE, sentinel=shared.sentinel)
    prefix = f"t{uuid.uuid4().hex}"
    keys = Keys(prefix, prefix)
    unqueue = Scripts(client).unqueue
    started, done = f"{prefix}-started", f"{prefix}-done"
    inbox = keys.inbox("github:o/r#1")
    client.rpush(inbox, started, done)
    client.hset(keys.delivery(started), mapping={"event": "issues", "started": 1})
    client.set(keys.seen(started), 1)
    client.set(keys.seen(done), 1)
    rest = [keys.ready, keys.inboxes, keys.wake]
    assert unqueue(keys=[keys.seen(started), keys.delivery(started), inbox, *rest],
                   args=[started, "github:o/r#1", "w"]) == 0
    assert unqueue(keys=[keys.seen(done), keys.delivery(done), inbox, *rest],
                   args=[done, "github:o/r#1", "w"]) == 0
    assert client.exists(keys.seen(started), keys.seen(done), keys.delivery(started)) == 3
    assert client.lrange(inbox, 0, -1) == [started.encode(), done.encode()]
