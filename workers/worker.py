"""The RQ worker process: ``the-loop worker [--burst]``.

It runs jobs in-process (RQ's ``SimpleWorker``: no fork per job). Its jobs are wake-ups
(``workers.jobs.dispatch``): one job drains many deliveries, so RQ's per-job bookkeeping
is not paid per delivery. A worker that dies (SIGKILL, OOM) leaves its job in RQ's
started-job registry and, mid-drain, a work item lock and an inbox that is on no ready
list; the reaper of any other worker (:mod:`workers.reaper`) sees that it stopped beating,
releases the lock, lists the inbox as ready again and queues a wake-up.

Redis trouble does not crash-loop the process: RQ already waits and reconnects while it
waits for jobs; when its loop gives up (a Redis error while finishing a job) or Redis is
down at start-up, :func:`run_worker` starts a fresh RQ worker after an exponential
backoff (redis-py's ``Retry`` with ``ExponentialBackoff``, capped at 30 s), until Redis
answers again or the process is told to stop.

A worker whose interpreter cannot run for the worker TTL (a hook frozen in C code
holding the interpreter lock) or that runs a hook it could not stop exits with every
thread's traceback (:mod:`workers.watchdog`): its work is taken back and counted.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested

from foundation.observability.logs import bind as bind_log_context
from foundation.observability.logs import clear as clear_log_context
from foundation.redis import DEQUEUE_TIMEOUT, BoundedDequeue, blocking
from graph.errors import LoopError
from workers import jobs
from workers import metrics as worker_metrics
from workers.drain import DeliveryProcessor
from workers.reaper import Reaper
from workers.watchdog import Watchdog

if TYPE_CHECKING:
    from foundation.settings import Settings

log = logging.getLogger("the_loop.worker")


class LoopWorker(BoundedDequeue, SimpleWorker):
    """RQ's in-process worker. Kept as a named class so deployments can point RQ tooling
    (``rq info``, ``--worker-class``) at it.

    Each delivery's log lines carry its delivery id and work item (a wake-up job binds
    each delivery it handles; another job, its own id), and each job's wall time goes to
    ``the_loop_job_duration_seconds``. On SIGTERM (or SIGINT) RQ's warm shutdown lets the
    current job finish -- a wake-up finishes the delivery in hand and takes no other --
    then the worker exits 0; a second signal stops it at once.

    It waits for a job at most :data:`~foundation.redis.client.DEQUEUE_TIMEOUT` seconds at a
    time (:class:`~foundation.redis.client.BoundedDequeue`), on a connection of its own
    (:func:`rq_connection`) whose socket timeout covers that wait; the jobs' processor
    keeps its short one.

    Args:
        processor: the processor its jobs use (:func:`the_loop.wiring.build_worker`);
            the other arguments are RQ's ``SimpleWorker``'s.
    """

    def __init__(self, *args: Any, processor: DeliveryProcessor, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.processor = processor

    def request_stop(self, signum: Any, frame: Any) -> None:
        """RQ's warm shutdown; a wake-up job under way also stops taking deliveries: it
        finishes the one in hand, lists what is left as ready and queues a wake-up for
        another worker (:attr:`workers.drain.DeliveryProcessor.stopping`)."""
        self.processor.stopping.set()
        super().request_stop(signum, frame)

    def register_death(self) -> None:
        """RQ's last write as it stops (its registration dropped, its death stamped). A
        worker stopping because Redis failed under it (a failover) may get a protocol
        error instead of a connection error from that pipeline (redis-py's "Wrong number
        of response items"): logged, not raised, so that :func:`work_with_reconnect` starts
        a fresh worker rather than the process exiting; the dead worker's keys expire and
        the reaper takes back what it held."""
        try:
            super().register_death()
        except redis.RedisError as exc:
            log.warning("worker %s: its death not recorded in Redis (%s); its keys expire",
                        self.name, type(exc).__name__)

    def execute_job(self, job: Any, queue: Queue) -> None:
        # A wake-up covers many deliveries: each binds its own. Another job, its id.
        bind_log_context(None if worker_metrics.is_dispatch(job) else job.id)
        start = time.perf_counter()
        try:
            with jobs.running_with(self.processor):
                super().execute_job(job, queue)
        finally:
            worker_metrics.observe_job(job, time.perf_counter() - start)
            clear_log_context()


def rq_connection(processor: DeliveryProcessor) -> redis.Redis:
    """RQ's connection for a worker: the processor's client's twin whose socket timeout
    also covers RQ's blocking wait for a job (:func:`foundation.redis.client.blocking`)."""
    return blocking(processor.redis, DEQUEUE_TIMEOUT)


def run_worker(
    processor: DeliveryProcessor,
    settings: Settings,
    *,
    burst: bool = False,
    name: str | None = None,
) -> bool:
    """Work the queue with ``processor`` (built, failing fast on bad config, by
    :func:`the_loop.wiring.build_worker`), serving the worker's metrics meanwhile.

    Args:
        processor: the processor the jobs use.
        settings: the settings it was built from (metrics port, address, log level).
        burst: return when the queue is empty instead of waiting for jobs.
        name: worker name (default RQ's).

    Returns:
        whether any job was performed (RQ's ``work()`` result).
    """
    queue = Queue(processor.settings.queue, connection=rq_connection(processor))
    server = worker_metrics.start_server(settings.metrics.worker_port, settings.web.host)
    # A frozen interpreter or an unstoppable hook ends the process once other workers
    # take its work back (the worker TTL); see workers.watchdog.
    watchdog = Watchdog(processor.settings.worker_ttl)
    watchdog.start()
    try:
        return work_with_reconnect(processor, queue, burst=burst, name=name,
                                   logging_level=settings.logging.level)
    except StopRequested:
        return False
    finally:
        watchdog.stop()
        if server is not None:
            server.shutdown()


class WorkerLoopEnded(LoopError, redis.exceptions.ConnectionError):
    """RQ's work loop returned without being asked to stop (it logs why: a Redis error
    while finishing a job); a fresh worker is started after a backoff."""


#: Backoff between two starts of the RQ worker while Redis is unavailable.
RECONNECT_BACKOFF = ExponentialBackoff(cap=30.0, base=1.0)


def work_with_reconnect(
    processor: DeliveryProcessor,
    queue: Queue,
    *,
    burst: bool = False,
    name: str | None = None,
    logging_level: str = "INFO",
    retries: int = -1,
) -> bool:
    """Work ``queue`` with a :class:`LoopWorker` and its :class:`~workers.reaper.Reaper`;
    on a Redis connection error (or RQ's loop giving up) start a fresh one after an
    exponential backoff, ``retries`` times (``-1``: until Redis answers again).

    Each start is a new RQ worker (a new name), so the reaper of another worker can take
    back what the previous one held.

    Raises:
        redis.exceptions.ConnectionError: the retries ran out.
        rq.exceptions.StopRequested: a stop signal arrived while waiting to reconnect.
    """
    starts = [0]

    def once() -> bool:
        starts[0] += 1
        worker_name = name if starts[0] == 1 or name is None else f"{name}-{starts[0]}"
        worker = LoopWorker([queue], connection=queue.connection, name=worker_name,
                            processor=processor)
        reaper = Reaper(processor, worker.name)
        reaper.register()
        reaper.reap()  # before the first job: take back what dead workers left
        reaper.start()
        log.info("worker %s on queue %s", worker.name, queue.name)
        try:
            worked = worker.work(burst=burst, logging_level=logging_level,
                                 with_scheduler=False)
        finally:
            reaper.stop()
            reaper.deregister()
        asked_to_stop = (getattr(worker, "_stop_requested", False)
                         or getattr(worker, "_shutdown_requested_date", None) is not None)
        if not burst and not asked_to_stop:
            raise WorkerLoopEnded(f"worker {worker.name} stopped on its own")
        return worked

    def waiting(error: Exception) -> None:
        log.warning("Redis unavailable (%s: %s); starting the worker again after a backoff",
                    type(error).__name__, error)
        if threading.current_thread() is threading.main_thread():
            # RQ's handlers ask Redis for the worker's state; while waiting, just stop.
            def stop(signum: int, frame: Any) -> None:
                raise StopRequested()

            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)

    policy = Retry(RECONNECT_BACKOFF, retries,
                   supported_errors=(redis.exceptions.ConnectionError,
                                     redis.exceptions.TimeoutError))
    return policy.call_with_retry(once, waiting)
