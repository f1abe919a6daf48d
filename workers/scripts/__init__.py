"""The worker's stores' Lua scripts, one file each (loaded by
:func:`foundation.redis.scripts.register`, named by their store):

- ``append_event.lua``: append to a work item's event log and index the entry,
  ``save_state.lua``: save its state record or one record of its outbox, and
  ``quarantine.lua``: move its unreadable state record aside
  (:class:`workers.state.RedisStateStore`); each is loaded behind ``fence.lua``, the fence
  of a work item's writes; ``reschedule_due.lua``: move a work item's entry in the monitor
  sweep's index unless a save changed it meanwhile (the same store);
- ``ci_record.lua``: store a CI result unless a newer one is stored
  (:class:`workers.ci.RedisCI`);
- ``repository.lua``: note a repository's id and current name, return its ref key
  (:class:`workers.identities.Repositories`).

Scripts never spell a key name: they get their keys through ``KEYS``.
"""
