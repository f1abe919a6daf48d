"""The work item's Jira issue, as the hooks keep it in step (specification: ``set-phase-label``
is the "GitHub/Jira label for the current phase").

A work item has a Jira issue when Jira is configured (``THE_LOOP_JIRA_*``) and the issue's
or pull request's title or body names an issue key (``ABC-123``,
:attr:`graph.model.WorkItem.tickets`); with ``ticketing.system: jira`` in the repository's
``harness-config.yaml`` that is the expected case. Then:

* :func:`jira_phase` (from ``set-phase-label``): the issue's ``phase:`` label is set to the
  current phase (older ``phase:`` labels removed), and ``ticketing.jira.transitions:
  {<node>: <status name>}`` moves it to that status on entering the node;
* :func:`jira_decision` (from ``record-decision``): the gate's decision is added to it as
  a comment.

Calls go through the runtime's outbox (``ctx.config.jira``), so a retried delivery does
not repeat them. A refusal is recorded in the hook's messages and logged with Jira's
status, never raised (like a notification, a Jira failure never wedges the graph); a
transient failure (``RetryLater``) propagates, so the delivery is retried.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from graph.context import PHASE_PREFIX
from graph.model import HookContext, HookResult, Message
from graph.ports import IntegrationError, RetryLater

__all__ = ["jira_decision", "jira_issue", "jira_phase"]

log = logging.getLogger("foundation.hooks.jira")


def jira_issue(ctx: HookContext) -> str | None:
    """The work item's Jira issue key, or ``None`` (no Jira transport, or no key)."""
    if ctx.config.jira is None or not ctx.work_item.tickets:
        return None
    return ctx.work_item.tickets[0]


def _transitions(ctx: HookContext) -> Mapping[str, str]:
    ticketing = ctx.config.harness.get("ticketing") if ctx.config.harness else None
    jira = ticketing.get("jira") if isinstance(ticketing, Mapping) else None
    transitions = jira.get("transitions") if isinstance(jira, Mapping) else None
    return transitions if isinstance(transitions, Mapping) else {}


def _failed(hook: str, issue: str, op: str, exc: IntegrationError) -> Message:
    log.error("hook %s: %s", hook, exc.summary(issue))
    said = f"HTTP {exc.status}" if exc.status is not None else "refused"
    return Message(f"Jira {op} on {issue} failed ({said}): {exc.reason or exc}",
                   code="jira-failed")


def jira_phase(ctx: HookContext, result: HookResult) -> HookResult:
    """``result`` (set-phase-label's GitHub result) with the Jira issue labelled
    ``phase:<phase>`` and moved to the node's ``ticketing.jira.transitions`` status; a
    refusal is added to its messages (``jira_failed``), the result stays a pass.

    Raises:
        RetryLater: Jira failed transiently (the delivery is retried).
    """
    issue = jira_issue(ctx)
    jira = ctx.config.jira
    if issue is None or jira is None:
        return result
    label = f"{PHASE_PREFIX}{ctx.node.phase}"
    messages: list[Message] = []
    data = {"jira_issue": issue}
    try:
        jira.add_label(issue=issue, label=label, replace_prefix=PHASE_PREFIX)
        data["jira_label"] = label
    except RetryLater:
        raise
    except IntegrationError as exc:
        messages.append(_failed(result.hook, issue, "add-label", exc))
    status = _transitions(ctx).get(ctx.node.id)
    if status:
        try:
            moved = jira.transition_issue(issue=issue, name=status)
            data["jira_transition"] = str(moved.get("transition") or status)
        except RetryLater:
            raise
        except IntegrationError as exc:
            messages.append(_failed(result.hook, issue, "transition-issue", exc))
    return replace(result, messages=(*result.messages, *messages),
                   data={**result.data, **data, "jira_failed": bool(messages)})


def jira_decision(ctx: HookContext, text: str) -> Message | None:
    """Add the decision ``text`` to the work item's Jira issue as a comment; returns the
    message of a refusal (recorded by the caller), or ``None``.

    Raises:
        RetryLater: Jira failed transiently (the delivery is retried).
    """
    issue = jira_issue(ctx)
    jira = ctx.config.jira
    if issue is None or jira is None:
        return None
    try:
        jira.add_comment(issue=issue, body=text)
    except RetryLater:
        raise
    except IntegrationError as exc:
        return _failed("record-decision", issue, "add-comment", exc)
    return None
