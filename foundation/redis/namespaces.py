"""Who owns which Redis keys: every key of the-loop is ``P:NAMESPACE:...`` (``P`` the
deployment's prefix, ``THE_LOOP_REDIS_PREFIX``), and each namespace belongs to one store.

A store declares the namespaces of its keys once, on the class that spells them
(:func:`owns`), and builds every key from that class (:class:`KeySpace`). Claiming is
done at import: a store claiming a namespace another store holds -- the same one, or one
inside or around it (``github`` would take in ``github:writes``) -- raises
:class:`NamespaceTaken`, so two stores can never write the same keys.

The stores and their namespaces (each module documents its keys):

- the delivery protocol, :mod:`foundation.inbox.keys`: ``delivery``, ``inbox``, ``ready``,
  ``inboxes``, ``wake``, ``lock``, ``backoff``, ``parked``, ``deliveries``, ``workers``,
  ``worker``, ``reaper``, ``stuck``;
- agent turns (the worker <-> runner turn protocol), :mod:`foundation.turns`: ``turn``,
  ``turns``, ``turn-lock``, ``runner:slots``, ``workspace``, ``alias``, ``turn-log``;
- the GitHub write throttle and rate budget, :mod:`integrations.throttle`:
  ``github:writes``, ``github:budget``; the ETag cache, :mod:`integrations.github_cache`:
  ``github:etag``;
- work item state, its log and outbox, :mod:`workers.state`: ``state``, ``state-corrupt``,
  ``events``, ``event-types``, ``events-by``, ``effects``, ``fence``, ``state-due``;
- commits (default branch heads, CI results), :mod:`workers.ci`: ``head``, ``ci``,
  ``ci-order``, ``sha``;
- repositories, installations, accounts, the App, :mod:`workers.identities`:
  ``repository``, ``repository-name``, ``repository-key``, ``installation``,
  ``installation-items``, ``account``, ``account-checked``, ``app``;
- the reconciler of missed deliveries, :mod:`workers.reconcile`: ``reconcile``.

RQ's own keys (``rq:job:*``, ``rq:queue:Q``...) are RQ's: only RQ's classes name them.
Lua scripts get every key through ``KEYS`` or, per ref, key prefixes through ``ARGV``:
Lua never spells a key name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from graph.errors import LoopError

__all__ = ["NAMESPACES", "KeySpace", "NamespaceTaken", "Namespaces", "owns"]

#: Characters a namespace may not hold: Redis glob characters (a namespace is also a
#: ``SCAN`` pattern's stem) and whitespace.
_FORBIDDEN = frozenset("*?[]\\ \t\n")

_Class = TypeVar("_Class", bound="type[KeySpace]")


class NamespaceTaken(LoopError):
    """A store claimed a key namespace another store holds (the same, or one inside or
    around it), or a malformed one.

    Attributes:
        namespace: the namespace claimed.
        owner: the module that claimed it.
        holder: the module holding it (or the overlapping one), ``None`` when malformed.
    """

    def __init__(self, namespace: str, owner: str, holder: str | None) -> None:
        reason = f"is held by {holder}" if holder else "is not a key namespace"
        super().__init__(f"{owner} claims the Redis key namespace {namespace!r}, which "
                         f"{reason}")
        self.namespace = namespace
        self.owner = owner
        self.holder = holder


def _overlaps(a: str, b: str) -> bool:
    """Whether keys of namespace ``a`` can be keys of ``b``: equal, or one is the other
    followed by ``:``."""
    return a == b or a.startswith(b + ":") or b.startswith(a + ":")


class Namespaces:
    """A registry of key namespaces, namespace -> owning module. Thread-safe; no I/O.
    The process's registry is :data:`NAMESPACES`; a test may make its own."""

    def __init__(self) -> None:
        self._owners: dict[str, str] = {}
        self._guard = threading.Lock()

    def claim(self, owner: str, namespaces: Iterable[str]) -> None:
        """Give ``namespaces`` to ``owner``. Claiming again what ``owner`` holds is a
        no-op (a module imported again).

        Args:
            owner: the owning module's name (``workers.state``).
            namespaces: segments after the prefix, e.g. ``"state"``, ``"github:writes"``.

        Raises:
            NamespaceTaken: one is held by another owner (or overlaps one), or is empty,
                starts or ends with ``:``, or holds a glob character or whitespace.
        """
        with self._guard:
            for namespace in namespaces:
                if not namespace or namespace.startswith(":") or namespace.endswith(":") \
                        or not _FORBIDDEN.isdisjoint(namespace):
                    raise NamespaceTaken(namespace, owner, None)
                for held, holder in self._owners.items():
                    if holder != owner and _overlaps(namespace, held):
                        raise NamespaceTaken(namespace, owner, holder)
                self._owners[namespace] = owner

    def owners(self) -> Mapping[str, str]:
        """A copy of namespace -> owning module."""
        with self._guard:
            return dict(self._owners)


#: The process's registry: the stores' key classes claim their namespaces here.
NAMESPACES = Namespaces()


def owns(*namespaces: str, registry: Namespaces = NAMESPACES) -> Callable[[_Class], _Class]:
    """Class decorator: the decorated key class's module owns ``namespaces`` (claimed in
    ``registry`` when the class is defined, i.e. at import); the class keeps them as
    ``namespaces``.

    Raises:
        NamespaceTaken: as :meth:`Namespaces.claim`.
    """
    def claim(cls: _Class) -> _Class:
        registry.claim(cls.__module__, namespaces)
        cls.namespaces = namespaces
        return cls
    return claim


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Base of a store's key names for one deployment. No I/O.

    Args:
        prefix: prefix of the-loop's keys (``THE_LOOP_REDIS_PREFIX``).
    """

    #: The namespaces the class's keys are in (set by :func:`owns`).
    namespaces: ClassVar[tuple[str, ...]] = ()

    prefix: str = "the-loop"

    def key(self, namespace: str, *parts: str) -> str:
        """``P:NAMESPACE:PART:...``: a key of one of the store's namespaces (a last part
        ``""`` gives the prefix of the namespace's keys, ``P:NAMESPACE:``)."""
        return ":".join((self.prefix, namespace, *parts))
