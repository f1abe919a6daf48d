"""Work item state and event log in Redis (the service's :class:`graph.state.StateStore`).

Keys (:mod:`the_loop.inbox.keys`):

- ``P:state:REF``: the state record (a JSON string): where the item is, not its past;
- ``P:effects:REF``: hash, effect id -> JSON record: the outbox of the current node
  visit, one field per effect, so recording an effect never rewrites the state;
- ``P:events:REF``: the event log (a list of JSON envelopes; the list position is the
  sequence number);
- ``P:event-types:REF`` (set of entry types) and ``P:events-by:ID:REF`` (the entries
  delivery ID caused, expiring after :data:`CAUSED_TTL`): the log's indexes, so nothing
  on the delivery path reads the whole log.

Retention: once a work item is done its event log (and the index of its types) expires
after ``retention`` seconds (``THE_LOOP_RETENTION``); ``the-loop state export`` saves it
before. The state record and its effects stay (small, and they say the item is done); a
work item that leaves ``done`` keeps its log again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis

from graph.model import Status
from graph.state import LogEvent, WorkItemState, new_event_id, now
from the_loop.inbox.enqueue import SEVEN_DAYS
from the_loop.inbox.keys import Keys
from the_loop.inbox.scripts import Scripts

#: Seconds the entries a delivery caused stay indexed: as long as its record can be
#: retried (the receiver keeps a delivery, and its dedupe marker, seven days).
CAUSED_TTL = SEVEN_DAYS


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
        self.keys = Keys(prefix)
        self.retention = retention
        self._append = Scripts(connection).append_event

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
        state.updated_at = now()
        ref = state.ref
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(self.state_key(ref), state.to_json(effects=False))
        if state.effects_reset:
            pipe.delete(self.effects_key(ref))
            if state.effects:
                pipe.hset(self.effects_key(ref), mapping={
                    k: json.dumps(v, sort_keys=True) for k, v in state.effects.items()})
        if self.retention is not None:
            logs = (self.events_key(ref), self.keys.event_types(ref))
            for key in logs:
                if state.status == Status.DONE:
                    # Counted from when it was first saved done, not from the last save.
                    pipe.expire(key, max(1, int(self.retention)), nx=True)
                else:
                    pipe.persist(key)
        pipe.execute()
        state.effects_reset = False

    def save_effect(self, state: WorkItemState, effect: str) -> None:
        if state.effects_reset:
            self.save(state)  # a new visit's outbox: written whole, with the record
            return
        self.redis.hset(self.effects_key(state.ref), effect,
                        json.dumps(state.effects[effect], sort_keys=True))

    def quarantine(self, ref: str) -> str | None:
        key = self.state_key(ref)
        aside = self.keys.state_corrupt(int(now()), ref)
        try:
            self.redis.rename(key, aside)
        except redis.ResponseError:  # no such key
            return None
        return aside

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
        seq = int(self._append(keys=keys, args=[json.dumps(envelope, sort_keys=True), type,
                                                CAUSED_TTL]))
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
