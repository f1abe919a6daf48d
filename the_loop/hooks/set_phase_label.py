"""``set-phase-label``: label the work item ``phase:<phase>``, removing older phase labels."""

from __future__ import annotations

from graph.context import PHASE_PREFIX
from graph.model import HookContext, HookResult
from graph.registry import hook

PHASE_COLOR = "5319e7"


@hook(
    "set-phase-label",
    requires={"github": {"ensure-label", "add-label", "remove-label"}},
    boundaries={"entry"},
)
def set_phase_label(ctx: HookContext) -> HookResult:
    """Add ``phase:<node.phase>`` (creating the label if missing), then remove every other
    ``phase:`` label, read from the labels GitHub returns (not the event's stale list).

    Returns ``skip`` for a work item with no GitHub repository (local CLI use). Raises
    whatever the integration raises (the chain turns it into a block).
    """
    github = ctx.config.github
    repo, number = ctx.work_item.repository, ctx.work_item.id
    if github is None or repo is None or number is None:
        return HookResult.skipped("set-phase-label", "no GitHub repository for this work item")
    label = f"{PHASE_PREFIX}{ctx.node.phase}"
    github.ensure_label(
        repo=repo,
        label=label,
        color=PHASE_COLOR,
        description="the-loop: current phase of this work item",
    )
    after = github.add_label(repo=repo, number=number, label=label)
    labels = after.get("labels") or list(ctx.work_item.tags)
    removed = []
    for old in labels:
        if old.startswith(PHASE_PREFIX) and old != label:
            github.remove_label(repo=repo, number=number, label=old)
            removed.append(old)
    return HookResult.passed("set-phase-label", label=label, removed=removed)
