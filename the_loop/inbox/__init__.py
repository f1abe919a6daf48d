"""The delivery protocol: how a delivery travels from the receiver to a worker through
Redis, with ordering per work item, nothing lost and nothing done twice.

Both processes import it; it imports neither (``webhook/`` and ``workers/`` meet only
here). Its modules, each with one job:

- :mod:`~the_loop.inbox.keys`: every Redis key name, spelled once (:class:`Keys`);
- :mod:`~the_loop.inbox.record`: the delivery record, one encode and one decode;
- :mod:`~the_loop.inbox.scripts`: every Lua script, loaded by one class;
- :mod:`~the_loop.inbox.wake`: wake-up jobs, made with RQ's public API;
- :mod:`~the_loop.inbox.enqueue`: the receiver's dedupe + enqueue;
- :mod:`~the_loop.inbox.drain`: the worker's drain steps and the ready list;
- :mod:`~the_loop.inbox.dead`: attempts, retries with backoff, parking;
- :mod:`~the_loop.inbox.reaper`: heartbeats and what dead workers left behind;
- :mod:`~the_loop.inbox.backlog`: how far behind the workers are (``/metrics``).
"""
