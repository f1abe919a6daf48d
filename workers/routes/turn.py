"""The ``turn`` route: the runner's report that an agent turn ended."""

from __future__ import annotations

from workers.routes.agent import Agent, Delivery, Handled
from workers.routes.drive import advance


def turn(agent: Agent, delivery: Delivery) -> Handled:
    """The runner's report that an agent turn ended: remember where the work item's work
    lives (its branch; its draft pull request, whose deliveries are then the work
    item's), then advance it: the node's exit chain runs against the pushed head."""
    ref, report = delivery.ref, delivery.event.turn or {}
    if ref is None:
        return delivery.ignored("a turn report names no work item")
    branch, pull = report.get("branch"), report.get("pull")
    if agent.turns is not None and isinstance(branch, str) and branch:
        agent.turns.remember_workspace(ref.format(), ref.repository, branch,
                                       pull if isinstance(pull, int) else None)
    return advance(agent, delivery, enrol=False)

