"""Deduplicate and enqueue a delivery in one atomic Redis round trip.

GitHub keeps the ``X-GitHub-Delivery`` GUID when a delivery is redelivered ("Handling
failed webhook deliveries" / "Best practices for using webhooks" docs), so the delivery id
is the deduplication key.

Deliveries are not RQ jobs of their own. Each one is appended to its work item's
**inbox** (the source of truth, drained in order by whichever worker holds the work
item's lock); RQ only carries **wake-up jobs** (``workers.jobs.dispatch``, no arguments)
that make a worker drain the inboxes listed in the **ready list**. One Lua script
(registered once per :class:`DeliveryQueue`, run with EVALSHA) checks the "seen" marker
and, only if the delivery is new:

1. writes the delivery record and appends the delivery id to the inbox;
2. when that append made the inbox non-empty (an *activation*), appends the inbox's ref
   to the ready list and adds it to the inbox index; and then, only if no wake-up job is
   pending (``SET P:wake <job id> NX PX <ttl>`` succeeds), writes a wake-up job (the RQ
   job hash, exactly as RQ's ``Queue.enqueue_job`` writes it) and pushes it on the RQ
   queue;
3. finally sets the "seen" marker. A delivery is never marked seen unless it was queued,
   and a duplicate writes nothing.

An inbox that already had deliveries needs no wake-up: its ref is in the ready list, or
a worker holds its lock and drains it (it re-checks the inbox atomically as it lets go),
or it waits for a retry or an operator (``workers.deliveries``); a worker that died is
covered by the reaper (``workers.reaper``).

The wake-up job's hash is built once per :class:`DeliveryQueue` from RQ's own
``Job.create(...).to_dict()`` (it has no arguments, so it is the same for every request)
and written into the script's text; a request passes only its own fields (delivery,
record, one timestamp).

Redis keys (``P`` = prefix, ``Q`` = queue name, ``ID`` = delivery id, ``REF`` = work item
``github:OWNER/REPO#N``, or ``~`` for the shared inbox of deliveries about no issue or
pull request: push, status, installation...; no order is kept or needed there):

- ``P:delivery:seen:ID``  string "1", expires after ``seen_ttl`` (dedupe marker)
- ``P:delivery:ID``       hash: event, action, delivery_id, received_at, installation_id,
  repository, work_item, body; expires after ``seen_ttl``. Absent values are "".
- ``P:inbox:REF``         list of delivery ids, in arrival order
- ``P:ready``             list of refs whose inbox needs a worker
- ``P:inboxes``           set of refs whose inbox may hold deliveries (the reaper's index)
- ``P:wake``              id of the pending wake-up job; expires after ``wake_ttl_ms``
- ``rq:job:ID-wake``      the wake-up job's RQ hash (only when one was written)
- ``rq:queue:Q``          RQ queue list (RPUSH job id)
- ``rq:queues``           RQ set of queue keys (SADD ``rq:queue:Q``)
"""

from __future__ import annotations

import time
from typing import Any

import redis
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.utils import now, utcformat

from webhook.events import Delivery

__all__ = [
    "DEFAULT_JOB_FUNC",
    "DISPATCH_FUNC",
    "SHARED_INBOX",
    "WAKE_TTL_MS",
    "DeliveryQueue",
    "enqueue_script",
    "wake_job",
    "wake_job_fields",
]

#: The job every wake-up runs: drain the ready list (``workers.jobs.dispatch``).
DISPATCH_FUNC = "workers.jobs.dispatch"
DEFAULT_JOB_FUNC = DISPATCH_FUNC
#: The ref of the inbox shared by deliveries about no issue or pull request.
SHARED_INBOX = "~"
SEVEN_DAYS = 7 * 24 * 3600
#: How long ``P:wake`` says "a wake-up job is queued": a wake-up job lost before it ran
#: (its worker died between taking it and starting it) blocks new ones at most this long.
WAKE_TTL_MS = 30_000
JOB_TIMEOUT = 300


def wake_job(connection: redis.Redis, queue_name: str, job_id: str, *,
             func: str = DISPATCH_FUNC, timeout: int = JOB_TIMEOUT,
             failure_ttl: int = SEVEN_DAYS) -> Job:
    """A wake-up job (no arguments), prepared as ``Queue._prepare_for_queue`` does.

    No I/O. ``result_ttl=0``: RQ deletes it as soon as it finished.
    """
    return Job.create(
        func, connection=connection, id=job_id, origin=queue_name, result_ttl=0,
        failure_ttl=failure_ttl, timeout=timeout, description="the-loop dispatch",
        status=JobStatus.QUEUED,
    )


