"""What follows a work item's end: once it is ``done`` with its pull request merged
(``merge-pull-request`` passed at its terminal node), its branches on GitHub are deleted;
once it is ``done``, its workspace is removed; once it is ``abandoned``, its
live turn is cancelled and its workspace removed (its branches stay: a person may take
the work over). Every route that advances a work item calls :func:`finish`.

Branches are deleted through the outbox (effect ``<ref>/finish/<branch>``), so a
redelivery, or every later delivery of a done work item, deletes nothing twice and asks
GitHub nothing again; only the-loop's own branches are deleted (``the-loop/<N>-...``,
:data:`foundation.branches.BRANCH_PREFIX`): the work item's branch and, when its plan ran
tasks side by side, each task's (:func:`foundation.branches.task_branch`).
"""

from __future__ import annotations

import logging
from typing import cast

from foundation.branches import BRANCH_PREFIX, task_branch
from graph.effects import HookEffects
from graph.model import Status, WorkItem
from graph.ports import GitHub, Integration, IntegrationError
from graph.state import WorkItemState
from workers.routes.agent import Agent

log = logging.getLogger(__name__)


def branches_of(state: WorkItemState, branch: str | None) -> list[str]:
    """The-loop's branches of the work item: its own ``branch`` (``None``: none known) and,
    for a plan whose tasks ran side by side, each task's; only names under
    :data:`~foundation.branches.BRANCH_PREFIX`."""
    if not branch or not branch.startswith(BRANCH_PREFIX):
        return []
    plan = state.plan or {}
    tasks = sorted(plan.get("status") or {}) if int(plan.get("max_parallel") or 1) > 1 \
        else []
    return [*(task_branch(branch, task) for task in tasks), branch]


def merged(state: WorkItemState) -> bool:
    """Whether the work item is done with its pull request merged: the last entry chain
    of its current (terminal) node has ``merge-pull-request`` passing. A graph without
    that hook deletes no branch: unmerged work is never lost."""
    ran = (state.results.get(state.current_node) or {}).get("entry") or []
    return state.status == Status.DONE and any(
        r.get("hook") == "merge-pull-request" and r.get("status") == "pass" for r in ran)


def finish(agent: Agent, item: WorkItem, github: GitHub, state: WorkItemState,
           *, branch: str | None = None) -> list[str]:
    """Complete a ``done`` or ``abandoned`` work item (nothing for any other status).

    Args:
        state: the work item's state after the delivery.
        branch: the work item's branch when the caller knows it (the merged pull
            request's head); else the one its turns pushed to (``P:workspace:REF``).

    Returns:
        the branches deleted by this call (none for an abandoned one, one not merged
        (:func:`merged`), or when they were deleted before).

    Raises:
        RetryLater: GitHub failed transiently (the delivery is retried; deletions made
            are not made again).
    """
    if state.status not in (Status.DONE, Status.ABANDONED):
        return []
    deleted: list[str] = []
    if merged(state) and item.repository is not None:
        if branch is None and agent.turns is not None:
            branch = agent.turns.workspace(item.ref).get("branch")
        outbox = HookEffects(state, agent.store, f"{item.ref}/finish")
        for name in branches_of(state, branch):
            effect = f"{item.ref}/finish/{name}"
            recorded = state.effects.get(effect)
            try:
                done = outbox.github(cast(Integration, github), effect=effect).delete_branch(
                    repo=item.repository, branch=name)
            except IntegrationError as exc:
                if exc.retriable:
                    raise
                log.warning("branch %s of %s not deleted: %s", name, item.ref,
                            exc.summary(item.repository))
                continue
            if done.get("deleted") and not (recorded and recorded.get("status") == "done"):
                deleted.append(name)
        if deleted:
            agent.store.append_event(item.ref, "branches.deleted", {"branches": deleted},
                                     None)
    if agent.turns is not None and item.repository is not None and item.id is not None:
        if state.status == Status.ABANDONED:
            agent.turns.request_cancel(item.ref)
        agent.turns.retire(item.ref, item.repository, item.id)  # its workspace goes
    return deleted
