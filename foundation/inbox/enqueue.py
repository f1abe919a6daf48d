"""Deduplicate and enqueue a delivery: the receiver's side of the protocol.

GitHub keeps the ``X-GitHub-Delivery`` GUID when a delivery is redelivered ("Handling
failed webhook deliveries" / "Best practices for using webhooks" docs), so the delivery id
is the deduplication key.

Deliveries are not RQ jobs of their own. Each one is appended to its work item's
**inbox** (the source of truth, drained in order by whichever worker holds the work
item's lock); RQ only carries **wake-up jobs** (:mod:`foundation.inbox.wake`) that make a
worker drain the inboxes listed in the **ready list**. One Lua call (``enqueue.lua``,
EVALSHA) checks the "seen" marker and, only if the delivery is new:

1. writes the delivery record (:meth:`foundation.inbox.record.DeliveryRecord.to_redis`)
   and appends the delivery id to the inbox;
2. when that append made the inbox non-empty (an *activation*), appends the inbox's ref
   to the ready list, adds it to the inbox index and sets ``P:wake`` to a new wake-up
   job id unless one is pending (``SET NX PX``);
3. finally sets the "seen" marker. A delivery is never marked seen unless it was queued,
   and a duplicate writes nothing.

When the script set ``P:wake``, the wake-up job is queued through RQ's own
``Queue.enqueue_job`` (a second round trip, only on those activations). Should that one
fail, the delivery is queued all the same: the flag expires and the reaper wakes a worker.

An inbox that already had deliveries needs no wake-up: its ref is in the ready list, or
a worker holds its lock and drains it (it re-checks the inbox atomically as it lets go),
or it waits for a retry or an operator (:mod:`foundation.inbox.dead`); a worker that died
is covered by the reaper (:mod:`foundation.inbox.reaper`). Key names:
:mod:`foundation.inbox.keys`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import redis

from foundation.inbox.keys import SHARED_INBOX, Keys
from foundation.inbox.record import Delivery, DeliveryRecord
from foundation.inbox.scripts import Scripts
from foundation.inbox.wake import DISPATCH_FUNC, FAILURE_TTL, JOB_TIMEOUT, WAKE_TTL_MS, WakeUps
from foundation.redis import HeldConnections

__all__ = ["SEVEN_DAYS", "DeliveryQueue"]

log = logging.getLogger("foundation.inbox")

SEVEN_DAYS = 7 * 24 * 3600


class DeliveryQueue:
    """Deduplicating enqueue of deliveries into their inboxes, waking a worker up through
    RQ when an inbox becomes non-empty and no wake-up job is pending.

    Args:
        connection: Redis client. No I/O happens in the constructor.
        queue_name: RQ queue name.
        prefix: prefix of the-loop's own keys (:mod:`foundation.inbox.keys`).
        seen_ttl: seconds a delivery id is remembered (and its record kept); default
            7 days.
        job_func: dotted path of the wake-up job's function (called with no arguments).
        job_timeout: RQ job timeout of a wake-up job, seconds (default 300).
        failure_ttl: seconds a failed job stays in RQ's failed registry (default 7 days).
        wake_ttl_ms: expiry of the "wake-up job pending" flag, milliseconds.

    Raises:
        ValueError: ``seen_ttl`` or ``wake_ttl_ms`` is not positive.
    """

    def __init__(
        self,
        connection: redis.Redis,
        *,
        queue_name: str = "the-loop",
        prefix: str = "the-loop",
        seen_ttl: int = SEVEN_DAYS,
        job_func: str = DISPATCH_FUNC,
        job_timeout: int = JOB_TIMEOUT,
        failure_ttl: int = FAILURE_TTL,
        wake_ttl_ms: int = WAKE_TTL_MS,
    ) -> None:
        if seen_ttl <= 0:
            raise ValueError("seen_ttl must be a positive number of seconds")
        if wake_ttl_ms <= 0:
            raise ValueError("wake_ttl_ms must be a positive number of milliseconds")
        self.connection = connection
        self.keys = Keys(prefix, queue_name)
        self.queue_name = queue_name
        self.prefix = prefix
        self.seen_ttl = int(seen_ttl)
        self.wake_ttl_ms = int(wake_ttl_ms)
        self.wakeups = WakeUps(connection, queue_name, func=job_func, timeout=job_timeout,
                               failure_ttl=failure_ttl)
        self.queue_key: str = self.wakeups.queue.key
        self._script = Scripts(connection).enqueue
        # The receiver's one command per delivery: on held connections, past the pool's
        # per-command checks (foundation.redis.client.HeldConnections).
        self._held = HeldConnections(connection)

    def enqueue(self, delivery: Delivery, *, received_at: float | None = None) -> bool:
        """Enqueue ``delivery`` unless its delivery id was seen within ``seen_ttl``.

        Args:
            delivery: the parsed delivery.
            received_at: Unix time in seconds (float) the delivery arrived; default now.

        Returns:
            True if newly enqueued; False if the delivery id was already seen (a GitHub
            redelivery or a retry), in which case nothing was written.

        Raises:
            redis.RedisError: Redis unreachable, timed out, or refused the script; then
                nothing was written and the delivery is not marked seen.
        """
        return self.put(DeliveryRecord.of(
            delivery, time.time() if received_at is None else received_at))

    def seen(self, delivery_ids: Sequence[str]) -> list[bool]:
        """Whether each of ``delivery_ids`` was queued within ``seen_ttl`` (its dedupe
        marker ``P:delivery:seen:ID`` is there): one pipelined round trip.

        Raises:
            redis.RedisError: Redis unreachable or timed out.
        """
        if not delivery_ids:
            return []
        with self.connection.pipeline(transaction=False) as pipe:
            for delivery_id in delivery_ids:
                pipe.exists(self.keys.seen(delivery_id))
            return [bool(n) for n in pipe.execute()]

    def put(self, record: DeliveryRecord) -> bool:
        """Store ``record`` and append it to its inbox unless its id was seen (see
        :meth:`enqueue`): one round trip, two when it queues a wake-up job."""
        delivery_id = record.delivery_id
        keys = self.keys
        wake_id = f"{delivery_id}-wake"
        result = self._held.run_script(
            self._script,
            (keys.seen(delivery_id), keys.delivery(delivery_id), keys.inbox(record.work_item),
             keys.ready, keys.inboxes, keys.wake),
            (delivery_id, record.work_item or SHARED_INBOX, self.seen_ttl,
             self.wake_ttl_ms, wake_id, *record.to_redis()))
        if result == 2:
            try:
                self.wakeups.enqueue(wake_id)
            except redis.RedisError as exc:
                # Queued and safe; P:wake expires and the reaper wakes a worker.
                log.warning("delivery=%s queued, its wake-up job not (%s); the reaper "
                            "wakes a worker within %d s", delivery_id, type(exc).__name__,
                            self.wake_ttl_ms // 1000)
        return result != 0
