"""Delivery bookkeeping around the queue: attempts, retries with backoff, dead letters.

Every delivery is tried at most ``THE_LOOP_DELIVERY_ATTEMPTS`` times; an attempt starts
when a worker begins handling it (so a worker killed while handling it counts). A failed
attempt leaves the delivery at the head of its work item's inbox, holds that work item's
later deliveries behind it for the backoff interval (``THE_LOOP_DELIVERY_BACKOFF``) and
schedules a retry; other work items are not affected. (A delivery about no work item is
taken out of the shared inbox instead, which keeps no order, and put back when its retry
is due.) A due retry lists the work item as ready again and makes sure a wake-up job is
queued (:mod:`foundation.inbox.drain`); no job is queued per delivery. When the attempts
are used up the delivery is **parked**: recorded with its reason in the
``P:deliveries:failed`` hash and in RQ's ``FailedJobRegistry`` (job id = delivery id),
taken off the inbox, and — when it belongs to a work item — the work item is held (its
later deliveries wait in the inbox) and its state says why (``blocked_by_delivery``,
``parked_reason``).
``the-loop deliveries retry ID`` puts it back at the head of the inbox and runs it again;
``the-loop deliveries discard ID`` drops it and lets the held deliveries through.

Redis keys (:mod:`foundation.inbox.keys`): ``P:deliveries:failed`` (hash: id -> JSON
reason), ``P:deliveries:retry`` (sorted set: id -> due time), ``P:backoff:REF`` (the work
item waits until it expires), ``P:parked:REF`` (the parked delivery holding the work
item), and the delivery record ``P:delivery:ID`` (fields ``attempts``, ``started``,
``last_error``). Payload bodies are never logged; reasons are the-loop's own words.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import redis
from rq.job import Job
from rq.registry import FailedJobRegistry

from foundation.inbox.drain import DrainSettings, Inboxes
from foundation.inbox.keys import SHARED_INBOX
from foundation.inbox.record import text
from foundation.inbox.wake import FAILURE_TTL
from graph.errors import LoopError
from graph.state import StateStore

log = logging.getLogger("the_loop.worker")

#: Schema-invalid deliveries kept for ``the-loop deliveries failed`` (the newest).
INVALID_KEPT = 1000


class DeadLetterSettings(DrainSettings, Protocol):
    """What retries and parking need of the worker's settings (beside
    :class:`~foundation.inbox.drain.DrainSettings`)."""

    @property
    def worker_ttl(self) -> int: ...

    def backoff(self, attempt: int) -> float: ...


class DeliveryCommandError(LoopError, RuntimeError):
    """An operator command on a delivery cannot be carried out; the message says why."""


@dataclass(frozen=True)
class Parked:
    """One dead letter, as ``the-loop deliveries failed`` lists it."""

    delivery: str
    event: str | None
    work_item: str | None
    reason: str
    attempts: int
    at: float
    payload_kept: bool

    def to_dict(self) -> dict[str, Any]:
        return {"delivery": self.delivery, "event": self.event, "work_item": self.work_item,
                "reason": self.reason, "attempts": self.attempts, "at": self.at,
                "payload_kept": self.payload_kept}


class Deliveries:
    """Attempts, retries and dead letters of the deliveries on one queue.

    Args:
        connection: the Redis client (the queue's).
        settings: worker settings (prefix, queue, backoff, lock timeout, worker TTL).
        store: the work items' state (to say why a work item is held).
        inboxes: the inboxes to list work items on (default: built from ``settings``).
    """

    def __init__(self, connection: redis.Redis, settings: DeadLetterSettings,
                 store: StateStore, inboxes: Inboxes | None = None) -> None:
        self.redis = connection
        self.settings = settings
        self.store = store
        self.inboxes = inboxes or Inboxes(connection, settings)
        self.keys = self.inboxes.keys

    # -- while processing -------------------------------------------------------------

    def schedule_retry(self, delivery_id: str, ref: str | None, attempt: int,
                       reason: str, *, at_least: float = 0.0) -> float:
        """Retry ``delivery_id`` after the backoff for ``attempt``, or after ``at_least``
        seconds when that is longer (a ``Retry-After`` or rate-limit reset); until then
        its work item's later deliveries wait. Returns the delay in seconds."""
        delay = max(self.settings.backoff(attempt), at_least)
        due = time.time() + delay
        with self.redis.pipeline() as pipe:
            pipe.hset(self.keys.delivery(delivery_id), "last_error", reason[:500])
            if ref:
                pipe.set(self.keys.backoff(ref), delivery_id, px=max(1, int(delay * 1000)))
            pipe.zadd(self.keys.retry, {delivery_id: due})
            pipe.execute()
        return delay

    def park(self, delivery_id: str, event: str | None, ref: str | None, reason: str,
             attempts: int) -> None:
        """Record ``delivery_id`` as a dead letter and hold its work item, visibly.

        Idempotent (a crash part-way through parks it again on the next attempt).
        """
        at = time.time()
        self.redis.hset(self.keys.failed, delivery_id, json.dumps({
            "event": event, "work_item": ref, "reason": reason, "attempts": attempts,
            "at": at}))
        job = self.inboxes.wakeups.parked(delivery_id, f"{event} {delivery_id} (parked)")
        FailedJobRegistry(self.settings.queue, connection=self.redis).add(
            job, ttl=FAILURE_TTL, exc_string=f"parked after {attempts} attempts: {reason}")
        self.redis.zrem(self.keys.retry, delivery_id)
        if not ref:
            return
        state = self.store.load(ref)
        if state is None:
            return  # not a work item: nothing to hold
        if (state.blocked_by_delivery or {}).get("delivery") != delivery_id:
            state.blocked_by_delivery = {
                "delivery": delivery_id, "event": event, "reason": reason,
                "attempts": attempts, "at": at, "previous_reason": state.parked_reason}
            state.parked_reason = (
                f"delivery {delivery_id} ({event}) failed {attempts} times and is parked "
                f"({reason}); later deliveries wait until an operator runs "
                f"`the-loop deliveries retry {delivery_id}` (or `discard`)")
            self.store.save(state)
            self.store.append_event(ref, "delivery.parked", {
                "delivery": delivery_id, "event": event, "attempts": attempts,
                "reason": reason}, delivery_id)
        self.redis.set(self.keys.parked(ref), delivery_id)
        log.error("delivery=%s event=%s work_item=%s parked after %d attempts: %s",
                  delivery_id, event, ref, attempts, reason)

    def record_invalid(self, delivery_id: str, event: str, action: str | None,
                       ref: str | None, path: str, rule: str) -> None:
        """Note that ``delivery_id``'s payload does not match its event's schema: it is
        acknowledged and never processed, retried or parked, and holds nothing. The entry
        (``P:deliveries:invalid``, the newest :data:`INVALID_KEPT`) holds the failing
        JSON path and rule (see :class:`foundation.webhook_schema.SchemaCheck`), never a
        payload value."""
        entry = json.dumps({"delivery": delivery_id, "event": event, "action": action,
                            "work_item": ref, "path": path, "rule": rule, "at": time.time()})
        with self.redis.pipeline() as pipe:
            pipe.lpush(self.keys.invalid, entry)
            pipe.ltrim(self.keys.invalid, 0, INVALID_KEPT - 1)
            pipe.execute()

    def invalid(self) -> list[dict[str, Any]]:
        """The schema-invalid deliveries, newest first: ``{delivery, event, action,
        work_item, path, rule, at}``."""
        out = []
        for raw in self.redis.lrange(self.keys.invalid, 0, -1):
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict):
                out.append(entry)
        return out

    # -- requeueing -------------------------------------------------------------------

    def requeue(self, delivery_id: str, ref: str | None, *, at_front: bool = False,
                wake: bool = True) -> str | None:
        """Have ``delivery_id`` processed (again): list its work item as ready -- for a
        delivery about no work item, first put it back in the shared inbox (at the head
        with ``at_front``) unless it is there -- and make sure a wake-up job is queued.

        Returns the id of the wake-up job (new or already pending; ``None`` with
        ``wake=False``).
        """
        if ref:
            self.inboxes.mark_ready(ref)
        else:
            self.inboxes.mark_ready(SHARED_INBOX, delivery_id=delivery_id, at_front=at_front)
        return self.inboxes.ensure_wake(tag=delivery_id) if wake else None

    def release_due(self, now: float | None = None) -> int:
        """List the work items of the retries that are due as ready again (one wake-up
        job for all of them); returns how many."""
        due = self.redis.zrangebyscore(self.keys.retry, 0, now or time.time(), start=0, num=500)
        count = 0
        for raw in due:
            delivery_id = text(raw)
            event, ref = self.redis.hmget(self.keys.delivery(delivery_id), "event", "work_item")
            if event is not None:
                work_item = text(ref or b"") or None
                if work_item:
                    # The retry is due: its hold is over (do not let the drain race the TTL).
                    held_by = self.redis.get(self.keys.backoff(work_item))
                    if held_by is not None and text(held_by) == delivery_id:
                        self.redis.delete(self.keys.backoff(work_item))
                # List first, then forget: a crash in between only lists it twice, which
                # finds nothing left to do.
                self.requeue(delivery_id, work_item, wake=False)
                count += 1
            self.redis.zrem(self.keys.retry, delivery_id)
        if count:
            self.inboxes.ensure_wake()
        return count

    # -- operators --------------------------------------------------------------------

    def failed(self) -> list[Parked]:
        """The parked deliveries, oldest first."""
        out = []
        for raw_id, raw in self.redis.hgetall(self.keys.failed).items():
            delivery_id = text(raw_id)
            try:
                entry = json.loads(raw)
            except ValueError:
                entry = {}
            out.append(Parked(
                delivery=delivery_id, event=entry.get("event"),
                work_item=entry.get("work_item"), reason=str(entry.get("reason", "?")),
                attempts=int(entry.get("attempts") or 0), at=float(entry.get("at") or 0),
                payload_kept=bool(self.redis.exists(self.keys.delivery(delivery_id)))))
        return sorted(out, key=lambda p: p.at)

    def retrying(self) -> list[dict[str, Any]]:
        """Deliveries waiting for a retry: ``{delivery, due, attempts, last_error}``."""
        out = []
        entries: list[tuple[bytes, float]] = self.redis.zrange(  # type: ignore[assignment]
            self.keys.retry, 0, -1, withscores=True)
        for raw_id, due in entries:
            delivery_id = text(raw_id)
            attempts, error = self.redis.hmget(self.keys.delivery(delivery_id), "attempts",
                                               "last_error")
            out.append({"delivery": delivery_id, "due": due,
                        "attempts": int(attempts or 0),
                        "last_error": text(error) if error is not None else None})
        return out

    def _entry(self, delivery_id: str) -> Mapping[str, Any]:
        raw = self.redis.hget(self.keys.failed, delivery_id)
        if raw is None:
            raise DeliveryCommandError(f"delivery {delivery_id} is not parked "
                                "(see `the-loop deliveries failed`)")
        entry: Mapping[str, Any] = json.loads(raw)
        return entry

    def _unhold(self, ref: str, delivery_id: str, what: str) -> None:
        """Clear the hold ``delivery_id`` put on ``ref`` (state, marker key)."""
        parked = self.redis.get(self.keys.parked(ref))
        if parked is not None and text(parked) == delivery_id:
            self.redis.delete(self.keys.parked(ref))
        state = self.store.load(ref)
        blocked = state.blocked_by_delivery if state is not None else None
        if state is not None and blocked and blocked.get("delivery") == delivery_id:
            state.parked_reason = blocked.get("previous_reason")
            state.blocked_by_delivery = None
            self.store.save(state)
        self.store.append_event(ref, what, {"delivery": delivery_id}, delivery_id)

    @contextmanager
    def _with_lock(self, ref: str) -> Iterator[None]:
        """Hold ``ref``'s drain lock (as a worker would), its state writes fenced on the
        lock's token while held (a store that fences: ``fence(ref, token)``)."""
        lock = self.redis.lock(self.keys.lock(ref), timeout=self.settings.lock_timeout,
                               thread_local=False)
        if not lock.acquire(blocking=True, blocking_timeout=max(30, self.settings.worker_ttl)):
            raise DeliveryCommandError(f"work item {ref} is busy (its lock is held); try again")
        fence = getattr(self.store, "fence", None)
        if fence is not None:
            fence(ref, text(lock.local.token))
        try:
            yield
        finally:
            if fence is not None:
                fence(ref, None)
            lock.release()

    def retry(self, delivery_id: str) -> dict[str, Any]:
        """Put parked ``delivery_id`` back at the head of its work item's inbox, with its
        attempts reset, and queue a job for it. Returns what was done.

        Raises:
            DeliveryCommandError: not parked, its payload is no longer kept, or its work item is
                busy.
        """
        entry = self._entry(delivery_id)
        key = self.keys.delivery(delivery_id)
        event = self.redis.hget(key, "event")
        if event is None:
            raise DeliveryCommandError(
                f"delivery {delivery_id}'s payload is no longer kept (deliveries are kept "
                "7 days); ask GitHub to send it again: `the-loop redeliver --since 7d`")
        ref = entry.get("work_item") or None
        if ref:
            with self._with_lock(ref):
                inbox = self.keys.inbox(ref)
                if self.redis.lpos(inbox, delivery_id) is None:
                    self.redis.lpush(inbox, delivery_id)
                self.redis.hset(key, "attempts", 0)
                self._unhold(ref, delivery_id, "delivery.retried")
        else:
            self.redis.hset(key, "attempts", 0)
        self._forget(delivery_id)
        job_id = self.requeue(delivery_id, ref, at_front=True)
        return {"delivery": delivery_id, "work_item": ref, "job": job_id}

    def discard(self, delivery_id: str) -> dict[str, Any]:
        """Drop parked ``delivery_id`` for good and let its work item's held deliveries
        through. Returns what was done.

        Raises:
            DeliveryCommandError: not parked, or its work item is busy.
        """
        entry = self._entry(delivery_id)
        ref = entry.get("work_item") or None
        job_id = None
        if ref:
            with self._with_lock(ref):
                self.redis.lrem(self.keys.inbox(ref), 0, delivery_id)
                self._unhold(ref, delivery_id, "delivery.discarded")
                head = self.redis.lindex(self.keys.inbox(ref), 0)
            if head is not None:
                job_id = self.requeue(text(head), ref)
        self.redis.delete(self.keys.delivery(delivery_id))
        self._forget(delivery_id)
        return {"delivery": delivery_id, "work_item": ref, "job": job_id}

    def _forget(self, delivery_id: str) -> None:
        self.redis.hdel(self.keys.failed, delivery_id)
        self.redis.zrem(self.keys.retry, delivery_id)
        FailedJobRegistry(self.settings.queue, connection=self.redis).remove(delivery_id)
        self.redis.delete(Job.key_for(delivery_id))
