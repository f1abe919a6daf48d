"""The transports' Lua scripts, one file each (loaded by
:func:`foundation.redis.scripts.register`, named by their store):

- ``reserve_write.lua``: the GitHub write throttle's slot reservation
  (:class:`integrations.throttle.WriteThrottle`).

Scripts never spell a key name: they get their keys through ``KEYS``.
"""
