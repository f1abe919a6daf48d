"""Work item state and event log in Redis (the service's :class:`graph.state.StateStore`).

Keys (:class:`StateKeys`; ``P`` the prefix, ``REF`` a work item ``github:OWNER/REPO#N``),
written by the worker and read by the dashboard (:mod:`the_loop.web.readmodel`):

- ``P:state:REF``: the state record (a JSON string): where the item is, not its past;
- ``P:state-corrupt:AT:REF``: a state record set aside as unreadable at Unix time AT
  (:meth:`RedisStateStore.quarantine`);
- ``P:effects:REF``: hash, effect id -> JSON record: the outbox of the current node
  visit, one field per effect, so recording an effect never rewrites the state;
- ``P:events:REF``: the event log (a list of JSON envelopes; the list position is the
  sequence number);
- ``P:event-types:REF`` (set of entry types) and ``P:events-by:ID:REF`` (list of
  ``"SEQ ENVELOPE"``: the entries delivery ID caused, expiring after :data:`CAUSED_TTL`):
  the log's indexes, so nothing on the delivery path reads the whole log;
- ``P:fence:REF``: hash: ``writer``, ``n``, ``reply`` of the last write applied to the
  work item's state or log (below);
- ``P:state-due``: sorted set, ref -> when the monitor sweep should next look at it (Unix
  seconds): every work item that waits (``waiting`` or ``escalated``), so the sweep reads
  only the entries due (:meth:`RedisStateStore.due`) instead of every state. A save
  scores the item at its node visit's start (:func:`due_score`: the earliest any monitor
  can fall due; the store does not know the graph) or removes it when it stops waiting;
  the sweep moves an entry it looked at to its exact next time
  (:meth:`RedisStateStore.reschedule`, ``+inf``: no monitor);
- ``P:state-due:backfilled``: the graph digest the index was last built for from every
  state (:meth:`RedisStateStore.backfill`: states saved before the index existed, or a
  graph whose gates' freshness changed).

Scripts (``workers/scripts/``): ``save_state.lua``, ``append_event.lua`` and
``quarantine.lua``, each loaded behind ``fence.lua``, and ``reschedule_due.lua``; they get
every key through ``KEYS``.

Fencing: every write to a work item's state or log (:meth:`RedisStateStore.save`,
``save_effect``, ``append_event``, ``quarantine``) is one Lua call that begins with
``fence.lua``. A worker draining a work item's inbox holds its lock (``P:lock:REF``) and
tells the store its token (:meth:`RedisStateStore.fence`); the script refuses the write
unless the lock still holds that token (:class:`LockLost`: another worker took the work
item over, and this one must stop without acknowledging its delivery). Each write also
carries its writer and a write number, increasing in the process; ``P:fence:REF`` keeps
the last applied, so a copy of a write that reaches Redis again (redis-py retried it
after a timeout, and the first copy, held up on a silently dropped connection, arrives
too) or late (after a newer write of the same writer) is skipped: nothing lands twice
and nothing older overwrites newer. An operator's command holds no lock: its writes are
not fenced on a token but are deduplicated the same way.

Retention: once a work item is done its event log (and the index of its types) expires
after ``retention`` seconds (``THE_LOOP_RETENTION``); ``the-loop state export`` saves it
before. The state record and its effects stay (small, and they say the item is done); a
work item that leaves ``done`` keeps its log again.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from foundation.inbox.enqueue import SEVEN_DAYS
from foundation.inbox.keys import Keys
from foundation.redis import scripts
from foundation.redis.namespaces import KeySpace, owns
from graph.errors import LoopError
from graph.model import Status
from graph.state import LogEvent, StateError, WorkItemState, new_event_id, now

#: Seconds the entries a delivery caused stay indexed: as long as its record can be
#: retried (the receiver keeps a delivery, and its dedupe marker, seven days).
CAUSED_TTL = SEVEN_DAYS

#: Write numbers of this process: increasing across every store of the process, so that
#: one writer's later write always carries a higher number (``fence.lua``).
_WRITES = itertools.count(1)
#: One writer's writes to one work item are sent one at a time, in the order of their
#: numbers (a lock per stripe of refs), so no write overtakes an older one on the way
#: and the live caller never has its write taken for a late copy.
_IN_ORDER = tuple(threading.Lock() for _ in range(64))


#: The package of the store's Lua scripts.
SCRIPTS = "workers.scripts"

#: The statuses of a work item that waits for people (the ones the monitor sweep reads).
WAITING_STATUSES = frozenset({Status.WAITING, Status.ESCALATED})


def due_score(state: WorkItemState) -> float | None:
    """``state``'s score in ``P:state-due`` when saved: the start of its node visit
    (no monitor can fall due earlier), ``None`` when it does not wait (it leaves the
    index)."""
    return float(state.visit_started) if state.status in WAITING_STATUSES else None


def _score(at: float) -> str:
    """A sorted-set score as Redis reads it (``+inf`` for infinity)."""
    return "+inf" if math.isinf(at) else repr(float(at))


@owns("state", "state-corrupt", "events", "event-types", "events-by", "effects", "fence",
      "state-due")
@dataclass(frozen=True, slots=True)
class StateKeys(KeySpace):
    """The state store's key names of one deployment (see the module docstring). No I/O.

    Args:
        prefix: prefix of the-loop's keys (``THE_LOOP_REDIS_PREFIX``).
    """

    def state(self, ref: str) -> str:
        """``P:state:REF``: the work item's state (JSON)."""
        return self.key("state", ref)

    @property
    def state_match(self) -> str:
        """``P:state:*``: the SCAN pattern of every work item's state (the prefix holds no
        glob character: the settings refuse one)."""
        return self.key("state", "*")

    @property
    def state_prefix(self) -> str:
        """``P:state:``: a state key less its ref."""
        return self.key("state", "")

    @property
    def due(self) -> str:
        """``P:state-due``: sorted set, waiting ref -> when the sweep next looks at it."""
        return self.key("state-due")

    @property
    def due_backfilled(self) -> str:
        """``P:state-due:backfilled``: the graph digest ``P:state-due`` was built for."""
        return self.key("state-due", "backfilled")

    def state_corrupt(self, at: int, ref: str) -> str:
        """``P:state-corrupt:AT:REF``: a state set aside as unreadable at Unix time AT."""
        return self.key("state-corrupt", str(at), ref)

    def events(self, ref: str) -> str:
        """``P:events:REF``: the work item's event log (list of JSON envelopes)."""
        return self.key("events", ref)

    def effects(self, ref: str) -> str:
        """``P:effects:REF``: hash, effect id -> JSON record: the outbox of the work
        item's current node visit (one field per effect, apart from the state)."""
        return self.key("effects", ref)

    def fence(self, ref: str) -> str:
        """``P:fence:REF``: hash, the last write applied to the work item's state or log
        (who wrote it, its write number, its reply)."""
        return self.key("fence", ref)

    def event_types(self, ref: str) -> str:
        """``P:event-types:REF``: set of the entry types the work item's log holds."""
        return self.key("event-types", ref)

    def events_by(self, delivery_id: str, ref: str) -> str:
        """``P:events-by:ID:REF``: list of ``"SEQ ENVELOPE"``: the log entries delivery
        ID caused (what a retried delivery checks); expires."""
        return self.key("events-by", delivery_id, ref)


