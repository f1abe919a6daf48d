"""At-least-once processing on the real Redis: retries with backoff, dead letters, the
reaper taking back a dead worker's job and lock, and reconnecting to Redis."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import threading
import time
import uuid

import pytest
import redis
from rq import Queue
from rq.registry import FailedJobRegistry, StartedJobRegistry

from foundation.inbox.dead import DeliveryCommandError
from foundation.inbox.enqueue import DeliveryQueue
from foundation.settings import WorkerSettings
from graph.ports import IntegrationError
from tests.conftest import act_as, gh_label, load_payload
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers import worker as worker_module
from workers.reaper import Reaper
from workers.worker import LoopWorker, work_with_reconnect

REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


@pytest.fixture
def env(redis_ns):
    gh = FakeGitHub()
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name,
                              delivery_attempts=3, delivery_backoff=(1.5,), lock_timeout=5,
                              worker_ttl=2, reap_interval=0.2)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    yield gh, processor, queue, redis_ns


def deliver(queue, ns, event, payload):
    body = json.dumps(payload).encode()
    delivery = parse_delivery({"X-GitHub-Event": event,
                               "X-GitHub-Delivery": f"{ns.token}-{uuid.uuid4().hex[:12]}",
                               "Content-Type": "application/json"}, body)
    assert queue.enqueue(delivery)
    return delivery.delivery_id


def enrol_payload(number=1):
    p = load_payload("issues", "labeled")
    p["label"] = gh_label("the-loop")
    p["issue"]["labels"].append(gh_label("the-loop"))
    p["issue"]["number"] = number
    return p


def comment_payload(login, body, number=1):
    p = load_payload("issue_comment", "created")
    p["issue"]["labels"].append(gh_label("the-loop"))
    p["issue"]["number"] = number
    act_as(p, login)
    p["comment"]["body"] = body
    return p


def break_runtime(processor):
    """Every advance raises (a bug, a poison payload)."""
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    for name in ("enrol", "advance"):
        original = getattr(processor.agent.runtime, name)

        def broken(item, *args, _original=original, **kwargs):
            if item.ref == REF:
                raise RuntimeError("boom")
            return _original(item, *args, **kwargs)

        setattr(processor.agent.runtime, name, broken)


def skip_backoff(processor, ns):
    """As if the backoff had passed: the hold expires and the due retry is requeued."""
    ns.client.delete(processor.keys.backoff(REF))
    processor.deliveries.release_due(time.time() + 3600)


def work(ns, processor, name=None):
    w = LoopWorker([Queue(ns.queue_name, connection=ns.client)], connection=ns.client,
                   name=name or f"w-{ns.new_id()}", processor=processor)
    w.work(burst=True, with_scheduler=False)


def received(processor, ref=REF):
    return [e.caused_by for e in processor.store.events(ref) if e.type == "delivery.received"]


def flaky_ensure_label(gh, failures):
    """ensure-label answers a retriable 502 ``failures`` times, then works."""
    original = gh.ensure_label
    left = [failures]

    def ensure(**params):
        if left[0] > 0:
            left[0] -= 1
            raise IntegrationError("github ensure-label on x failed: HTTP 502",
                                   integration="github", op="ensure-label", status=502,
                                   retriable=True)
        return original(**params)

    gh.ensure_label = ensure


def test_a_transient_failure_is_retried_after_a_backoff_and_order_is_kept(env):
    """Given GitHub answers 502 once while the item is enrolled
    When the enrolment and a later comment are processed
    Then the enrolment is retried after its backoff (the comment waits behind it), both are
      received exactly once, in order, and nothing is parked."""
    gh, processor, queue, ns = env
    flaky_ensure_label(gh, 1)
    first = deliver(queue, ns, "issues", enrol_payload())
    second = deliver(queue, ns, "issue_comment", comment_payload("mallory", "/approve"))
    work(ns, processor)
    assert ns.client.get(processor.keys.backoff(REF)) == first.encode()  # in backoff
    assert ns.client.lrange(processor.keys.inbox(REF), 0, -1) == [first.encode(),
                                                                  second.encode()]
    assert processor.deliveries.release_due() == 0  # not due yet
    time.sleep(1.6)
    assert processor.deliveries.release_due() == 1
    work(ns, processor)
    assert received(processor) == [first, second]
    state = processor.store.load(REF)
    assert (state.current_node, state.status) == ("requirements-approval", "waiting")
    assert processor.deliveries.failed() == []
    assert not ns.client.llen(processor.keys.inbox(REF))


def test_a_poison_delivery_is_parked_visibly_and_holds_only_its_own_work_item(env):
    """Given a delivery whose processing fails every time
    When it has been tried delivery_attempts times
    Then it is parked (failed hash with its reason, RQ's FailedJobRegistry), its work
      item's state says why and its later delivery waits, while another work item moves;
      `retry` runs it again (now healthy) and the held delivery follows, in order."""
    gh, processor, queue, ns = env
    enrolled = deliver(queue, ns, "issues", enrol_payload())
    work(ns, processor)
    assert processor.store.load(REF).status == "waiting"
    poison = deliver(queue, ns, "issue_comment", comment_payload("Codertocat", "/approve"))
    later = deliver(queue, ns, "issue_comment", comment_payload("mallory", "hello"))
    break_runtime(processor)
    for _ in range(3):
        work(ns, processor)
        skip_backoff(processor, ns)
    other = deliver(queue, ns, "issues", enrol_payload(number=2))
    work(ns, processor)
    parked = processor.deliveries.failed()
    assert [(p.delivery, p.reason, p.attempts) for p in parked] == [(poison, "RuntimeError", 3)]
    assert poison in FailedJobRegistry(ns.queue_name, connection=ns.client).get_job_ids()
    state = processor.store.load(REF)
    assert state.blocked_by_delivery["delivery"] == poison
    assert poison in state.parked_reason and "deliveries retry" in state.parked_reason
    assert ns.client.lrange(processor.keys.inbox(REF), 0, -1) == [later.encode()]
    assert received(processor, f"github:{REPO}#2") == [other]  # not held
    del processor.agent.runtime.enrol, processor.agent.runtime.advance  # healthy again
    done = processor.deliveries.retry(poison)
    assert done["work_item"] == REF
    work(ns, processor)
    assert received(processor) == [enrolled, poison, later]
    state = processor.store.load(REF)
    assert state.blocked_by_delivery is None and state.current_node == "design"
    assert processor.deliveries.failed() == []
    assert poison not in FailedJobRegistry(ns.queue_name, connection=ns.client).get_job_ids()


def test_discard_drops_a_parked_delivery_and_lets_the_held_ones_through(env):
    gh, processor, queue, ns = env
    processor = build_processor(WorkerSettings(prefix=ns.prefix, queue=ns.queue_name,
                                               delivery_attempts=1),
                                ns.client, processor.agent.graph, processor.github)
    deliver(queue, ns, "issues", enrol_payload())
    work(ns, processor)
    break_runtime(processor)
    poison = deliver(queue, ns, "issue_comment", comment_payload("Codertocat", "/approve"))
    later = deliver(queue, ns, "issue_comment", comment_payload("mallory", "/approve"))
    work(ns, processor)
    assert [p.delivery for p in processor.deliveries.failed()] == [poison]
    del processor.agent.runtime.enrol, processor.agent.runtime.advance  # healthy again
    processor.deliveries.discard(poison)
    work(ns, processor)
    assert received(processor)[-2:] == [poison, later]
    types = [e.type for e in processor.store.events(REF) if e.caused_by == poison]
    assert types[-2:] == ["delivery.parked", "delivery.discarded"]
    assert processor.store.load(REF).blocked_by_delivery is None
    with pytest.raises(DeliveryCommandError, match="not parked"):
        processor.deliveries.retry(poison)


def test_a_delivery_that_kills_its_worker_every_time_is_parked(env):
    """Attempts are counted before handling: a delivery whose handling never finishes
    (the worker dies each time) is parked on the attempt after the last."""
    gh, processor, queue, ns = env
    d = deliver(queue, ns, "issues", enrol_payload())
    ns.client.hset(processor.keys.delivery(d), "attempts", 3)  # three deaths so far
    handled = processor.drain(REF)
    assert [(h.delivery_id, h.outcome) for h in handled] == [(d, "failed")]
    assert "did not finish in 3 attempts" in processor.deliveries.failed()[0].reason


def test_a_replayed_delivery_is_received_once(env):
    """Given a worker that died after logging delivery.received (attempt 1 never finished)
    When the delivery is handled again
    Then the log has its delivery.received once, and the item advanced once."""
    gh, processor, queue, ns = env
    d = deliver(queue, ns, "issues", enrol_payload())
    processor.store.append_event(REF, "delivery.received", {"delivery": d}, d)
    ns.client.hset(processor.keys.delivery(d), mapping={"attempts": 1, "started": 1})
    work(ns, processor)
    assert received(processor) == [d]
    assert processor.store.load(REF).current_node == "requirements-approval"


def test_the_reaper_takes_back_a_dead_workers_job_and_lock(env):
    """Given a worker that took a delivery's job, locked its work item and was SIGKILLed
      (its execution is in RQ's StartedJobRegistry, its liveness key expired)
    When another worker's reaper runs
    Then the lock is released, the job requeued, and the delivery processed once."""
    gh, processor, queue, ns = env
    d = deliver(queue, ns, "issues", enrol_payload())
    rq_queue = Queue(ns.queue_name, connection=ns.client)
    dead = LoopWorker([rq_queue], connection=ns.client, name=f"dead-{ns.token}",
                      processor=processor)
    job, _ = Queue.dequeue_any([rq_queue], None, connection=ns.client)
    dead.prepare_execution(job)
    dead.prepare_job_execution(job, remove_from_intermediate_queue=True)
    lock = ns.client.lock(processor.keys.lock(REF), timeout=60)
    assert lock.acquire(blocking=False, token=f"{dead.name}|abc")
    ns.client.sadd(processor.keys.workers, dead.name)  # registered, never beats again
    assert job.id in StartedJobRegistry(ns.queue_name, connection=ns.client).get_job_ids(
        cleanup=False)

    live = Reaper(processor, f"live-{ns.token}")
    live.register()
    assert processor.drain(REF) == []  # the dead worker's lock blocks it
    counts = live.reap()
    assert counts["abandoned"] == 1
    assert ns.client.get(processor.keys.lock(REF)) is None
    assert not StartedJobRegistry(ns.queue_name, connection=ns.client).get_job_ids(
        cleanup=False)
    work(ns, processor)
    assert received(processor) == [d]
    assert not ns.client.sismember(processor.keys.workers, dead.name)
    live.deregister()


def _dispatch_until_killed(url, prefix, queue_name, owner, marker):
    """A dispatcher (in a child process) whose handling of a delivery never finishes."""
    client = redis.Redis.from_url(url)
    settings = WorkerSettings(prefix=prefix, queue=queue_name, lock_timeout=60)
    dispatcher = build_processor(settings, client, load_graph(), None)
    dispatcher.owner = owner

    def stuck(record, **kwargs):
        client.rpush(marker, record.delivery_id)
        time.sleep(120)

    dispatcher.handle = stuck
    dispatcher.dispatch()


def test_a_dispatcher_killed_mid_drain_is_recovered_by_the_reaper(env):
    """Given a wake-up's dispatcher that took a work item off the ready list, locked it and
      was SIGKILLed while handling its first delivery (a registered worker that no longer
      beats)
    When another worker's reaper runs
    Then the dead dispatcher's lock is released, the work item is listed as ready again
      and a wake-up is pending, and a worker handles every delivery once, in order."""
    gh, processor, queue, ns = env
    first = deliver(queue, ns, "issues", enrol_payload())
    second = deliver(queue, ns, "issue_comment", comment_payload("mallory", "hello"))
    other = deliver(queue, ns, "issues", enrol_payload(number=2))
    ready_key = processor.keys.ready
    assert ns.client.lrange(ready_key, 0, -1) == [REF.encode(), f"github:{REPO}#2".encode()]
    dead = f"dead-{ns.token}"
    ns.client.sadd(processor.keys.workers, dead)  # registered; it never beats
    marker = f"{ns.prefix}:taken"
    child = multiprocessing.get_context("fork").Process(
        target=_dispatch_until_killed, args=(ns.url, ns.prefix, ns.queue_name, dead, marker))
    child.start()
    try:
        taken = ns.client.blpop([marker], timeout=30)
        assert taken is not None and taken[1] == first.encode()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    # Killed mid-drain: the inbox still holds both deliveries, its ref is on no ready list,
    # and the dead worker's lock is still there.
    assert ns.client.lrange(processor.keys.inbox(REF), 0, -1) == [first.encode(),
                                                                  second.encode()]
    assert REF.encode() not in ns.client.lrange(ready_key, 0, -1)
    assert ns.client.get(processor.keys.lock(REF)).decode().startswith(f"{dead}|")
    assert processor.drain(REF) == []  # nobody else can take it meanwhile

    live = Reaper(processor, f"live-{ns.token}")
    live.register()
    counts = live.reap()
    assert counts["stranded"] == 1
    assert ns.client.get(processor.keys.lock(REF)) is None
    assert REF.encode() in ns.client.lrange(ready_key, 0, -1)
    assert ns.client.exists(processor.keys.wake)
    work(ns, processor)
    assert received(processor) == [first, second]
    assert received(processor, f"github:{REPO}#2") == [other]
    assert processor.store.load(REF).current_node == "requirements-approval"
    assert ns.client.hget(processor.keys.delivery(first), "attempts") is None  # handled
    assert not ns.client.llen(processor.keys.inbox(REF))
    assert processor.deliveries.failed() == []
    ns.client.delete(live.keys.reaper)  # the next round
    assert live.reap()["stranded"] == 0
    assert not ns.client.smembers(processor.keys.inboxes)  # empty inboxes leave
    live.deregister()


def test_an_inbox_nobody_looks_after_is_listed_again(env):
    """An inbox that holds deliveries while its ref is on no ready list and its lock is
    free (its drain stopped on an error, say) is listed as ready by the reaper's sweep;
    a held one (backing off) is left to its retry."""
    gh, processor, queue, ns = env
    d = deliver(queue, ns, "issues", enrol_payload())
    ns.client.delete(processor.keys.ready, processor.keys.wake)
    ns.client.set(processor.keys.backoff(REF), d, px=60_000)
    reaper = Reaper(processor, f"live-{ns.token}")
    reaper.register()
    assert reaper.reap()["stranded"] == 0  # backing off: its retry lists it again
    ns.client.delete(processor.keys.backoff(REF), reaper.keys.reaper)
    assert reaper.reap()["stranded"] == 1
    assert ns.client.lrange(processor.keys.ready, 0, -1) == [REF.encode()]
    work(ns, processor)
    assert received(processor) == [d]
    reaper.deregister()


def test_a_failing_delivery_about_no_work_item_does_not_hold_the_shared_inbox(env):
    """Deliveries about no issue or pull request share one inbox, which keeps no order: a
    failing one is taken out of it (the others go on) and put back when its retry is due."""
    gh, processor, queue, ns = env
    original = processor.handle
    bad_ids: set[str] = set()

    def handle(record, **kwargs):
        if record.delivery_id in bad_ids:
            raise RuntimeError("boom")
        return original(record, **kwargs)

    processor.handle = handle
    push = load_payload("push", "with-installation")
    bad = deliver(queue, ns, "push", push)
    bad_ids.add(bad)
    good = deliver(queue, ns, "push", push)
    shared = processor.keys.inbox("~")
    assert ns.client.lrange(shared, 0, -1) == [bad.encode(), good.encode()]
    work(ns, processor)
    assert not ns.client.exists(processor.keys.delivery(good))  # handled
    assert ns.client.lrange(shared, 0, -1) == []
    assert [r["delivery"] for r in processor.deliveries.retrying()] == [bad]
    bad_ids.clear()
    assert processor.deliveries.release_due(time.time() + 3600) == 1
    assert ns.client.lrange(shared, 0, -1) == [bad.encode()]
    assert b"~" in ns.client.lrange(processor.keys.ready, 0, -1)
    work(ns, processor)
    assert not ns.client.exists(processor.keys.delivery(bad))
    assert processor.deliveries.retrying() == [] and processor.deliveries.failed() == []


def test_a_wake_up_stops_at_its_budget_and_queues_the_next(env):
    """A wake-up drains until its time budget is used up; then the work item it was on
    goes back on the ready list and a wake-up job is queued for the rest."""
    gh, processor, queue, ns = env
    ids = [deliver(queue, ns, "issue_comment", comment_payload("mallory", f"hi {i}"))
           for i in range(3)]
    rq_queue = Queue(ns.queue_name, connection=ns.client)
    rq_queue.empty()  # the receiver's wake-up: this test runs the dispatcher itself
    handled = processor.dispatch(budget=0)
    assert [h.delivery_id for h in handled] == ids[:1]
    assert ns.client.lrange(processor.keys.inbox(REF), 0, -1) == [i.encode() for i in ids[1:]]
    assert ns.client.lrange(processor.keys.ready, 0, -1) == [REF.encode()]
    assert len(rq_queue.job_ids) == 1  # the next wake-up
    assert ns.client.get(processor.keys.lock(REF)) is None
    work(ns, processor)
    assert not ns.client.llen(processor.keys.inbox(REF))
    assert all(not ns.client.exists(processor.keys.delivery(i)) for i in ids)


def test_a_live_workers_lock_is_extended_and_never_taken(env):
    gh, processor, queue, ns = env
    reaper = Reaper(processor, f"live-{ns.token}")
    reaper.register()
    lock = ns.client.lock(processor.keys.lock(REF), timeout=1, thread_local=False)
    assert lock.acquire(blocking=False, token=f"{reaper.name}|x")
    processor._held[REF] = lock
    time.sleep(0.6)
    reaper.beat()
    time.sleep(0.6)
    assert ns.client.get(processor.keys.lock(REF)) is not None  # extended past 1 s
    reaper.reap()
    assert ns.client.get(processor.keys.lock(REF)) is not None
    processor._held.clear()
    reaper.deregister()


def test_the_worker_reconnects_with_backoff_instead_of_crashing(env, monkeypatch, caplog):
    """Given Redis is unreachable
    When the worker starts
    Then it retries with a bounded exponential backoff and, once retries run out, raises
      Redis' ConnectionError (the CLI names REDIS_URL)."""
    gh, processor, queue, ns = env
    from redis.backoff import ConstantBackoff, NoBackoff

    monkeypatch.setattr(worker_module, "RECONNECT_BACKOFF", ConstantBackoff(0.05))
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                       retry=redis.retry.Retry(NoBackoff(), 0))
    broken = build_processor(processor.settings, down, processor.agent.graph, processor.github)
    with caplog.at_level(logging.WARNING, logger="the_loop.worker"), \
            pytest.raises(redis.exceptions.ConnectionError):
        work_with_reconnect(broken, Queue(ns.queue_name, connection=down), burst=True,
                            retries=3)
    waits = [r for r in caplog.records if "Redis unavailable" in r.getMessage()]
    assert len(waits) == 4  # the first try and three retries, each logged


def test_the_worker_serves_once_redis_answers_again(env, monkeypatch):
    gh, processor, queue, ns = env
    from redis.backoff import ConstantBackoff

    monkeypatch.setattr(worker_module, "RECONNECT_BACKOFF", ConstantBackoff(0.05))
    d = deliver(queue, ns, "issues", enrol_payload())
    failures = [2]
    original = Reaper.register

    def flaky(self):
        if failures[0]:
            failures[0] -= 1
            raise redis.exceptions.ConnectionError("Redis is loading")
        return original(self)

    monkeypatch.setattr(Reaper, "register", flaky)
    rq_queue = Queue(ns.queue_name, connection=ns.client)
    assert work_with_reconnect(processor, rq_queue, burst=True, name=f"w-{ns.token}")
    assert received(processor) == [d]


def test_a_sweep_that_blocks_never_stops_the_liveness_beat(env):
    """Given a worker whose reaper round is stuck in its monitor sweep
    When its liveness key is gone meanwhile
    Then its beat still sets it again (it has its own thread), so no other worker takes
    it for dead."""
    gh, processor, queue, ns = env
    reaper = Reaper(processor, f"live-{ns.token}")
    sweeping, release, beaten = threading.Event(), threading.Event(), threading.Event()
    armed = threading.Event()
    liveness = processor.keys.worker(reaper.name)

    class StuckSweep:
        def due(self):
            return True

        def sweep(self):
            sweeping.set()
            release.wait(30)
            return []

    reaper.monitors = StuckSweep()
    beat = reaper.beat

    def seen_beat():
        beat()
        if armed.is_set() and ns.client.exists(liveness):
            beaten.set()

    reaper.beat = seen_beat
    reaper.register()
    reaper.start()
    try:
        assert sweeping.wait(10)
        ns.client.delete(liveness)  # as if it expired while the sweep ran
        armed.set()
        assert beaten.wait(10), "the beat waited for the sweep"
        assert sweeping.is_set() and not release.is_set()  # still stuck in the sweep
    finally:
        release.set()
        reaper.stop()
        reaper.deregister()


def test_a_protocol_error_as_the_worker_records_its_death_starts_a_fresh_worker(
        env, monkeypatch, caplog):
    """Given RQ's teardown pipeline failing with a protocol error, as redis-py's
    "Wrong number of response items" does when a failover cuts a MULTI/EXEC short
    When the RQ loop ends (here: after a burst)
    Then the error is logged, not raised: the process keeps running and the deliveries
      are handled."""
    gh, processor, queue, ns = env
    d = deliver(queue, ns, "issues", enrol_payload())
    original = redis.client.Pipeline.execute
    broken = [1]

    def failing(self, *args, **kwargs):
        if broken[0] and any(c[0][0] == "HSET" and "death" in c[0] for c in self.command_stack):
            broken[0] -= 1
            raise redis.ResponseError("Wrong number of response items from pipeline execution")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", failing)
    with caplog.at_level(logging.WARNING, logger="the_loop.worker"):
        work(ns, processor)
    assert broken == [0]  # the teardown did meet the error
    assert any("death not recorded" in r.getMessage() for r in caplog.records)
    assert received(processor) == [d]
