"""The hook registry: hook name -> function, filled by the ``@hook("name")`` decorator.

Built-in hooks live one module each under ``graph/hooks/``; importing
:mod:`graph.hooks` registers them into :data:`DEFAULT_REGISTRY` from one explicit list.
Tests build a fresh :class:`HookRegistry` and register what they need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from graph.errors import LoopError
from graph.model import HookContext, HookResult

HookFn = Callable[[HookContext], HookResult]
ParamCheck = Callable[[Mapping[str, Any]], str | None]


@dataclass(frozen=True)
class HookDef:
    """A registered hook.

    Attributes:
        name: the name graphs refer to, e.g. ``"validate-artifacts"``.
        fn: the hook function.
        requires: integration name -> operations the hook calls on it, e.g.
            ``{"github": frozenset({"add-label"})}``; checked against the configured
            providers at startup.
        outcomes: named outcomes the hook may put in ``data["outcome"]`` besides ``pass``.
        boundaries: where the hook may run (``entry``, ``exit``).
        params: the ``with:`` keys the hook accepts; anything else is a load error.
        timeout: seconds the hook may run before it counts as a retriable block.
        validating: the hook only judges artifacts (no side effect, no network); ``the-loop
            check --recompute`` re-runs exactly these to re-derive verdicts.
        check: called by the compiler with each call's ``with:`` parameters; returns an
            error message (a load error naming file, node and hook) or ``None``. For what
            can be known before running, e.g. a tool the call needs is not installed.
    """

    name: str
    fn: HookFn
    requires: Mapping[str, frozenset[str]] = field(default_factory=dict)
    outcomes: frozenset[str] = frozenset()
    boundaries: frozenset[str] = frozenset({"entry", "exit"})
    params: frozenset[str] = frozenset()
    timeout: float = 30.0
    validating: bool = False
    check: ParamCheck | None = None


class RegistryError(LoopError, ValueError):
    """A hook name registered twice, or looked up but never registered."""


class HookRegistry:
    """Hook name -> :class:`HookDef`. Frozen once a graph has been compiled against it."""

    def __init__(self) -> None:
        self._hooks: dict[str, HookDef] = {}
        self._frozen = False

    def register(self, hook_def: HookDef) -> None:
        """Add ``hook_def``.

        Raises:
            RegistryError: the name is taken, or the registry is frozen.
        """
        if self._frozen:
            raise RegistryError(f"hook registry is frozen; cannot register {hook_def.name!r}")
        if hook_def.name in self._hooks:
            raise RegistryError(f"hook {hook_def.name!r} is registered twice")
        self._hooks[hook_def.name] = hook_def

    def hook(
        self,
        name: str,
        *,
        requires: Mapping[str, set[str] | frozenset[str]] | None = None,
        outcomes: set[str] | frozenset[str] = frozenset(),
        boundaries: set[str] | frozenset[str] = frozenset({"entry", "exit"}),
        params: set[str] | frozenset[str] = frozenset(),
        timeout: float = 30.0,
        validating: bool = False,
        check: ParamCheck | None = None,
    ) -> Callable[[HookFn], HookFn]:
        """Decorator registering a hook function under ``name``; see :class:`HookDef`."""

        def decorate(fn: HookFn) -> HookFn:
            self.register(
                HookDef(
                    name=name,
                    fn=fn,
                    requires={k: frozenset(v) for k, v in (requires or {}).items()},
                    outcomes=frozenset(outcomes),
                    boundaries=frozenset(boundaries),
                    params=frozenset(params),
                    timeout=timeout,
                    validating=validating,
                    check=check,
                )
            )
            return fn

        return decorate

    def get(self, name: str) -> HookDef:
        """Return the hook named ``name``.

        Raises:
            RegistryError: no such hook.
        """
        try:
            return self._hooks[name]
        except KeyError:
            raise RegistryError(f"unknown hook {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._hooks

    def __iter__(self) -> Iterator[HookDef]:
        return iter(sorted(self._hooks.values(), key=lambda d: d.name))

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._hooks)

    def freeze(self) -> None:
        """Refuse further registrations (called when the runtime starts)."""
        self._frozen = True


DEFAULT_REGISTRY = HookRegistry()
hook = DEFAULT_REGISTRY.hook
