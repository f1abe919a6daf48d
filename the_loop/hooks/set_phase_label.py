"""``set-phase-label``: label the work item ``phase:<phase>``, removing older phase labels
(of any case); on GitHub and, when the work item has a Jira issue, on Jira too
(:mod:`the_loop.hooks.jira_ticket`)."""

from __future__ import annotations

from graph.context import PHASE_PREFIX
from graph.model import HookContext, HookResult
from graph.registry import hook
from the_loop.hooks.jira_ticket import jira_phase

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
    # GitHub's label names are unique regardless of case ("Managing labels"): a
    # "Phase:Design" set by a person is a phase label, and "phase:design" is the same
    # label as "PHASE:DESIGN".
    for old in labels:
        if (old.casefold().startswith(PHASE_PREFIX)
                and old.casefold() != label.casefold()):
            github.remove_label(repo=repo, number=number, label=old)
            removed.append(old)
    result = HookResult.passed("set-phase-label", label=label, removed=removed)
    return jira_phase(ctx, result)
