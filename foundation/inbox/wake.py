"""Wake-up jobs: the only RQ jobs the-loop queues, made one way, with RQ's public API
(and RQ's record of a parked delivery, :meth:`WakeUps.parked`).

A wake-up job runs ``workers.jobs.dispatch`` (no arguments): it drains the inboxes on the
ready list. ``P:wake`` holds the id of the pending one (set with ``NX``, expiring after
:data:`WAKE_TTL_MS`), so one activation wakes one worker and a wake-up lost before it
ran blocks new ones at most that long. Whoever set the flag queues the job with
:meth:`WakeUps.enqueue` (``Queue.create_job`` + ``Queue.enqueue_job`` in one pipeline:
one round trip). A crash between the flag and the job leaves the flag to expire; the
reaper then queues one.
"""

from __future__ import annotations

import redis
from rq.job import Job, JobStatus
from rq.queue import Queue

__all__ = ["DISPATCH_FUNC", "FAILURE_TTL", "JOB_TIMEOUT", "WAKE_TTL_MS", "WakeUps"]

#: The job every wake-up runs: drain the ready list.
DISPATCH_FUNC = "workers.jobs.dispatch"
#: How long ``P:wake`` says "a wake-up job is queued", milliseconds.
WAKE_TTL_MS = 30_000
#: RQ timeout of a wake-up job, seconds.
JOB_TIMEOUT = 300
#: Seconds a failed job stays in RQ's FailedJobRegistry.
FAILURE_TTL = 7 * 24 * 3600


class WakeUps:
    """Queue wake-up jobs on one RQ queue.

    Args:
        connection: the Redis client (the queue's).
        queue_name: the RQ queue.
        func: dotted path of the job's function (called with no arguments).
        timeout: RQ job timeout, seconds.
        failure_ttl: seconds a failed wake-up stays in RQ's failed registry.
    """

    def __init__(self, connection: redis.Redis, queue_name: str, *,
                 func: str = DISPATCH_FUNC, timeout: int = JOB_TIMEOUT,
                 failure_ttl: int = FAILURE_TTL) -> None:
        self.queue = Queue(queue_name, connection=connection)
        self.func = func
        self.timeout = timeout
        self.failure_ttl = failure_ttl

    def job(self, job_id: str) -> Job:
        """The wake-up job ``job_id``, not saved (no I/O). ``result_ttl=0``: RQ deletes
        it as soon as it finished."""
        return self.queue.create_job(
            self.func, job_id=job_id, result_ttl=0, failure_ttl=self.failure_ttl,
            timeout=self.timeout, description="the-loop dispatch")

    def parked(self, job_id: str, description: str) -> Job:
        """RQ's view of a parked delivery (for ``FailedJobRegistry``; not saved, no I/O):
        a failed wake-up under the delivery's id. Requeued from RQ it only wakes a
        worker; the delivery stays parked until an operator acts."""
        return self.queue.create_job(
            self.func, job_id=job_id, result_ttl=0, failure_ttl=self.failure_ttl,
            timeout=self.timeout, description=description, status=JobStatus.FAILED)

    def enqueue(self, job_id: str) -> Job:
        """Save and queue wake-up job ``job_id`` (one round trip, a MULTI/EXEC pipeline;
        the very first call of a process also asks Redis for its version, as RQ does).

        Raises:
            redis.RedisError: Redis unreachable; then no job was queued.
        """
        with self.queue.connection.pipeline() as pipe:
            job = self.queue.enqueue_job(self.job(job_id), pipeline=pipe)
            pipe.execute()
        return job
