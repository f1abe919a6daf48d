"""webhook.enqueue: atomic dedupe + inbox + wake-up on the real Redis, read back through
RQ."""

from __future__ import annotations

import threading
import zlib

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry

from tests.conftest import RedisNamespace, load_fixture
from tests.webhook import jobs
from webhook.enqueue import DEFAULT_JOB_FUNC, WAKE_TTL_MS, DeliveryQueue, wake_job
from webhook.events import parse_delivery

TEST_JOB_FUNC = "tests.webhook.jobs.record_wake"
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
    assert r.get(q.seen_key(d.delivery_id)) == b"1"
    assert 0 < r.ttl(q.seen_key(d.delivery_id)) <= 7 * 24 * 3600
    record = r.hgetall(q.delivery_key(d.delivery_id))
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
    assert 0 < r.ttl(q.delivery_key(d.delivery_id)) <= 7 * 24 * 3600
    assert r.lrange(q.inbox_key(d.work_item), 0, -1) == [d.delivery_id.encode()]
    assert q.inbox_key(d.work_item) == f"{redis_ns.prefix}:inbox:github:Codertocat/Hello-World#1"
    # The inbox became non-empty (an activation): ready, indexed, and a wake-up job.
    assert r.lrange(q.ready_key, 0, -1) == [REF1.encode()]
    assert r.smembers(q.inboxes_key) == {REF1.encode()}
    wake = q.wake_job_id(d.delivery_id)
    assert r.get(q.wake_key) == wake.encode()
    assert 0 < r.pttl(q.wake_key) <= WAKE_TTL_MS
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
    job = Job.fetch(q.wake_job_id(d.delivery_id), connection=redis_ns.client)
    assert job.func_name == DEFAULT_JOB_FUNC == "workers.jobs.dispatch"
    assert job.args == ()
    assert job.kwargs == {}
    assert job.origin == redis_ns.queue_name
    assert job.get_status() == JobStatus.QUEUED
    assert (job.result_ttl, job.failure_ttl, job.timeout) == (0, 7 * 24 * 3600, 300)
    assert job.description == "the-loop dispatch"
    assert job.enqueued_at is not None and job.created_at is not None
    rq_queue = Queue(redis_ns.queue_name, connection=redis_ns.client)
    assert rq_queue.job_ids == [q.wake_job_id(d.delivery_id)]
    assert rq_queue in Queue.all(connection=redis_ns.client)


def test_job_hash_matches_what_rq_itself_writes(redis_ns: RedisNamespace) -> None:
    """Contract: the wake-up job hash the script writes from its constant template has the
    same fields and values as Queue.enqueue_job writes, except the two timestamps."""
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    q.enqueue(d)

    rq_queue = Queue(redis_ns.queue_name, connection=redis_ns.client)
    theirs_id = redis_ns.new_id()
    rq_queue.enqueue_job(wake_job(redis_ns.client, redis_ns.queue_name, theirs_id))
    ours = redis_ns.client.hgetall(Job.key_for(q.wake_job_id(d.delivery_id)))
    theirs = redis_ns.client.hgetall(Job.key_for(theirs_id))
    assert set(ours) == set(theirs)
    differing = {k for k in ours if ours[k] != theirs[k]}
    assert differing <= {b"created_at", b"enqueued_at"}
    assert zlib.decompress(ours[b"data"]) == zlib.decompress(theirs[b"data"])
    assert redis_ns.client.lrange(rq_queue.key, 0, -1) == [
        q.wake_job_id(d.delivery_id).encode(), theirs_id.encode()
    ]


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
    assert r.lrange(q.inbox_key(REF1), 0, -1) == [
        first.delivery_id.encode(), same.delivery_id.encode()]
    assert r.lrange(q.ready_key, 0, -1) == [REF1.encode(),
                                            b"github:Codertocat/Hello-World#2"]
    assert r.lrange(q.queue_key, 0, -1) == [q.wake_job_id(first.delivery_id).encode()]
    r.delete(q.wake_key)  # a dispatcher started
    assert q.enqueue(push)
    assert r.lrange(q.ready_key, -1, -1) == [b"~"]
    assert r.lrange(q.queue_key, 0, -1) == [q.wake_job_id(first.delivery_id).encode(),
                                            q.wake_job_id(push.delivery_id).encode()]


