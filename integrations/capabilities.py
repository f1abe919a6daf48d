"""The capability check: a graph needing an operation its transport lacks fails at start-up.

Every provider declares the operations it implements (``operations``); every hook declares
the operations it calls (``requires=`` in :mod:`graph.registry`). :func:`check_capabilities`
compares the two when the worker starts (``the_loop.wiring.build_worker``), so a gap
is reported once, naming the operation, the integration, the transport and the two ways
to fix it -- not three nodes deep in a running work item.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from graph.errors import LoopError

__all__ = ["CapabilityError", "Gap", "check_capabilities", "hooks_needing", "transport_of"]


class CapabilityError(LoopError, RuntimeError):
    """The configured transports cannot perform every operation the graph needs.

    Attributes:
        gaps: one :class:`Gap` per missing (integration, operation).
    """

    def __init__(self, message: str, gaps: list[Gap]) -> None:
        super().__init__(message)
        self.gaps = gaps


class Gap:
    """One operation the graph needs that the configured provider lacks."""

    def __init__(
        self,
        integration: str,
        op: str,
        transport: str | None,
        hooks: tuple[str, ...],
        alternatives: tuple[str, ...],
    ) -> None:
        self.integration = integration
        self.op = op
        self.transport = transport  # None: no provider configured at all
        self.hooks = hooks
        self.alternatives = alternatives

    def __repr__(self) -> str:
        return f"Gap({self.integration!r}, {self.op!r}, transport={self.transport!r})"

    def message(self) -> str:
        integration, op = self.integration, self.op
        if self.hooks:
            who = f"{_names(self.hooks, 'hook')} {'need' if len(self.hooks) > 1 else 'needs'}"
        else:
            who = "the-loop's worker needs"
        if self.transport is None:
            head = (
                f"{who} {integration} operation {op!r}, but no {integration} "
                f"transport is configured"
            )
        else:
            head = (
                f"{who} {integration} operation {op!r}, but the configured "
                f"{integration} transport {self.transport!r} does not implement it"
            )
        variable = f"THE_LOOP_{integration.upper()}_TRANSPORT"
        if self.alternatives:
            choose = (
                f"choose a {integration} transport that has it ("
                + " or ".join(repr(a) for a in self.alternatives)
                + f": set integrations.{integration}.transport in cli-config.yaml or "
                f"{variable}, with that transport's credentials)"
            )
        else:
            choose = f"no {integration} transport implements {op!r} yet, so"
        if self.hooks:
            remove = f"remove {_names(self.hooks, 'hook')} from the graph"
        else:
            remove = (
                "remove the hook that needs it from the graph (here the worker itself needs "
                "it, so only another transport helps)"
            )
        joiner = "; or " if self.alternatives else " "
        return f"{head}. Fix: {choose}{joiner}{remove}."


def transport_of(provider: Any) -> str:
    """A provider's transport name (``api``, ``cli``, ``sdk``, ``webhook``...)."""
    return str(getattr(provider, "transport", None) or type(provider).__name__)


def hooks_needing(graph: Any) -> dict[tuple[str, str], tuple[str, ...]]:
    """(integration, operation) -> names of the graph's hooks that declare it, sorted.

    ``graph`` is a compiled :class:`graph.compile.Graph` (its nodes' entry and exit hook
    calls carry their registry definitions).
    """
    found: dict[tuple[str, str], set[str]] = {}
    for node in graph.nodes.values():
        for call in (*node.entry, *node.exit):
            for integration, ops in call.definition.requires.items():
                for op in ops:
                    found.setdefault((integration, op), set()).add(call.name)
    return {key: tuple(sorted(names)) for key, names in found.items()}


def check_capabilities(
    graph_ops: Mapping[str, Iterable[str]],
    providers: Mapping[str, Any],
    *,
    hooks: Mapping[tuple[str, str], Iterable[str]] | None = None,
    transports: Mapping[str, Mapping[str, Any]] | None = None,
    optional: Iterable[str] = (),
) -> list[Gap]:
    """Check that ``providers`` implement every operation in ``graph_ops``.

    Args:
        graph_ops: integration name -> operations the graph needs
            (``Graph.required_operations()``, plus the worker's own).
        providers: integration name -> the configured provider: anything with
            ``operations`` (an :class:`graph.ports.Integration`, or a per-installation
            factory such as :class:`integrations.providers.GitHubProvider`) and, for the
            message, ``transport``.
        hooks: (integration, operation) -> hook names that need it (:func:`hooks_needing`),
            to name them in the message.
        transports: integration -> transport name -> provider class (default
            :data:`integrations.providers.TRANSPORTS`), to name the transports that have
            a missing operation.
        optional: integrations that may be left unconfigured: their hooks get no handle
            and skip (``notify`` without Slack). A *configured* optional integration is
            checked like any other.

    Returns:
        the gaps of unconfigured optional integrations (to log), when nothing fails.

    Raises:
        CapabilityError: one line per missing operation, each naming the operation, the
            integration, the configured transport and the two fixes: choose a transport
            that has it, or remove the hook that needs it from the graph.
    """
    if transports is None:
        from integrations.providers import TRANSPORTS

        transports = TRANSPORTS
    gaps: list[Gap] = []
    skipped: list[Gap] = []
    optional = frozenset(optional)
    for integration in sorted(graph_ops):
        needed = set(graph_ops[integration])
        provider = providers.get(integration)
        into = skipped if provider is None and integration in optional else gaps
        have: frozenset[str] = frozenset(getattr(provider, "operations", ()) or ())
        for op in sorted(needed - have):
            known = transports.get(integration, {})
            alternatives = tuple(
                name
                for name, cls in sorted(known.items())
                if op in getattr(cls, "operations", ())
                and (provider is None or name != transport_of(provider))
            )
            into.append(
                Gap(
                    integration,
                    op,
                    None if provider is None else transport_of(provider),
                    tuple((hooks or {}).get((integration, op), ())),
                    alternatives,
                )
            )
    if gaps:
        lines = [gap.message() for gap in gaps]
        head = (
            "the configured integrations cannot run this graph"
            if len(gaps) > 1
            else "the configured integration cannot run this graph"
        )
        raise CapabilityError(f"{head}:\n- " + "\n- ".join(lines), gaps)
    return skipped


def _names(names: tuple[str, ...], noun: str = "") -> str:
    quoted = ", ".join(repr(n) for n in names)
    if not noun:
        return quoted
    return f"{noun}{'s' if len(names) > 1 else ''} {quoted}"
