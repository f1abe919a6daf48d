"""Redis for the-loop: the one way its clients are made, and who owns which keys.

- :mod:`~foundation.redis.client`: every Redis client (:func:`connect`, timeouts,
  keepalive, health checks, retries), :class:`HeldConnections` for a hot path, and RQ's
  bounded blocking waits; its public names are also importable from here;
- :mod:`~foundation.redis.namespaces`: the registry of key namespaces: each store declares
  the namespaces of its keys (``P:state:...``, ``P:github:writes:...``) once, and no two
  stores may claim the same one;
- :mod:`~foundation.redis.scripts`: the loader of the stores' Lua scripts (each store keeps
  its scripts beside its code and names them).
"""

from __future__ import annotations

from foundation.redis.client import (
    CLI,
    DEQUEUE_TIMEOUT,
    HEALTH_CHECK_INTERVAL,
    KEEPALIVE,
    RECEIVER,
    SERVICE,
    BoundedDequeue,
    HeldConnections,
    Profile,
    blocking,
    connect,
)

__all__ = ["CLI", "DEQUEUE_TIMEOUT", "HEALTH_CHECK_INTERVAL", "KEEPALIVE", "RECEIVER",
           "SERVICE", "BoundedDequeue", "HeldConnections", "Profile", "blocking", "connect"]
