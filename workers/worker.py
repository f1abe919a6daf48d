"""The RQ worker process: ``the-loop worker [--burst]``.

It runs jobs in-process (RQ's ``SimpleWorker``: no fork per job), which is what lets one
process handle hundreds of routine deliveries a second; a job that crashes the process
is left in RQ's started-job registry and handled by RQ's abandoned-job cleanup.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import redis
from rq import Queue, SimpleWorker

from webhook.logs import bind as bind_log_context
from webhook.logs import clear as clear_log_context
from workers import jobs
from workers import metrics as worker_metrics
from workers.bootstrap import build_processor

log = logging.getLogger("the_loop.worker")


class LoopWorker(SimpleWorker):
    """RQ's in-process worker. Kept as a named class so deployments can point RQ tooling
    (``rq info``, ``--worker-class``) at it.

    Each job's log lines carry its delivery id and work item, and its wall time goes to
    ``the_loop_job_duration_seconds``. On SIGTERM (or SIGINT) RQ's warm shutdown lets the
    current job finish, then the worker exits 0; a second signal stops it at once.
    """

    def execute_job(self, job: Any, queue: Queue) -> None:
        args = worker_metrics.job_args(job)
        bind_log_context(job.id, args[2] if len(args) > 2 and isinstance(args[2], str) else None)
        start = time.perf_counter()
        try:
            super().execute_job(job, queue)
        finally:
            worker_metrics.observe_job(job, time.perf_counter() - start)
            clear_log_context()


def run_worker(
    env: Mapping[str, str] | None = None,
    *,
    burst: bool = False,
    connection: redis.Redis | None = None,
    name: str | None = None,
) -> bool:
    """Build the processor (failing fast on bad config), then work the queue.

    Args:
        env: environment (default ``os.environ``).
        burst: return when the queue is empty instead of waiting for jobs.
        connection: Redis client (default from ``REDIS_URL``).
        name: worker name (default RQ's).

    Returns:
        whether any job was performed (RQ's ``work()`` result).
    """
    env = os.environ if env is None else env
    processor = build_processor(env, connection)
    worker_metrics.instrument(processor)
    jobs.install(processor)
    queue = Queue(processor.settings.queue, connection=processor.redis)
    worker = LoopWorker([queue], connection=processor.redis, name=name)
    log.info("worker %s on queue %s", worker.name, queue.name)
    server = worker_metrics.start_server(env)
    try:
        return worker.work(burst=burst, logging_level=env.get("THE_LOOP_LOG_LEVEL", "INFO"),
                           with_scheduler=False)
    finally:
        if server is not None:
            server.shutdown()
