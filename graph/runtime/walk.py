"""The walk: one delivery's evaluation of a work item (specification, "The runtime").

:func:`advance` runs the current node's exit chain, persists, takes the edge the outcome
names and runs the next node's entry chain, until the work item waits, blocks,
escalates or is done (:func:`walk`); then it settles what shows the node the walk left
the work item at (:func:`settle`). A stopped chain parks the work item (:func:`park`):
a wait, a block to repair, an escalation. Every driver (the RQ worker, ``the-loop
run``) reaches these through :class:`graph.runtime.Runtime`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import graph.runtime.notes as notes
import graph.runtime.operator as operator
import graph.runtime.turns as turns
from graph.context import HookConfig
from graph.model import Graph, HookResult, InboundEvent, Message, Node, Status, WorkItem
from graph.monitors import REMINDER, forget_reminders
from graph.runtime.api import RuntimeAPI
from graph.runtime.calls import context, keep_notes, scope
from graph.runtime.chains import ChainResult, call_hook, with_moved_head
from graph.runtime.shapes import (
    AWAITING_REPAIR,
    CHANGE_KINDS,
    AdvanceResult,
    Move,
    content_blob,
    decision_record,
    gate_artifacts,
)
from graph.runtime.waves import PlanRun
from graph.state import WorkItemState
from graph.work import CI_REPORT, TurnEnded

log = logging.getLogger(__name__)


def advance(
    rt: RuntimeAPI,
    state: WorkItemState,
    work_item: WorkItem,
    config: HookConfig,
    event: InboundEvent | None,
    repo: Path | None,
) -> AdvanceResult:
    """Walk the graph on ``event`` (:func:`walk`), then settle what shows the node
    the walk left the work item at (:func:`settle`): once per delivery, so a node
    passed through gets no label of its own. A retried delivery settles again, and
    the outbox makes that converge (done effects are not made twice).

    Args:
        state: the work item's state as loaded (``Runtime.load``); changed and saved.

    Returns:
        the :class:`AdvanceResult` (its ``state`` is ``state``).

    Raises:
        RetryLater: a hook failed transiently (the delivery is retried).
    """
    result = walk(rt, state, work_item, config, event, repo)
    moved = with_moved_head(config, [r for c in result.chains for r in c.results])
    blocked = settle(rt, state, work_item, moved)
    if blocked is not None:
        return park(rt, state, work_item, moved, blocked, result)
    return result


def settle(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem,
           config: HookConfig) -> ChainResult | None:
    """Call ``HookDef.on_settle`` of each hook in the current node's entry chain
    (``set-phase-label``: the phase label swap), through the outbox under that entry
    call's effect ids ``<ref>/<node>/<visit>/<hook>/<n>``: within one node visit a
    done effect is not made again, a pending one (a crash) is made again. While the
    entry chain is stopped (it waits or blocks), only the hooks it reached settle: a
    hook after the one that stopped it shows nothing yet (``done``'s ``phase:done``
    label is written once ``merge-pull-request`` before it passed, not while the work
    item waits for the merge).

    Returns:
        the ``block`` (an entry chain of the settling results) when one did not
        settle (it raised, or ran past its timeout), for :func:`park`; else ``None``.

    Raises:
        RetryLater: a transient failure (the delivery is retried).
    """
    node = rt.graph.nodes.get(state.current_node)
    if node is None:  # the deployed graph dropped it: held until it is migrated
        return None
    effects = scope(rt, node, "entry", state, work_item)
    ctx = context(rt, node, "entry", {}, state, work_item, config)
    settled: list[HookResult] = []
    ran = (state.results.get(node.id) or {}).get("entry")
    reached = len(ran) if state.entry_pending and isinstance(ran, list) else len(node.entry)
    for position, call in enumerate(node.entry):
        on_settle = call.definition.on_settle
        if on_settle is None or position >= reached:
            continue
        outbox = effects(position, call)
        settling = dataclasses.replace(
            call, definition=dataclasses.replace(call.definition, fn=on_settle))
        result = call_hook(settling, dataclasses.replace(
            ctx, params=call.params, config=outbox.wrap(config)),
            on_timeout=outbox.close)
        if result.status == "block":
            return ChainResult(node.id, "entry", "block", "block", (result,))
        settled.append(result)
    # A settling hook's refusals (a Jira label or transition) are shown and logged.
    if keep_notes(rt, state, node.id, "entry", settled, None):
        rt.store.save(state)
        notes.republish(rt, state, work_item, config)
    return None


def walk(
    rt: RuntimeAPI,
    state: WorkItemState,
    work_item: WorkItem,
    config: HookConfig,
    event: InboundEvent | None,
    repo: Path | None,
) -> AdvanceResult:
    """Evaluate the work item on ``event`` and walk the edges its outcomes name, each
    step persisted before the next node's entry hooks run; the graph drift check, a
    reminder sweep, a retried delivery and a change after an approval come first.

    Returns:
        the :class:`AdvanceResult` of the walk (not yet settled).
    """
    held = operator.check_graph(rt, state)
    if state.risk_tier != work_item.risk_tier:
        rt.log(state, "work-item.risk-tier",
               {"from": state.risk_tier, "to": work_item.risk_tier}, event)
        state.risk_tier = work_item.risk_tier  # saved with what follows
    result = AdvanceResult(ref=state.ref, node=state.current_node, status=state.status,
                           state=state)
    if held:  # the graph changed under it: escalated until it is migrated
        if state.current_node in rt.graph.nodes:
            rt.publish(state, work_item, config, rt.graph.node(state.current_node), ())
        return result
    operator.retry_forced(rt, state, work_item, config)
    if state.status in (Status.DONE, Status.ABANDONED):
        return result
    if event is not None and event.kind == REMINDER:
        notes.remind(rt, state, work_item, config)  # a monitor's sweep: nothing to evaluate
        return result
    if event is not None and event.delivery_id == state.last_event:
        # The same delivery again (a retried job): it was consumed before; only what
        # it left unfinished (an entry chain, an effect) runs, on a tick.
        log.info("delivery %s already consumed by %s; evaluating on a tick",
                 event.delivery_id, state.ref)
        event = None
    if event is not None and event.kind in CHANGE_KINDS and reapprove(config):
        changed = notes.changed_approval(rt, state, work_item, config)
        if changed is not None:
            gate, paths = changed
            state.last_event = event.delivery_id
            notes.reopen(rt, state, gate, via="reapproval", code="approval-invalidated",
                         text=(f"{', '.join(f'`{p}`' for p in paths)} changed after gate "
                               f"`{gate}` approved it, so the work item is back at "
                               f"`{gate}` for a new approval"),
                         data={"paths": paths}, event=event)
            event = None
    # Bound the walk: without new events, a cycle of passing nodes must not spin.
    for _ in range(2 * len(rt.graph.nodes) + 2):
        node = rt.graph.node(state.current_node)
        if state.entry_pending:
            chain = rt.run_boundary(node, "entry", state, work_item, config, event, repo)
            result.chains.append(chain)
            config = with_moved_head(config, chain.results)
            if chain.status != "pass":
                return park(rt, state, work_item, config, chain, result)
            state.entry_pending = False
            rt.store.save(state)
        if rt.graph.is_terminal(node.id):
            state.status = Status.DONE
            state.parked_reason = None
            rt.store.save(state)
            rt.log(state, "work-item.done", {"node": node.id}, None)
            result.status, result.node = Status.DONE, node.id
            rt.publish(state, work_item, config, node, ())
            return result
        ended: TurnEnded | None = None
        if turns.works(node, state, config) and node.plan is not None:
            planned = PlanRun(rt).step(state, work_item, config, node, event, result,
                                       repo)
            if planned is not None:  # the plan's waves are still running
                return planned
            if state.turn is not None:  # a repair turn of the node's own session
                ended = turns.turn_ended(rt, state, node, event)
                if ended is None:
                    return turns.await_turn(rt, state, work_item, config, node, result)
        elif turns.works(node, state, config):
            ended = turns.turn_ended(rt, state, node, event)
            if ended is None and not turns.awaits_verdict(state, node):
                # the agent's turn is still to come: nothing to check yet
                return turns.await_turn(rt, state, work_item, config, node, result)
        unrepaired = None
        if ended is None or ended.ok:
            unrepaired = unrepaired_verdict(rt, node, state, work_item, config,
                                            after_turn=ended is not None)
        if ended is not None and not ended.ok:
            chain = turns.failed_turn(node, ended)
            rt.record(state, chain, event)
        elif unrepaired is not None:
            chain = unrepaired
            rt.record(state, chain, event)
        else:
            chain = rt.run_boundary(node, "exit", state, work_item, config, event, repo)
        if event is not None:
            state.last_event = event.delivery_id  # persisted with what follows
        event = None  # consumed by the first exit chain
        result.chains.append(chain)
        # A hook committed to the branch (a review record): what follows is evaluated
        # at the new head, so no check run lands on the commit it replaced.
        config = with_moved_head(config, chain.results)
        if chain.status != "pass":
            return park(rt, state, work_item, config, chain, result)
        edge = rt.graph.edge(node.id, chain.outcome)
        if edge is None:
            msg = Message(
                f"no edge leaves node {node.id} on outcome {chain.outcome}; "
                "the graph does not say where to go",
                code="no-edge",
            )
            blocked = ChainResult(node.id, "exit", "block", "block",
                                  chain.results + (HookResult("block", "runtime", (msg,),
                                                              retriable=False),))
            return park(rt, state, work_item, config, blocked, result)
        state.outcomes[node.id] = chain.outcome
        state.next_input.pop(node.id, None)
        handoff = handoff_of(node, chain)
        rejected = rejected_artifacts(rt, node, chain, edge.target, work_item, config)
        enter(rt, state, edge.target, via=chain.outcome)
        if handoff:
            state.next_input[edge.target] = {"feedback": handoff}
        if rejected:
            state.next_input.setdefault(edge.target, {})["rejected"] = rejected
        # Persist BEFORE the next node's entry hooks perform side effects.
        rt.store.save(state)
        rt.log(state, "edge.taken",
               {"from": edge.source, "to": edge.target, "on": edge.on}, None)
        result.moves.append(Move(edge.source, edge.target, edge.on))
        result.node, result.status = edge.target, Status.ACTIVE
    return result


def abandon(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem, config: HookConfig,
            text: str, event: InboundEvent | None) -> AdvanceResult:
    """End the work item without completing it (its pull request was closed unmerged):
    status ``abandoned``, never ``done``; ``text`` (the-loop's own words) is its parked
    reason and a note of the status comment, the event log says ``work-item.abandoned``
    ``{node, reason}``; the outstanding turn is forgotten (a late report is ignored, as
    every later delivery is: :func:`walk` evaluates nothing for it). A work item done or
    abandoned already is left as it is.

    Returns:
        the :class:`AdvanceResult` (status ``abandoned``, no chains).
    """
    result = AdvanceResult(ref=state.ref, node=state.current_node, status=state.status,
                           state=state)
    if state.status in (Status.DONE, Status.ABANDONED):
        return result
    state.status = Status.ABANDONED
    state.parked_reason = text
    state.escalated = None
    state.turn = None
    if event is not None:
        state.last_event = event.delivery_id
    state.note("abandoned", text)
    rt.store.save(state)
    rt.log(state, "work-item.abandoned", {"node": state.current_node, "reason": text}, event)
    node = rt.graph.nodes.get(state.current_node)
    if node is not None:
        rt.publish(state, work_item, config, node, ())
    result.status = Status.ABANDONED
    return result


def merged(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem, config: HookConfig,
           event: InboundEvent | None, repo: Path | None, *, by: str | None) -> AdvanceResult:
    """The work item's pull request was merged (``pull_request.closed``, ``merged:
    true``): at the graph's terminal node this is an ordinary advance (its entry chain
    sees the merge: ``merge-pull-request`` passes). Anywhere else, when the graph has one
    terminal node, the work item moves there first (``via: merged``, a note and
    ``work-item.merged-early`` ``{from, by}`` in the event log: merged before its gates
    passed), then advances. A done or abandoned work item is left as it is.

    Args:
        by: the login of who merged it (from the payload; shown defused).

    Returns:
        the :class:`AdvanceResult` of the advance.
    """
    terminals = [n for n in rt.graph.nodes if rt.graph.is_terminal(n)]
    if (state.status not in (Status.DONE, Status.ABANDONED)
            and state.current_node not in terminals and len(terminals) == 1):
        source = state.current_node
        who = f" by @\u200b{by}" if by else ""
        enter(rt, state, terminals[0], via="merged")
        state.note("merged-early", f"the pull request was merged{who} at node `{source}`, "
                                   "before the-loop's gates there passed")
        rt.store.save(state)
        rt.log(state, "work-item.merged-early", {"from": source, "by": by}, event)
    return advance(rt, state, work_item, config, event, repo)


def handoff_of(node: Node, chain: ChainResult) -> dict[str, Any] | None:
    """What a gate's decision hands to the node it routes to: a reference to the
    feedback (who, which comment, its digest), never the text itself."""
    if not node.is_gate or chain.outcome not in node.hands_off:
        return None
    decided = next((r for r in chain.results if r.data.get("outcome") == chain.outcome), None)
    data = decided.data if decided else {}
    return {
        "kind": chain.outcome,
        "gate": node.id,
        "actor": data.get("actor"),
        "comment_id": data.get("comment_id"),
        "delivery": data.get("delivery"),
        "body_sha256": data.get("body_sha256"),
    }


def rejected_artifacts(rt: RuntimeAPI, gate: Node, chain: ChainResult, target: str,
                       work_item: WorkItem, config: HookConfig) -> dict[str, Any] | None:
    """What a gate's backwards decision (an outcome that is not forward, e.g.
    changes-requested) rejected, for the node it returns to: ``{"gate", "outcome",
    "blobs": {path: blob SHA}}`` of the reviewed artifacts that node produces (the
    content less the-loop's own review record, :func:`content_blob`), or ``{"gate",
    "outcome", "head_sha"}`` when it produces none of them (the implementation: the
    pull request head was rejected). ``None`` for a forward outcome or nothing to
    compare."""
    if not gate.is_gate or chain.outcome in gate.forward_outcomes:
        return None
    record = decision_record(gate)
    strip = record.strip if record is not None else None
    produced = set(rt.graph.node(target).produces)
    names = [a for a in gate_artifacts(rt.graph, gate) if a in produced]
    base: dict[str, Any] = {"gate": gate.id, "outcome": chain.outcome}
    if names:
        blobs = {}
        for name in names:
            path = rt.artifacts_for(work_item, name)
            blobs[path] = content_blob(config.files.read_text(path), strip)
        return {**base, "blobs": blobs}
    if config.head_sha:
        return {**base, "head_sha": config.head_sha}
    return None


def unrepaired_verdict(rt: RuntimeAPI, node: Node, state: WorkItemState,
                       work_item: WorkItem, config: HookConfig, *,
                       after_turn: bool) -> ChainResult | None:
    """The verdict of a node a gate sent back while what the gate rejected is
    unchanged (specification: changes-requested means repair): a ``wait`` for the
    work (a push, the harness's turn), or, after a turn that changed nothing, a
    ``block`` whose message is the next turn's input. ``None``: repaired (or nothing
    was rejected), the exit chain runs."""
    rejected = (state.next_input.get(node.id) or {}).get("rejected")
    if not isinstance(rejected, Mapping):
        return None
    gate = rt.graph.nodes.get(str(rejected.get("gate")))
    record = decision_record(gate) if gate is not None else None
    strip = record.strip if record is not None else None
    blobs = rejected.get("blobs")
    # An artifact absent when the gate decided has nothing to compare: its checks say.
    compared = {p: b for p, b in blobs.items() if b} if isinstance(blobs, Mapping) else {}
    if compared:
        unchanged = [path for path, blob in compared.items()
                     if content_blob(config.files.read_text(path), strip) == blob]
        if len(unchanged) < len(compared):
            return None
        what = ", ".join(unchanged)
    elif rejected.get("head_sha"):
        if not config.head_sha or config.head_sha != rejected["head_sha"]:
            return None
        what = f"the pull request head {str(rejected['head_sha'])[:12]}"
    else:
        return None
    review = f"{rejected.get('gate')} decided {rejected.get('outcome')}"
    if after_turn:
        result = HookResult.blocked("runtime", Message(
            f"{what} is unchanged since {review}: change it as the review asks "
            "(the-loop's review record does not count)", code="unrepaired"))
        return ChainResult(node.id, "exit", "block", "block", (result,))
    result = HookResult.waiting("runtime", Message(
        f"waiting for the changes the review asked for: {what} is unchanged since "
        f"{review}", code=AWAITING_REPAIR))
    return ChainResult(node.id, "exit", "wait", "wait", (result,))


def work_token(rt: RuntimeAPI, node: Node, state: WorkItemState, work_item: WorkItem,
               config: HookConfig) -> str:
    """What changes when the node's work takes a turn: the harness turns ordered in
    this visit and the content of the node's artifacts (the pull request head for a
    node that declares none). Two blocks with the same token are not separated by
    a repair attempt."""
    parts = [str(state.turns.get(node.id, 0))]
    if node.produces:
        for name in node.produces:
            path = rt.artifacts_for(work_item, name)
            parts.append(f"{path}={content_blob(config.files.read_text(path), None)}")
    else:
        parts.append(f"head={config.head_sha}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def enter(rt: RuntimeAPI, state: WorkItemState, node_id: str, *, via: str,
          forced: bool = False, log_entry: bool = True) -> None:
    """Move the pointer and bind the node's harness session: an agent node keeps its
    own session across visits (so changes-requested returns to the same one); a gate
    with ``session: inherit`` reuses the session of the node that produces its
    artifacts (:func:`producers`), whatever path the work item took there, or starts
    a fresh one seeded with the artifacts. The step is logged (``node.entered``)
    unless ``log_entry`` is false (a scratch state)."""
    forget_reminders(state, node_id)
    entered = state.enter(node_id, via=via, forced=forced)
    if log_entry:
        rt.log(state, "node.entered", entered, None)
    node = rt.graph.node(node_id)
    session: dict[str, Any] | None = None
    if node.session == "inherit":
        inherited = next((state.sessions[p] for p in producers(rt.graph, node)
                          if state.sessions.get(p)), None)
        if inherited:
            session = dict(inherited)
        else:
            session = {"id": str(uuid.uuid4()), "runner": "harness", "cwd": None,
                       "seeded_with": gate_artifacts(rt.graph, node)}
    elif node.actor == "agent":
        session = state.sessions.get(node_id) or {
            "id": str(uuid.uuid4()), "runner": "harness", "cwd": None}
    if session is not None:
        state.sessions[node_id] = session
    state.session = session


def producers(graph: Graph, gate: Node) -> list[str]:
    """Nodes whose session a ``session: inherit`` gate takes, in preference order:
    those that produce the artifacts it reviews (``produces`` against
    :func:`gate_artifacts`), then the agent nodes with an edge into it."""
    reviewed = set(gate_artifacts(graph, gate))
    found = [n.id for n in graph.nodes.values()
             if n.id != gate.id and reviewed & set(n.produces)]
    for edge in graph.edges:
        source = graph.node(edge.source)
        if edge.target == gate.id and source.actor == "agent" and source.id not in found:
            found.append(source.id)
    return found


def park(
    rt: RuntimeAPI,
    state: WorkItemState,
    work_item: WorkItem,
    config: HookConfig,
    chain: ChainResult,
    result: AdvanceResult,
) -> AdvanceResult:
    """Stop at the current node: ``waiting`` on a wait; on a block, record the
    messages as the node's next input, count the attempt, and escalate to a human
    when the block is terminal, repeats the previous one, or exhausts ``attempts``."""
    node = rt.graph.node(chain.node)
    stop = chain.stopper
    texts = [m.text for m in chain.messages]
    state.parked_reason = (
        f"{chain.boundary} hook {stop.hook if stop else '?'}: "
        + ("; ".join(texts) if texts else chain.status)
    )
    escalation = None
    if chain.status == "wait":
        state.status = Status.ESCALATED if state.escalated else Status.WAITING
    else:
        # Only a turn of the work (a harness turn, a push that changed the node's
        # artifacts) between two blocks makes the second a repair attempt.
        finding = fingerprint(stop)
        token = work_token(rt, node, state, work_item, config)
        previous_fp, _, previous_token = state.last_block.get(node.id, "").partition("/")
        worked = not previous_fp or previous_token != token
        attempts = state.attempts.get(node.id, 0) + (1 if worked else 0)
        state.attempts[node.id] = attempts
        repeated = worked and previous_fp == finding
        state.last_block[node.id] = f"{finding}/{token}"
        block: dict[str, Any] = {
            "hook": stop.hook if stop else None,
            "boundary": chain.boundary,
            "messages": [m.to_dict() for m in chain.messages],
        }
        if stop is not None and isinstance(stop.data.get(CI_REPORT), Mapping):
            block[CI_REPORT] = dict(stop.data[CI_REPORT])  # shown as data, bounded
        state.next_input.setdefault(node.id, {})["block"] = block
        hook_name = stop.hook if stop else "?"
        if stop is not None and not stop.retriable:
            escalation = (str(stop.data["escalation"]) if stop.data.get("escalation")
                          else f"hook {hook_name} failed in a way retrying cannot fix")
        elif repeated:
            escalation = f"hook {hook_name} blocked twice with the same finding"
        elif attempts >= node.attempts:
            escalation = (f"node {node.id} blocked {attempts} times "
                          f"(its limit is {node.attempts})")
        if escalation:
            turns.escalate(rt, state, node, escalation, attempts=attempts)
        elif state.escalated:
            state.status = Status.ESCALATED
        else:
            state.status = Status.BLOCKED
            if chain.boundary == "exit" and turns.works(node, state, config):
                # do -> check -> repair: the block's messages are the next turn's input.
                turns.order_turn(rt, state, work_item, config, node)
    rt.store.save(state)
    result.status, result.node = state.status, state.current_node
    result.messages = chain.messages
    shown = chain.messages if chain.status == "block" else tuple(
        m for m in chain.messages if m.code in node.shown_waits | {AWAITING_REPAIR})
    rt.publish(state, work_item, config, node, shown, hook=stop.hook if stop else None)
    return result


def fingerprint(result: HookResult | None) -> str:
    """What makes two blocks "the same finding": the stopping hook and its messages'
    text, hashed (16 hex digits)."""
    texts = "\n".join(m.text for m in result.messages) if result else ""
    return hashlib.sha256(f"{result.hook if result else ''}\n{texts}".encode()).hexdigest()[:16]


def reapprove(config: HookConfig) -> bool:
    """``gates.reapproveOnChange`` of the repository's harness config (default true)."""
    gates = config.harness.get("gates") if config.harness else None
    return not isinstance(gates, Mapping) or gates.get("reapproveOnChange", True) is not False
