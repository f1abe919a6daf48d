"""The ``drive-if-enrolled`` and ``ci`` routes: CI results (check runs, check suites,
workflow runs, commit statuses) are recorded for ``verify-tests``, then advance the work
items they name, or are fanned out to the work items whose head is their commit.
"""

from __future__ import annotations

from workers.routes.agent import Agent, Delivery, Handled
from workers.routes.drive import advance


def drive_if_enrolled(agent: Agent, delivery: Delivery) -> Handled:
    """A completed check run, check suite or workflow run: record its result for
    ``verify-tests``, then advance the work item it names if it is one."""
    ci = delivery.event.ci
    if ci is not None:
        store = agent.repos.ci(ci.repository)
        store.record(ci)
        if delivery.ref is None:
            # An empty pull_requests list: a pull request from a fork (GitHub lists only
            # pull requests whose head is in the repository). Reach the work items whose
            # head is that commit, as a commit status does.
            fanned = agent.fan_out(delivery.record, store.work_items(ci.sha))
            return delivery.ignored(f"recorded {ci.name}={ci.conclusion} for "
                                    f"{ci.sha[:12]}; re-driving {fanned} work item(s)")
    return advance(agent, delivery, enrol=False)


def ci_status(agent: Agent, delivery: Delivery) -> Handled:
    """A commit status: record it. It names no pull request, so the work items whose
    head is that commit are re-driven, each through its own inbox (order is kept); a
    status already fanned out to one work item advances it."""
    ci = delivery.event.ci
    if ci is None:
        return advance(agent, delivery, enrol=False)
    store = agent.repos.ci(ci.repository)
    store.record(ci)
    if delivery.ref is not None:
        return advance(agent, delivery, enrol=False)
    fanned = agent.fan_out(delivery.record, store.work_items(ci.sha))
    return delivery.ignored(f"recorded {ci.name}={ci.conclusion} for {ci.sha[:12]}; "
                            f"re-driving {fanned} work item(s)")

