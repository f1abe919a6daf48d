"""The ``labels`` route: a person changed a ``phase:`` label (drift), and the ``config``
route: a push to the default branch refreshes the repository configuration.
"""

from __future__ import annotations

from graph.context import PHASE_PREFIX
from workers.notices import DRIFT_TEXT, drift_effect
from workers.routes.agent import Agent, Delivery, Handled, logged_by


def labels(agent: Agent, delivery: Delivery) -> Handled:
    """Phase labels changed by a person are noticed, not fought: the drift is recorded
    in the event log and the work item is told once how to move the phase properly.
    The-loop never re-adds the label in a loop (it sets labels only when a delivery
    leaves the work item at a new node visit)."""
    ref, event = delivery.ref, delivery.event
    if ref is None:
        return delivery.ignored("no issue or pull request in this delivery")
    label = event.label or ""
    login = event.sender.login or ""
    if not label.casefold().startswith(PHASE_PREFIX):
        return delivery.ignored("label change does not move a work item")
    if event.sender.is_bot or login.casefold() in agent.settings.bot_logins:
        return delivery.ignored("the-loop's own phase label change")
    key = ref.format()
    state = agent.store.load(key)
    if state is None:
        return delivery.ignored("not a work item")
    if not (delivery.replay and logged_by(agent, key, "labels.drift", delivery.id)):
        agent.store.append_event(key, "labels.drift", {
            "action": event.action, "label": label, "actor": login,
            "node": state.current_node,
        }, delivery.id)
    github = agent.github_or_none(event.installation_id)
    if github is not None and not agent.store.logged(key, "labels.drift-noted"):
        agent.notices.comment(github, event.work_item(ref), drift_effect(key),
                              DRIFT_TEXT.format(node=state.current_node, ref=key), state)
        agent.store.append_event(key, "labels.drift-noted", {"node": state.current_node},
                                 delivery.id)
    return delivery.ignored(f"phase label {event.action} by a person: recorded")


def config_push(agent: Agent, delivery: Delivery) -> Handled:
    """A push: when it moves the default branch, every worker reads the repository
    configuration at the new head."""
    event = delivery.event
    if (event.repository and event.after
            and event.pushed_ref == f"refs/heads/{event.default_branch}"):
        agent.repos.note_push(event.repository, event.after)
        return delivery.ignored("default branch moved; config refreshed")
    return delivery.ignored("push does not move a work item")

