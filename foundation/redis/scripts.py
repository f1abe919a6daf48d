"""The loader of the stores' Lua scripts: one file each, kept beside the store that runs
it (``foundation/inbox/scripts/``, ``workers/scripts/``, ``integrations/scripts/``: each a
package, so the files ship with it).

A store names its scripts (:func:`register`); redis-py's ``register_script`` only hashes
the text, the first call loads it and every later one sends ``EVALSHA``, loading it again
on ``NOSCRIPT`` (a restart, ``SCRIPT FLUSH``). A hot path that sends commands on a
:class:`foundation.redis.client.HeldConnections` runs the same registered script with its
``run_script``, which does the same.

Scripts never spell a key name: they get keys through ``KEYS`` and per-ref key prefixes
through ``ARGV`` (the owning store's key class spells them,
:mod:`foundation.redis.namespaces`).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import redis
from redis.commands.core import Script

__all__ = ["lua_string", "register", "source"]


@cache
def source(package: str, *names: str) -> str:
    """The text of ``<package>/<name>.lua`` for each of ``names``, joined by newlines
    (a script that begins with another one, e.g. ``fence`` then ``save_state``).

    Args:
        package: the dotted name of the scripts' package, e.g. ``"workers.scripts"``.
        names: file names less ``.lua``.

    Raises:
        FileNotFoundError: no such script.
    """
    return "\n".join(files(package).joinpath(f"{name}.lua").read_text(encoding="utf-8")
                     for name in names)


def lua_string(text: str) -> str:
    """``text`` as a Lua string literal (anything but ``[A-Za-z0-9_-. *]`` escaped)."""
    return '"' + "".join(c if c.isalnum() or c in "_-. *" else f"\\{ord(c):03d}"
                         for c in text) + '"'


def register(connection: redis.Redis, package: str, *names: str) -> Script:
    """The script made of ``names`` in ``package`` (:func:`source`), registered on
    ``connection``. No I/O.

    Returns:
        redis-py's :class:`~redis.commands.core.Script`: call it with ``keys`` and
        ``args``.
    """
    return connection.register_script(source(package, *names))
