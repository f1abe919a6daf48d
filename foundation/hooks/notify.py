"""``notify``: tell the people of the roles the harness config names for an event.

Slack users get a direct message through the Slack transport (by their Slack user id from
``collaborators.yaml``); GitHub logins are @mentioned by the-loop's own comments. A
failed notification is recorded and never wedges the graph (specification, "Error
handling": notification hook fails -> record and continue).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from graph.model import HookContext, HookResult, Message
from graph.ports import IntegrationError
from graph.registry import hook

log = logging.getLogger("foundation.hooks.notify")

DEFAULT_EVENT = "phase-approval-pending"
#: Seconds a notification may take by default (a graph sets its own per call:
#: ``{hook: notify, timeout: 10}``); past it the failure is recorded and the chain goes on.
DEFAULT_TIMEOUT = 30.0
TEXTS = {
    "phase-approval-pending": "the-loop: {ref} is waiting for your decision at phase {phase}.",
    "phase-approval-stale": "the-loop: reminder: {ref} is still waiting for your decision "
                            "at phase {phase}.",
    "phase-approved": "the-loop: {ref} passed phase {phase}.",
    "changes-requested": "the-loop: changes were requested on {ref} at phase {phase}.",
    "work-item-blocked": "the-loop: {ref} is blocked at phase {phase}.",
    "work-item-done": "the-loop: {ref} is done.",
}


def roles_for(ctx: HookContext, event: str) -> tuple[str, ...]:
    """Roles ``notifications.events[event]`` names in the harness config (default: the
    node's role for ``phase-approval-pending``)."""
    notifications = ctx.config.harness.get("notifications") if ctx.config.harness else None
    events = notifications.get("events") if isinstance(notifications, Mapping) else None
    if isinstance(events, Mapping) and event in events:
        return tuple(str(r) for r in events[event] or ())
    return (ctx.node.role,) if event in (DEFAULT_EVENT, "phase-approval-stale") else ()


@hook("notify", requires={"slack": {"post-message"}}, boundaries={"entry"}, params={"event"},
      timeout=DEFAULT_TIMEOUT, fails_open=True)
def notify(ctx: HookContext) -> HookResult:
    """``with: {event: NAME}`` (default ``phase-approval-pending``).

    Returns ``skip`` when no Slack transport is configured or nobody with a Slack id holds
    the roles; otherwise ``pass`` with ``sent``/``failed`` counts (failures recorded, not
    raised).
    """
    name = "notify"
    event = str(ctx.params.get("event") or DEFAULT_EVENT)
    slack = ctx.config.slack
    if slack is None:
        return HookResult.skipped(name, "no Slack transport configured")
    people = {p.slack for role in roles_for(ctx, event)
              for p in ctx.config.collaborators.people(role) if p.slack}
    if not people:
        return HookResult.skipped(name, f"nobody with a Slack id holds the roles for {event}")
    text = TEXTS.get(event, "the-loop: {ref} — {phase}").format(
        ref=ctx.work_item.ref, phase=ctx.node.phase)
    if getattr(slack, "transport", None) == "webhook":
        # An incoming webhook posts to its one channel: one message per notification,
        # mentioning every person of the roles ("Formatting text": <@USER_ID>).
        mentions = " ".join(f"<@{user}>" for user in sorted(people))
        posts = [("the webhook's channel", f"{mentions} {text}")]
    else:
        posts = [(user, text) for user in sorted(people)]
    sent, failed, messages = 0, 0, []
    for channel, body in posts:
        try:
            slack.post_message(channel=channel, text=body)
            sent += 1
        except IntegrationError as exc:  # transient ones too: a notification never wedges
            failed += 1
            codes = ",".join(exc.codes) or "-"
            log.error("notify %s for %s: %s", event, ctx.work_item.ref, exc.summary(channel))
            messages.append(Message(
                f"the Slack notification {event} was not delivered (HTTP {exc.status}, "
                f"Slack error {codes})", code="notification-failed"))
    data: dict[str, object] = {"event": event, "sent": sent, "failed": failed,
                               "notification_failed": bool(failed)}
    if messages:
        data["error"] = messages[0].text
    result = HookResult.passed(name, **data)
    return HookResult(result.status, result.hook, tuple(messages), result.data)
