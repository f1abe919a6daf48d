"""A node's chain run for one work item: the context its hooks see, the outbox each hook
run writes through, and the record the run leaves in state and the event log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from graph.context import HookConfig
from graph.effects import HookEffects, hook_keys
from graph.envelope import MAX_TEXT
from graph.model import (
    Boundary,
    GateVisit,
    HookCall,
    HookContext,
    HookResult,
    InboundEvent,
    Node,
    Session,
    WorkItem,
)
from graph.ports import provider_text
from graph.runtime.api import RuntimeAPI
from graph.runtime.chains import ChainResult, run_chain
from graph.runtime.shapes import gate_artifacts
from graph.state import WorkItemState


def run_boundary(
    rt: RuntimeAPI,
    node: Node,
    boundary: Boundary,
    state: WorkItemState,
    work_item: WorkItem,
    config: HookConfig,
    event: InboundEvent | None,
    repo: Path | None,
    *,
    only_validating: bool = False,
    record: bool = True,
) -> ChainResult:
    """Run ``node``'s ``boundary`` chain for ``work_item`` through the outbox and record
    it (:func:`record`); with ``record=False`` (a check, a re-derivation) no outbox is
    handed in and nothing is written.

    Returns:
        the chain's :class:`ChainResult`.

    Raises:
        RetryLater: a hook failed transiently.
    """
    calls = node.entry if boundary == "entry" else node.exit
    ctx = context(rt, node, boundary, {}, state, work_item, config, event=event, repo=repo)
    effects = scope(rt, node, boundary, state, work_item) if record else None
    chain = run_chain(calls, ctx, only_validating=only_validating, effects=effects)
    if record:
        rt.record(state, chain, event)
    return chain


def context(rt: RuntimeAPI, node: Node, boundary: Boundary, params: Mapping[str, Any],
            state: WorkItemState, work_item: WorkItem, config: HookConfig, *,
            event: InboundEvent | None = None, repo: Path | None = None) -> HookContext:
    """The context a hook at ``node``'s ``boundary`` sees (``results`` empty). At a
    gate, ``artifacts`` are the artifacts it reviews and ``gate`` its visit."""
    gate = None
    artifacts = rt.artifacts(node, work_item)
    if node.is_gate:
        artifacts = {name: rt.artifacts_for(work_item, name)
                     for name in gate_artifacts(rt.graph, node)}
        gate = GateVisit(started_at=state.visit_started_at,
                         decided=state.decided_sources(),
                         votes=tuple(state.votes.get(node.id, ())),
                         approvals=node.approvals)
    return HookContext(
        work_item=work_item,
        node=node,
        boundary=boundary,
        repo=repo,
        artifacts=artifacts,
        session=session(state),
        event=event,
        results=(),
        config=config,
        params=params,
        visit=state.visit,
        gate=gate,
        decisions={str(d.get("node")): d for _, d in state.standing_decisions()
                   if not d.get("invalidated")},
    )


def scope(rt: RuntimeAPI, node: Node, boundary: Boundary, state: WorkItemState,
          work_item: WorkItem) -> Callable[[int, HookCall], HookEffects]:
    """The outbox factory of one chain run: effect ids ``<ref>/<node>/<visit>/<hook>``
    + ``/<n>``, recorded in ``state.effects`` and saved before each side effect."""
    keys = hook_keys(tuple(c.name for c in node.entry), tuple(c.name for c in node.exit))

    def outbox(position: int, call: HookCall) -> HookEffects:
        hook_key = keys.get((boundary, position), call.name)
        return HookEffects(state, rt.store,
                           f"{work_item.ref}/{node.id}/{state.visit}/{hook_key}")

    return outbox


def session(state: WorkItemState) -> Session | None:
    """The harness session bound to the current node visit, as hooks see it."""
    if not state.session:
        return None
    return Session(id=str(state.session["id"]), runner=str(state.session.get("runner")),
                   cwd=state.session.get("cwd"))


def record(rt: RuntimeAPI, state: WorkItemState, chain: ChainResult,
           event: InboundEvent | None) -> None:
    """Keep ``chain``'s results as the node's latest (``state.results``), take in the
    decisions and votes its hooks return, and log the run (``chain.completed``), each
    failed notification (``notification.failed``), the messages of its passing hooks
    (:func:`keep_notes`) and each checkpoint (``checkpoint``).
    Nothing is saved here: the caller saves with what follows."""
    state.results.setdefault(chain.node, {})[chain.boundary] = [
        r.to_dict() for r in chain.results
    ]
    for r in chain.results:
        decision = r.data.get("decision")
        if isinstance(decision, Mapping):
            rt.log(state, "decision.recorded", state.record_decision(decision), event)
        vote = r.data.get("vote")
        if isinstance(vote, Mapping) and vote.get("source"):
            votes = state.votes.setdefault(chain.node, [])
            if all(v.get("source") != vote.get("source") for v in votes):
                votes.append(dict(vote))
    rt.log(
        state,
        "chain.completed",
        {
            "node": chain.node,
            "boundary": chain.boundary,
            "status": chain.status,
            "outcome": chain.outcome,
            "hooks": [{"hook": r.hook, "status": r.status} for r in chain.results],
        },
        event,
    )
    for r in chain.results:
        if r.data.get("notification_failed"):
            rt.log(state, "notification.failed",
                   {"channel": r.hook, "node": chain.node,
                    "error": r.data.get("error") or r.data.get("integration_failed")
                    or "failed"}, event)
    keep_notes(rt, state, chain.node, chain.boundary,
               [r for r in chain.results if r is not chain.stopper], event)
    for r in chain.results:
        checkpoint = r.data.get("checkpoint")
        if isinstance(checkpoint, Mapping):
            rt.log(state, "checkpoint", dict(checkpoint), event)


def keep_notes(rt: RuntimeAPI, state: WorkItemState, node: str, boundary: str,
               results: Sequence[HookResult], event: InboundEvent | None) -> bool:
    """Keep the messages of the passing ``results`` (a hook's own words that do not stop
    the chain: a refused notification, a Jira transition that does not exist from the
    issue's status, with the available ones named): each new one is a note of the status
    comment (:meth:`WorkItemState.note`, ``<hook>: <text>``) and an event
    ``hook.notes`` ``{hook, node, boundary, code, note}``. A message already noted in
    this node visit (a redelivery) is not kept again. Nothing is saved here.

    Returns:
        whether a note was added (the status comment changed).
    """
    added = False
    for r in results:
        if r.status != "pass":
            continue  # a skip's reason is routine; a stop's messages are its findings
        for m in r.messages:
            # Bounded to what the event log's metadata keeps as is (the dashboard shows it);
            # provider text in it is untrusted: no control characters.
            text = provider_text(m.text, MAX_TEXT)
            shown = f"{r.hook}: {text}"
            if shown in state.current_notes():
                continue
            state.note(m.code or "hook-note", shown)
            rt.log(state, "hook.notes", {"hook": r.hook, "node": node, "boundary": boundary,
                                         "code": m.code, "note": text}, event)
            added = True
    return added
