"""The ``closed`` route: ``pull_request.closed``. Merged (``merged: true``), it completes
the work item: its ``done`` node's entry chain sees the merge (``merge-pull-request``
passes, with who merged it), then its branches are deleted and its workspace removed
(:func:`workers.routes.finish.finish`); GitHub closes the issue its body closes
(``Closes #N``) itself. Closed without merging, the work item is ``abandoned``: never
``done``, the reason in its status comment, its live turn cancelled and no turn ordered
again.
"""

from __future__ import annotations

import re

from workers.routes.agent import Agent, Delivery, Handled, logged_by
from workers.routes.drive import advance, forwarded
from workers.routes.finish import finish
from workers.session import WorkItemSession

#: A GitHub login (what a payload's login is shown as, or not at all).
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")


def closed(agent: Agent, delivery: Delivery) -> Handled:
    """A work item's pull request was closed: merged, it advances (and is completed);
    unmerged, the work item is abandoned. A closed pull request that is no work item's,
    or one whose work item ended already, changes nothing."""
    ref, event = delivery.ref, delivery.event
    if ref is None:
        return delivery.ignored("no pull request in this delivery")
    moved = forwarded(agent, delivery)
    if moved is not None:
        return moved
    if event.merged:
        return advance(agent, delivery, enrol=False, merged=True)
    session = WorkItemSession.open(agent, delivery)
    if not session.known:
        return delivery.ignored("not a work item")
    config = session.hook_config()
    github = session.github
    assert github is not None  # hook_config() made one, or raised
    item = session.work_item()
    inbound = event.inbound(delivery.id)
    if not (delivery.replay and logged_by(agent, item.ref, "delivery.received", delivery.id)):
        agent.store.append_event(item.ref, "delivery.received", {
            "event": event.name, "action": event.action, "delivery": delivery.id,
            "actor": inbound.actor, "body_sha256": None}, delivery.id)
    actor = inbound.actor if inbound.actor and LOGIN.match(inbound.actor) else None
    who = f" by @\u200b{actor}" if actor else ""
    number = event.pull_number or ref.number
    text = (f"pull request #{number} was closed without being merged{who}, so the work "
            "item is abandoned: no more agent turns; to take it up again an operator "
            f"moves it with `the-loop graph force --work-item {item.ref} --to NODE`")
    result = agent.runtime.abandon(item, config, text, event=inbound,
                                   state=session.runtime_state())
    if result is None:
        return delivery.ignored("not a work item")
    if result.state is not None:
        finish(agent, item, github, result.state)
    return Handled(delivery.id, "advanced", f"{result.status} at {result.node}")
