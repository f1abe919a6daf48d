"""Every Lua script of the-loop, one file each, loaded by :class:`Scripts`.

- ``enqueue.lua``: the receiver's dedupe + record + inbox + ready + ``SET P:wake NX``;
- ``step.lua``: one step of a drain (finish the delivery just handled, take the next);
- ``mark_ready.lua``: list a ref as ready if its inbox holds deliveries;
- ``sweep.lua``: the reaper's look at a batch of indexed inboxes;
- ``list_stranded.lua``: the reaper's listing of the stranded inboxes it found;
- ``backlog.lua``: queue depth and the oldest ready delivery's arrival (``/metrics``);
- ``delete_if_equal.lua``: delete a key only if it still holds a value;
- ``reserve_write.lua``: the GitHub write throttle's slot reservation
  (:class:`integrations.throttle.WriteThrottle`);
- ``repository.lua``: note a repository's id and current name, return its ref key
  (:class:`workers.identities.Repositories`);
- ``ci_record.lua``: store a CI result unless a newer one is stored
  (:class:`workers.ci.RedisCI`);
- ``append_event.lua``: append to a work item's event log and index the entry, and
  ``save_state.lua``: save its state record or one record of its outbox, and
  ``quarantine.lua``: move its unreadable state record aside
  (:class:`workers.state.RedisStateStore`); all three begin with ``fence.lua``, the fence of
  a work item's writes (:func:`fenced_source`).

Scripts never spell a key name: they get keys through ``KEYS`` and the per-ref key
prefixes through ``ARGV`` (:meth:`foundation.inbox.keys.Keys.per_ref`). Two tables are
written into ``step.lua`` when it is loaded: the record fields it reads
(:data:`foundation.inbox.record.FIELDS`) and the router's table, ``(event, action)`` ->
route (given by the worker, whose router owns it): a drain step decides the route once
and hands it back with the delivery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from importlib.resources import files

import redis
from redis.commands.core import Script

from foundation.inbox.record import FIELDS

__all__ = ["Routed", "Scripts", "fenced_source", "lua_string", "source", "step_source"]

#: The router's table as the step script takes it: ``(event, action) -> route``, or only
#: the pairs (action ``None``: every action of the event).
Routed = Mapping[tuple[str, str | None], str] | Iterable[tuple[str, str | None]]


@cache
def source(name: str) -> str:
    """The text of ``scripts/<name>.lua``."""
    return files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def lua_string(text: str) -> str:
    """``text`` as a Lua string literal (anything but ``[A-Za-z0-9_-. *]`` escaped)."""
    return '"' + "".join(c if c.isalnum() or c in "_-. *" else f"\\{ord(c):03d}"
                         for c in text) + '"'


def fenced_source(name: str) -> str:
    """``scripts/<name>.lua`` behind ``fence.lua``: a write that first checks the work
    item's lock still holds the writer's token and that it is not a copy of a write
    already applied (see ``fence.lua``)."""
    return source("fence") + "\n" + source(name)


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
    """Every script, registered on one Redis connection (``register_script``
    only hashes the text: no I/O here; the first call of each loads it, EVALSHA after).

    Args:
        connection: the Redis client.
        routed: the worker's router table, ``(event, action) -> route``: a drain step
            returns the body of those deliveries, and their route (just the pairs: the
            body only); empty = never (the body is then read on demand).
    """

    def __init__(self, connection: redis.Redis,
                 routed: Routed = ()) -> None:
        self.enqueue: Script = connection.register_script(source("enqueue"))
        self.step: Script = connection.register_script(step_source(routed))
        self.mark_ready: Script = connection.register_script(source("mark_ready"))
        self.sweep: Script = connection.register_script(source("sweep"))
        self.list_stranded: Script = connection.register_script(source("list_stranded"))
        self.backlog: Script = connection.register_script(source("backlog"))
        self.delete_if_equal: Script = connection.register_script(source("delete_if_equal"))
        self.reserve_write: Script = connection.register_script(source("reserve_write"))
        self.repository: Script = connection.register_script(source("repository"))
        self.ci_record: Script = connection.register_script(source("ci_record"))
        self.append_event: Script = connection.register_script(fenced_source("append_event"))
        self.save_state: Script = connection.register_script(fenced_source("save_state"))
        self.quarantine: Script = connection.register_script(fenced_source("quarantine"))
