"""Publishing a work item's status: its one status comment and whatever the node's hooks
publish on a status change (``HookDef.on_status``, e.g. a check run), through the outbox.
"""

from __future__ import annotations

import logging

from graph.context import HookConfig
from graph.effects import HookEffects, digest
from graph.model import Boundary, Message, Node, Status, WorkItem
from graph.runtime.api import RuntimeAPI
from graph.runtime.calls import context
from graph.state import WorkItemState
from graph.status import render_status, status_effect

log = logging.getLogger(__name__)


def publish(
    rt: RuntimeAPI,
    state: WorkItemState,
    work_item: WorkItem,
    config: HookConfig,
    node: Node,
    messages: tuple[Message, ...],
    *,
    hook: str | None = None,
) -> None:
    """Publish the status when it changed, through the outbox: the work item's one
    status comment (effect ``<ref>/status``, edited in place), and whatever the node's
    hooks publish on a status change (``HookDef.on_status``, e.g. a check run). A
    failure is recorded in the event log and never wedges the graph (specification,
    "Notification hook fails").

    Args:
        node: the node the work item stands at.
        messages: what the status comment shows (a block's findings, a shown wait).
        hook: the hook whose result stopped the chain, named in the comment.
    """
    escalation = state.escalated["reason"] if state.escalated else None
    mentions = [p.github for p in config.collaborators.people(node.role) if p.github]
    working = state.parked_reason if state.status == Status.WORKING else None
    notes = state.current_notes()
    reserved = (config.human_reason(work_item.risk_tier)
                if node.is_gate and config.human_reason is not None
                and state.status != Status.DONE else None)
    body = render_status(work_item, node.id, node.phase, state.status, messages,
                         hook=hook, escalation=escalation,
                         mentions=mentions if escalation else (), working=working,
                         notes=notes, reserved=reserved, page_url=config.page_url)
    body_digest = digest(body)
    if body_digest == state.status_digest:
        return
    summary = "; ".join(([working] if working else []) + notes
                        + [m.text for m in messages])
    for call in node.calls:
        on_status = call.definition.on_status
        if on_status is None:
            continue
        outbox = HookEffects(state, rt.store, f"{status_effect(state.ref)}/{call.name}")
        boundary: Boundary = "entry" if call in node.entry else "exit"
        ctx = context(rt, node, boundary, call.params, state, work_item,
                      outbox.wrap(config))
        try:
            on_status(ctx, state.status, summary)
        except Exception as exc:  # noqa: BLE001  (recorded; the graph must not wedge)
            rt.log(state, "notification.failed",
                   {"channel": call.name, "error": type(exc).__name__}, None)
    github = config.integrations.get("github")
    if github is None or work_item.repository is None or work_item.id is None:
        return
    effect = status_effect(state.ref)
    try:
        outbox = HookEffects(state, rt.store, effect, own=config.own)
        outbox.github(github, effect=effect, in_place=True).comment(
            repo=work_item.repository, number=work_item.id, body=body)
    except Exception as exc:  # noqa: BLE001  (recorded; the graph must not wedge)
        log.warning("status comment for %s not published (%s)", state.ref,
                    type(exc).__name__)
        rt.log(state, "notification.failed",
               {"channel": "github-status", "error": type(exc).__name__}, None)
        return
    state.status_digest = body_digest
    rt.store.save(state)
