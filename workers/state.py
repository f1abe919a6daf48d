"""Work item state and event log in Redis (the service's :class:`graph.state.StateStore`).

Keys (:mod:`the_loop.inbox.keys`): ``P:state:REF`` (a JSON string) and ``P:events:REF``
(a list of JSON envelopes; the list length is the sequence).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis

from graph.state import LogEvent, WorkItemState, new_event_id, now
from the_loop.inbox.keys import Keys


class RedisStateStore:
    """:class:`graph.state.StateStore` over Redis.

    Args:
        connection: a ``redis.Redis`` client (bytes or str responses both work).
        prefix: key prefix, e.g. ``"the-loop"``.
    """

    def __init__(self, connection: redis.Redis, prefix: str) -> None:
        self.redis = connection
        self.prefix = prefix
        self.keys = Keys(prefix)

    def state_key(self, ref: str) -> str:
        """Redis key of ``ref``'s state."""
        return self.keys.state(ref)

    def events_key(self, ref: str) -> str:
        """Redis key of ``ref``'s event log."""
        return self.keys.events(ref)

    def load(self, ref: str) -> WorkItemState | None:
        raw = self.redis.get(self.state_key(ref))
        return None if raw is None else WorkItemState.from_json(raw, self.state_key(ref))

    def save(self, state: WorkItemState) -> None:
        state.updated_at = now()
        self.redis.set(self.state_key(state.ref), state.to_json())

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
        # The list position is the sequence number; RPUSH returns it atomically.
        seq = int(self.redis.rpush(self.events_key(ref), json.dumps(envelope, sort_keys=True)))
        return LogEvent(seq, event_id, type, dict(data), caused_by, at)

    def events(self, ref: str) -> list[LogEvent]:
        out = []
        for seq, raw in enumerate(self.redis.lrange(self.events_key(ref), 0, -1), start=1):
            d = json.loads(raw)
            out.append(LogEvent(seq, d["id"], d["type"], d["data"], d.get("caused_by"),
                                d.get("at", 0.0)))
        return out
