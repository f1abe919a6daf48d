"""The worker's reaper: heartbeats, due retries, and jobs of workers that died.

``the-loop worker`` runs one :class:`Reaper` in a background thread (and one round
synchronously at start-up, before it takes a job). Every ``THE_LOOP_REAP_INTERVAL``
seconds each worker

* beats: refreshes its liveness key ``P:worker:NAME`` (expires after
  ``THE_LOOP_WORKER_TTL``) and extends the work item locks it holds;

and one worker per round (a short Redis lock, ``P:reaper``)

* lists the work items of the retries that are due as ready again
  (:meth:`workers.deliveries.Deliveries.release_due`);
* sweeps the inbox index ``P:inboxes`` (:meth:`Reaper._stranded`): a work item lock held
  by a registered ``the-loop worker`` (``P:workers``) whose liveness key expired is
  deleted (a dispatcher SIGKILLed mid-drain, OOM, a lost node: it had taken the work item
  off the ready list); every inbox that holds deliveries, has a free lock, is neither
  backing off nor held by a parked delivery, and is not in ``P:ready`` (``LPOS``) is
  appended to ``P:ready``; refs whose inbox is empty leave the index (checked in Lua, so
  a delivery appended meanwhile keeps its ref). The delivery the dead worker was
  handling is still at the head of its inbox (it is popped only after handling), and the
  outbox makes handling it again safe;
* takes back the jobs of dead workers, built on RQ's registries: an execution in the
  queue's ``StartedJobRegistry`` whose worker is dead has been abandoned; for a wake-up
  job (``workers.jobs.dispatch``) its ``P:wake`` flag is deleted if it still names it and
  a wake-up is queued again; a job of the job-per-delivery days
  (``workers.jobs.process_delivery``) has its work item listed as ready. The stale
  registry entry is removed;
* does the same for jobs RQ itself failed by abandonment (``AbandonedJobError``, "stuck
  in intermediate queue": RQ's own cleanup got there first, e.g. after every worker was
  down), and jobs left in RQ's intermediate queue by a worker that died between taking a
  job and starting it;
* finally, when ``P:ready`` is not empty, makes sure a wake-up job is queued (``P:wake``
  expires, so a wake-up lost any other way is replaced within ``WAKE_TTL_MS``).

A delivery whose handling kills its worker every time is bounded like any other: each
attempt is counted before it starts, and the last one parks it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.registry import FailedJobRegistry, StartedJobRegistry
from rq.utils import parse_composite_key

from webhook.enqueue import DISPATCH_FUNC
from workers.service import DeliveryProcessor

log = logging.getLogger("the_loop.worker")

#: Delete a lock only if it still holds the dead worker's token.
DELETE_IF_EQUAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

ABANDONED_MARKS = ("AbandonedJobError", "stuck in intermediate queue")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Reaper:
    """Heartbeat and recovery duties of one ``the-loop worker``.

    Args:
        processor: the worker's processor (its Redis, settings, held locks).
        worker_name: the RQ worker's name (also the owner in its lock tokens).
    """

    def __init__(self, processor: DeliveryProcessor, worker_name: str) -> None:
        self.processor = processor
        self.redis: redis.Redis = processor.redis
        self.settings = processor.settings
        self.name = worker_name
        self.queue = Queue(self.settings.queue, connection=self.redis)
        self._delete_if_equal = self.redis.register_script(DELETE_IF_EQUAL)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- keys -------------------------------------------------------------------------

    @property
    def workers_key(self) -> str:
        return f"{self.settings.prefix}:workers"

    def alive_key(self, name: str) -> str:
        return f"{self.settings.prefix}:worker:{name}"

    @property
    def round_key(self) -> str:
        return f"{self.settings.prefix}:reaper"

    def stuck_key(self, job_id: str) -> str:
        return f"{self.settings.prefix}:stuck:{job_id}"

    # -- life cycle -------------------------------------------------------------------

    def register(self) -> None:
        """Announce this worker (before it takes a job)."""
        self.processor.owner = self.name
        with self.redis.pipeline() as pipe:
            pipe.sadd(self.workers_key, self.name)
            pipe.set(self.alive_key(self.name), "1", ex=self.settings.worker_ttl)
            pipe.execute()

    def deregister(self) -> None:
        """This worker stops cleanly: it holds nothing any more."""
        try:
            with self.redis.pipeline() as pipe:
                pipe.srem(self.workers_key, self.name)
                pipe.delete(self.alive_key(self.name))
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("worker %s could not deregister (%s)", self.name, type(exc).__name__)

    def start(self) -> None:
        """Run :meth:`reap` every ``reap_interval`` seconds in a daemon thread."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="the-loop-reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        interval = min(self.settings.reap_interval, self.settings.worker_ttl / 3,
                       self.settings.lock_timeout / 3)
        while not self._stop.wait(interval):
            try:
                self.reap()
            except redis.RedisError as exc:
                log.warning("reaper: Redis error (%s); trying again in %g s",
                            type(exc).__name__, interval)
            except Exception:  # noqa: BLE001  (the reaper must outlive a bad round)
                log.exception("reaper round failed")

    # -- one round --------------------------------------------------------------------

    def beat(self) -> None:
        """Refresh this worker's liveness and extend the locks it holds."""
        self.redis.set(self.alive_key(self.name), "1", ex=self.settings.worker_ttl)
        self.processor.heartbeat()

    def reap(self) -> dict[str, int]:
        """One round (see the module docstring); returns what it did, by kind."""
        self.beat()
        window = max(1, int(self.settings.reap_interval * 900))
        if not self.redis.set(self.round_key, self.name, nx=True, px=window):
            return {}
        counts = {
            "retried": self.processor.deliveries.release_due(),
            # Before _abandoned, which forgets dead workers (their locks are found here).
            "stranded": self._stranded(),
            "abandoned": self._abandoned(),
            "failed": self._failed_by_abandonment(),
            "stuck": self._stuck_in_intermediate(),
        }
        if self.processor.inboxes.ready_length():
            self.processor.inboxes.ensure_wake()
        if any(counts.values()):
            log.info("reaper: %s", ", ".join(f"{k}={v}" for k, v in counts.items() if v))
        return counts

    def is_dead(self, name: str) -> bool:
        """Whether ``name`` is a registered ``the-loop worker`` that stopped beating."""
        return bool(self.redis.sismember(self.workers_key, name)) and not self.redis.exists(
            self.alive_key(name))

    def _requeue_job(self, job_id: str, why: str) -> bool:
        """Redo what job ``job_id`` would have done and forget it: a wake-up job is
        replaced (its ``P:wake`` flag dropped if it still names it); a delivery job of the
        job-per-delivery days has its work item listed as ready."""
        try:
            job = Job.fetch(job_id, connection=self.redis)
            func = job.func_name
        except Exception:  # noqa: BLE001  (gone, or not one of ours)
            return False
        inboxes = self.processor.inboxes
        if func == DISPATCH_FUNC:
            inboxes.drop_wake(job_id)
            new_id = inboxes.ensure_wake()
            log.warning("reaper: wake-up job %s %s; woken again by %s", job_id, why, new_id)
        elif func == "workers.jobs.process_delivery":
            try:
                delivery_id, event, ref = job.args[0], job.args[1], job.args[2]
            except Exception:  # noqa: BLE001
                return False
            new_id = self.processor.deliveries.requeue(str(delivery_id), str(event), ref)
            log.warning("reaper: job %s of delivery %s %s; its inbox is ready again (%s)",
                        job_id, delivery_id, why, new_id)
        else:
            return False
        self.redis.delete(job.key)
        return True

    def _stranded(self) -> int:
        """Sweep the inbox index (see the module docstring); returns how many inboxes were
        listed as ready again."""
        inboxes = self.processor.inboxes
        listed = 0
        dead: dict[str, bool] = {}
        # One snapshot of P:ready (not an LPOS per indexed ref: both can be long under a
        # backlog); MARK_READY checks with LPOS, atomically, before it lists a ref.
        ready = inboxes.listed()
        for refs in inboxes.indexed():
            _dropped, rows = inboxes.sweep(refs)
            for row in rows:
                locked = bool(row.lock_token)
                if locked:
                    owner = row.lock_token.partition("|")[0]
                    if owner not in dead:
                        dead[owner] = bool(owner) and self.is_dead(owner)
                    if dead[owner] and self._delete_if_equal(
                            keys=[self.processor.lock_key(row.ref)], args=[row.lock_token]):
                        log.warning("reaper: released %s's lock on %s", owner, row.ref)
                        locked = False
                # A live holder drains it (or its lock expires: a later round lists it).
                if locked or row.held or row.ref in ready:
                    continue
                if inboxes.mark_ready(row.ref, strict=True):
                    listed += 1
                    log.warning("reaper: %s had deliveries and nobody on it; ready again",
                                row.ref)
        return listed

    def _abandoned(self) -> int:
        registry = StartedJobRegistry(self.queue.name, connection=self.redis)
        referenced: set[str] = set()
        count = 0
        for raw in self.redis.zrange(registry.key, 0, -1):
            entry = _text(raw)
            job_id, execution_id = parse_composite_key(entry)
            execution = Execution(execution_id, job_id, connection=self.redis)
            worker = self.redis.hget(execution.key, "worker_name")
            if worker is None:
                continue  # RQ's own cleanup handles it when it expires
            worker_name = _text(worker)
            if not self.is_dead(worker_name):
                referenced.add(worker_name)
                continue
            try:
                job = Job.fetch(job_id, connection=self.redis)
                ref = job.args[2] if len(job.args) > 2 else None
            except Exception:  # noqa: BLE001
                ref = None
            if ref:
                self._release_lock_of(worker_name, str(ref))
            if self._requeue_job(job_id, f"was abandoned by dead worker {worker_name}"):
                count += 1
            with self.redis.pipeline() as pipe:
                pipe.zrem(registry.key, entry)
                pipe.delete(execution.key)
                pipe.srem(Execution(execution_id, job_id, connection=self.redis,
                                    worker_name=worker_name).worker_executions_key, entry)
                pipe.execute()
        for name in self.redis.smembers(self.workers_key):
            worker_name = _text(name)
            if worker_name not in referenced and self.is_dead(worker_name):
                self.redis.srem(self.workers_key, worker_name)
        return count

    def _release_lock_of(self, worker_name: str, ref: str) -> None:
        key = self.processor.lock_key(ref)
        token = self.redis.get(key)
        if (token is not None and _text(token).startswith(f"{worker_name}|")
                and self._delete_if_equal(keys=[key], args=[token])):
            log.warning("reaper: released %s's lock on %s", worker_name, ref)

    def _failed_by_abandonment(self) -> int:
        registry = FailedJobRegistry(self.queue.name, connection=self.redis)
        count = 0
        for job_id in registry.get_job_ids(cleanup=False):
            if self.redis.hexists(self.processor.deliveries.failed_key, job_id):
                continue  # parked by us: an operator decides
            try:
                job = Job.fetch(job_id, connection=self.redis)
            except Exception:  # noqa: BLE001
                continue
            if not any(mark in (job.exc_info or "") for mark in ABANDONED_MARKS):
                continue
            if self._requeue_job(job_id, "was failed by RQ as abandoned"):
                registry.remove(job_id)
                count += 1
        return count

    def _stuck_in_intermediate(self) -> int:
        started = {parse_composite_key(_text(e))[0] for e in self.redis.zrange(
            StartedJobRegistry(self.queue.name, connection=self.redis).key, 0, -1)}
        count = 0
        for raw in self.redis.lrange(self.queue.intermediate_queue_key, 0, -1):
            job_id = _text(raw)
            if job_id in started:
                continue
            now = time.time()
            self.redis.set(self.stuck_key(job_id), now, nx=True, ex=24 * 3600)
            first = float(self.redis.get(self.stuck_key(job_id)) or now)
            if now - first < self.settings.worker_ttl:
                continue
            if self._requeue_job(job_id, "was stuck between dequeue and start"):
                count += 1
            self.redis.lrem(self.queue.intermediate_queue_key, 1, job_id)
            self.redis.delete(self.stuck_key(job_id))
        return count
