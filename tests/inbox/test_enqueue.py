"""foundation.inbox.enqueue: atomic dedupe + inbox + wake-up on the real Redis, read back
through RQ."""

from __future__ import annotations

import threading

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.wake import DISPATCH_FUNC, WAKE_TTL_MS
from foundation.redis import HeldConnections
from tests.conftest import RedisNamespace, load_fixture
from tests.inbox import jobs
from webhook.events import parse_delivery

TEST_JOB_FUNC = "tests.inbox.jobs.record_wake"
REF1 = "github:Codertocat/Hello-World#1"


def make_delivery(ns: RedisNamespace, event: str = "issues", name: str = "opened", **hdrs):
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": hdrs.get("delivery") or ns.new_id(),
        "Content-Type": "application/json",
    }
    return parse_delivery(headers, load_fixture(event, name))


def make_queue(ns: RedisNamespace, **kwargs) -> DeliveryQueue:
    return DeliveryQueue(ns.client, queue_name=ns.queue_name, prefix=ns.prefix, **kwargs)


def wake_job_id(delivery_id: str) -> str:
    """The id of the wake-up job a delivery's enqueue queues, if it queues one."""
    return f"{delivery_id}-wake"


def snapshot(ns: RedisNamespace) -> dict[str, bytes | None]:
    """Serialized value of every key of this test, plus its membership in rq:queues."""
    state = {key: ns.client.dump(key) for key in ns.existing_keys()}
    state["rq:queues members"] = repr(
        sorted(m for m in ns.client.smembers("rq:queues") if ns.token.encode() in m)
    ).encode()
    return state


