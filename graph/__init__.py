"""the-loop's pure core: the node/hook graph, its compiler and its runtime.

Nothing in this package imports Flask, Redis or an HTTP client; side effects reach the
outside world only through :class:`graph.ports.Integration` objects handed in by the
caller, and state is persisted through :class:`graph.state.StateStore`.
"""

from graph.model import (
    Boundary,
    HookContext,
    HookResult,
    InboundEvent,
    Message,
    Session,
    WorkItem,
)

__all__ = [
    "Boundary",
    "HookContext",
    "HookResult",
    "InboundEvent",
    "Message",
    "Session",
    "WorkItem",
]