def wake_job_fields(connection: redis.Redis, queue_name: str, **options: Any) -> list[bytes]:
    """The wake-up job's hash as a flat field/value list, without the two timestamps
    (``created_at``, ``enqueued_at``) that each job gets.

    Mirrors ``rq.scripts._build_hset_args`` (what RQ's own enqueue script writes):
    ``job.to_dict()`` minus None values, strings encoded as redis-py encodes them.
    """
    job = wake_job(connection, queue_name, "template", **options)
    job.enqueued_at = now()
    fields: list[bytes] = []
    for key, value in job.to_dict().items():
        if value is None or key in ("created_at", "enqueued_at"):
            continue
        fields.append(key.encode())
        if isinstance(value, bytes):
            fields.append(value)
        elif isinstance(value, str):  # JobStatus is a str enum: its value, as redis-py sends
            fields.append(value.encode())
        else:
            fields.append(str(value).encode())
    return fields


def _lua_string(value: bytes) -> str:
    """``value`` as a Lua string literal (any bytes: 3-digit decimal escapes)."""
    return '"' + "".join(
        chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:03d}" for b in value
    ) + '"'


def enqueue_script(job_fields: list[bytes], seen_ttl: int, wake_ttl_ms: int) -> str:
    """The receiver's Lua script, with the wake-up job's constant fields and the TTLs
    written into its text (see the module docstring)."""
    job_hset = ", ".join(_lua_string(v) for v in job_fields)
    return f"""
-- KEYS[1] = P:delivery:seen:ID   dedupe marker
-- KEYS[2] = P:delivery:ID        delivery record (hash)
-- KEYS[3] = P:inbox:REF          the work item's inbox, or the shared one (list)
-- KEYS[4] = P:ready              refs whose inbox needs a worker (list)
-- KEYS[5] = P:inboxes            refs whose inbox may hold deliveries (set)
-- KEYS[6] = P:wake               id of the pending wake-up job (string, expires)
-- KEYS[7] = rq:job:ID-wake       the wake-up job (hash), written only on a wake-up
-- KEYS[8] = rq:queue:Q           RQ queue (list)
-- KEYS[9] = rq:queues            RQ registered queues (set)
-- ARGV[1] = delivery id
-- ARGV[2..8] = event, action, received_at, installation_id, repository, work_item, body
-- ARGV[9] = created_at/enqueued_at of the wake-up job (RQ's timestamp format)
-- Returns 0 when the delivery id was already seen (nothing written), 1 when queued,
-- 2 when queued and a wake-up job was written.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
-- Check types before the first write: a script error after a write would leave
-- half a delivery behind (Redis does not roll scripts back).
local function holds(key, kind)
  local t = redis.call('TYPE', key)['ok']
  return t == 'none' or t == kind
end
if not (holds(KEYS[3], 'list') and holds(KEYS[4], 'list') and holds(KEYS[5], 'set')
        and holds(KEYS[8], 'list') and holds(KEYS[9], 'set')) then
  return redis.error_reply('WRONGTYPE the-loop enqueue: queue or inbox key has the wrong type')
end
-- Start from a clean hash: an expired marker may leave an old record behind.
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'delivery_id', ARGV[1], 'event', ARGV[2], 'action', ARGV[3],
  'received_at', ARGV[4], 'installation_id', ARGV[5], 'repository', ARGV[6],
  'work_item', ARGV[7], 'body', ARGV[8])
redis.call('EXPIRE', KEYS[2], {seen_ttl})
local result = 1
if redis.call('RPUSH', KEYS[3], ARGV[1]) == 1 then
  -- Activation: the inbox was empty, so nobody is on it. List it as ready.
  local ref = ARGV[7]
  if ref == '' then ref = {_lua_string(SHARED_INBOX.encode())} end
  redis.call('RPUSH', KEYS[4], ref)
  redis.call('SADD', KEYS[5], ref)
  local job_id = ARGV[1] .. '-wake'
  if redis.call('SET', KEYS[6], job_id, 'NX', 'PX', {wake_ttl_ms}) then
    redis.call('DEL', KEYS[7])
    redis.call('HSET', KEYS[7], {job_hset},
      'created_at', ARGV[9], 'enqueued_at', ARGV[9])
    redis.call('SADD', KEYS[9], KEYS[8])
    redis.call('RPUSH', KEYS[8], job_id)
    result = 2
  end
end
-- Marked seen last: a failure above leaves it unset, so a redelivery is accepted.
redis.call('SET', KEYS[1], '1', 'EX', {seen_ttl})
return result
"""