def test_new_delivery_writes_everything(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    assert q.enqueue(d, received_at=1700000000.25) is True

    r = redis_ns.client
    assert r.get(q.keys.seen(d.delivery_id)) == b"1"
    assert 0 < r.ttl(q.keys.seen(d.delivery_id)) <= 7 * 24 * 3600
    record = r.hgetall(q.keys.delivery(d.delivery_id))
    assert record == {
        b"event": b"issues",
        b"action": b"opened",
        b"delivery_id": d.delivery_id.encode(),
        b"received_at": b"1700000000.25",
        b"installation_id": b"",
        b"repository": b"Codertocat/Hello-World",
        b"work_item": b"github:Codertocat/Hello-World#1",
        b"body": d.body,
    }
    assert 0 < r.ttl(q.keys.delivery(d.delivery_id)) <= 7 * 24 * 3600
    assert r.lrange(q.keys.inbox(d.work_item), 0, -1) == [d.delivery_id.encode()]
    assert q.keys.inbox(d.work_item) == f"{redis_ns.prefix}:inbox:github:Codertocat/Hello-World#1"
    # The inbox became non-empty (an activation): ready, indexed, and a wake-up job.
    assert r.lrange(q.keys.ready, 0, -1) == [REF1.encode()]
    assert r.smembers(q.keys.inboxes) == {REF1.encode()}
    wake = wake_job_id(d.delivery_id)
    assert r.get(q.keys.wake) == wake.encode()
    assert 0 < r.pttl(q.keys.wake) <= WAKE_TTL_MS
    assert r.lrange(q.queue_key, 0, -1) == [wake.encode()]
    assert q.queue_key == f"rq:queue:{redis_ns.queue_name}"
    assert r.sismember("rq:queues", q.queue_key)
    # RQ job hash has no expiry, like RQ's own enqueue (result_ttl/failure_ttl govern it).
    assert r.ttl(Job.key_for(wake)) == -1
    assert not r.exists(Job.key_for(d.delivery_id))  # no job per delivery


def test_job_reads_back_as_a_normal_rq_job(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    q.enqueue(d)
    job = Job.fetch(wake_job_id(d.delivery_id), connection=redis_ns.client)
    assert job.func_name == DISPATCH_FUNC == "workers.jobs.dispatch"
    assert job.args == ()
    assert job.kwargs == {}
    assert job.origin == redis_ns.queue_name
    assert job.get_status() == JobStatus.QUEUED
    assert (job.result_ttl, job.failure_ttl, job.timeout) == (0, 7 * 24 * 3600, 300)
    assert job.description == "the-loop dispatch"
    assert job.enqueued_at is not None and job.created_at is not None
    rq_queue = Queue(redis_ns.queue_name, connection=redis_ns.client)
    assert rq_queue.job_ids == [wake_job_id(d.delivery_id)]
    assert rq_queue in Queue.all(connection=redis_ns.client)


def test_only_an_activation_wakes_and_only_one_wake_up_is_pending(redis_ns) -> None:
    """A delivery to a non-empty inbox lists nothing and wakes nobody; an inbox that
    becomes non-empty is listed as ready, but no second wake-up job is queued while one
    is pending (P:wake); once a dispatcher took it (deleted P:wake), the next activation
    queues another."""
    q = make_queue(redis_ns)
    r = redis_ns.client
    first = make_delivery(redis_ns, "issues", "opened")  # issue #1
    same = make_delivery(redis_ns, "issue_comment", "created")  # issue #1 too
    other = make_delivery(redis_ns, "pull_request", "opened")  # PR #2
    push = make_delivery(redis_ns, "push", "with-installation")  # no work item
    assert all(q.enqueue(d) for d in (first, same, other))
    assert r.lrange(q.keys.inbox(REF1), 0, -1) == [
        first.delivery_id.encode(), same.delivery_id.encode()]
    assert r.lrange(q.keys.ready, 0, -1) == [REF1.encode(),
                                            b"github:Codertocat/Hello-World#2"]
    assert r.lrange(q.queue_key, 0, -1) == [wake_job_id(first.delivery_id).encode()]
    r.delete(q.keys.wake)  # a dispatcher started
    assert q.enqueue(push)
    assert r.lrange(q.keys.ready, -1, -1) == [b"~"]
    assert r.lrange(q.queue_key, 0, -1) == [wake_job_id(first.delivery_id).encode(),
                                            wake_job_id(push.delivery_id).encode()]


def test_duplicate_writes_nothing(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    assert q.enqueue(d) is True
    before = snapshot(redis_ns)
    assert q.enqueue(d) is False
    assert q.enqueue(d, received_at=1.0) is False
    assert snapshot(redis_ns) == before
    assert redis_ns.client.llen(q.queue_key) == 1
    assert redis_ns.client.llen(q.keys.inbox(d.work_item)) == 1


def test_no_work_item_goes_to_the_shared_inbox(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns, "push", "with-installation")
    assert d.work_item is None
    assert q.enqueue(d) is True
    assert [k for k in redis_ns.existing_keys() if ":inbox:" in k] == [
        f"{redis_ns.prefix}:inbox:~"]
    assert redis_ns.client.lrange(q.keys.inbox(None), 0, -1) == [d.delivery_id.encode()]
    assert redis_ns.client.lrange(q.keys.ready, 0, -1) == [b"~"]
    record = redis_ns.client.hgetall(q.keys.delivery(d.delivery_id))
    assert record[b"installation_id"] == b"1" and record[b"work_item"] == b""


def test_inbox_keeps_arrival_order(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    ids = [make_delivery(redis_ns, "pull_request", n) for n in ("opened", "labeled", "closed")]
    for d in ids:
        q.enqueue(d)
    inbox = redis_ns.client.lrange(q.keys.inbox("github:Codertocat/Hello-World#2"), 0, -1)
    assert inbox == [d.delivery_id.encode() for d in ids]


def round_trips(client: redis.Redis, monkeypatch) -> list[object]:
    """Record every round trip of ``client`` and of the held connections made from it: a
    command's name, or ``PIPELINE``."""
    trips: list[object] = []
    original = client.execute_command
    pipeline_execute = redis.client.Pipeline.execute
    held_send = HeldConnections._send

    def counting(*args, **kwargs):
        trips.append(args[0])
        return original(*args, **kwargs)

    def counting_held(self, connection, args):
        trips.append(args[0])
        return held_send(self, connection, args)

    def counting_pipeline(self, *args, **kwargs):
        trips.append("PIPELINE")
        return pipeline_execute(self, *args, **kwargs)

    monkeypatch.setattr(client, "execute_command", counting)
    monkeypatch.setattr(HeldConnections, "_send", counting_held)
    monkeypatch.setattr(redis.client.Pipeline, "execute", counting_pipeline)
    return trips


def test_round_trips_per_enqueue(redis_ns: RedisNamespace, monkeypatch) -> None:
    """One round trip per delivery; an activation that queues a wake-up job adds one
    (RQ's Queue.enqueue_job in one MULTI/EXEC pipeline)."""
    q = make_queue(redis_ns)
    q.enqueue(make_delivery(redis_ns))  # first calls load the script, read the version
    redis_ns.client.delete(q.keys.wake)
    trips = round_trips(redis_ns.client, monkeypatch)
    assert q.enqueue(make_delivery(redis_ns, "pull_request", "opened")) is True
    assert trips == ["EVALSHA", "PIPELINE"]  # activation: a wake-up job queued
    trips.clear()
    assert q.enqueue(make_delivery(redis_ns, "pull_request", "labeled")) is True
    assert trips == ["EVALSHA"]  # its inbox was not empty
    trips.clear()
    assert q.enqueue(make_delivery(redis_ns, "push", "with-installation")) is True
    assert trips == ["EVALSHA"]  # an activation, but a wake-up is pending


def test_a_lost_wake_up_does_not_lose_the_delivery(redis_ns: RedisNamespace,
                                                   monkeypatch) -> None:
    """Redis failing between the script and the wake-up job: the delivery is queued
    (answered as such); P:wake expires, then a reaper round wakes a worker."""
    q = make_queue(redis_ns)

    def broken(job_id: str) -> None:
        raise redis.ConnectionError("gone")

    monkeypatch.setattr(q.wakeups, "enqueue", broken)
    d = make_delivery(redis_ns)
    assert q.enqueue(d) is True
    assert redis_ns.client.lrange(q.keys.inbox(d.work_item), 0, -1) == [d.delivery_id.encode()]
    assert 0 < redis_ns.client.pttl(q.keys.wake) <= WAKE_TTL_MS
    assert redis_ns.client.llen(q.queue_key) == 0


def test_script_loaded_after_script_flush(redis_ns: RedisNamespace, monkeypatch) -> None:
    """NOSCRIPT (e.g. Redis restarted) is recovered by loading the script, then the same
    EVALSHA again: the delivery is queued once."""
    q = make_queue(redis_ns)
    real_send = HeldConnections._send
    sent: list[object] = []

    def first_evalsha_missing(self, connection, args):
        sent.append(args[0])
        if sent == ["EVALSHA"]:
            raise redis.exceptions.NoScriptError("NOSCRIPT No matching script.")
        return real_send(self, connection, args)

    monkeypatch.setattr(HeldConnections, "_send", first_evalsha_missing)
    d = make_delivery(redis_ns)
    assert q.enqueue(d) is True
    assert sent == ["EVALSHA", "SCRIPT", "EVALSHA"]
    assert redis_ns.client.lrange(q.keys.inbox(d.work_item), 0, -1) == [d.delivery_id.encode()]


def test_failure_inside_script_leaves_nothing_half_written(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    # A key of the wrong type makes the script fail; it must fail before any write.
    redis_ns.client.set(q.keys.inbox(d.work_item), "not a list")
    before = snapshot(redis_ns)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        q.enqueue(d)
    assert snapshot(redis_ns) == before
    assert not redis_ns.client.exists(
        q.keys.seen(d.delivery_id), q.keys.delivery(d.delivery_id), Job.key_for(d.delivery_id)
    )
    # Not marked seen, so the redelivery goes through once the key is fixed.
    redis_ns.client.delete(q.keys.inbox(d.work_item))
    assert q.enqueue(d) is True


def test_a_wrong_ready_list_fails_an_activation_before_any_write(
        redis_ns: RedisNamespace) -> None:
    """The ready list and the inbox index are written only when the inbox was empty, and
    then their types are checked first: nothing is written, nothing marked seen; an
    inbox that already holds deliveries never touches them."""
    q = make_queue(redis_ns)
    first, second = make_delivery(redis_ns), make_delivery(redis_ns)
    redis_ns.client.set(q.keys.ready, "not a list")
    before = snapshot(redis_ns)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        q.enqueue(first)
    assert snapshot(redis_ns) == before
    assert not redis_ns.client.exists(q.keys.seen(first.delivery_id))
    # With a delivery already in the inbox the append is no activation: queued.
    redis_ns.client.rpush(q.keys.inbox(first.work_item), "earlier")
    assert q.enqueue(second) is True
    assert redis_ns.client.lrange(q.keys.inbox(first.work_item), 0, -1) == [
        b"earlier", second.delivery_id.encode()]
    assert redis_ns.client.get(q.keys.ready) == b"not a list"


def test_concurrent_duplicates_enqueue_once(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        results.append(q.enqueue(d))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert redis_ns.client.llen(q.queue_key) == 1
    assert redis_ns.client.llen(q.keys.inbox(d.work_item)) == 1


def test_seen_ttl_is_used(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns, seen_ttl=60)
    d = make_delivery(redis_ns)
    q.enqueue(d)
    assert 0 < redis_ns.client.ttl(q.keys.seen(d.delivery_id)) <= 60
    assert 0 < redis_ns.client.ttl(q.keys.delivery(d.delivery_id)) <= 60
    with pytest.raises(ValueError):
        make_queue(redis_ns, seen_ttl=0)


def test_real_simple_worker_runs_the_job(redis_ns: RedisNamespace) -> None:
    """A wake-up job is performed by a stock RQ SimpleWorker."""
    q = make_queue(redis_ns, job_func=TEST_JOB_FUNC)
    first = make_delivery(redis_ns, "pull_request", "opened")
    second = make_delivery(redis_ns, "push", "with-installation")
    assert q.enqueue(first) and q.enqueue(second)
    jobs.woken.clear()

    rq_queue = Queue(redis_ns.queue_name, connection=redis_ns.client)
    worker = SimpleWorker(
        [rq_queue], connection=redis_ns.client, name=f"worker-{redis_ns.token}"
    )
    assert worker.work(burst=True) is True

    # One wake-up for both (the second activation found one pending).
    assert jobs.woken == [wake_job_id(first.delivery_id)]
    assert rq_queue.count == 0
    assert FailedJobRegistry(queue=rq_queue).count == 0
    # result_ttl=0: finished jobs are deleted right away.
    assert not redis_ns.client.exists(Job.key_for(wake_job_id(first.delivery_id)))
