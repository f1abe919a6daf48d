"""``set-phase-label``: label the work item ``phase:<phase>``, removing older phase labels
(of any case); on GitHub and, when the work item has a Jira issue, on Jira too
(:mod:`foundation.hooks.jira_ticket`).

The label shows the phase the work item is at, so it is written once per delivery, for
the node the delivery leaves the work item at (the registration's ``on_settle``, called
by the runtime when the walk stops): a node passed through within the same delivery
(``design`` on the way from ``requirements-approval`` to ``design-approval``) gets no
label nobody could see, and a swap costs one add and one remove per delivery instead of
per node entered. The writes go through the outbox under the entry call's effect ids, so
a retried delivery converges to the same labels and a settled visit writes nothing again.
"""

from __future__ import annotations

from foundation.hooks.jira_ticket import jira_phase
from graph.context import PHASE_PREFIX
from graph.model import HookContext, HookResult
from graph.registry import hook

NAME = "set-phase-label"
PHASE_COLOR = "5319e7"


def settle_phase_label(ctx: HookContext) -> HookResult:
    """Add ``phase:<node.phase>`` (creating the label if missing), then remove every other
    ``phase:`` label, read from the labels GitHub returns (not the event's stale list).

    Returns ``skip`` for a work item with no GitHub repository (local CLI use). Raises
    whatever the integration raises (the runtime parks it as an entry block).
    """
    github = ctx.config.github
    repo, number = ctx.work_item.repository, ctx.work_item.id
    if github is None or repo is None or number is None:
        return HookResult.skipped(NAME, "no GitHub repository for this work item")
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
    result = HookResult.passed(NAME, label=label, removed=removed)
    return jira_phase(ctx, result)


@hook(
    NAME,
    requires={"github": {"ensure-label", "add-label", "remove-label"}},
    boundaries={"entry"},
    on_settle=settle_phase_label,
)
def set_phase_label(ctx: HookContext) -> HookResult:
    """On entering a node nothing is written here: the runtime calls
    :func:`settle_phase_label` when the delivery leaves the work item at this node.
    Returns ``pass`` with the label it will show, ``skip`` for a work item with no
    GitHub repository."""
    if ctx.config.github is None or ctx.work_item.repository is None or ctx.work_item.id is None:
        return HookResult.skipped(NAME, "no GitHub repository for this work item")
    return HookResult.passed(NAME, label=f"{PHASE_PREFIX}{ctx.node.phase}",
                             published="on settle")
