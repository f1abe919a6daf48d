"""The delivery protocol's Redis key names, spelled once.

``P`` is the deployment's prefix (``THE_LOOP_REDIS_PREFIX``), ``Q`` its RQ queue name,
``ID`` a delivery id (``X-GitHub-Delivery``), ``REF`` a work item ``github:OWNER/REPO#N``
or ``~`` (:data:`SHARED_INBOX`, the inbox of deliveries about no issue or pull request:
push, status, installation...; it keeps no order).

The delivery protocol (:mod:`foundation.inbox`):

- ``P:delivery:seen:ID``    string "1": the dedupe marker, expires with the record
- ``P:delivery:ID``         hash: the delivery record (:mod:`foundation.inbox.record`)
- ``P:inbox:REF``           list of delivery ids, in arrival order
- ``P:ready``               list of refs whose inbox needs a worker
- ``P:inboxes``             set of refs whose inbox holds deliveries (the reaper's index:
  added by the delivery that fills an empty inbox, removed by the drain step that empties it)
- ``P:wake``                id of the pending wake-up job; expires (``WAKE_TTL_MS``)
- ``P:lock:REF``            the drain lock of a work item (token ``worker|hex``)
- ``P:backoff:REF``         the delivery id a work item waits to retry; expires
- ``P:parked:REF``          the parked delivery that holds a work item
- ``P:deliveries:failed``   hash: parked delivery id -> JSON reason
- ``P:deliveries:retry``    sorted set: delivery id -> due time
- ``P:deliveries:invalid``  list of JSON entries, newest first (at most
  ``INVALID_KEPT``): deliveries whose payload did not match its event's schema
- ``P:workers``             set of registered ``the-loop worker`` names
- ``P:worker:NAME``         a worker's liveness key; expires
- ``P:reaper``              who runs this reaper round (short lock)
- ``P:stuck:JOB``           when a job was first seen stuck in RQ's intermediate queue

The other stores' keys are theirs, each spelled and documented beside its code: the
work item state store (:mod:`workers.state`), commits and CI results (:mod:`workers.ci`),
repositories and installations (:mod:`workers.identities`), agent turns
(:mod:`foundation.turns`), the GitHub write throttle and rate budget
(:mod:`integrations.throttle`) and ETag cache (:mod:`integrations.github_cache`); the map of
every namespace and its owner is :mod:`foundation.redis.namespaces`.

RQ's own keys (``rq:job:*``, ``rq:queue:Q``...) are RQ's: only RQ's classes name them.

Lua scripts receive every key through ``KEYS`` (one work item) or, when one call walks
from one work item to the next, the per-ref key prefixes through ``ARGV``
(:meth:`Keys.per_ref`): Lua never spells a key name.
"""

from __future__ import annotations

from dataclasses import dataclass

from foundation.redis.namespaces import KeySpace, owns

__all__ = ["SHARED_INBOX", "Keys"]

#: The ref of the inbox shared by deliveries about no issue or pull request.
SHARED_INBOX = "~"


@owns("delivery", "inbox", "ready", "inboxes", "wake", "lock", "backoff", "parked",
      "deliveries", "workers", "worker", "reaper", "stuck")
@dataclass(frozen=True, slots=True)
class Keys(KeySpace):
    """The delivery protocol's key names of one deployment (see the module docstring).
    No I/O.

    Args:
        prefix: prefix of the-loop's keys (``THE_LOOP_REDIS_PREFIX``).
        queue: the RQ queue name (``THE_LOOP_QUEUE``).
    """

    queue: str = "the-loop"

    # -- the delivery protocol ---------------------------------------------------------

    def seen(self, delivery_id: str) -> str:
        """``P:delivery:seen:ID``: the dedupe marker."""
        return self.key("delivery", "seen", delivery_id)

    def delivery(self, delivery_id: str) -> str:
        """``P:delivery:ID``: the delivery record hash."""
        return self.delivery_prefix + delivery_id

    def inbox(self, ref: str | None) -> str:
        """``P:inbox:REF``: a work item's delivery ids (the shared inbox for ``None``)."""
        return self.inbox_prefix + (ref or SHARED_INBOX)

    def lock(self, ref: str) -> str:
        """``P:lock:REF``: the work item's drain lock."""
        return self.lock_prefix + ref

    def backoff(self, ref: str) -> str:
        """``P:backoff:REF``: the work item waits for a retry while this exists."""
        return self.backoff_prefix + ref

    def parked(self, ref: str) -> str:
        """``P:parked:REF``: the parked delivery holding the work item."""
        return self.parked_prefix + ref

    @property
    def delivery_prefix(self) -> str:
        return self.key("delivery", "")

    @property
    def inbox_prefix(self) -> str:
        return self.key("inbox", "")

    @property
    def lock_prefix(self) -> str:
        return self.key("lock", "")

    @property
    def backoff_prefix(self) -> str:
        return self.key("backoff", "")

    @property
    def parked_prefix(self) -> str:
        return self.key("parked", "")

    def per_ref(self) -> tuple[str, str, str, str, str]:
        """The per-ref key prefixes Lua scripts get as ARGV, in this fixed order:
        ``(P:inbox:, P:lock:, P:backoff:, P:parked:, P:delivery:)``."""
        return (self.inbox_prefix, self.lock_prefix, self.backoff_prefix,
                self.parked_prefix, self.delivery_prefix)

    @property
    def ready(self) -> str:
        """``P:ready``: refs whose inbox needs a worker."""
        return self.key("ready")

    @property
    def inboxes(self) -> str:
        """``P:inboxes``: refs whose inbox may hold deliveries."""
        return self.key("inboxes")

    @property
    def wake(self) -> str:
        """``P:wake``: the id of the pending wake-up job."""
        return self.key("wake")

    @property
    def failed(self) -> str:
        """``P:deliveries:failed``: parked deliveries (id -> JSON reason)."""
        return self.key("deliveries", "failed")

    @property
    def retry(self) -> str:
        """``P:deliveries:retry``: deliveries waiting for a retry (id -> due time)."""
        return self.key("deliveries", "retry")

    @property
    def invalid(self) -> str:
        """``P:deliveries:invalid``: deliveries acknowledged as schema-invalid (JSON list,
        newest first)."""
        return self.key("deliveries", "invalid")

    @property
    def workers(self) -> str:
        """``P:workers``: registered ``the-loop worker`` names."""
        return self.key("workers")

    def worker(self, name: str) -> str:
        """``P:worker:NAME``: the worker's liveness key."""
        return self.key("worker", name)

    @property
    def reaper(self) -> str:
        """``P:reaper``: the current reaper round's owner."""
        return self.key("reaper")

    def stuck(self, job_id: str) -> str:
        """``P:stuck:JOB``: when a job was first seen in RQ's intermediate queue."""
        return self.key("stuck", job_id)
