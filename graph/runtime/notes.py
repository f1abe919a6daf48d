"""Gates re-opened, notes and reminders: what returns a work item to a gate for a new
decision (a dismissed review, a change after an approval), the-loop's own notes in the
status comment, and the reminders of a stale gate (:mod:`graph.monitors`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from graph.context import HookConfig
from graph.effects import HookEffects
from graph.model import HookCall, InboundEvent, Message, Status, WorkItem
from graph.monitors import REMINDER_EVENT, due_reminder, reminder_key
from graph.runtime.api import RuntimeAPI
from graph.runtime.calls import context
from graph.runtime.chains import run_chain
from graph.runtime.shapes import decision_record, gates_between
from graph.state import WorkItemState


def reopen(rt: RuntimeAPI, state: WorkItemState, gate: str, *, via: str, code: str,
           text: str, data: Mapping[str, Any], event: InboundEvent | None) -> None:
    """Return the work item in ``state`` to ``gate`` (a new visit): the gate's standing
    decision is marked invalidated (``decision.invalidated``), ``text`` is noted for the
    status comment and the move is saved and logged (``gate.reopened``, with ``data``).
    The caller advances it afterwards."""
    source = state.current_node
    standing = state.standing.get(gate)
    if standing is not None and "invalidated" not in standing["decision"]:
        voided = {"via": via, "at": time.time()}
        standing["decision"]["invalidated"] = voided
        rt.log(state, "decision.invalidated",
               {"index": standing["index"], "node": gate, **voided}, event)
    rt.enter(state, gate, via=via)
    state.note(code, text)
    rt.store.save(state)
    rt.log(state, "gate.reopened", {"gate": gate, "from": source, "via": via,
                                    "code": code, **data}, event)


def note(rt: RuntimeAPI, work_item: WorkItem, config: HookConfig, code: str, text: str, *,
         data: Mapping[str, Any] | None = None,
         event: InboundEvent | None = None) -> bool:
    """Record ``text`` (the-loop's own words) in the event log (``note``) and show it
    in the status comment of the current node visit. Returns ``False`` when the work
    item has no state."""
    state = rt.store.load(work_item.ref)
    if state is None:
        return False
    state.note(code, text)
    rt.store.save(state)
    rt.log(state, "note", {"code": code, "node": state.current_node, **(data or {})},
           event)
    republish(rt, state, work_item, config)
    return True


def republish(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem,
              config: HookConfig) -> None:
    """Publish the status of the current node again (its notes changed), with the
    findings of the block it stands at when it is blocked or escalated."""
    node = rt.graph.node(state.current_node)
    block = (state.next_input.get(node.id) or {}).get("block") or {}
    messages = tuple(Message.from_dict(m) for m in block.get("messages") or ()
                     if state.status in (Status.BLOCKED, Status.ESCALATED))
    rt.publish(state, work_item, config, node, messages,
               hook=block.get("hook") if messages else None)


def later_gate_passed(rt: RuntimeAPI, state: WorkItemState, index: int) -> bool:
    """Whether another gate's standing decision, recorded after the decision
    ``index``, passed it (one of its forward outcomes, not invalidated since)."""
    decided = state.decision(index)
    gate = decided.get("node") if decided is not None else None
    for later_index, later in state.standing_decisions():
        if later_index <= index:
            continue
        node = rt.graph.nodes.get(str(later.get("node")))
        if (node is not None and node.id != gate and not later.get("invalidated")
                and later.get("outcome") in node.forward_outcomes):
            return True
    return False


def changed_approval(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem,
                     config: HookConfig) -> tuple[str, list[str]] | None:
    """The first gate behind the work item whose standing approval is bound to
    artifacts that changed since (their fingerprint differs), with those paths."""
    behind = gates_between(rt.graph, rt.graph.start, state.current_node)
    for gate_id in behind:
        if gate_id == state.current_node:
            continue
        gate = rt.graph.node(gate_id)
        record = decision_record(gate)
        if record is None or record.fingerprint is None:
            continue
        standing = state.standing.get(gate_id)
        latest = standing["decision"] if standing is not None else None
        if (latest is None or latest.get("invalidated")
                or latest.get("outcome") not in gate.forward_outcomes):
            continue
        bound = latest.get("artifacts") or {}
        changed = [path for path, seen in sorted(bound.items())
                   if isinstance(seen, Mapping) and seen.get("digest")
                   and record.fingerprint(config.files.read_text(path)) != seen["digest"]]
        if changed:
            return gate_id, changed
    return None


def remind(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem,
           config: HookConfig) -> int | None:
    """Run the gate's ``notify`` calls with the reminder event, through the outbox
    (effect ``<ref>/<node>/<visit>/reminder-<k>/<hook>``: once per period), then
    record the period in state and the event log."""
    period = due_reminder(state, rt.graph, rt.clock())
    if period is None:
        return None
    node = rt.graph.node(state.current_node)
    calls = tuple(dataclasses.replace(c, params=MappingProxyType(
        {**c.params, "event": REMINDER_EVENT})) for c in node.entry if c.name == "notify")
    key = reminder_key(node.id, state.visit)
    state.reminders[key] = period  # before the effects: a crash never sends it twice
    rt.store.save(state)
    if calls:
        ctx = context(rt, node, "entry", {}, state, work_item, config)

        def scope(position: int, call: HookCall) -> HookEffects:
            return HookEffects(state, rt.store, f"{work_item.ref}/{node.id}/"
                                                f"{state.visit}/reminder-{period}/"
                                                f"{call.name}-{position}")

        chain = run_chain(calls, ctx, effects=scope)
        sent = [r.data.get("sent") for r in chain.results]
    else:
        sent = []
    rt.log(state, "monitor.reminded", {"node": node.id, "period": period,
                                       "freshness": node.freshness,
                                       "sent": sent}, None)
    rt.store.save(state)
    return period
