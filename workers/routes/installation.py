"""The ``installation`` route: ``installation`` and ``installation_repositories``
deliveries (the App's access changed), and the re-drive of a work item after its
installation was unsuspended.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace

from graph.refs import WorkItemRef
from workers.identities import DELETED, SUSPENDED
from workers.routes.agent import Agent, Delivery, Handled
from workers.routes.drive import advance

log = logging.getLogger("the_loop.worker")


def installation(agent: Agent, delivery: Delivery) -> Handled:
    """``installation`` and ``installation_repositories`` deliveries ("Webhook events and
    payloads"): what the-loop knows of the App's access changes, and cached tokens are
    dropped (a token minted before carries the old access).

    * ``installation.deleted``: its later deliveries are no-ops; its work items are
      forgotten by the index.
    * ``installation.suspend``: its later deliveries are no-ops until ``unsuspend``,
      which re-drives each of its work items (a tick through its own inbox).
    * ``installation.created`` / ``new_permissions_accepted``: active (tokens renewed).
    * ``installation_repositories.removed`` / ``added``: deliveries for those
      repositories are no-ops / handled again.

    The re-drive of one work item after ``unsuspend`` arrives here too (its record names
    the work item): it advances the work item.
    """
    event = delivery.event
    if delivery.ref is not None:  # a work item re-driven after unsuspend
        return advance(agent, replace(delivery, repository=event.repository), enrol=False)
    installation_id = event.installation_id
    if installation_id is None:
        return delivery.ignored("no installation in this delivery")
    forget = getattr(agent.github, "forget", None)
    if callable(forget):
        forget(installation_id)
    payload = delivery.record.payload()
    installations, repositories = agent.installations, agent.repositories
    if installations is None:
        return delivery.ignored("installations are not tracked")
    if event.name == "installation_repositories":
        removed = _repository_ids(payload.get("repositories_removed"))
        added = _repository_ids(payload.get("repositories_added"))
        if repositories is not None:
            repositories.mark_removed(removed)
            repositories.mark_removed(added, removed=False)
        log.info("installation %d: %d repositories removed, %d added; cached token dropped",
                 installation_id, len(removed), len(added))
        return delivery.ignored(f"installation {installation_id}: {len(removed)} "
                                f"repositories removed, {len(added)} added")
    action = event.action
    if action == "deleted":
        installations.set_status(installation_id, DELETED)
        installations.forget(installation_id)
    elif action == "suspend":
        installations.set_status(installation_id, SUSPENDED)
    elif action in ("unsuspend", "created", "new_permissions_accepted"):
        was = installations.status(installation_id)
        installations.set_status(installation_id, None)
        if action == "unsuspend" or was == SUSPENDED:
            resumed = _resume(agent, delivery, installation_id)
            log.info("installation %d resumed: %d work items re-driven", installation_id,
                     resumed)
            return delivery.ignored(f"installation {installation_id} resumed; re-driving "
                                    f"{resumed} work item(s)")
    else:
        return delivery.ignored(f"installation {action}: nothing to change")
    log.info("installation %d %s; cached token dropped", installation_id, action)
    return delivery.ignored(f"installation {installation_id} {action}: recorded")


def _repository_ids(items: object) -> list[int]:
    if not isinstance(items, list):
        return []
    return [int(r["id"]) for r in items if isinstance(r, Mapping)
            and isinstance(r.get("id"), int) and not isinstance(r.get("id"), bool)]


def _resume(agent: Agent, delivery: Delivery, installation_id: int) -> int:
    """Queue one re-drive per work item of the installation, each into its own inbox
    (an ``installation.unsuspend`` record naming the work item and its repository)."""
    if agent.installations is None or agent.forward is None:
        return 0
    count = 0
    for key in agent.installations.work_items(installation_id):
        ref = WorkItemRef.parse_or_none(key)
        state = agent.store.load(key) if ref is not None else None
        if ref is None or state is None:
            continue
        name = (agent.repositories.name_of(ref.repository) if agent.repositories
                else ref.repository)
        body = json.dumps({
            "action": "unsuspend", "installation": {"id": installation_id},
            "repository": {"full_name": name,
                           "default_branch": state.default_branch or "main"},
            "pull_request" if state.kind == "pull_request" else "issue": {
                "number": ref.number},
            "sender": {"login": "the-loop", "type": "Bot"},
        }).encode()
        record = replace(delivery.record, delivery_id=f"{delivery.id}-{count}",
                         body=body, repository=name)
        count += agent.forward(record, key)
    return count

