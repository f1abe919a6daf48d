"""How far behind the workers are: the backlog the receiver's ``/metrics`` reports."""

from __future__ import annotations

import redis

from foundation.inbox.keys import Keys
from foundation.inbox.scripts import Scripts

__all__ = ["Backlog"]


class Backlog:
    """Read the backlog of one deployment (one Lua call, ``backlog.lua``).

    Args:
        connection: the Redis client.
        keys: the deployment's key names.
    """

    def __init__(self, connection: redis.Redis, keys: Keys) -> None:
        self.keys = keys
        self._script = Scripts(connection).backlog

    def read(self) -> tuple[int, float | None]:
        """Returns ``(depth, received_at)``: deliveries waiting in the indexed inboxes
        (ready, being drained, or held for a retry or a parked delivery), and the Unix
        time the oldest delivery of the work item at the head of the ready list arrived
        (``None`` when nothing is ready or it is unknown).

        Raises:
            redis.RedisError: Redis unreachable.
        """
        depth, received = self._script(keys=(self.keys.inboxes, self.keys.ready),
                                       args=self.keys.per_ref())
        try:
            return int(depth), float(received) if received else None
        except ValueError:
            return int(depth), None
