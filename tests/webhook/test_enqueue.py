"""webhook.enqueue: atomic dedupe + enqueue on the real Redis, read back through RQ."""

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
from webhook.enqueue import DEFAULT_JOB_FUNC, DeliveryQueue
from webhook.events import parse_delivery

TEST_JOB_FUNC = "tests.webhook.jobs.record_delivery"


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
    assert r.lrange(q.queue_key, 0, -1) == [d.delivery_id.encode()]
    assert q.queue_key == f"rq:queue:{redis_ns.queue_name}"
    assert r.sismember("rq:queues", q.queue_key)
    assert r.lrange(q.inbox_key(d.work_item), 0, -1) == [d.delivery_id.encode()]
    assert q.inbox_key(d.work_item) == f"{redis_ns.prefix}:inbox:github:Codertocat/Hello-World#1"
    # RQ job hash has no expiry, like RQ's own enqueue (result_ttl/failure_ttl govern it).
    assert r.ttl(Job.key_for(d.delivery_id)) == -1


def test_job_reads_back_as_a_normal_rq_job(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    q.enqueue(d)
    job = Job.fetch(d.delivery_id, connection=redis_ns.client)
    assert job.func_name == DEFAULT_JOB_FUNC
    assert job.args == (d.delivery_id, "issues", "github:Codertocat/Hello-World#1")
    assert job.kwargs == {}
    assert job.origin == redis_ns.queue_name
    assert job.get_status() == JobStatus.QUEUED
    assert (job.result_ttl, job.failure_ttl, job.timeout) == (0, 7 * 24 * 3600, 300)
    assert job.description == f"issues {d.delivery_id}"
    assert job.enqueued_at is not None
    rq_queue = Queue(redis_ns.queue_name, connection=redis_ns.client)
    assert rq_queue.job_ids == [d.delivery_id]
    assert rq_queue in Queue.all(connection=redis_ns.client)


def test_job_hash_matches_what_rq_itself_writes(redis_ns: RedisNamespace) -> None:
    """Contract: same fields and values as Queue.enqueue_job, except timestamps/args."""
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns)
    q.enqueue(d)

    rq_queue = Queue(redis_ns.queue_name, connection=redis_ns.client)
    theirs_id = redis_ns.new_id()
    args = (theirs_id, d.event, d.work_item)
    rq_queue.enqueue_job(
        Job.create(
            DEFAULT_JOB_FUNC, args=args, connection=redis_ns.client, id=theirs_id,
            result_ttl=0, failure_ttl=7 * 24 * 3600, timeout=300,
            description=f"{d.event} {theirs_id}",
        )
    )
    ours = redis_ns.client.hgetall(Job.key_for(d.delivery_id))
    theirs = redis_ns.client.hgetall(Job.key_for(theirs_id))
    assert set(ours) == set(theirs)
    differing = {k for k in ours if ours[k] != theirs[k]}
    assert differing <= {b"created_at", b"enqueued_at", b"data", b"description"}
    # data differs only by the delivery id inside the pickled args.
    assert zlib.decompress(ours[b"data"]).replace(
        d.delivery_id.encode(), theirs_id.encode()
    ) == zlib.decompress(theirs[b"data"])
    assert redis_ns.client.lrange(rq_queue.key, 0, -1) == [
        d.delivery_id.encode(), theirs_id.encode()
    ]


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


def test_no_work_item_no_inbox(redis_ns: RedisNamespace) -> None:
    q = make_queue(redis_ns)
    d = make_delivery(redis_ns, "push", "with-installation")
    assert d.work_item is None
    assert q.enqueue(d) is True
    assert not any(":inbox:" in k for k in redis_ns.existing_keys())
    assert redis_ns.client.hget(q.delivery_key(d.delivery_id), "installation_id") == b"1"
    assert Job.fetch(d.delivery_id, connection=redis_ns.client).args == (
        d.delivery_id, "push", None,
    )


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
    q = make_queue(redis_ns, job_func=TEST_JOB_FUNC)
    first = make_delivery(redis_ns, "pull_request", "opened")
    second = make_delivery(redis_ns, "push", "with-installation")
    assert q.enqueue(first) and q.enqueue(second)
    jobs.recorded.clear()

    rq_queue = Queue(redis_ns.queue_name, connection=redis_ns.client)
    worker = SimpleWorker(
        [rq_queue], connection=redis_ns.client, name=f"worker-{redis_ns.token}"
    )
    assert worker.work(burst=True) is True

    assert jobs.recorded == [
        (first.delivery_id, "pull_request", "github:Codertocat/Hello-World#2"),
        (second.delivery_id, "push", None),
    ]
    assert rq_queue.count == 0
    assert FailedJobRegistry(queue=rq_queue).count == 0
    # result_ttl=0: finished jobs are deleted right away.
    assert not redis_ns.client.exists(Job.key_for(first.delivery_id))
