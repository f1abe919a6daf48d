"""Keeping the work item's draft pull request's body current, after each saved advance.

The runner opens the pull request with the-loop's marked region in its body
(:func:`graph.pull_body.render`); here that region is brought up to date from the work
item's state: the artifacts its nodes have written (links to them on the work
item's branch) and the task table of its plan with each task's status
(:func:`graph.pull_body.plan_rows`). Text a person wrote outside the markers is kept
(:func:`graph.pull_body.splice`).

GitHub's secondary rate limits count writes ("Rate limits for the REST API": 80 content
writes a minute, 500 an hour), so nothing is written when nothing changed: the digest of
what the region shows is kept in the work item's workspace record
(:meth:`foundation.turns.TurnRecords.remember_pull_body`) and an unchanged one costs no
request at all; a changed one reads the pull request (``GET .../pulls/{n}``, conditional,
for its current body) and writes (``PATCH .../pulls/{n}`` with ``body``, "Update a pull
request") only when the spliced body differs, through the outbox (effect
``<ref>/pull-body``, kept in place). A failure is logged and recorded as a
``notification.failed`` event; it never stops the work item.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import cast

from graph import pull_body
from graph.effects import HookEffects, digest
from graph.model import WorkItem
from graph.ports import GitHub, Integration
from graph.state import WorkItemState
from workers.routes.agent import Agent

log = logging.getLogger("the_loop.workers")


def keep_pull_body(agent: Agent, item: WorkItem, github: GitHub, state: WorkItemState,
                   delivery: str | None = None) -> bool:
    """Bring ``item``'s draft pull request's region up to date (see the module docstring).

    Args:
        agent: the worker's collaborators (turns, graph, store).
        item, github, state: the work item, its GitHub provider, its saved state.
        delivery: the delivery that caused it (for the event log).

    Returns:
        whether the body was written.
    """
    if agent.turns is None or item.repository is None or item.id is None:
        return False
    workspace = agent.turns.workspace(item.ref)
    pull, branch = workspace.get("pull"), workspace.get("branch") or ""
    if not pull or not pull.isdigit():
        return False
    number = int(pull)
    graph = agent.graph
    written = [(node.id, name) for node in graph.nodes.values()
               for name in (*node.produces, *([node.plan] if node.plan else ()))
               if state.outcomes.get(node.id)]
    paths = list(dict.fromkeys(f"{item.spec_dir.rstrip('/')}/{name}" for _, name in written))
    rows = pull_body.plan_rows(state.plan)
    shown = digest(repr((item.kind, item.id, branch, paths, rows)))
    if workspace.get("pull_body") == shown:
        return False
    try:
        current = github.get_pull_request(repo=item.repository, number=number)
        base = str(current.get("html_url") or "").rpartition("/pull/")[0]
        artifacts = [(path, f"{base}/blob/{urllib.parse.quote(branch, safe='/')}/"
                            f"{urllib.parse.quote(path, safe='/')}" if base and branch
                      else None) for path in paths]
        region = pull_body.render(item.ref, kind=item.kind, number=item.id,
                                  artifacts=artifacts, tasks=rows)
        body = pull_body.splice(current.get("body"), region, item.ref)
        changed = body != (current.get("body") or "")
        if changed:
            effect = f"{item.ref}/{pull_body.PULL_BODY}"
            outbox = HookEffects(state, agent.store, effect)
            outbox.github(cast(Integration, github), effect=effect,
                          in_place=True).update_pull_request(
                repo=item.repository, number=number, body=body)
    except Exception as exc:  # noqa: BLE001  (logged and recorded; never stops the item)
        log.warning("pull request body of %s not kept (%s)", item.ref, type(exc).__name__)
        agent.store.append_event(item.ref, "notification.failed",
                                 {"channel": "pull-body", "error": type(exc).__name__},
                                 delivery)
        return False
    agent.turns.remember_pull_body(item.ref, shown)
    return changed
