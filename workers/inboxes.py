"""Inboxes, the ready list and wake-up jobs: the worker's side of ``webhook.enqueue``.

The receiver appends each delivery to its work item's inbox ``P:inbox:REF`` (``~`` for
deliveries about no issue or pull request) and, when that made the inbox non-empty, lists
the ref in ``P:ready`` and queues a wake-up job (``workers.jobs.dispatch``) through RQ
unless one is pending (``P:wake``). A dispatcher pops refs off the ready list and drains
each inbox head-first under the work item's lock (:meth:`Inboxes.step`, one Lua call
per delivery: finish the delivery just handled, take the next one).

Who looks after an inbox that holds deliveries? Exactly one of:

- its ref is in ``P:ready`` (a wake-up job is queued, or a dispatcher is running);
- a worker holds its lock and drains it: the step that lets go checks the inbox in the
  same atomic call, so nothing that arrives meanwhile is missed;
- it waits for a retry (``P:backoff:REF``; the reaper's due retries list it again) or
  an operator (``P:parked:REF``; ``the-loop deliveries retry|discard`` list it again);
- its holder died: the reaper (``workers.reaper``) releases a dead worker's lock and
  lists every inbox in ``P:inboxes`` that holds deliveries, has a free lock, is not held
  and is not in ``P:ready`` (:meth:`Inboxes.sweep`).

Scripts here build the per-ref key names (``P:inbox:REF``, ``P:lock:REF``,
``P:backoff:REF``, ``P:parked:REF``, ``P:delivery:ID``) from the prefix inside Lua:
one call can move from one work item to the next. That is fine on a single Redis (RQ
needs one anyway) and would not be on Redis Cluster.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from rq.queue import Queue

from webhook.enqueue import DISPATCH_FUNC, SHARED_INBOX, WAKE_TTL_MS, wake_job
from workers.settings import WorkerSettings

log = logging.getLogger("the_loop.worker")

__all__ = ["SHARED_INBOX", "Inboxes", "Step"]

#: Finish the delivery just handled, then take the next one (see :meth:`Inboxes.step`).
STEP = """
-- KEYS[1] = P:ready   KEYS[2] = P:wake
-- ARGV[1] = prefix P   ARGV[2] = lock token   ARGV[3] = lock expiry, ms
-- ARGV[4] = ref of the delivery just handled ('' = none)   ARGV[5] = its delivery id
-- ARGV[6] = '1': pop it off the inbox (only if it is still the head)
-- ARGV[7] = '1': delete its record
-- ARGV[8] = then, for that ref: 'more' (take its next delivery), 'release' (let go: a
--           scheduled retry lists it again), 'yield' (let go, listed again if it has more)
-- ARGV[9] = a ref to take now ('' = none)
-- ARGV[10] = at most this many refs popped off P:ready (0 = leave the ready list alone)
-- Returns {what, ref, delivery id, attempt, first, #ready, wake pending, record, done}:
-- what 'ok' (a delivery was taken: its attempt is counted, first = 1 on its first start,
-- record = its fields, the body only when the router acts on its event and action),
-- else 'idle', 'locked', 'held' or 'empty'; done says what became of ARGV[4]: 'more',
-- 'released', 'yielded', 'held', 'empty', 'lost' (the lock was no longer ours) or
-- 'changed' (it was no longer the head).
local P = ARGV[1] .. ':'
local FIELDS = {'delivery_id', 'event', 'action', 'received_at', 'installation_id',
                'repository', 'work_item', 'attempts', 'started', 'last_error'}
-- "event action" (or "event *") pairs the router acts on (workers.router.ROUTES).
local ROUTED = {ROUTED_TABLE}
local token, ttl = ARGV[2], ARGV[3]
local function held(ref)
  return redis.call('EXISTS', P .. 'parked:' .. ref, P .. 'backoff:' .. ref) > 0
end
-- With ref's lock ours: the id at its inbox head, or nil (and the lock let go). fresh:
-- the lock was just taken, after a look at held().
local function head_of(ref, fresh)
  local lock = P .. 'lock:' .. ref
  if not fresh and held(ref) then
    redis.call('DEL', lock)
    return nil, 'held'
  end
  local id = redis.call('LINDEX', P .. 'inbox:' .. ref, 0)
  if not id then
    redis.call('DEL', lock)
    return nil, 'empty'
  end
  if not fresh then
    redis.call('PEXPIRE', lock, ttl)
  end
  return id
end
local function took(ref, id, done)
  local rec = P .. 'delivery:' .. id
  local attempt, first = 0, 1
  local values = redis.call('HMGET', rec, unpack(FIELDS))
  local record = {}
  for i, name in ipairs(FIELDS) do
    if values[i] then
      record[#record + 1] = name
      record[#record + 1] = values[i]
    end
  end
  local event = values[2]
  if event then
    attempt = redis.call('HINCRBY', rec, 'attempts', 1)
    first = redis.call('HSETNX', rec, 'started', 1)
    -- The 15 KB body only when the router will read it (the route alone ignores the rest).
    if ROUTED[event .. ' ' .. (values[3] or '')] or ROUTED[event .. ' *'] then
      record[#record + 1] = 'body'
      record[#record + 1] = redis.call('HGET', rec, 'body')
    end
  end
  return {'ok', ref, id, attempt, first, redis.call('LLEN', KEYS[1]),
          redis.call('EXISTS', KEYS[2]), record, done}
end
local function nothing(what, done)
  return {what, '', '', 0, 0, redis.call('LLEN', KEYS[1]), redis.call('EXISTS', KEYS[2]),
          {}, done}
end

local done = ''
local ref = ARGV[4]
if ref ~= '' then
  local lock, inbox = P .. 'lock:' .. ref, P .. 'inbox:' .. ref
  if ARGV[7] == '1' then
    redis.call('DEL', P .. 'delivery:' .. ARGV[5])
  end
  local popped = true
  if ARGV[6] == '1' then
    if redis.call('LINDEX', inbox, 0) == ARGV[5] then
      redis.call('LPOP', inbox)
    else
      popped = false
    end
  end
  if redis.call('GET', lock) ~= token then
    done = 'lost'
  elseif not popped then
    redis.call('DEL', lock)
    done = 'changed'
  elseif ARGV[8] == 'more' then
    local id, why = head_of(ref)
    if id then
      return took(ref, id, 'more')
    end
    done = why
  else
    redis.call('DEL', lock)
    done = 'released'
    if ARGV[8] == 'yield' and redis.call('LLEN', inbox) > 0 and not held(ref) then
      redis.call('RPUSH', KEYS[1], ref)
      done = 'yielded'
    end
  end
end

local want = ARGV[9]
if want ~= '' then
  if held(want) then
    return nothing('held', done)
  end
  if not redis.call('SET', P .. 'lock:' .. want, token, 'NX', 'PX', ttl) then
    return nothing('locked', done)
  end
  local id, why = head_of(want, true)
  if id then
    return took(want, id, done)
  end
  return nothing(why, done)
end

for _ = 1, tonumber(ARGV[10]) do
  local next_ref = redis.call('LPOP', KEYS[1])
  if not next_ref then
    break
  end
  -- Held: a retry or an operator lists it again. Locked: its holder re-checks its inbox
  -- as it lets go. Empty: nothing to do.
  if not held(next_ref) and redis.call('SET', P .. 'lock:' .. next_ref, token, 'NX', 'PX', ttl) then
    local id = head_of(next_ref, true)
    if id then
      return took(next_ref, id, done)
    end
  end
end
return nothing('idle', done)
"""

def step_script() -> str:
    """The ``STEP`` script with the router's table written in (see ``ROUTED``)."""
    from workers.router import ROUTES

    def lua(text: str) -> str:
        return '"' + "".join(c if c.isalnum() or c in "_-. *" else f"\\{ord(c):03d}"
                             for c in text) + '"'

    pairs = sorted(f"{event} {action or '*'}" for event, action in ROUTES)
    return STEP.replace("ROUTED_TABLE", ", ".join(f"[{lua(p)}] = true" for p in pairs))


#: List a ref as ready (if its inbox holds deliveries and it is not listed already).
MARK_READY = """
-- KEYS[1] = P:ready  KEYS[2] = P:inboxes  KEYS[3] = P:inbox:REF  KEYS[4] = P:lock:REF
-- KEYS[5] = P:backoff:REF  KEYS[6] = P:parked:REF
-- ARGV[1] = REF   ARGV[2] = '1': only if its lock is free and it is not held
-- ARGV[3] = a delivery id to put in the inbox first unless it is there ('' = none)
-- ARGV[4] = '1': put it at the head (else the tail)
if ARGV[3] ~= '' and not redis.call('LPOS', KEYS[3], ARGV[3]) then
  if ARGV[4] == '1' then
    redis.call('LPUSH', KEYS[3], ARGV[3])
  else
    redis.call('RPUSH', KEYS[3], ARGV[3])
  end
end
if redis.call('LLEN', KEYS[3]) == 0 then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[1])
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[4], KEYS[5], KEYS[6]) > 0 then
  return 0
end
if redis.call('LPOS', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('RPUSH', KEYS[1], ARGV[1])
return 1
"""

#: The reaper's look at a batch of indexed refs.
SWEEP = """
-- KEYS[1] = P:inboxes   ARGV[1] = prefix P   ARGV[2..] = refs
-- Drops the refs whose inbox is empty from the index (checked here, so a delivery
-- appended meanwhile keeps its ref); returns {dropped, {{ref, lock token or '', held},
-- ...}} for the others.
local P = ARGV[1] .. ':'
local out, dropped = {}, 0
for i = 2, #ARGV do
  local ref = ARGV[i]
  if redis.call('LLEN', P .. 'inbox:' .. ref) == 0 then
    redis.call('SREM', KEYS[1], ref)
    dropped = dropped + 1
  else
    local lock = redis.call('GET', P .. 'lock:' .. ref) or ''
    local held = redis.call('EXISTS', P .. 'parked:' .. ref, P .. 'backoff:' .. ref)
    table.insert(out, {ref, lock, held})
  end
end
return {dropped, out}
"""

#: Delete a key only if it still holds the given value.
DELETE_IF_EQUAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Step:
    """What one :meth:`Inboxes.step` did (see the ``STEP`` script)."""

    what: str
    ref: str
    delivery_id: str
    attempt: int
    first: bool
    ready: int
    wake_pending: bool
    record: dict[str, Any] = field(repr=False)
    done: str

    @classmethod
    def parse(cls, reply: list[Any]) -> Step:
        what, ref, delivery_id, attempt, first, ready, wake, fields, done = reply
        it = iter(fields)
        return cls(_text(what), _text(ref), _text(delivery_id), int(attempt), bool(first),
                   int(ready), bool(wake), {_text(k): v for k, v in zip(it, it, strict=False)},
                   _text(done))


@dataclass(frozen=True, slots=True)
class Stranded:
    """One indexed inbox that holds deliveries, as :meth:`Inboxes.sweep` saw it."""

    ref: str
    lock_token: str
    held: bool


class Inboxes:
    """Keys and scripts of the inboxes, the ready list and wake-ups for one deployment.

    Args:
        connection: the Redis client (the queue's).
        settings: worker settings (prefix, queue, lock timeout).
    """

    def __init__(self, connection: redis.Redis, settings: WorkerSettings) -> None:
        self.redis = connection
        self.settings = settings
        self.prefix = settings.prefix
        self._step = connection.register_script(step_script())
        self._mark_ready = connection.register_script(MARK_READY)
        self._sweep = connection.register_script(SWEEP)
        self._delete_if_equal = connection.register_script(DELETE_IF_EQUAL)
        self._queue: Queue | None = None
        # Wake-up job ids carry the queue name (as far as RQ allows in an id).
        self._tag = re.sub(r"[^A-Za-z0-9_-]", "", settings.queue)[:64] or "the-loop"

    # -- keys -------------------------------------------------------------------------

    @property
    def ready_key(self) -> str:
        return f"{self.prefix}:ready"

    @property
    def index_key(self) -> str:
        return f"{self.prefix}:inboxes"

    @property
    def wake_key(self) -> str:
        return f"{self.prefix}:wake"

    def inbox_key(self, ref: str | None) -> str:
        return f"{self.prefix}:inbox:{ref or SHARED_INBOX}"

    def lock_key(self, ref: str) -> str:
        return f"{self.prefix}:lock:{ref}"

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
        """
        ref, delivery_id, pop, delete, then = done or ("", "", False, False, "")
        reply = self._step(keys=(self.ready_key, self.wake_key), args=(
            self.prefix, token, int(self.settings.lock_timeout * 1000), ref, delivery_id,
            "1" if pop else "", "1" if delete else "", then, take or "", ready))
        return Step.parse(reply)

    def let_go(self, ref: str, token: str) -> None:
        """Release ``ref``'s lock if ``token`` still holds it and list ``ref`` as ready if
        its inbox holds deliveries (a drain that stopped on an error)."""
        self._delete_if_equal(keys=[self.lock_key(ref)], args=[token])
        self.mark_ready(ref)

    # -- listing and waking -----------------------------------------------------------

    def mark_ready(self, ref: str, *, strict: bool = False, delivery_id: str | None = None,
                   at_front: bool = False) -> bool:
        """List ``ref`` in ``P:ready`` if its inbox holds deliveries and it is not listed
        yet; with ``delivery_id``, first put that delivery in the inbox unless it is
        there (at the head with ``at_front``). ``strict``: only if its lock is free and
        it is not held. Returns whether it was listed now."""
        p = self.prefix
        return bool(self._mark_ready(
            keys=(self.ready_key, self.index_key, self.inbox_key(ref), f"{p}:lock:{ref}",
                  f"{p}:backoff:{ref}", f"{p}:parked:{ref}"),
            args=(ref, "1" if strict else "", delivery_id or "", "1" if at_front else "")))

    def ensure_wake(self, tag: str | None = None) -> str | None:
        """Make sure a wake-up job is queued: set ``P:wake`` (NX, expiring) and, if it was
        unset, enqueue a ``workers.jobs.dispatch`` job through RQ's Queue API.

        Returns the id of the new or the pending wake-up job (``None`` if the flag kept
        vanishing). A crash between the flag and the enqueue leaves the flag to expire
        (``WAKE_TTL_MS``); the reaper then queues one.
        """
        job_id = f"{tag or self._tag}-wake-{uuid.uuid4().hex[:12]}"
        for _ in range(3):
            if self.redis.set(self.wake_key, job_id, nx=True, px=WAKE_TTL_MS):
                if self._queue is None:
                    self._queue = Queue(self.settings.queue, connection=self.redis)
                self._queue.enqueue_job(wake_job(self.redis, self.settings.queue, job_id,
                                                 func=DISPATCH_FUNC))
                return job_id
            pending = self.redis.get(self.wake_key)
            if pending is not None:
                return _text(pending)
        return None

    def drop_wake(self, job_id: str) -> bool:
        """Delete ``P:wake`` if it still names ``job_id`` (a wake-up job that will never
        run: its worker died)."""
        return bool(self._delete_if_equal(keys=[self.wake_key], args=[job_id]))

    def ready_length(self) -> int:
        return int(self.redis.llen(self.ready_key))

    # -- the reaper's sweep -----------------------------------------------------------

    def indexed(self, batch: int = 200) -> Iterable[list[str]]:
        """The refs of ``P:inboxes``, in batches."""
        chunk: list[str] = []
        for raw in self.redis.sscan_iter(self.index_key, count=batch):
            chunk.append(_text(raw))
            if len(chunk) >= batch:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def sweep(self, refs: list[str]) -> tuple[int, list[Stranded]]:
        """Drop ``refs`` whose inbox is empty from the index; describe the others."""
        dropped, rows = self._sweep(keys=(self.index_key,), args=(self.prefix, *refs))
        return int(dropped), [Stranded(_text(r), _text(t), bool(h)) for r, t, h in rows]

    def listed(self) -> set[str]:
        """The refs on the ready list now (a snapshot)."""
        return {_text(r) for r in self.redis.lrange(self.ready_key, 0, -1)}
