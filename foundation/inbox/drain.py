"""Draining inboxes: the worker's side of the protocol (:mod:`foundation.inbox.enqueue`).

The receiver appends each delivery to its work item's inbox ``P:inbox:REF`` (``~`` for
deliveries about no issue or pull request) and, when that made the inbox non-empty, lists
the ref in ``P:ready`` and queues a wake-up job (:mod:`foundation.inbox.wake`) unless one is
pending (``P:wake``). A dispatcher pops refs off the ready list and drains each inbox
head-first under the work item's lock (:meth:`Inboxes.step`, one Lua call per delivery:
finish the delivery just handled, take the next one).

Who looks after an inbox that holds deliveries? Exactly one of:

- its ref is in ``P:ready`` (a wake-up job is queued, or a dispatcher is running);
- a worker holds its lock and drains it: the step that lets go checks the inbox in the
  same atomic call, so nothing that arrives meanwhile is missed;
- it waits for a retry (``P:backoff:REF``; the reaper's due retries list it again) or
  an operator (``P:parked:REF``; ``the-loop deliveries retry|discard`` list it again);
- its holder died: the reaper (:mod:`foundation.inbox.reaper`) releases a dead worker's
  lock and lists every inbox in ``P:inboxes`` that holds deliveries, has a free lock, is
  not held and is not in ``P:ready`` (:meth:`Inboxes.sweep`, :meth:`Inboxes.list_stranded`).

``P:inboxes`` holds the inboxes with work, not every work item ever seen: a delivery that
makes an inbox non-empty adds its ref (``enqueue.lua``, ``mark_ready.lua``), and the
drain step that finds or leaves it empty removes it, under the work item's lock
(``step.lua``); the reaper's sweep drops any other ref whose inbox is empty (an operator's
discard). So a reaper round costs O(work in flight), however many work items are done.

``step.lua`` and ``sweep.lua`` build per-ref key names from the prefixes
:meth:`foundation.inbox.keys.Keys.per_ref` passes in ARGV: one call can move from one work
item to the next. That is fine on a single Redis (RQ needs one anyway) and would not be
on Redis Cluster.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from foundation.inbox.keys import SHARED_INBOX, Keys
from foundation.inbox.record import DeliveryRecord, text
from foundation.inbox.scripts import Routed, Scripts
from foundation.inbox.wake import WAKE_TTL_MS, WakeUps

log = logging.getLogger("the_loop.worker")

__all__ = ["SHARED_INBOX", "DrainSettings", "Inboxes", "Step", "Stranded"]


class DrainSettings(Protocol):
    """What the protocol needs of the worker's settings."""

    @property
    def prefix(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def lock_timeout(self) -> float: ...



@dataclass(frozen=True, slots=True)
class Step:
    """What one :meth:`Inboxes.step` did (see ``step.lua``).

    Attributes:
        what: ``ok`` (a delivery was taken), ``idle``, ``locked``, ``held`` or ``empty``.
        ref, delivery_id: the delivery taken (``""`` unless ``ok``).
        attempt: its attempt number, counted by this step.
        first: whether this is its first start (else a replay: its effects may have begun).
        ready: the ready list's length after the step.
        wake_pending: whether ``P:wake`` is set.
        record: the delivery taken, decoded; ``None`` when its record expired.
        leftover: an expired record left bookkeeping fields behind (delete them).
        done: what became of the delivery handled before (see ``step.lua``).
        route: the router's route for the delivery taken (the table the
            :class:`Inboxes` were given), ``""`` when it has none (ignored).
    """

    what: str
    ref: str
    delivery_id: str
    attempt: int
    first: bool
    ready: int
    wake_pending: bool
    record: DeliveryRecord | None
    leftover: bool
    done: str
    route: str = ""

    @classmethod
    def parse(cls, reply: list[Any]) -> Step:
        """Decode ``step.lua``'s reply."""
        what, ref, delivery_id, attempt, first, ready, wake, fields, done, route = reply
        it = iter(fields)
        values = dict(zip(it, it, strict=False))
        delivery_id = text(delivery_id)
        record = DeliveryRecord.from_redis(values, delivery_id) if values else None
        return cls(text(what), text(ref), delivery_id, int(attempt), bool(first),
                   int(ready), bool(wake), record, bool(values) and record is None,
                   text(done), text(route))


@dataclass(frozen=True, slots=True)
class Stranded:
    """One indexed inbox that holds deliveries, as :meth:`Inboxes.sweep` saw it."""

    ref: str
    lock_token: str
    held: bool


class Inboxes:
    """The inboxes, the ready list and wake-ups of one deployment.

    Args:
        connection: the Redis client (the queue's).
        settings: prefix, queue and lock timeout (the worker's settings).
        routed: the worker's router table, ``(event, action) -> route`` (``action``
            ``None``: any action): a step returns the body and the route only for
            those.
    """

    def __init__(self, connection: redis.Redis, settings: DrainSettings, *,
                 routed: Routed = ()) -> None:
        self.redis = connection
        self.settings = settings
        self.keys = Keys(settings.prefix, settings.queue)
        self.scripts = Scripts(connection, routed)
        # Every step passes these (built once: a step is the drain's hot path).
        self._step_keys = (self.keys.ready, self.keys.wake, self.keys.inboxes)
        self._per_ref = self.keys.per_ref()
        self.wakeups = WakeUps(connection, settings.queue)
        # Wake-up job ids carry the queue name (as far as RQ allows in an id).
        self._tag = re.sub(r"[^A-Za-z0-9_-]", "", settings.queue)[:64] or "the-loop"

    # -- draining ---------------------------------------------------------------------

    def step(self, token: str, *, done: tuple[str, str, bool, bool, str] | None = None,
             take: str | None = None, ready: int = 0) -> Step:
        """One atomic step of a drain (one Redis round trip).

        Args:
            token: this drain's lock token (``owner|hex``).
            done: ``(ref, delivery id, pop, delete record, then)`` for the delivery just
                handled; ``then`` is ``more``, ``release`` or ``yield``.
            take: a ref whose lock to take (if free) and whose head to take.
            ready: pop at most this many refs off the ready list to find a delivery.

        Returns:
            What the step did (:class:`Step`).
        """
        ref, delivery_id, pop, delete, then = done or ("", "", False, False, "")
        reply = self.scripts.step(keys=self._step_keys, args=(
            *self._per_ref, token, int(self.settings.lock_timeout * 1000), ref, delivery_id,
            "1" if pop else "", "1" if delete else "", then, take or "", ready))
        return Step.parse(reply)

    def body(self, delivery_id: str) -> bytes | None:
        """The stored body of ``delivery_id`` (``None`` once its record expired)."""
        raw = self.redis.hget(self.keys.delivery(delivery_id), "body")
        return raw.encode() if isinstance(raw, str) else raw

    def let_go(self, ref: str, token: str) -> None:
        """Release ``ref``'s lock if ``token`` still holds it and list ``ref`` as ready if
        its inbox holds deliveries (a drain that stopped on an error)."""
        self.delete_if_equal(self.keys.lock(ref), token)
        self.mark_ready(ref)

    def delete_if_equal(self, key: str, value: str | bytes) -> bool:
        """Delete ``key`` if it still holds ``value``; returns whether it did."""
        return bool(self.scripts.delete_if_equal(keys=[key], args=[value]))

    # -- listing and waking -----------------------------------------------------------

    def mark_ready(self, ref: str, *, strict: bool = False, delivery_id: str | None = None,
                   at_front: bool = False) -> bool:
        """List ``ref`` in ``P:ready`` if its inbox holds deliveries and it is not listed
        yet; with ``delivery_id``, first put that delivery in the inbox unless it is
        there (at the head with ``at_front``). ``strict``: only if its lock is free and
        it is not held. Returns whether it was listed now."""
        keys = self.keys
        return bool(self.scripts.mark_ready(
            keys=(keys.ready, keys.inboxes, keys.inbox(ref), keys.lock(ref), keys.backoff(ref),
                  keys.parked(ref)),
            args=(ref, "1" if strict else "", delivery_id or "", "1" if at_front else "")))

    def ensure_wake(self, tag: str | None = None) -> str | None:
        """Make sure a wake-up job is queued: set ``P:wake`` (NX, expiring) and, if it was
        unset, queue a wake-up job (:meth:`foundation.inbox.wake.WakeUps.enqueue`).

        Returns the id of the new or the pending wake-up job (``None`` if the flag kept
        vanishing). A crash between the flag and the enqueue leaves the flag to expire
        (``WAKE_TTL_MS``); the reaper then queues one.
        """
        job_id = f"{tag or self._tag}-wake-{uuid.uuid4().hex[:12]}"
        for _ in range(3):
            if self.redis.set(self.keys.wake, job_id, nx=True, px=WAKE_TTL_MS):
                self.wakeups.enqueue(job_id)
                return job_id
            pending = self.redis.get(self.keys.wake)
            if pending is not None:
                return text(pending)
        return None

    def drop_wake(self, job_id: str) -> bool:
        """Delete ``P:wake`` if it still names ``job_id`` (a wake-up job that will never
        run: its worker died)."""
        return self.delete_if_equal(self.keys.wake, job_id)

    def clear_wake(self) -> None:
        """Delete ``P:wake`` (a dispatcher starts: the next activation wakes another)."""
        self.redis.delete(self.keys.wake)

    def ready_length(self) -> int:
        """How many refs are on the ready list."""
        return int(self.redis.llen(self.keys.ready))

    # -- the reaper's sweep -----------------------------------------------------------

    def indexed(self, batch: int = 200) -> Iterable[list[str]]:
        """The refs of ``P:inboxes``, in batches."""
        chunk: list[str] = []
        for raw in self.redis.sscan_iter(self.keys.inboxes, count=batch):
            chunk.append(text(raw))
            if len(chunk) >= batch:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def sweep(self, refs: list[str]) -> tuple[int, list[Stranded]]:
        """Drop ``refs`` whose inbox is empty from the index; describe the others."""
        dropped, rows = self.scripts.sweep(keys=(self.keys.inboxes,),
                                           args=(*self.keys.per_ref(), *refs))
        return int(dropped), [Stranded(text(r), text(t), bool(h)) for r, t, h in rows]

    def list_stranded(self, refs: list[str]) -> list[str]:
        """Append to ``P:ready`` each of ``refs`` whose inbox holds deliveries, whose lock
        is free, that is not held and not listed yet, atomically (``list_stranded.lua``:
        the ready list is read once, so this is linear in ``refs`` plus its length).

        Returns:
            the refs listed now.
        """
        if not refs:
            return []
        listed = self.scripts.list_stranded(keys=(self.keys.ready,),
                                            args=(*self._per_ref, *refs))
        return [text(r) for r in listed]
