"""Deduplicate and enqueue a delivery in one atomic Redis round trip.

GitHub keeps the ``X-GitHub-Delivery`` GUID when a delivery is redelivered ("Handling
failed webhook deliveries" / "Best practices for using webhooks" docs), so the delivery id
is the deduplication key and also the RQ job id.

One Lua script (registered once per :class:`DeliveryQueue`, run with EVALSHA) checks the
"seen" marker and, only if the delivery is new, writes the delivery record, the RQ job
hash, pushes the job id onto the RQ queue, registers the queue, appends the delivery id
to the work item's inbox, and finally sets the "seen" marker. A delivery is therefore
never marked seen unless it was enqueued, and a duplicate writes nothing.

Redis keys (``P`` = prefix, ``Q`` = queue name, ``ID`` = delivery id):

- ``P:delivery:seen:ID``  string "1", expires after ``seen_ttl`` (dedupe marker)
- ``P:delivery:ID``       hash: event, action, delivery_id, received_at, installation_id,
  repository, work_item, body; expires after ``seen_ttl``. Absent values are "".
- ``rq:job:ID``           RQ job hash, exactly as ``Queue.enqueue_job`` writes it
- ``rq:queue:Q``          RQ queue list (RPUSH job id)
- ``rq:queues``           RQ set of queue keys (SADD ``rq:queue:Q``)
- ``P:inbox:WORK_ITEM``   list of delivery ids for one work item, in arrival order
  (only when the delivery has a work item; drained by the worker under a lock)
"""

from __future__ import annotations

import time
from typing import Any

import redis
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.utils import now

from webhook.events import Delivery

__all__ = ["DEFAULT_JOB_FUNC", "ENQUEUE_SCRIPT", "DeliveryQueue"]

DEFAULT_JOB_FUNC = "workers.jobs.process_delivery"
SEVEN_DAYS = 7 * 24 * 3600

ENQUEUE_SCRIPT = """
-- KEYS[1] = P:delivery:seen:ID   dedupe marker
-- KEYS[2] = P:delivery:ID        delivery record (hash)
-- KEYS[3] = rq:job:ID            RQ job (hash)
-- KEYS[4] = rq:queue:Q           RQ queue (list)
-- KEYS[5] = rq:queues            RQ registered queues (set)
-- KEYS[6] = P:inbox:WORK_ITEM    optional: the work item's inbox (list)
-- ARGV[1] = delivery id (= RQ job id)
-- ARGV[2] = TTL of the marker and of the delivery record, seconds
-- ARGV[3..9] = event, action, received_at, installation_id, repository, work_item, body
-- ARGV[10..] = RQ job hash fields and values
-- Returns 1 when enqueued, 0 when the delivery id was already seen (nothing written).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
-- Check types before the first write: a script error after a write would leave
-- half a delivery behind (Redis does not roll scripts back).
local function holds(key, kind)
  local t = redis.call('TYPE', key)['ok']
  return t == 'none' or t == kind
end
if not holds(KEYS[4], 'list') or not holds(KEYS[5], 'set')
    or (#KEYS >= 6 and not holds(KEYS[6], 'list')) then
  return redis.error_reply('WRONGTYPE the-loop enqueue: queue or inbox key has the wrong type')
end
-- Start from clean hashes: an expired marker may leave an old job/record behind.
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HSET', KEYS[2], 'delivery_id', ARGV[1], 'event', ARGV[3], 'action', ARGV[4],
  'received_at', ARGV[5], 'installation_id', ARGV[6], 'repository', ARGV[7],
  'work_item', ARGV[8], 'body', ARGV[9])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], unpack(ARGV, 10))
-- Inbox before the queue push, so a worker never pops a job whose inbox entry is missing.
if #KEYS >= 6 then
  redis.call('RPUSH', KEYS[6], ARGV[1])
end
redis.call('SADD', KEYS[5], KEYS[4])
redis.call('RPUSH', KEYS[4], ARGV[1])
-- Marked seen last: a failure above leaves it unset, so a redelivery is accepted.
redis.call('SET', KEYS[1], '1', 'EX', ARGV[2])
return 1
"""


