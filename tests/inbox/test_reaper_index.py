"""The reaper's inbox index on the real Redis: it holds the inboxes with work, not every
work item ever seen, so a round visits only those; a stranded inbox is still found among
many done ones, and listing many stranded inboxes reads the ready list once."""

from __future__ import annotations

import json

import pytest

from foundation.inbox.dead import Deliveries
from foundation.inbox.drain import Inboxes
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.reaper import Reaper
from foundation.settings import WorkerSettings
from tests.conftest import RedisNamespace, load_payload
from webhook.events import parse_delivery
from workers.state import RedisStateStore

DONE = 300  # work items whose deliveries were all handled


def ref(n: int) -> str:
    return f"github:Codertocat/Hello-World#{n}"


class Protocol:
    """The receiver's queue, the worker's inboxes and a reaper, on one namespace."""

    def __init__(self, ns: RedisNamespace) -> None:
        self.ns = ns
        self.settings = WorkerSettings(prefix=ns.prefix, queue=ns.queue_name, lock_timeout=30,
                                       worker_ttl=30, reap_interval=0.2)
        self.queue = DeliveryQueue(ns.client, queue_name=ns.queue_name, prefix=ns.prefix)
        self.inboxes = Inboxes(ns.client, self.settings)
        self.keys = self.inboxes.keys
        self.deliveries = Deliveries(ns.client, self.settings,
                                     RedisStateStore(ns.client, ns.prefix), self.inboxes)
        self.reaper = Reaper(self.deliveries, f"live-{ns.token}")
        self.reaper.register()

    def deliver(self, n: int) -> str:
        body = load_payload("issues", "opened")
        body["issue"]["number"] = n
        payload = json.dumps(body).encode()
        delivery = parse_delivery({"X-GitHub-Event": "issues",
                                   "X-GitHub-Delivery": self.ns.new_id(),
                                   "Content-Type": "application/json"}, payload)
        assert delivery.work_item == ref(n)
        assert self.queue.enqueue(delivery)
        return delivery.delivery_id

    def take(self, owner: str, n: int):
        """Take ``n``'s head under a lock of ``owner`` (a drain step)."""
        step = self.inboxes.step(f"{owner}|abc", take=ref(n))
        assert step.what == "ok" and step.ref == ref(n)
        return step

    def finish(self, owner: str, step, then: str = "more"):
        """Finish the delivery ``step`` took (pop it, delete its record)."""
        return self.inboxes.step(f"{owner}|abc",
                                 done=(step.ref, step.delivery_id, True, True, then))

    def indexed(self) -> set[str]:
        return {r.decode() for r in self.ns.client.smembers(self.keys.inboxes)}

    def ready(self) -> list[str]:
        return [r.decode() for r in self.ns.client.lrange(self.keys.ready, 0, -1)]

    def round(self) -> dict[str, int]:
        self.ns.client.delete(self.keys.reaper)  # a new round, whoever ran the last one
        return self.reaper.reap()


@pytest.fixture
def protocol(redis_ns):
    p = Protocol(redis_ns)
    yield p
    p.reaper.deregister()


def test_an_inbox_leaves_the_index_when_its_last_delivery_is_done(protocol):
    """Given two work items with a delivery each (both indexed)
    When a worker handles the first one's delivery and its inbox is empty
    Then that step removed the first from the index; the second is still indexed."""
    p = protocol
    p.deliver(1)
    p.deliver(2)
    assert p.indexed() == {ref(1), ref(2)}
    step = p.take("w", 1)
    assert p.indexed() == {ref(1), ref(2)}  # taken, not done: still work in flight
    after = p.finish("w", step)
    assert after.done == "empty"
    assert p.indexed() == {ref(2)}
    assert p.ns.client.get(p.keys.lock(ref(1))) is None