def test_duplicate_writes_nothing(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    assert q.enqueue(d) is True
    before = snapshot(redis_ns)
    assert q.enqueue(d) is False
    assert q.enqueue(d, received_at=1.0) is False
    assert snapshot(redis_ns) == before
    assert redis_ns.client.llen(q.queue_key) == 1
    assert redis_ns.client.llen(q.inbox_key(d.work_item)) == 1


def test_no_work_item_goes_to_the_shared_inbox(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns, "push", "with-installation")
    assert d.work_item is None
    assert q.enqueue(d) is True
    assert [k for k in redis_ns.existing_keys() if ":inbox:" in k] == [
        f"{redis_ns.prefix}:inbox:~"]
    assert redis_ns.client.lrange(q.inbox_key(None), 0, -1) == [d.delivery_id.encode()]
    assert redis_ns.client.lrange(q.ready_key, 0, -1) == [b"~"]
    record = redis_ns.client.hgetall(q.delivery_key(d.delivery_id))
    assert record[b"installation_id"] == b"1" and record[b"work_item"] == b""


def test_inbox_keeps_arrival_order(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    ids = [make_delivery(redis_ns, "pull_request", n) for n in ("opened", "labeled", "closed")]
    for d in ids:
        q.enqueue(d)
    inbox = redis_ns.client.lrange(q.inbox_key("github:Codertocat/Hello-World#2"), 0, -1)
    assert inbox == [d.delivery_id.encode() for d in ids]


def test_one_round_trip_per_enqueue(redis_ns: RedisNamespace, monkeypatch) -> None:
    q = make_queue(redis_ns)
    q.enqueue(make_delivery(redis_ns))  # first call may load the script
    commands: list[object] = []
    original = redis_ns.client.execute_command

    def counting(*args, **kwargs):
        commands.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(redis_ns.client, "execute_command", counting)
    assert q.enqueue(make_delivery(redis_ns)) is True
    assert commands == ["EVALSHA"]


def test_script_loaded_after_script_flush(redis_ns: RedisNamespace, monkeypatch) -> None:
    """NOSCRIPT (e.g. Redis restarted) is recovered by redis-py loading the script."""
    q = make_queue(redis_ns)
    real_evalsha = redis_ns.client.evalsha
    calls = {"n": 0}

    def evalsha_once_missing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise redis.exceptions.NoScriptError("NOSCRIPT")
        return real_evalsha(*args, **kwargs)

    monkeypatch.setattr(redis_ns.client, "evalsha", evalsha_once_missing)
    assert q.enqueue(make_delivery(redis_ns)) is True


def test_failure_inside_script_leaves_nothing_half_written(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    # A key of the wrong type makes the script fail; it must fail before any write.
    redis_ns.client.set(q.inbox_key(d.work_item), "not a list")
    before = snapshot(redis_ns)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        q.enqueue(d)
    assert snapshot(redis_ns) == before
    assert not redis_ns.client.exists(
        q.seen_key(d.delivery_id), q.delivery_key(d.delivery_id), Job.key_for(d.delivery_id)
    )
    # Not marked seen, so the redelivery goes through once the key is fixed.
    redis_ns.client.delete(q.inbox_key(d.work_item))
    assert q.enqueue(d) is True


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
    assert redis_ns.client.llen(q.inbox_key(d.work_item)) == 1


def test_seen_ttl_is_used(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns, seen_ttl=60)
    d = make_delivery(redis_ns)
    q.enqueue(d)
    assert 0 < redis_ns.client.ttl(q.seen_key(d.delivery_id)) <= 60
    assert 0 < redis_ns.client.ttl(q.delivery_key(d.delivery_id)) <= 60
    with pytest.raises(ValueError):
        make_queue(redis_ns, seen_ttl=0)


def test_real_simple_worker_runs_the_job(redis_ns: RedisNamespace) -> None:
    """A wake-up job written by the script (from the constant template) is performed by
    a stock RQ SimpleWorker like any job RQ enqueued itself."""
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
    assert jobs.woken == [q.wake_job_id(first.delivery_id)]
    assert rq_queue.count == 0
    assert FailedJobRegistry(queue=rq_queue).count == 0
    # result_ttl=0: finished jobs are deleted right away.
    assert not redis_ns.client.exists(Job.key_for(q.wake_job_id(first.delivery_id)))
