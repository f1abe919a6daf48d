"""The reaper: heartbeats, due retries, and what workers that died left behind.

``the-loop worker`` runs one :class:`Reaper` in two background threads (and one round
synchronously at start-up, before it takes a job; :mod:`workers.reaper` binds it to the
worker's processor). Every ``THE_LOOP_REAP_INTERVAL`` seconds each worker

* beats, in a thread of its own: refreshes its liveness key ``P:worker:NAME`` (expires
  after ``THE_LOOP_WORKER_TTL``) and extends the work item locks it holds -- so a long
  round (the worker's monitor sweep) never delays it and never lets another worker judge
  this one dead and release its locks;

and, in the other thread, one worker per round (a short Redis lock, ``P:reaper``)

* lists the work items of the retries that are due as ready again
  (:meth:`foundation.inbox.dead.Deliveries.release_due`);
* sweeps the inbox index ``P:inboxes`` (:meth:`Reaper._stranded`): a work item lock held
  by a registered ``the-loop worker`` (``P:workers``) whose liveness key expired is
  deleted (a dispatcher SIGKILLed mid-drain, OOM, a lost node: it had taken the work item
  off the ready list); every inbox that holds deliveries, has a free lock, is neither
  backing off nor held by a parked delivery, and is not in ``P:ready`` is appended to
  ``P:ready``, all in one call that reads the ready list once; refs whose inbox is empty
  leave the index (checked in Lua, so a delivery appended meanwhile keeps its ref). The
  index holds only inboxes with work (the drain step removes a ref when it empties its
  inbox), so a round costs O(work in flight), not O(work items ever seen). The delivery
  the dead worker was handling is still at the head of its inbox (it is popped only
  after handling), and the outbox makes handling it again safe;
* takes back the wake-up jobs of dead workers, built on RQ's registries: an execution in
  the queue's ``StartedJobRegistry`` whose worker is dead has been abandoned; its
  ``P:wake`` flag is deleted if it still names it and a wake-up is queued again. The
  stale registry entry is removed;
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
from collections.abc import Callable
from typing import Protocol

import redis
from rq.executions import Execution
from rq.job import Job
from rq.registry import FailedJobRegistry, StartedJobRegistry
from rq.utils import parse_composite_key

from foundation.inbox.dead import DeadLetterSettings, Deliveries
from foundation.inbox.record import text
from foundation.redis import SERVICE

log = logging.getLogger("the_loop.worker")

ABANDONED_MARKS = ("AbandonedJobError", "stuck in intermediate queue")



class ReaperSettings(DeadLetterSettings, Protocol):
    """What the reaper needs of the worker's settings (beside
    :class:`~foundation.inbox.dead.DeadLetterSettings`)."""

    @property
    def reap_interval(self) -> float: ...


class Reaper:
    """Heartbeat and recovery duties of one ``the-loop worker``.

    Args:
        deliveries: the worker's retries and dead letters (and through them its inboxes,
            Redis connection and settings).
        worker_name: the RQ worker's name (also the owner in its lock tokens).
        heartbeat: extends the work item locks this worker holds; returns how many.
    """

    def __init__(self, deliveries: Deliveries, worker_name: str, *,
                 heartbeat: Callable[[], int] = lambda: 0) -> None:
        self.deliveries = deliveries
        self.inboxes = deliveries.inboxes
        self.keys = deliveries.keys
        self.redis: redis.Redis = deliveries.redis
        self.settings: ReaperSettings = deliveries.settings  # type: ignore[assignment]
        self.name = worker_name
        self.queue = self.inboxes.wakeups.queue
        self._heartbeat = heartbeat
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- life cycle -------------------------------------------------------------------

    def register(self) -> None:
        """Announce this worker (before it takes a job)."""
        with self.redis.pipeline() as pipe:
            pipe.sadd(self.keys.workers, self.name)
            pipe.set(self.keys.worker(self.name), "1", ex=self.settings.worker_ttl)
            pipe.execute()

    def deregister(self) -> None:
        """This worker stops cleanly: it holds nothing any more."""
        try:
            with self.redis.pipeline() as pipe:
                pipe.srem(self.keys.workers, self.name)
                pipe.delete(self.keys.worker(self.name))
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("worker %s could not deregister (%s)", self.name, type(exc).__name__)

    @property
    def interval(self) -> float:
        """Seconds between two rounds (and heartbeats): ``reap_interval``, at most a third
        of the worker TTL and of the lock timeout."""
        return min(self.settings.reap_interval, self.settings.worker_ttl / 3,
                   self.settings.lock_timeout / 3)

    def start(self) -> None:
        """Run :meth:`beat` every :attr:`interval` seconds in one daemon thread and
        :meth:`round` every :attr:`interval` seconds in another."""
        outlast = self.interval + SERVICE.longest_stall
        if min(self.settings.worker_ttl, self.settings.lock_timeout) <= outlast:
            log.warning("THE_LOOP_WORKER_TTL and THE_LOOP_LOCK_TIMEOUT should exceed %.0f s "
                        "(a heartbeat interval and the longest a Redis command can stall and "
                        "be retried); shorter, another worker may take over the work item of "
                        "a worker cut off from Redis while its last write is retried (that "
                        "write is then refused and the delivery handled again)", outlast)
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._loop, args=(self.beat, "beat"),
                             name="the-loop-beat", daemon=True),
            threading.Thread(target=self._loop, args=(self.round, "round"),
                             name="the-loop-reaper", daemon=True)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def _loop(self, duty: Callable[[], object], what: str) -> None:
        """Run ``duty`` every :attr:`interval` seconds until :meth:`stop`."""
        interval = self.interval
        while not self._stop.wait(interval):
            try:
                duty()
            except redis.RedisError as exc:
                log.warning("reaper %s: Redis error (%s); trying again in %g s",
                            what, type(exc).__name__, interval)
            except Exception:  # noqa: BLE001  (the reaper must outlive a bad round)
                log.exception("reaper %s failed", what)

    # -- one round --------------------------------------------------------------------

    def beat(self) -> None:
        """Refresh this worker's liveness and extend the locks it holds."""
        self.redis.set(self.keys.worker(self.name), "1", ex=self.settings.worker_ttl)
        self._heartbeat()

    def reap(self) -> dict[str, int]:
        """A beat, then one round (what start-up runs before the worker takes a job)."""
        self.beat()
        return self.round()

    def round(self) -> dict[str, int]:
        """One round (see the module docstring), without the beat; returns what it did, by
        kind (empty: another worker has this round)."""
        window = max(1, int(self.settings.reap_interval * 900))
        if not self.redis.set(self.keys.reaper, self.name, nx=True, px=window):
            return {}
        counts = {
            "retried": self.deliveries.release_due(),
            # Before _abandoned, which forgets dead workers (their locks are found here).
            "stranded": self._stranded(),
            "abandoned": self._abandoned(),
            "failed": self._failed_by_abandonment(),
            "stuck": self._stuck_in_intermediate(),
        }
        if self.inboxes.ready_length():
            self.inboxes.ensure_wake()
        if any(counts.values()):
            log.info("reaper: %s", ", ".join(f"{k}={v}" for k, v in counts.items() if v))
        return counts

    def is_dead(self, name: str) -> bool:
        """Whether ``name`` is a registered ``the-loop worker`` that stopped beating."""
        return bool(self.redis.sismember(self.keys.workers, name)) and not self.redis.exists(
            self.keys.worker(name))

    def _requeue_job(self, job_id: str, why: str) -> bool:
        """Replace wake-up job ``job_id`` (its ``P:wake`` flag dropped if it still names
        it) and forget it; ``False`` for a job that is gone or not a wake-up."""
        try:
            job = Job.fetch(job_id, connection=self.redis)
            func = job.func_name
        except Exception:  # noqa: BLE001  (gone, or not one of ours)
            return False
        if func != self.inboxes.wakeups.func:
            return False
        self.inboxes.drop_wake(job_id)
        new_id = self.inboxes.ensure_wake()
        log.warning("reaper: wake-up job %s %s; woken again by %s", job_id, why, new_id)
        self.redis.delete(job.key)
        return True

    def _stranded(self) -> int:
        """Sweep the inbox index (see the module docstring); returns how many inboxes were
        listed as ready again. Costs O(indexed inboxes + ready list): the index holds
        only inboxes with work, and the candidates are listed in one call
        (:meth:`~foundation.inbox.drain.Inboxes.list_stranded`), not one ``LPOS`` each."""
        inboxes = self.inboxes
        dead: dict[str, bool] = {}
        candidates: list[str] = []
        for refs in inboxes.indexed():
            _dropped, rows = inboxes.sweep(refs)
            for row in rows:
                locked = bool(row.lock_token)
                if locked:
                    owner = row.lock_token.partition("|")[0]
                    if owner not in dead:
                        dead[owner] = bool(owner) and self.is_dead(owner)
                    if dead[owner] and inboxes.delete_if_equal(self.keys.lock(row.ref),
                                                               row.lock_token):
                        log.warning("reaper: released %s's lock on %s", owner, row.ref)
                        locked = False
                # A live holder drains it (or its lock expires: a later round lists it).
                if not locked and not row.held:
                    candidates.append(row.ref)
        listed = inboxes.list_stranded(candidates)
        for ref in listed:
            log.warning("reaper: %s had deliveries and nobody on it; ready again", ref)
        return len(listed)

    def _abandoned(self) -> int:
        registry = StartedJobRegistry(self.queue.name, connection=self.redis)
        referenced: set[str] = set()
        count = 0
        for raw in self.redis.zrange(registry.key, 0, -1):
            entry = text(raw)
            job_id, execution_id = parse_composite_key(entry)
            execution = Execution(execution_id, job_id, connection=self.redis)
            worker = self.redis.hget(execution.key, "worker_name")
            if worker is None:
                continue  # RQ's own cleanup handles it when it expires
            worker_name = text(worker)
            if not self.is_dead(worker_name):
                referenced.add(worker_name)
                continue
            if self._requeue_job(job_id, f"was abandoned by dead worker {worker_name}"):
                count += 1
            with self.redis.pipeline() as pipe:
                pipe.zrem(registry.key, entry)
                pipe.delete(execution.key)
                pipe.srem(Execution(execution_id, job_id, connection=self.redis,
                                    worker_name=worker_name).worker_executions_key, entry)
                pipe.execute()
        for name in self.redis.smembers(self.keys.workers):
            worker_name = text(name)
            if worker_name not in referenced and self.is_dead(worker_name):
                self.redis.srem(self.keys.workers, worker_name)
        return count

    def _failed_by_abandonment(self) -> int:
        registry = FailedJobRegistry(self.queue.name, connection=self.redis)
        count = 0
        for job_id in registry.get_job_ids(cleanup=False):
            if self.redis.hexists(self.keys.failed, job_id):
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
        started = {parse_composite_key(text(e))[0] for e in self.redis.zrange(
            StartedJobRegistry(self.queue.name, connection=self.redis).key, 0, -1)}
        count = 0
        for raw in self.redis.lrange(self.queue.intermediate_queue_key, 0, -1):
            job_id = text(raw)
            if job_id in started:
                continue
            now = time.time()
            self.redis.set(self.keys.stuck(job_id), now, nx=True, ex=24 * 3600)
            first = float(self.redis.get(self.keys.stuck(job_id)) or now)
            if now - first < self.settings.worker_ttl:
                continue
            if self._requeue_job(job_id, "was stuck between dequeue and start"):
                count += 1
            self.redis.lrem(self.queue.intermediate_queue_key, 1, job_id)
            self.redis.delete(self.keys.stuck(job_id))
        return count