def test_a_release_that_empties_the_inbox_leaves_the_index_and_one_with_more_stays(protocol):
    """Given a work item with two deliveries, and another with one
    When a worker lets go of each after handling one delivery (``release``)
    Then the one with a delivery left is still indexed, the emptied one is not, and a new
      delivery to the emptied one indexes it again."""
    p = protocol
    p.deliver(1)
    p.deliver(1)
    p.deliver(2)
    p.finish("w", p.take("w", 1), then="release")
    p.finish("w", p.take("w", 2), then="release")
    assert p.indexed() == {ref(1)}
    p.deliver(2)
    assert p.indexed() == {ref(1), ref(2)}


def test_the_reaper_finds_a_crash_mid_claim_among_many_done_work_items(protocol):
    """Given 300 work items whose deliveries were all handled, one whose worker took its
      delivery and died (registered, never beats again), one whose holder's lock expired
      while its ref was on no ready list, and one waiting on the ready list
    When a reaper round runs
    Then the index holds just the three with work, the dead worker's lock is released,
      the two stranded inboxes are listed as ready once each, and the waiting one is not
      listed twice."""
    p = protocol
    for n in range(1, DONE + 1):
        p.deliver(n)
        p.finish("w", p.take("w", n))
    assert p.indexed() == set()
    crashed, expired, waiting = DONE + 1, DONE + 2, DONE + 3
    dead = f"dead-{p.ns.token}"
    p.ns.client.sadd(p.keys.workers, dead)  # registered; its liveness key is gone
    for n in (crashed, expired, waiting):
        p.deliver(n)
    p.ns.client.delete(p.keys.ready)
    p.take(dead, crashed)  # the crash: taken, never finished
    p.take("gone", expired)
    p.ns.client.delete(p.keys.lock(ref(expired)))  # its lock expired
    p.ns.client.rpush(p.keys.ready, ref(waiting))
    assert p.indexed() == {ref(crashed), ref(expired), ref(waiting)}

    counts = p.round()
    assert counts["stranded"] == 2
    assert p.ns.client.get(p.keys.lock(ref(crashed))) is None
    assert sorted(p.ready()) == sorted([ref(waiting), ref(crashed), ref(expired)])
    assert p.round()["stranded"] == 0  # listed already: not again
    assert len(p.ready()) == 3


def test_the_sweep_drops_an_indexed_ref_whose_inbox_was_emptied_elsewhere(protocol):
    """Given an indexed work item whose inbox an operator emptied (no drain step ran)
    When a reaper round runs
    Then its ref leaves the index and nothing is listed."""
    p = protocol
    p.deliver(1)
    p.ns.client.delete(p.keys.inbox(ref(1)), p.keys.ready)
    assert p.round()["stranded"] == 0
    assert p.indexed() == set()
    assert p.ready() == []


def test_listing_many_stranded_inboxes_lists_each_once_behind_a_long_ready_list(protocol):
    """Given 500 refs already on the ready list and 200 stranded inboxes (deliveries, a
      free lock, on no ready list), 50 of which are also on the ready list, plus one held
      by a backoff and one locked
    When they are all handed to one listing call
    Then the 150 that were on no list are appended once each, in the order given, and the
      held, locked and listed ones are not."""
    p = protocol
    client = p.ns.client
    client.rpush(p.keys.ready, *[f"github:o/r#{n}" for n in range(10_000, 10_500)])
    refs = [ref(n) for n in range(1, 203)]
    for r in refs:
        client.rpush(p.keys.inbox(r), "some-delivery")
    client.rpush(p.keys.ready, *refs[:50])
    client.set(p.keys.backoff(refs[200]), "x")
    client.set(p.keys.lock(refs[201]), "w|abc")
    listed = p.inboxes.list_stranded(refs)
    assert listed == refs[50:200]
    ready = p.ready()
    assert len(ready) == 500 + 200
    assert len(set(ready)) == len(ready)
    assert p.inboxes.list_stranded(refs) == []
