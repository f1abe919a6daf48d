"""Every Redis key name of the-loop, spelled once.

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

The worker's own data:

- ``P:state:REF``, ``P:state-corrupt:T:REF``, ``P:events:REF``: work item state and log
- ``P:effects:REF``         hash: effect id -> record, the outbox of the current visit
- ``P:fence:REF``           hash: ``writer``, ``n``, ``reply`` of the last write applied to
  the work item's state or log (``fence.lua``: a late or repeated copy of a write is
  recognised and skipped)
- ``P:event-types:REF``     set of the entry types of the log; ``P:events-by:ID:REF`` list
  of the entries delivery ID caused (expires): the log's indexes
- ``P:head:OWNER/REPO``     the default branch's head commit (from ``push``)
- ``P:ci:OWNER/REPO:SHA``   hash: check name -> conclusion
- ``P:sha:OWNER/REPO:SHA``  set of work items whose pull request head is SHA
- ``P:github:writes:BUCKET`` hash: the write throttle's schedule of an installation
- ``P:github:etag:BUCKET:DIGEST`` hash: a cached GitHub ``GET`` answer (``etag``,
  ``last_modified``, ``data``, ``link``) of one URL; expires unused
- ``P:github:budget:BUCKET`` hash: GitHub's last ``x-ratelimit-remaining``/``-reset``/
  ``-limit`` for an installation; expires at the reset
- ``P:ci-order:OWNER/REPO:SHA`` hash: check name -> the order of the stored result
  (``run_attempt`` and time; an older result never replaces a newer one)

What the-loop knows of repositories and installations (:mod:`workers.identities`):

- ``P:repository:ID``       hash: ``key`` (the OWNER/REPO its work item refs use, fixed
  at first sight), ``name`` (its current full name), ``installation``, ``removed``
- ``P:repository-name:OWNER/REPO`` the repository id a name (current or former) names
- ``P:repository-key:OWNER/REPO``  the repository id whose work item refs use that name
- ``P:installation:ID``     hash: ``status`` (``deleted``, ``suspended``; absent: active), ``at``
- ``P:installation-items:ID`` set of work item refs seen through the installation
- ``P:account:LOGIN``       hash: ``id`` (the user id recorded for a login, at first
  resolution, kept), ``other`` (another account's id GitHub answered for it since), ``at``
- ``P:account-checked:LOGIN`` string "1": GitHub was asked about the login lately; expires
- ``P:app``                 hash: ``slug`` of the App the-loop acts for; expires

The runner's (agent turns, :mod:`foundation.turns`):

- ``P:turn:REF``            hash: the work item's outstanding or last turn record
- ``P:turns``               set of refs with a turn record (``the-loop sessions list``)
- ``P:turn:ordered:ID``     string "1": turn order ID was queued (ordering it again is a no-op)
- ``P:turn-lock:REF``       the one live turn of a work item (token; expires without a heartbeat)
- ``P:runner:slots``        sorted set: live turn ids -> lease expiry (the global cap)
- ``P:runner:slots:INST``   the same per installation (the per-installation cap)
- ``P:workspace:REF``       hash: the work item's branch and draft pull request
- ``P:alias:OWNER/REPO#N``  the work item a draft pull request belongs to
- ``P:turn-log:REF``        the tail of the last turn's log
- ``P:turn:retired:REF``    string "1": the done work item's workspace removal was queued

RQ's own keys (``rq:job:*``, ``rq:queue:Q``...) are RQ's: only RQ's classes name them.

Lua scripts receive every key through ``KEYS`` (one work item) or, when one call walks
from one work item to the next, the per-ref key prefixes through ``ARGV``
(:meth:`Keys.per_ref`): Lua never spells a key name.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SHARED_INBOX", "Keys"]

#: The ref of the inbox shared by deliveries about no issue or pull request.
SHARED_INBOX = "~"


@dataclass(frozen=True, slots=True)
class Keys:
    """The key names of one deployment (see the module docstring). No I/O.

    Args:
        prefix: prefix of the-loop's keys (``THE_LOOP_REDIS_PREFIX``).
        queue: the RQ queue name (``THE_LOOP_QUEUE``).
    """

    prefix: str = "the-loop"
    queue: str = "the-loop"

    def _(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    # -- the delivery protocol ---------------------------------------------------------

    def seen(self, delivery_id: str) -> str:
        """``P:delivery:seen:ID``: the dedupe marker."""
        return self._("delivery", "seen", delivery_id)

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
        return self._("delivery", "")

    @property
    def inbox_prefix(self) -> str:
        return self._("inbox", "")

    @property
    def lock_prefix(self) -> str:
        return self._("lock", "")

    @property
    def backoff_prefix(self) -> str:
        return self._("backoff", "")

    @property
    def parked_prefix(self) -> str:
        return self._("parked", "")

    def per_ref(self) -> tuple[str, str, str, str, str]:
        """The per-ref key prefixes Lua scripts get as ARGV, in this fixed order:
        ``(P:inbox:, P:lock:, P:backoff:, P:parked:, P:delivery:)``."""
        return (self.inbox_prefix, self.lock_prefix, self.backoff_prefix,
                self.parked_prefix, self.delivery_prefix)

    @property
    def ready(self) -> str:
        """``P:ready``: refs whose inbox needs a worker."""
        return self._("ready")

    @property
    def inboxes(self) -> str:
        """``P:inboxes``: refs whose inbox may hold deliveries."""
        return self._("inboxes")

    @property
    def wake(self) -> str:
        """``P:wake``: the id of the pending wake-up job."""
        return self._("wake")

    @property
    def failed(self) -> str:
        """``P:deliveries:failed``: parked deliveries (id -> JSON reason)."""
        return self._("deliveries", "failed")

    @property
    def retry(self) -> str:
        """``P:deliveries:retry``: deliveries waiting for a retry (id -> due time)."""
        return self._("deliveries", "retry")

    @property
    def invalid(self) -> str:
        """``P:deliveries:invalid``: deliveries acknowledged as schema-invalid (JSON list,
        newest first)."""
        return self._("deliveries", "invalid")

    @property
    def workers(self) -> str:
        """``P:workers``: registered ``the-loop worker`` names."""
        return self._("workers")

    def worker(self, name: str) -> str:
        """``P:worker:NAME``: the worker's liveness key."""
        return self._("worker", name)

    @property
    def reaper(self) -> str:
        """``P:reaper``: the current reaper round's owner."""
        return self._("reaper")

    def stuck(self, job_id: str) -> str:
        """``P:stuck:JOB``: when a job was first seen in RQ's intermediate queue."""
        return self._("stuck", job_id)

    # -- the runner's data -------------------------------------------------------------

    def turn(self, ref: str) -> str:
        """``P:turn:REF``: the work item's turn record (hash)."""
        return self._("turn", ref)

    @property
    def turns(self) -> str:
        """``P:turns``: refs with a turn record."""
        return self._("turns")

    def turn_ordered(self, order_id: str) -> str:
        """``P:turn:ordered:ID``: turn order ``order_id`` was queued."""
        return self._("turn", "ordered", order_id)

    def turn_retired(self, ref: str) -> str:
        """``P:turn:retired:REF``: the removal of ``ref``'s workspace was queued."""
        return self._("turn", "retired", ref)

    def turn_lock(self, ref: str) -> str:
        """``P:turn-lock:REF``: the work item's one live turn."""
        return self._("turn-lock", ref)

    def runner_slots(self, installation: int | None = None) -> str:
        """``P:runner:slots`` (global) or ``P:runner:slots:INST`` (one installation)."""
        if installation is None:
            return self._("runner", "slots")
        return self._("runner", "slots", str(installation))

    def workspace(self, ref: str) -> str:
        """``P:workspace:REF``: the work item's branch and draft pull request (hash)."""
        return self._("workspace", ref)

    def alias(self, repository: str, number: int) -> str:
        """``P:alias:OWNER/REPO#N``: the work item pull request N belongs to."""
        return self._("alias", f"{repository}#{number}")

    def turn_log(self, ref: str) -> str:
        """``P:turn-log:REF``: the tail of the work item's last turn log."""
        return self._("turn-log", ref)

    # -- the worker's data -------------------------------------------------------------

    def state(self, ref: str) -> str:
        """``P:state:REF``: the work item's state (JSON)."""
        return self._("state", ref)

    @property
    def state_match(self) -> str:
        """``P:state:*``: the SCAN pattern of every work item's state (the prefix holds no
        glob character: the settings refuse one)."""
        return self._("state", "*")

    @property
    def state_prefix(self) -> str:
        """``P:state:``: a state key less its ref."""
        return self._("state", "")

    def state_corrupt(self, at: int, ref: str) -> str:
        """``P:state-corrupt:AT:REF``: a state set aside as unreadable at Unix time AT."""
        return self._("state-corrupt", str(at), ref)

    def events(self, ref: str) -> str:
        """``P:events:REF``: the work item's event log (list of JSON envelopes)."""
        return self._("events", ref)

    def effects(self, ref: str) -> str:
        """``P:effects:REF``: hash, effect id -> JSON record: the outbox of the work
        item's current node visit (one field per effect, apart from the state)."""
        return self._("effects", ref)

    def fence(self, ref: str) -> str:
        """``P:fence:REF``: hash, the last write applied to the work item's state or log
        (who wrote it, its write number, its reply)."""
        return self._("fence", ref)

    def event_types(self, ref: str) -> str:
        """``P:event-types:REF``: set of the entry types the work item's log holds."""
        return self._("event-types", ref)

    def events_by(self, delivery_id: str, ref: str) -> str:
        """``P:events-by:ID:REF``: list of ``"SEQ ENVELOPE"``: the log entries delivery
        ID caused (what a retried delivery checks); expires."""
        return self._("events-by", delivery_id, ref)

    def head(self, repository: str) -> str:
        """``P:head:OWNER/REPO``: the default branch's head commit."""
        return self._("head", repository)

    def ci(self, repository: str, sha: str) -> str:
        """``P:ci:OWNER/REPO:SHA``: CI conclusions of a commit."""
        return self._("ci", repository, sha)

    def sha(self, repository: str, sha: str) -> str:
        """``P:sha:OWNER/REPO:SHA``: work items whose pull request head is SHA."""
        return self._("sha", repository, sha)

    def ci_order(self, repository: str, sha: str) -> str:
        """``P:ci-order:OWNER/REPO:SHA``: the order of each stored CI result of a commit."""
        return self._("ci-order", repository, sha)

    # -- repositories and installations ------------------------------------------------

    def repository(self, repository_id: int) -> str:
        """``P:repository:ID``: a repository's ref key, current name, installation."""
        return self._("repository", str(repository_id))

    def repository_name(self, full_name: str) -> str:
        """``P:repository-name:OWNER/REPO``: the repository id the name names (lower-cased:
        GitHub's names are case-insensitive)."""
        return self._("repository-name", full_name.lower())

    def repository_key(self, full_name: str) -> str:
        """``P:repository-key:OWNER/REPO``: the repository id whose refs use the name."""
        return self._("repository-key", full_name.lower())

    def installation(self, installation_id: int) -> str:
        """``P:installation:ID``: an installation's status (hash)."""
        return self._("installation", str(installation_id))

    def installation_items(self, installation_id: int) -> str:
        """``P:installation-items:ID``: work item refs seen through the installation."""
        return self._("installation-items", str(installation_id))

    def account(self, login: str) -> str:
        """``P:account:LOGIN``: the user id recorded for a login (lower-cased: GitHub's
        logins are case-insensitive)."""
        return self._("account", login.lower())

    def account_checked(self, login: str) -> str:
        """``P:account-checked:LOGIN``: GitHub was asked about the login lately."""
        return self._("account-checked", login.lower())

    def app(self) -> str:
        """``P:app``: the App the-loop acts for (its ``slug``)."""
        return self._("app")

    def writes(self, bucket: str) -> str:
        """``P:github:writes:BUCKET``: the write throttle's schedule of one bucket."""
        return self._("github", "writes", bucket)

    def etag(self, bucket: str, digest: str) -> str:
        """``P:github:etag:BUCKET:DIGEST``: the cached ``GET`` answer of one URL."""
        return self._("github", "etag", bucket, digest)

    def budget(self, bucket: str) -> str:
        """``P:github:budget:BUCKET``: GitHub's primary rate limit as last reported."""
        return self._("github", "budget", bucket)