def _job_hash_args(job: Job) -> list[Any]:
    """Flat field/value list of the job hash, as RQ writes it.

    Mirrors ``rq.scripts._build_hset_args`` (what RQ's own unique-enqueue Lua script
    writes): ``job.to_dict()`` minus None values, non-bytes values as str.
    """
    args: list[Any] = []
    for key, value in job.to_dict().items():
        if value is not None:
            args.append(key)
            args.append(value if isinstance(value, (bytes, str)) else str(value))
    return args


class DeliveryQueue:
    """Deduplicating enqueue of deliveries onto an RQ queue.

    Args:
        connection: Redis client. No I/O happens in the constructor.
        queue_name: RQ queue name (RQ key ``rq:queue:{queue_name}``).
        prefix: prefix of the-loop's own keys (see module docstring).
        seen_ttl: seconds a delivery id is remembered (and its record kept); default
            7 days.
        job_func: dotted path of the job function RQ imports at run time; it is called
            as ``job_func(delivery_id, event, work_item)``.
        job_timeout: RQ job timeout, seconds (default 300).
        failure_ttl: seconds a failed job stays in RQ's failed registry (default 7 days).
    """

    def __init__(
        self,
        connection: redis.Redis,
        *,
        queue_name: str = "the-loop",
        prefix: str = "the-loop",
        seen_ttl: int = SEVEN_DAYS,
        job_func: str = DEFAULT_JOB_FUNC,
        job_timeout: int = 300,
        failure_ttl: int = SEVEN_DAYS,
    ) -> None:
        if seen_ttl <= 0:
            raise ValueError("seen_ttl must be a positive number of seconds")
        self.connection = connection
        self.queue_name = queue_name
        self.prefix = prefix
        self.seen_ttl = seen_ttl
        self.job_func = job_func
        self.job_timeout = job_timeout
        self.failure_ttl = failure_ttl
        # Key names come from RQ's own classes, so they follow RQ if it ever changes them.
        self.queue_key: str = Queue(queue_name, connection=connection).key
        self.queues_set_key: str = Queue.redis_queues_keys
        # register_script only hashes the script locally; the first call loads it.
        self._script = connection.register_script(ENQUEUE_SCRIPT)

    # Key helpers, public so workers and tests name the same keys.
    def seen_key(self, delivery_id: str) -> str:
        """``{prefix}:delivery:seen:{delivery_id}``: the dedupe marker."""
        return f"{self.prefix}:delivery:seen:{delivery_id}"

    def delivery_key(self, delivery_id: str) -> str:
        """``{prefix}:delivery:{delivery_id}``: the delivery record hash."""
        return f"{self.prefix}:delivery:{delivery_id}"

    def inbox_key(self, work_item: str) -> str:
        """``{prefix}:inbox:{work_item}``: the work item's list of delivery ids."""
        return f"{self.prefix}:inbox:{work_item}"

    def build_job(self, delivery: Delivery) -> Job:
        """The RQ job for ``delivery``, prepared as ``Queue._prepare_for_queue`` does.

        No I/O. The Redis server version RQ also records there is not persisted in the
        job hash, so it is skipped (asking costs a round trip).
        """
        return Job.create(
            self.job_func,
            args=(delivery.delivery_id, delivery.event, delivery.work_item),
            connection=self.connection,
            id=delivery.delivery_id,
            origin=self.queue_name,
            result_ttl=0,
            failure_ttl=self.failure_ttl,
            timeout=self.job_timeout,
            description=f"{delivery.event} {delivery.delivery_id}",
            status=JobStatus.QUEUED,
        )

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
        job = self.build_job(delivery)
        job.enqueued_at = now()
        # Order fixed by the script (ARGV[3..9]); absent values are "".
        installation_id = delivery.installation_id
        record = (
            delivery.event,
            delivery.action or "",
            repr(time.time() if received_at is None else received_at),
            "" if installation_id is None else str(installation_id),
            delivery.repository or "",
            delivery.work_item or "",
            delivery.body,
        )
        keys = [
            self.seen_key(delivery_id),
            self.delivery_key(delivery_id),
            job.key,
            self.queue_key,
            self.queues_set_key,
        ]
        if delivery.work_item:
            keys.append(self.inbox_key(delivery.work_item))
        args = [delivery_id, self.seen_ttl, *record, *_job_hash_args(job)]
        return self._script(keys=keys, args=args) == 1