class LockLost(LoopError):
    """A write to a work item was refused: its lock no longer holds the token of the
    worker that wrote (the lock expired, or the reaper judged the worker dead, and
    another worker took the work item over). The drain stops that work item and leaves
    its delivery unacknowledged at the inbox head, for the lock's holder.

    Attributes:
        ref: the work item.
    """

    def __init__(self, ref: str) -> None:
        super().__init__(f"work item {ref}: its lock is held by another worker now; "
                         "this worker's write was refused")
        self.ref = ref


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def _event(seq: int, d: Mapping[str, Any]) -> LogEvent:
    return LogEvent(seq, d["id"], d["type"], d["data"], d.get("caused_by"), d.get("at", 0.0))


class RedisStateStore:
    """:class:`graph.state.StateStore` over Redis.

    Args:
        connection: a ``redis.Redis`` client (bytes or str responses both work).
        prefix: key prefix, e.g. ``"the-loop"``.
        retention: seconds a done work item's event log is kept; ``None``: forever.
    """

    def __init__(self, connection: redis.Redis, prefix: str, *,
                 retention: float | None = None) -> None:
        self.redis = connection
        self.prefix = prefix
        self.keys = StateKeys(prefix)
        # the drain lock a fenced write checks is the delivery protocol's
        self._locks = Keys(prefix)
        self.retention = retention
        self._append = scripts.register(connection, SCRIPTS, "fence", "append_event")
        self._save = scripts.register(connection, SCRIPTS, "fence", "save_state")
        self._quarantine = scripts.register(connection, SCRIPTS, "fence", "quarantine")
        self._reschedule = scripts.register(connection, SCRIPTS, "reschedule_due")
        # ref -> the lock token this process holds for it (fence(); the heartbeat's
        # thread and the drain's share the store).
        self._fences: dict[str, str] = {}
        self._fences_guard = threading.Lock()
        # Who writes when no lock is held (an operator's command, the reaper).
        self._writer = f"op|{socket.gethostname()}:{os.getpid()}|{uuid.uuid4().hex}"

    def fence(self, ref: str, token: str | None) -> None:
        """Fence every later write to ``ref`` on the lock token ``token`` (the drain
        took ``ref``'s lock), or lift the fence (``None``: it let go).

        Args:
            ref: the work item.
            token: the value of ``P:lock:REF`` while this process holds it.
        """
        with self._fences_guard:
            if token is None:
                self._fences.pop(ref, None)
            else:
                self._fences[ref] = token

    def _write(self, script: Script, ref: str, keys: Sequence[str],
               args: Sequence[Any]) -> Any:
        """Run one fenced write of ``ref`` (``script``: ``fence.lua`` in front of it; one
        round trip): returns the write's reply, or raises :class:`LockLost`."""
        with self._fences_guard:
            token = self._fences.get(ref, "")
        with _IN_ORDER[hash(ref) % len(_IN_ORDER)]:
            n = next(_WRITES)
            reply = script(keys=[self._locks.lock(ref), self.keys.fence(ref), *keys],
                           args=[token, token or self._writer, n, *args])
        what = _text(reply[0])
        if what == "lost":
            raise LockLost(ref)
        # 'stale' only ever answers a copy nobody waits for (the writer moved on).
        return reply[1] if len(reply) > 1 else None

    def state_key(self, ref: str) -> str:
        """Redis key of ``ref``'s state."""
        return self.keys.state(ref)

    def events_key(self, ref: str) -> str:
        """Redis key of ``ref``'s event log."""
        return self.keys.events(ref)

    def effects_key(self, ref: str) -> str:
        """Redis key of ``ref``'s outbox (the effects of its current node visit)."""
        return self.keys.effects(ref)

    def load(self, ref: str) -> WorkItemState | None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(self.state_key(ref))
        pipe.hgetall(self.effects_key(ref))
        raw, effects = pipe.execute()
        if raw is None:
            return None
        state = WorkItemState.from_json(raw, self.state_key(ref))
        if state.effects and not effects:
            state.effects_reset = True  # an older record kept them inside: move them out
        for effect, record in effects.items():
            state.effects[_text(effect)] = json.loads(record)
        return state

    def save(self, state: WorkItemState) -> None:
        """Save ``state`` (with its outbox when ``effects_reset``), fenced.

        Raises:
            LockLost: the work item's lock is held by another worker now.
        """
        state.updated_at = now()
        ref = state.ref
        retention = ""
        if self.retention is not None:
            # A done item's log expires counted from its first save done, not the last.
            retention = (str(max(1, int(self.retention)))
                         if state.status in (Status.DONE, Status.ABANDONED) else "persist")
        outbox: list[str] = []
        if state.effects_reset:
            outbox = ["1", *itertools.chain.from_iterable(
                (k, json.dumps(v, sort_keys=True)) for k, v in state.effects.items())]
        score = due_score(state)
        self._write(self._save, ref, self._saved_keys(ref),
                    [state.to_json(effects=False), retention,
                     "" if score is None else _score(score), ref, *(outbox or [""])])
        state.effects_reset = False

    def save_effect(self, state: WorkItemState, effect: str) -> None:
        """Save one record of ``state``'s outbox, fenced.

        Raises:
            LockLost: the work item's lock is held by another worker now.
        """
        if state.effects_reset:
            self.save(state)  # a new visit's outbox: written whole, with the record
            return
        ref = state.ref
        self._write(self._save, ref, self._saved_keys(ref),
                    ["", "", "", ref, "effect", effect,
                     json.dumps(state.effects[effect], sort_keys=True)])

    def _saved_keys(self, ref: str) -> list[str]:
        """``save_state.lua``'s keys after the fence's: state, outbox, log, log types,
        the sweep's index."""
        return [self.state_key(ref), self.effects_key(ref), self.events_key(ref),
                self.keys.event_types(ref), self.keys.due]

    def quarantine(self, ref: str) -> str | None:
        """Move ``ref``'s unreadable state record aside, fenced; returns its new key, or
        ``None`` when there was none.

        Raises:
            LockLost: the work item's lock is held by another worker now.
        """
        aside = self.keys.state_corrupt(int(now()), ref)
        moved = self._write(self._quarantine, ref,
                            [self.state_key(ref), aside, self.keys.due], [ref])
        return aside if moved is not None and int(moved) else None

    # -- the monitor sweep's index (P:state-due) ----------------------------------------

    def due(self, now: float, limit: int) -> list[tuple[str, float]]:
        """The waiting work items the sweep should look at by ``now``, earliest first.

        Args:
            now: Unix seconds; limit: at most this many (one bounded read).

        Returns:
            ``(ref, score)`` pairs; pass the score back to :meth:`reschedule`.
        """
        rows: list[tuple[bytes | str, float]] = self.redis.zrangebyscore(  # type: ignore[assignment]
            self.keys.due, "-inf", _score(now), start=0, num=limit, withscores=True)
        return [(_text(ref), float(score)) for ref, score in rows]

    def reschedule(self, ref: str, seen: float, at: float | None) -> bool:
        """Move ``ref``'s entry in the index from ``seen`` (the score :meth:`due` gave)
        to ``at`` (``math.inf``: no monitor), or remove it (``None``: it no longer
        waits) -- unless a save changed the entry meanwhile (that save's score stands).

        Returns:
            whether the entry was changed.
        """
        return bool(self._reschedule(keys=[self.keys.due], args=[
            ref, _score(seen), "" if at is None else _score(at)]))

    def backfilled(self, tag: str) -> bool:
        """Whether the index was built from every state for ``tag`` (a graph digest)."""
        return _text(self.redis.get(self.keys.due_backfilled) or b"") == tag

    def backfill(self, tag: str, score: Callable[[WorkItemState], float | None], *,
                 count: int = 1000) -> int:
        """Index every waiting state (one ``SCAN`` of ``P:state:*``, states read a page at
        a time), then note ``tag``: states saved before the index existed, or scores
        that ``tag``'s graph times differently. An entry only ever moves earlier
        (``ZADD LT``), so a save or a sweep meanwhile never gets an entry looked at late.

        Args:
            tag: what :meth:`backfilled` checks afterwards (the graph digest).
            score: a state -> its score, or ``None``: not indexed (it does not wait).
            count: ``SCAN``'s page size.

        Returns:
            how many entries were written.
        """
        written = 0
        for page in self._state_pages(count):
            entries: dict[str, float] = {}
            for ref, raw in page:
                try:
                    state = WorkItemState.from_json(raw, self.state_key(ref))
                except StateError:
                    continue  # rebuilt when next processed, and indexed by that save
                at = score(state) if state.status in WAITING_STATUSES else None
                if at is not None:
                    entries[ref] = at
            if entries:
                self.redis.zadd(self.keys.due, {r: _score(a) for r, a in entries.items()},
                                lt=True)
                written += len(entries)
        self.redis.set(self.keys.due_backfilled, tag)
        return written

    def _state_pages(self, count: int) -> Iterator[list[tuple[str, bytes | str]]]:
        """Every state record, ``(ref, JSON)``, a ``SCAN`` page at a time."""
        cursor: int = 0
        prefix = self.keys.state_prefix
        while True:
            cursor, keys = self.redis.scan(cursor, match=self.keys.state_match, count=count)
            if keys:
                raws = self.redis.mget(keys)
                yield [(_text(k).removeprefix(prefix), raw)
                       for k, raw in zip(keys, raws, strict=True) if raw is not None]
            if not cursor:
                return

    def append_event(
        self, ref: str, type: str, data: Mapping[str, Any], caused_by: str | None = None
    ) -> LogEvent:
        event_id, at = new_event_id(), now()
        envelope = {"id": event_id, "type": type, "data": dict(data),
                    "caused_by": caused_by, "at": at}
        keys = [self.events_key(ref), self.keys.event_types(ref)]
        if caused_by:
            keys.append(self.keys.events_by(caused_by, ref))
        # The list position is the sequence number; the script returns it atomically.
        envelope_json = json.dumps(envelope, sort_keys=True)
        seq = int(self._write(self._append, ref, keys, [envelope_json, type, CAUSED_TTL]) or 0)
        return LogEvent(seq, event_id, type, dict(data), caused_by, at)

    def events(self, ref: str) -> list[LogEvent]:
        return [_event(seq, json.loads(raw)) for seq, raw in
                enumerate(self.redis.lrange(self.events_key(ref), 0, -1), start=1)]

    def caused_by(self, ref: str, delivery: str) -> list[LogEvent]:
        out = []
        for raw in self.redis.lrange(self.keys.events_by(delivery, ref), 0, -1):
            seq, _, envelope = _text(raw).partition(" ")
            out.append(_event(int(seq), json.loads(envelope)))
        return out

    def logged(self, ref: str, type: str) -> bool:
        return bool(self.redis.sismember(self.keys.event_types(ref), type))
