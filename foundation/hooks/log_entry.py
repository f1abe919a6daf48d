"""``log-entry``: an execution-log checkpoint in the work item's event log."""

from __future__ import annotations

from graph.model import HookContext, HookResult
from graph.registry import hook


@hook("log-entry")
def log_entry(ctx: HookContext) -> HookResult:
    """Pass with ``data["checkpoint"]`` = ``{node, phase, boundary, prior}`` (statuses of
    the hooks already run); the runtime appends it to the event log as ``checkpoint``."""
    return HookResult.passed(
        "log-entry",
        checkpoint={
            "node": ctx.node.id,
            "phase": ctx.node.phase,
            "boundary": ctx.boundary,
            "prior": [{"hook": r.hook, "status": r.status} for r in ctx.results],
        },
    )
