"""The hook registry: hook name -> :class:`~graph.model.HookDef`, filled by the
``@hook("name")`` decorator.

The core registers no hook itself: the built-in hooks live one module each under
``foundation/hooks/``, and importing :mod:`foundation.hooks` registers them into
:data:`DEFAULT_REGISTRY` from one explicit list. The compiler is handed a registry. Tests
build a fresh :class:`HookRegistry` and register what they need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from graph.errors import LoopError
from graph.model import DecisionRecord, HookDef, HookFn, ParamCheck, StatusFn

__all__ = ["DEFAULT_REGISTRY", "HookDef", "HookRegistry", "RegistryError", "hook"]


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
        fails_open: bool = False,
        check: ParamCheck | None = None,
        forward: Sequence[str] = (),
        hands_off: set[str] | frozenset[str] = frozenset(),
        shown_waits: set[str] | frozenset[str] = frozenset(),
        records: DecisionRecord | None = None,
        on_status: StatusFn | None = None,
        on_settle: HookFn | None = None,
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
                    fails_open=fails_open,
                    check=check,
                    forward=tuple(forward),
                    hands_off=frozenset(hands_off),
                    shown_waits=frozenset(shown_waits),
                    records=records,
                    on_status=on_status,
                    on_settle=on_settle,
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