class DeliveryQueue:
    """Deduplicating enqueue of deliveries into their inboxes, waking a worker up through
    RQ when an inbox becomes non-empty and no wake-up job is pending.

    Args:
        connection: Redis client. No I/O happens in the constructor.
        queue_name: RQ queue name (RQ key ``rq:queue:{queue_name}``).
        prefix: prefix of the-loop's own keys (see module docstring).
        seen_ttl: seconds a delivery id is remembered (and its record kept); default
            7 days.
        job_func: dotted path of the wake-up job's function (called with no arguments).
        job_timeout: RQ job timeout of a wake-up job, seconds (default 300).
        failure_ttl: seconds a failed job stays in RQ's failed registry (default 7 days).
        wake_ttl_ms: expiry of the "wake-up job pending" flag, milliseconds.
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
        failure_ttl: int = SEVEN_DAYS,
        wake_ttl_ms: int = WAKE_TTL_MS,
    ) -> None:
        if seen_ttl <= 0:
            raise ValueError("seen_ttl must be a positive number of seconds")
        if wake_ttl_ms <= 0:
            raise ValueError("wake_ttl_ms must be a positive number of milliseconds")
        self.connection = connection
        self.queue_name = queue_name
        self.prefix = prefix
        self.seen_ttl = int(seen_ttl)
        self.job_func = job_func
        self.job_timeout = job_timeout
        self.failure_ttl = failure_ttl
        self.wake_ttl_ms = int(wake_ttl_ms)
        # Key names come from RQ's own classes, so they follow RQ if it ever changes them.
        self.queue_key: str = Queue(queue_name, connection=connection).key
        self.queues_set_key: str = Queue.redis_queues_keys
        self._job_prefix: str = Job.redis_job_namespace_prefix
        self._p = f"{prefix}:"
        self.ready_key = f"{prefix}:ready"
        self.inboxes_key = f"{prefix}:inboxes"
        self.wake_key = f"{prefix}:wake"
        fields = wake_job_fields(connection, queue_name, func=job_func, timeout=job_timeout,
                                 failure_ttl=failure_ttl)
        # register_script only hashes the script locally; the first call loads it.
        self._script = connection.register_script(
            enqueue_script(fields, self.seen_ttl, self.wake_ttl_ms))

    # Key helpers, public so workers and tests name the same keys.
    def seen_key(self, delivery_id: str) -> str:
        """``{prefix}:delivery:seen:{delivery_id}``: the dedupe marker."""
        return f"{self.prefix}:delivery:seen:{delivery_id}"

    def delivery_key(self, delivery_id: str) -> str:
        """``{prefix}:delivery:{delivery_id}``: the delivery record hash."""
        return f"{self.prefix}:delivery:{delivery_id}"

    def inbox_key(self, work_item: str | None) -> str:
        """``{prefix}:inbox:{work_item}``: the work item's list of delivery ids (the shared
        inbox ``{prefix}:inbox:~`` for ``None``)."""
        return f"{self.prefix}:inbox:{work_item or SHARED_INBOX}"

    @staticmethod
    def wake_job_id(delivery_id: str) -> str:
        """The id of the wake-up job a delivery's enqueue writes, if it writes one."""
        return f"{delivery_id}-wake"

    def enqueue(self, delivery: Delivery, *, received_at: float | None = None) -> bool:
        """Enqueue ``delivery`` unless its delivery id was seen within ``seen_ttl``.

        One Redis round trip (EVALSHA; a second one only the first time after a Redis
        restart, to load the script).

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
        delivery_id = delivery.delivery_id
        work_item = delivery.work_item
        installation_id = delivery.installation_id
        p = self._p
        keys = (
            f"{p}delivery:seen:{delivery_id}",
            f"{p}delivery:{delivery_id}",
            f"{p}inbox:{work_item or SHARED_INBOX}",
            self.ready_key,
            self.inboxes_key,
            self.wake_key,
            f"{self._job_prefix}{delivery_id}-wake",
            self.queue_key,
            self.queues_set_key,
        )
        # Order fixed by the script (ARGV[1..9]); absent values are "".
        args = (
            delivery_id,
            delivery.event,
            delivery.action or "",
            repr(time.time() if received_at is None else received_at),
            "" if installation_id is None else str(installation_id),
            delivery.repository or "",
            work_item or "",
            delivery.body,
            utcformat(now()),
        )
        return self._script(keys=keys, args=args) != 0
