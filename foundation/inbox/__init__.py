"""The delivery protocol: how a delivery travels from the receiver to a worker through
Redis, with ordering per work item, nothing lost and nothing done twice.

Both processes import it; it imports neither (``webhook/`` and ``workers/`` meet only
here). Its modules, each with one job:

- :mod:`~foundation.inbox.keys`: the protocol's Redis key names, spelled once
  (:class:`Keys`; the other stores spell theirs, :mod:`foundation.redis.namespaces`);
- :mod:`~foundation.inbox.record`: the delivery record, one encode and one decode;
- :mod:`~foundation.inbox.scripts`: the protocol's Lua scripts, registered by one class;
- :mod:`~foundation.inbox.wake`: wake-up jobs, made with RQ's public API;
- :mod:`~foundation.inbox.enqueue`: the receiver's dedupe + enqueue;
- :mod:`~foundation.inbox.drain`: the worker's drain steps and the ready list;
- :mod:`~foundation.inbox.dead`: attempts, retries with backoff, parking;
- :mod:`~foundation.inbox.reaper`: heartbeats and what dead workers left behind;
- :mod:`~foundation.inbox.backlog`: how far behind the workers are (``/metrics``).
"""
