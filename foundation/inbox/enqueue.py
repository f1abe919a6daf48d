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

With ``replicas`` (``THE_LOOP_RECEIVER_REPLICAS``) the script is followed by Redis's
``WAIT replicas timeout`` on the same connection (:meth:`foundation.redis.client.
HeldConnections.run_script_and_wait`): the delivery counts as queued only once that many
replicas hold it, so a failover to one of them cannot lose it. Fewer by the timeout:
``unqueue.lua`` takes the delivery back (inbox entry, record and "seen" marker; an inbox
it leaves empty goes back to how it was: off the ready list and the index, ``P:wake``
cleared if this delivery set it), unless a worker already took it, and
:class:`NotReplicatedError` is raised (the receiver answers
503: GitHub's redelivery, or the reconciler's, is then accepted as new). Should the
primary die between the script and the ``WAIT``'s answer, the error is a connection
error and nothing can be taken back: the record is then whole or absent on the promoted
replica (replication applies the script's writes together), so its redelivery is either
a duplicate of a delivery that will be processed, or new.

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
from graph.errors import LoopError

__all__ = ["SEVEN_DAYS", "DeliveryQueue", "NotReplicatedError"]

log = logging.getLogger("foundation.inbox")

SEVEN_DAYS = 7 * 24 * 3600


class NotReplicatedError(LoopError, redis.RedisError):
    """Fewer replicas than required acknowledged a delivery's write in time.

    Attributes:
        acknowledged: how many did (``WAIT``'s answer).
        required: how many were required.
        taken_back: whether the delivery was taken back (else a worker already had it:
            it stays queued and a redelivery is a duplicate).
    """

    def __init__(self, acknowledged: int, required: int, taken_back: bool) -> None:
        super().__init__(f"{acknowledged} of {required} replicas acknowledged the delivery")
        self.acknowledged = acknowledged
        self.required = required
        self.taken_back = taken_back


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
        replicas: replicas that must acknowledge a delivery's write before it counts as
            queued (``THE_LOOP_RECEIVER_REPLICAS``; 0: none, no ``WAIT``).
        replicas_timeout_ms: how long to wait for them, milliseconds
            (``THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS``).

    Raises:
        ValueError: ``seen_ttl``, ``wake_ttl_ms`` or ``replicas_timeout_ms`` is not
            positive, or ``replicas`` is negative.
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
        replicas: int = 0,
        replicas_timeout_ms: int = 500,
    ) -> None:
        if replicas < 0 or replicas_timeout_ms <= 0:
            raise ValueError("replicas must be >= 0 and replicas_timeout_ms positive")
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
        self.replicas = int(replicas)
        self.replicas_timeout_ms = int(replicas_timeout_ms)
        self.wakeups = WakeUps(connection, queue_name, func=job_func, timeout=job_timeout,
                               failure_ttl=failure_ttl)
        self.queue_key: str = self.wakeups.queue.key
        scripts = Scripts(connection)
        self._script = scripts.enqueue
        self._unqueue = scripts.unqueue
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
            NotReplicatedError: fewer than ``replicas`` replicas acknowledged the write
                within ``replicas_timeout_ms`` (see the module docstring).
            redis.RedisError: Redis unreachable, timed out, or refused the script; then
                nothing was written and the delivery is not marked seen (with
                ``replicas``, unless the connection broke after the script ran: see the
                module docstring).
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
        seen, record_key, inbox = (keys.seen(delivery_id), keys.delivery(delivery_id),
                                   keys.inbox(record.work_item))
        result, acknowledged = self._held.run_script_and_wait(
            self._script,
            (seen, record_key, inbox, keys.ready, keys.inboxes, keys.wake),
            (delivery_id, record.work_item or SHARED_INBOX, self.seen_ttl,
             self.wake_ttl_ms, wake_id, *record.to_redis()),
            replicas=self.replicas, timeout_ms=self.replicas_timeout_ms,
            wrote=bool)
        if acknowledged is not None and acknowledged < self.replicas:
            ref = record.work_item or SHARED_INBOX
            undone = self._held.run_script(
                self._unqueue, (seen, record_key, inbox, keys.ready, keys.inboxes, keys.wake),
                (delivery_id, ref, wake_id))
            if undone != 1 and result == 2:
                self._wake(delivery_id, wake_id)  # for it (a worker has it) or those behind
            raise NotReplicatedError(acknowledged, self.replicas, undone != 0)
        if result == 2:
            self._wake(delivery_id, wake_id)
        return result != 0

    def _wake(self, delivery_id: str, wake_id: str) -> None:
        """Queue the wake-up job ``wake_id`` the enqueue script asked for (``P:wake``)."""
        try:
            self.wakeups.enqueue(wake_id)
        except redis.RedisError as exc:
            # Queued and safe; P:wake expires and the reaper wakes a worker.
            log.warning("delivery=%s queued, its wake-up job not (%s); the reaper "
                        "wakes a worker within %d s", delivery_id, type(exc).__name__,
                        self.wake_ttl_ms // 1000)
