"""The delivery protocol's Lua scripts, one file each, registered by :class:`Scripts`
(loaded by :mod:`foundation.redis.scripts`, as every store's are):

- ``enqueue.lua``: the receiver's dedupe + record + inbox + ready + ``SET P:wake NX``;
- ``step.lua``: one step of a drain (finish the delivery just handled, take the next);
- ``mark_ready.lua``: list a ref as ready if its inbox holds deliveries;
- ``sweep.lua``: the reaper's look at a batch of indexed inboxes;
- ``list_stranded.lua``: the reaper's listing of the stranded inboxes it found;
- ``backlog.lua``: queue depth and the oldest ready delivery's arrival (``/metrics``);
- ``delete_if_equal.lua``: delete a key only if it still holds a value;
- ``unqueue.lua``: take back a delivery its replicas did not acknowledge in time, unless
  a worker took it.

The other stores keep their scripts beside them (``workers/scripts/``: the state store's,
CI results', repositories'; ``integrations/scripts/``: the write throttle's).

Scripts never spell a key name: they get keys through ``KEYS`` and the per-ref key
prefixes through ``ARGV`` (:meth:`foundation.inbox.keys.Keys.per_ref`). Two tables are
written into ``step.lua`` when it is loaded: the record fields it reads
(:data:`foundation.inbox.record.FIELDS`) and the router's table, ``(event, action)`` ->
route (given by the worker, whose router owns it): a drain step decides the route once
and hands it back with the delivery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import redis
from redis.commands.core import Script

from foundation.inbox.record import FIELDS
from foundation.redis import scripts
from foundation.redis.scripts import lua_string

__all__ = ["Routed", "Scripts", "lua_string", "source", "step_source"]

#: The router's table as the step script takes it: ``(event, action) -> route``, or only
#: the pairs (action ``None``: every action of the event).
Routed = Mapping[tuple[str, str | None], str] | Iterable[tuple[str, str | None]]


def source(name: str) -> str:
    """The text of ``scripts/<name>.lua``."""
    return scripts.source(__name__, name)


def step_source(routed: Routed) -> str:
    """``step.lua`` with :data:`~foundation.inbox.record.FIELDS` and the router's table
    written in (``action`` ``None`` = every action of the event: ``"event *"``).

    Args:
        routed: ``(event, action) -> route`` (a step then returns the route with the
            delivery), or just the pairs (``true``: the body only).
    """
    routes = routed if isinstance(routed, Mapping) else dict.fromkeys(routed, True)
    pairs = sorted((f"{event} {action or '*'}",
                    "true" if route is True else lua_string(str(route)))
                   for (event, action), route in routes.items())
    return (source("step")
            .replace("--[[FIELDS]]", ", ".join(lua_string(f) for f in FIELDS))
            .replace("--[[ROUTED]]", ", ".join(f"[{lua_string(p)}] = {v}" for p, v in pairs)))


class Scripts:
    """The delivery protocol's scripts, registered on one Redis connection
    (``register_script`` only hashes the text: no I/O here; the first call of each loads
    it, EVALSHA after).

    Args:
        connection: the Redis client.
        routed: the worker's router table, ``(event, action) -> route``: a drain step
            returns the body of those deliveries, and their route (just the pairs: the
            body only); empty = never (the body is then read on demand).
    """

    def __init__(self, connection: redis.Redis,
                 routed: Routed = ()) -> None:
        self.enqueue: Script = scripts.register(connection, __name__, "enqueue")
        self.step: Script = connection.register_script(step_source(routed))
        self.mark_ready: Script = scripts.register(connection, __name__, "mark_ready")
        self.sweep: Script = scripts.register(connection, __name__, "sweep")
        self.list_stranded: Script = scripts.register(connection, __name__, "list_stranded")
        self.backlog: Script = scripts.register(connection, __name__, "backlog")
        self.delete_if_equal: Script = scripts.register(connection, __name__,
                                                        "delete_if_equal")
        self.unqueue: Script = scripts.register(connection, __name__, "unqueue")
