"""The runtime: a state machine, not a scheduler (specification, "The runtime").

``run_chain`` runs one boundary's hooks in declared order; ``Runtime.advance`` runs the
current node's exit chain, persists, takes the edge the outcome names and runs the next
node's entry chain, until the work item waits, blocks or is done. Every driver (the RQ
worker, ``the-loop run``) calls these same functions.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graph.compile import Graph, HookCall, Node
from graph.context import HookConfig
from graph.model import Boundary, HookContext, HookResult, InboundEvent, Message, Session, WorkItem
from graph.state import StateStore, WorkItemState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChainResult:
    """The verdict of one chain.

    Attributes:
        node: id of the node whose chain ran.
        boundary: ``entry`` or ``exit``.
        status: ``pass`` (every hook passed or skipped), ``block`` or ``wait`` (the first
            hook that returned it short-circuited the chain).
        outcome: what edges route on: the first named outcome a passing hook put in
            ``data["outcome"]``, else ``pass``; for a stopped chain, its status.
        results: every result produced, in order.
    """

    node: str
    boundary: Boundary
    status: str
    outcome: str
    results: tuple[HookResult, ...]

    @property
    def stopper(self) -> HookResult | None:
        """The result that stopped the chain, if one did."""
        return self.results[-1] if self.status != "pass" and self.results else None

    @property
    def messages(self) -> tuple[Message, ...]:
        """Messages of the stopping result (what goes back to the work as its next input)."""
        stop = self.stopper
        return stop.messages if stop else ()


def run_chain(calls: tuple[HookCall, ...], ctx: HookContext) -> ChainResult:
    """Run ``calls`` in declared order; the first non-pass short-circuits.

    ``skip`` is recorded and the chain continues. A hook that raises is a ``block`` with
    ``retriable=False``, never a pass (specification, "Error handling"). A hook returning
    something other than a HookResult is treated the same way.

    Args:
        calls: the chain (a node's ``entry`` or ``exit``).
        ctx: the context; ``results`` and ``params`` are filled in per hook.

    Returns:
        the :class:`ChainResult`.
    """
    results: list[HookResult] = []
    for call in calls:
        hook_ctx = dataclasses.replace(ctx, results=tuple(results), params=call.params)
        try:
            result = call.definition.fn(hook_ctx)
            if not isinstance(result, HookResult):
                raise TypeError(f"hook returned {type(result).__name__}, not HookResult")
        except Exception as exc:  # a hook that raises blocks; it never passes
            log.exception("hook %s raised at node %s", call.name, ctx.node.id)
            result = HookResult(
                "block",
                call.name,
                (Message(f"hook {call.name} failed ({type(exc).__name__}); see the-loop's logs",
                         code="hook-raised"),),
                {},
                retriable=False,
            )
        if result.hook != call.name:
            result = dataclasses.replace(result, hook=call.name)
        results.append(result)
        if result.status in ("block", "wait"):
            return ChainResult(ctx.node.id, ctx.boundary, result.status, result.status,
                               tuple(results))
    outcome = next(
        (r.outcome for r in results if r.status == "pass" and r.outcome != "pass"), "pass"
    )
    return ChainResult(ctx.node.id, ctx.boundary, "pass", outcome, tuple(results))


@dataclass(frozen=True)
class Move:
    """One edge taken: ``{from, to, on}``."""

    source: str
    target: str
    on: str


@dataclass
class AdvanceResult:
    """What one ``advance`` did.

    Attributes:
        ref: the work item.
        node: the node the item is in afterwards.
        status: ``waiting``, ``blocked``, ``done`` or ``active``.
        moves: edges taken, in order.
        chains: every chain run, in order.
        messages: the messages of the last stopping chain (feedback to the work).
    """

    ref: str
    node: str
    status: str
    moves: list[Move] = field(default_factory=list)
    chains: list[ChainResult] = field(default_factory=list)
    messages: tuple[Message, ...] = ()


class GraphMismatch(RuntimeError):
    """The work item's pinned graph no longer contains its current node."""


class Runtime:
    """Drives work items through a compiled graph, persisting to a :class:`StateStore`.

    Args:
        graph: the compiled graph.
        store: where state and the event log live.
    """

    def __init__(self, graph: Graph, store: StateStore) -> None:
        self.graph = graph
        self.store = store

    # -- entry points -----------------------------------------------------------------

    def enrol(
        self,
        work_item: WorkItem,
        config: HookConfig,
        event: InboundEvent | None,
        *,
        repo: Path | None = None,
    ) -> AdvanceResult:
        """Make ``work_item`` a work item at the graph's start node (if it is not one yet)
        and advance it. Idempotent: an enrolled item is simply advanced."""
        state = self.store.load(work_item.ref)
        if state is None:
            state = WorkItemState.new(work_item.ref, self.graph.digest, self.graph.start)
            self.store.save(state)
            self._log(state, "work-item.enrolled", {"node": state.current_node}, event)
        return self._advance(state, work_item, config, event, repo)

    def advance(
        self,
        work_item: WorkItem,
        config: HookConfig,
        event: InboundEvent | None,
        *,
        repo: Path | None = None,
    ) -> AdvanceResult | None:
        """Advance an enrolled work item on ``event``; ``None`` if it is not enrolled.

        The triggering event is seen by the first exit chain only; nodes entered during
        the same advance evaluate on a tick (``event=None``), so one ``/approve`` never
        approves two gates.

        Raises:
            GraphMismatch: the current node no longer exists in the graph.
            StateError: stored state is unreadable.
        """
        state = self.store.load(work_item.ref)
        if state is None:
            return None
        return self._advance(state, work_item, config, event, repo)

    # -- the loop ---------------------------------------------------------------------

    def _advance(
        self,
        state: WorkItemState,
        work_item: WorkItem,
        config: HookConfig,
        event: InboundEvent | None,
        repo: Path | None,
    ) -> AdvanceResult:
        self._check_graph(state)
        result = AdvanceResult(ref=state.ref, node=state.current_node, status=state.status)
        if state.status == "done":
            return result
        # Bound the walk: without new events, a cycle of passing nodes must not spin.
        for _ in range(2 * len(self.graph.nodes) + 2):
            node = self.graph.node(state.current_node)
            if state.entry_pending:
                chain = self._run(node, "entry", state, work_item, config, event, repo)
                result.chains.append(chain)
                if chain.status != "pass":
                    return self._park(state, chain, result, blocked_at_entry=True)
                state.entry_pending = False
                self.store.save(state)
            if self.graph.is_terminal(node.id):
                state.status = "done"
                state.parked_reason = None
                self.store.save(state)
                self._log(state, "work-item.done", {"node": node.id}, None)
                result.status, result.node = "done", node.id
                return result
            chain = self._run(node, "exit", state, work_item, config, event, repo)
            event = None  # consumed by the first exit chain
            result.chains.append(chain)
            if chain.status != "pass":
                return self._park(state, chain, result)
            edge = self.graph.edge(node.id, chain.outcome)
            if edge is None:
                msg = Message(
                    f"no edge leaves node {node.id} on outcome {chain.outcome}; "
                    "the graph does not say where to go",
                    code="no-edge",
                )
                blocked = ChainResult(node.id, "exit", "block", "block",
                                      chain.results + (HookResult("block", "runtime", (msg,)),))
                return self._park(state, blocked, result)
            state.outcomes[node.id] = chain.outcome
            state.enter(edge.target, via=chain.outcome)
            # Persist BEFORE the next node's entry hooks perform side effects.
            self.store.save(state)
            self._log(state, "edge.taken",
                      {"from": edge.source, "to": edge.target, "on": edge.on}, None)
            result.moves.append(Move(edge.source, edge.target, edge.on))
            result.node, result.status = edge.target, "active"
        return result

    def _run(
        self,
        node: Node,
        boundary: Boundary,
        state: WorkItemState,
        work_item: WorkItem,
        config: HookConfig,
        event: InboundEvent | None,
        repo: Path | None,
    ) -> ChainResult:
        ctx = HookContext(
            work_item=work_item,
            node=node,
            boundary=boundary,
            repo=repo,
            artifacts=self.artifacts(node, work_item),
            session=self._session(node, state),
            event=event,
            results=(),
            config=config,
            params={},
            visit=state.visit,
        )
        chain = run_chain(node.entry if boundary == "entry" else node.exit, ctx)
        self._record(state, chain, event)
        return chain

    def _record(self, state: WorkItemState, chain: ChainResult, event: InboundEvent | None) -> None:
        state.results.setdefault(chain.node, {})[chain.boundary] = [
            r.to_dict() for r in chain.results
        ]
        for r in chain.results:
            decision = r.data.get("decision")
            if isinstance(decision, Mapping):
                state.decisions.append(dict(decision))
        self._log(
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
            checkpoint = r.data.get("checkpoint")
            if isinstance(checkpoint, Mapping):
                self._log(state, "checkpoint", dict(checkpoint), event)

    def _park(
        self,
        state: WorkItemState,
        chain: ChainResult,
        result: AdvanceResult,
        *,
        blocked_at_entry: bool = False,
    ) -> AdvanceResult:
        state.status = "waiting" if chain.status == "wait" else "blocked"
        if state.status == "blocked":
            state.attempts[chain.node] = state.attempts.get(chain.node, 0) + 1
        stop = chain.stopper
        texts = [m.text for m in chain.messages]
        state.parked_reason = (
            f"{chain.boundary} hook {stop.hook if stop else '?'}: "
            + ("; ".join(texts) if texts else chain.status)
        )
        self.store.save(state)
        result.status, result.node = state.status, state.current_node
        result.messages = chain.messages
        return result

    # -- helpers ----------------------------------------------------------------------

    def artifacts(self, node: Node, work_item: WorkItem) -> dict[str, str]:
        """Artifact name -> repository-relative path for ``node`` of ``work_item``."""
        base = work_item.spec_dir.rstrip("/")
        return {name: f"{base}/{name}" if base else name for name in node.produces}

    def _session(self, node: Node, state: WorkItemState) -> Session | None:
        if state.session and node.session == "inherit":
            return Session(**state.session)
        return None

    def _check_graph(self, state: WorkItemState) -> None:
        if state.graph_digest == self.graph.digest:
            return
        if state.current_node not in self.graph.nodes:
            raise GraphMismatch(
                f"work item {state.ref} is at node {state.current_node!r}, which the current "
                f"graph ({self.graph.source}) does not have; valid ids: "
                f"{', '.join(self.graph.nodes)}. Move it with `the-loop graph force`."
            )
        log.warning("graph changed under work item %s; continuing at node %s",
                    state.ref, state.current_node)
        self._log(state, "graph.changed",
                  {"from": state.graph_digest, "to": self.graph.digest}, None)
        state.graph_digest = self.graph.digest
        self.store.save(state)

    def _log(
        self, state: WorkItemState, type_: str, data: Mapping[str, Any], event: InboundEvent | None
    ) -> None:
        self.store.append_event(state.ref, type_, data, event.delivery_id if event else None)
