"""Agent work at a node: the harness turn the runtime orders, the report that ends it,
and the escalation when the visit's turns or the work item's cost cap are used up
(shapes and bookkeeping in :mod:`graph.work`)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from graph.context import HookConfig
from graph.model import HookResult, InboundEvent, Message, Node, Status, WorkItem, plain
from graph.runtime.api import RuntimeAPI
from graph.runtime.chains import ChainResult
from graph.runtime.shapes import AdvanceResult, gate_artifacts
from graph.state import WorkItemState
from graph.work import (
    CANCELLED,
    TURN_COMPLETED,
    TurnEnded,
    TurnOrder,
    add_spend,
    record_totals,
    spend_of,
    totals_of,
    working_line,
)


def works(node: Node, state: WorkItemState, config: HookConfig) -> bool:
    """Whether ``node``'s work is a harness turn the runtime orders: an agent node,
    a harness configured, and no human asked to step in (an escalated agent node is
    evaluated on every event, as when a person does the work)."""
    return node.actor == "agent" and config.work is not None and not state.escalated


def awaits_verdict(state: WorkItemState, node: Node) -> bool:
    """Whether ``node``'s last turn of this visit ended and its exit chain waits (for a
    CI result, ``verify-tests``): a later event (the check's result, the monitor's
    timeout) runs the chain again; it orders no new turn."""
    return (state.turn is None and state.turns.get(node.id, 0) > 0
            and state.status == Status.WAITING)


def turn_ended(rt: RuntimeAPI, state: WorkItemState, node: Node,
               event: InboundEvent | None) -> TurnEnded | None:
    """The report of the outstanding turn carried by ``event``, recorded (spend, the
    session to resume, the event log); ``None`` when ``event`` is not that report."""
    live = state.turn
    if (live is None or event is None or event.kind != TURN_COMPLETED
            or not event.turn or event.turn.get("id") != live.get("id")
            or live.get("node") != node.id):
        return None
    try:
        ended = TurnEnded.from_dict(event.turn)
    except (KeyError, TypeError, ValueError):
        ended = TurnEnded(id=str(live["id"]), status="error",
                          detail="the runner's report of the turn was malformed")
    state.turn = None
    add_spend(state.spend, ended)
    session = state.sessions.setdefault(node.id, dict(state.session or {}))
    record_totals(session, ended)
    if ended.session_id:
        session["id"] = ended.session_id
    if ended.harness_session:
        session["resume"] = ended.harness_session
    state.session = session
    rt.log(state, "turn.completed", {
        "node": node.id, "turn": live.get("number"), "status": ended.status,
        "cost_usd": ended.cost_usd, "seconds": ended.seconds,
        "agent_seconds": ended.agent_seconds, "head_sha": ended.head_sha,
        "session": session.get("id"), "warnings": len(ended.warnings)}, event)
    return ended


def failed_turn(node: Node, ended: TurnEnded) -> ChainResult:
    """A turn that did not run to its end is a block of the work itself (cancelled by
    an operator: one retrying cannot fix)."""
    reason = ended.detail or ended.status
    message = Message(f"the agent's turn ended without completing ({ended.status}: "
                      f"{reason})", code=f"turn-{ended.status}")
    result = HookResult.blocked("harness", message,
                                retriable=ended.status != CANCELLED)
    return ChainResult(node.id, "exit", "block", "block", (result,))


def await_turn(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem,
               config: HookConfig, node: Node, result: AdvanceResult) -> AdvanceResult:
    """No report of the node's turn yet: order the first turn, or (an event while a
    turn is out, a retried delivery) place the outstanding order again, which the
    runner runs once."""
    work = config.work
    assert work is not None
    if state.turn is None:
        order_turn(rt, state, work_item, config, node)
    else:
        state.status = Status.WORKING
        rt.store.save(state)
        work.order(TurnOrder.from_dict(state.turn["order"]))
    result.status, result.node = state.status, state.current_node
    rt.publish(state, work_item, config, node, ())
    return result


def order_turn(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem,
               config: HookConfig, node: Node) -> None:
    """Order the node's next turn (status ``working``), or escalate when the visit's
    turns (``harness.maxTurns``) or the work item's cost cap are used up. The order
    is saved before it is placed (a crash in between places it again); so is an
    escalation."""
    work = config.work
    assert work is not None
    number = state.turns.get(node.id, 0) + 1
    spent = spend_of(state.spend)["cost_usd"]
    reason = None
    if number > work.max_turns:
        reason = f"node {node.id} used its {work.max_turns} agent turns"
    elif work.cost_cap_usd is not None and spent >= work.cost_cap_usd:
        reason = (f"the agent's cost cap of ${work.cost_cap_usd:.2f} for this work item "
                  f"is reached (${spent:.2f} spent)")
    if reason is not None:
        # Saved here: entering the node has no later save, and an unsaved escalation
        # would be decided (and logged) again on every event.
        escalate(rt, state, node, reason)
        rt.store.save(state)
        return
    session = state.sessions.get(node.id) or {"id": str(uuid.uuid4()),
                                              "runner": "harness", "cwd": None}
    state.sessions[node.id] = state.session = session
    order = TurnOrder(
        id=f"{work_item.ref}/{node.id}/{state.visit}/turn/{number}",
        ref=work_item.ref, node=node.id, visit=state.visit, number=number,
        max_turns=work.max_turns, session_id=str(session["id"]),
        resume=session.get("resume"), command=node.command, stage=node.stage,
        totals=totals_of(session.get("totals")) if session.get("resume") else {},
        artifacts=tuple(rt.artifacts(node, work_item).values()),
        checks=tuple({"hook": c.name, "with": plain(c.params)} for c in node.exit),
        feedback=dict(state.next_input.get(node.id) or {}),
        seeded_with=tuple(rt.artifacts_for(work_item, a) for a in
                          gate_artifacts(rt.graph, node)),
    )
    state.turns[node.id] = number
    state.turn = {"id": order.id, "node": node.id, "number": number,
                  "status": "ordered", "at": time.time(), "order": order.to_dict()}
    state.status = Status.WORKING
    state.parked_reason = working_line(number, work.max_turns, state.spend)
    rt.store.save(state)
    rt.log(state, "turn.ordered", {"node": node.id, "turn": number,
                                   "session": order.session_id,
                                   "resume": order.resume is not None}, None)
    work.order(order)


def escalate(rt: RuntimeAPI, state: WorkItemState, node: Node, reason: str, *,
             attempts: int | None = None) -> None:
    """Ask a human to step in at ``node`` (status ``escalated`` until it moves on)."""
    state.status = Status.ESCALATED
    state.escalated = {"node": node.id, "reason": reason, "at": time.time()}
    state.turn = None
    data: dict[str, Any] = {"node": node.id, "reason": reason}
    if attempts is not None:
        data["attempts"] = attempts
    rt.log(state, "work-item.escalated", data, None)
