"""``publish-check``: a check run named ``the-loop`` on the pull request head, showing the
current phase and gate state, so a repository can require it before merge (GitHub docs,
"About status checks"; check runs need a GitHub App with ``checks: write``)."""

from __future__ import annotations

from graph.feedback import publish_check
from graph.model import HookContext, HookResult
from graph.registry import hook


@hook("publish-check",
      requires={"github": {"list-check-runs", "create-check-run", "update-check-run"}},
      boundaries={"entry"})
def publish_check_hook(ctx: HookContext) -> HookResult:
    """On entering a node, show the phase as in progress (success on the terminal node's
    entry, which has no exit chain). The runtime updates the same check run when the node
    then waits, blocks or escalates. Returns ``skip`` without a pull request head."""
    status = "done" if not ctx.node.exit and ctx.node.actor == "system" else "active"
    run_id = publish_check(ctx.config, ctx.work_item, ctx.node.phase, status)
    if run_id is None:
        return HookResult.skipped("publish-check", "no pull request head to put a check on")
    return HookResult.passed("publish-check", check_run_id=run_id, status=status)
