"""The runtime: a state machine, not a scheduler (specification, "The runtime").

``run_chain`` runs one boundary's hooks in declared order; ``Runtime.advance`` runs the
current node's exit chain, persists, takes the edge the outcome names and runs the next
node's entry chain, until the work item waits, blocks, escalates or is done. Every driver
(the RQ worker, ``the-loop run``) calls these same functions.

The runtime names no hook: what it needs to know about one (which outcomes move forward,
which decisions are handed on, which waits are shown, where a gate's decision is recorded,
who publishes the status elsewhere) is declared in its :class:`~graph.model.HookDef`.
Every visible effect, the status comment and the forced-move comment included, goes
through the outbox (:mod:`graph.effects`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from graph import hook_threads
from graph.context import HEAD_MOVED, HookConfig, RevisionFiles
from graph.effects import HookEffects, digest, hook_keys
from graph.errors import LoopError
from graph.markers import marker
from graph.model import (
    Boundary,
    DecisionRecord,
    GateVisit,
    Graph,
    HookCall,
    HookContext,
    HookResult,
    InboundEvent,
    Message,
    Node,
    RecordCheck,
    Session,
    Status,
    WorkItem,
    plain,
)
from graph.monitors import (
    REMINDER,
    REMINDER_EVENT,
    due_reminder,
    forget_reminders,
    reminder_key,
)
from graph.ports import IntegrationError, RetryLater
from graph.state import StateError, StateStore, WorkItemState
from graph.status import render_status, status_effect
from graph.waves import PlanRun
from graph.work import (
    CANCELLED,
    TURN_COMPLETED,
    TurnEnded,
    TurnOrder,
    add_spend,
    spend_of,
    working_line,
)

log = logging.getLogger(__name__)

#: Event kinds after which approved artifacts are compared with what was approved (a push
#: to the pull request; the-loop's own review-record commits change nothing that counts).
CHANGE_KINDS = frozenset({"pull_request.synchronize"})


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


def call_hook(call: HookCall, ctx: HookContext, *,
              on_timeout: Callable[[], None] | None = None) -> HookResult:
    """Run one hook under its timeout (:attr:`HookCall.limit` seconds: the graph's
    ``timeout`` for this call, else ``HookDef.timeout``).

    A hook that raises, or returns something other than a HookResult, is a ``block`` with
    ``retriable=False``; one that runs past its timeout is a retriable ``block``: its
    thread is stopped (:func:`graph.hook_threads.stop`: pure-Python code, CPU-bound or
    not, ends at its next bytecode; what cannot be stopped is watched and, if it keeps
    burning CPU, ends the worker), it can no longer affect the verdict, and
    ``on_timeout`` is called, e.g. to stop its effects. A transient failure
    (:class:`graph.effects.RetryLater`, or a retriable
    :class:`~graph.ports.IntegrationError`: 5xx, rate limit, network) is not a verdict:
    it propagates as ``RetryLater`` so the caller retries the delivery later.

    An integration hook (``HookDef.fails_open``, e.g. ``notify``) never stops the chain:
    its timeout, exception or transient failure is a ``pass`` whose data records it
    (``{"integration_failed": "timeout" | "raised" | "transient", "error": type name}``),
    which the runtime writes to the event log as ``notification.failed``.

    Raises:
        RetryLater: the hook failed transiently.
    """
    box: list[HookResult | BaseException] = []

    def target() -> None:
        try:
            box.append(call.definition.fn(ctx))
        except BaseException as exc:  # noqa: BLE001  (reported as a block below)
            box.append(exc)

    worker = threading.Thread(target=target, name=f"hook-{call.name}", daemon=True)
    worker.start()
    worker.join(call.limit)
    fails_open = call.definition.fails_open
    if not box:
        hook_threads.stop(worker)
        if on_timeout is not None:
            on_timeout()
        log.warning("hook %s ran past its timeout at node %s", call.name, ctx.node.id)
        if fails_open:
            return _failed_open(call, "timeout", "timeout")
        return HookResult.blocked(
            call.name,
            Message(f"hook {call.name} ran past its timeout of {call.limit:g} s",
                    code="hook-timeout"),
            retriable=True,
        )
    outcome = box[0]
    if fails_open and isinstance(outcome, BaseException):
        transient = isinstance(outcome, RetryLater) or (
            isinstance(outcome, IntegrationError) and outcome.retriable)
        log.warning("integration hook %s failed at node %s (%s); recorded, continuing",
                    call.name, ctx.node.id, type(outcome).__name__)
        return _failed_open(call, "transient" if transient else "raised",
                            type(outcome).__name__)
    if isinstance(outcome, RetryLater):
        raise outcome
    if isinstance(outcome, IntegrationError) and outcome.retriable:
        raise RetryLater.from_error(outcome) from outcome
    if isinstance(outcome, HookResult):
        if outcome.hook != call.name:
            outcome = dataclasses.replace(outcome, hook=call.name)
        return outcome
    if isinstance(outcome, BaseException):
        log.error("hook %s raised at node %s", call.name, ctx.node.id, exc_info=outcome)
        kind = type(outcome).__name__
    else:
        kind = f"returned {type(outcome).__name__}, not HookResult"
    return HookResult(
        "block",
        call.name,
        (Message(f"hook {call.name} failed ({kind}); see the-loop's logs", code="hook-raised"),),
        {},
        retriable=False,
    )


def _failed_open(call: HookCall, how: str, error: str) -> HookResult:
    """The ``pass`` of an integration hook that failed (see :func:`call_hook`)."""
    seconds = f" of {call.limit:g} s" if how == "timeout" else ""
    return HookResult(
        "pass", call.name,
        (Message(f"hook {call.name} failed ({how}{seconds}); recorded, the graph continues",
                 code=f"integration-{how}"),),
        {"integration_failed": how, "error": error, "notification_failed": True})


def run_chain(
    calls: tuple[HookCall, ...],
    ctx: HookContext,
    *,
    only_validating: bool = False,
    effects: Callable[[int, HookCall], HookEffects] | None = None,
) -> ChainResult:
    """Run ``calls`` in declared order; the first non-pass short-circuits.

    ``skip`` is recorded and the chain continues. A hook that raises is a ``block`` with
    ``retriable=False``, never a pass; one that times out is a retriable ``block``
    (specification, "Error handling"). See :func:`call_hook`.

    Args:
        calls: the chain (a node's ``entry`` or ``exit``).
        ctx: the context; ``results`` and ``params`` are filled in per hook.
        only_validating: run only hooks registered ``validating=True`` (recompute).
        effects: (position, call) -> the outbox of that hook run; its integrations are
            handed to the hook wrapped (see :mod:`graph.effects`).

    Returns:
        the :class:`ChainResult`.

    Raises:
        RetryLater: a hook failed transiently; the chain stops without a verdict.
    """
    results: list[HookResult] = []
    for position, call in enumerate(calls):
        if only_validating and not call.definition.validating:
            continue
        outbox = effects(position, call) if effects is not None else None
        hook_ctx = dataclasses.replace(
            ctx, results=tuple(results), params=call.params,
            config=outbox.wrap(ctx.config) if outbox is not None else ctx.config)
        result = call_hook(call, hook_ctx, on_timeout=outbox.close if outbox else None)
        results.append(result)
        ctx = dataclasses.replace(ctx, config=with_moved_head(ctx.config, (result,)))
        if result.status in ("block", "wait"):
            return ChainResult(ctx.node.id, ctx.boundary, result.status, result.status,
                               tuple(results))
    outcome = next(
        (r.outcome for r in results if r.status == "pass" and r.outcome != "pass"), "pass"
    )
    return ChainResult(ctx.node.id, ctx.boundary, "pass", outcome, tuple(results))


def with_moved_head(config: HookConfig, results: Sequence[HookResult]) -> HookConfig:
    """``config`` with ``head_sha`` set to the last head a passing hook of ``results``
    moved the pull request branch to (``data[HEAD_MOVED]``), and its files read there
    when the reader can move (:class:`graph.context.RevisionFiles`); else ``config``
    itself."""
    moved = next((str(r.data[HEAD_MOVED]) for r in reversed(results)
                  if r.status == "pass" and r.data.get(HEAD_MOVED)), None)
    if moved is None or moved == config.head_sha:
        return config
    at = getattr(config.files, "at", None)
    files = cast(RevisionFiles, config.files).at(moved) if callable(at) else config.files
    return dataclasses.replace(config, head_sha=moved, files=files)


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
        status: where the work item stands afterwards.
        moves: edges taken, in order.
        chains: every chain run, in order.
        messages: the messages of the last stopping chain (feedback to the work).
        state: the work item's state as the advance left (and saved) it, so a caller
            need not read it back from the store; ``None`` only for results built
            elsewhere.
    """

    ref: str
    node: str
    status: Status
    moves: list[Move] = field(default_factory=list)
    chains: list[ChainResult] = field(default_factory=list)
    messages: tuple[Message, ...] = ()
    state: WorkItemState | None = field(default=None, repr=False, compare=False)


class GraphMismatch(LoopError, RuntimeError):
    """The work item's pinned graph no longer contains its current node."""


class ForceError(LoopError, ValueError):
    """A forced move was refused (no reason, or an unknown target node)."""


@dataclass(frozen=True)
class NodeVerdict:
    """A verdict re-derived from the artifacts (``the-loop check --recompute``).

    Attributes:
        node: node id.
        verdict: ``met``, ``unmet`` or ``unverified`` (nothing offline can decide it).
        reasons: why, in the-loop's words.
        gate: whether the node is a human gate.
        findings: recorded decisions that did not count (unsigned, altered, copied, by
            someone not authorized now), whatever the verdict.
    """

    node: str
    verdict: str
    reasons: tuple[Message, ...] = ()
    gate: bool = False
    findings: tuple[Message, ...] = ()


@dataclass
class ForceResult:
    """What ``force`` did: the move, the warnings it printed, the entry chain it ran."""

    source: str
    target: str
    warnings: list[str]
    bypassed: list[str]
    entry: ChainResult | None = None


#: Message code of a node a gate sent back, waiting for the rejected artifact to change.
AWAITING_REPAIR = "awaiting-repair"


def content_blob(text: str | None, strip: Callable[[str], str] | None) -> str | None:
    """The git blob SHA-1 of ``text`` less what ``strip`` removes (the-loop's own review
    record, ``DecisionRecord.strip``): what "the artifact changed" compares (Git's object
    format: ``sha1(b"blob <size>\\0" + content)``, Pro Git, "Git Objects"). ``None`` for an
    absent file."""
    if text is None:
        return None
    data = (strip(text) if strip is not None else text).encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _fingerprint(result: HookResult | None) -> str:
    texts = "\n".join(m.text for m in result.messages) if result else ""
    return hashlib.sha256(f"{result.hook if result else ''}\n{texts}".encode()).hexdigest()[:16]


class Unloaded:
    """The type of :data:`UNLOADED`: a work item's state not loaded by the caller."""

    def __repr__(self) -> str:
        return "UNLOADED"


#: ``state=UNLOADED`` (:meth:`Runtime.enrol`, :meth:`Runtime.advance`): the runtime loads
#: the state itself (:meth:`Runtime.load`).
UNLOADED = Unloaded()


class Runtime:
    """Drives work items through a compiled graph, persisting to a :class:`StateStore`.

    Args:
        graph: the compiled graph.
        store: where state and the event log live.
    """

    def __init__(self, graph: Graph, store: StateStore, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.graph = graph
        self.store = store
        self.clock = clock  # the monitors' and the joins' clock (controlled in tests)

    # -- entry points -----------------------------------------------------------------

    def enrol(
        self,
        work_item: WorkItem,
        config: HookConfig,
        event: InboundEvent | None,
        *,
        repo: Path | None = None,
        state: WorkItemState | None | Unloaded = UNLOADED,
    ) -> AdvanceResult:
        """Make ``work_item`` a work item at the graph's start node (if it is not one yet)
        and advance it. Idempotent: an enrolled item is simply advanced.

        ``state``: the work item's state as the caller loaded it (``None``: not enrolled;
        the store is not read again), or :data:`UNLOADED` (loaded here)."""
        state = self._given(work_item, config, repo, state)
        if state is None:
            state = WorkItemState(work_item.ref, self.graph.digest, self.graph.start)
            self._enter(state, self.graph.start, via="enrolled")
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
        state: WorkItemState | None | Unloaded = UNLOADED,
    ) -> AdvanceResult | None:
        """Advance an enrolled work item on ``event``; ``None`` if it is not enrolled.
        ``state``: as for :meth:`enrol`.

        The triggering event is seen by the first exit chain only; nodes entered during
        the same advance evaluate on a tick (``event=None``), so one ``/approve`` never
        approves two gates.

        Raises:
            (A work item whose node the deployed graph changed or removed is not
            evaluated: it is escalated, naming the nodes, until it is migrated.)
        """
        state = self._given(work_item, config, repo, state)
        if state is None:
            return None
        return self._advance(state, work_item, config, event, repo)

    def _given(self, work_item: WorkItem, config: HookConfig, repo: Path | None,
               state: WorkItemState | None | Unloaded) -> WorkItemState | None:
        """``state`` as the caller loaded it (an older record's history imported), or
        loaded here when :data:`UNLOADED`."""
        if isinstance(state, Unloaded):
            return self.load(work_item, config, repo=repo)
        return self._imported(state)

    def load(
        self, work_item: WorkItem, config: HookConfig, *, repo: Path | None = None
    ) -> WorkItemState | None:
        """Load ``work_item``'s state. State is a cache: if it is unreadable, it is rebuilt
        by re-running the validators over the artifacts (:meth:`derive`), the bad copy is
        kept aside, and a warning is logged and recorded."""
        try:
            state = self.store.load(work_item.ref)
        except StateError as exc:
            log.warning("state of %s is unreadable (%s); reconstructing from artifacts",
                        work_item.ref, exc)
            aside = self.store.quarantine(work_item.ref)
            verdicts = self.derive(work_item, config, repo=repo)
            state = self.reconstruct(work_item, config, repo=repo, verdicts=verdicts)
            self.store.save(state)
            findings = [m.to_dict() for v in verdicts for m in v.findings]
            for finding in findings:
                log.warning("state of %s rebuilt without a record: %s", work_item.ref,
                            finding["text"])
            self._log(state, "state.reconstructed",
                      {"node": state.current_node, "kept_aside": aside,
                       "findings": findings}, None)
            self._log(state, "node.entered", {
                "node": state.current_node, "via": "reconstructed",
                "at": state.visit_started, "forced": False,
                "visit": state.visit}, None)
            return state
        return self._imported(state)

    def _imported(self, state: WorkItemState | None) -> WorkItemState | None:
        """``state``, a record of an older format's per-step lists moved into the event
        log (logged before the record without them is saved: a crash logs them twice,
        never loses them)."""
        if state is not None and state.legacy:
            self._log(state, "history.imported", state.legacy, None)
            state.legacy = {}
            state.effects_reset = True  # its effects were inside the record
            self.store.save(state)
        return state

    # -- the loop ---------------------------------------------------------------------

    def _advance(
        self,
        state: WorkItemState,
        work_item: WorkItem,
        config: HookConfig,
        event: InboundEvent | None,
        repo: Path | None,
    ) -> AdvanceResult:
        """Walk the graph on ``event`` (:meth:`_walk`), then settle what shows the node
        the walk left the work item at (:meth:`_settle`): once per delivery, so a node
        passed through gets no label of its own. A retried delivery settles again, and
        the outbox makes that converge (done effects are not made twice)."""
        result = self._walk(state, work_item, config, event, repo)
        moved = with_moved_head(config, [r for c in result.chains for r in c.results])
        blocked = self._settle(state, work_item, moved)
        if blocked is not None:
            return self._park(state, work_item, moved, blocked, result)
        return result

    def _settle(self, state: WorkItemState, work_item: WorkItem,
                config: HookConfig) -> ChainResult | None:
        """Call ``HookDef.on_settle`` of each hook in the current node's entry chain
        (``set-phase-label``: the phase label swap), through the outbox under that entry
        call's effect ids ``<ref>/<node>/<visit>/<hook>/<n>``: within one node visit a
        done effect is not made again, a pending one (a crash) is made again.

        Returns:
            the ``block`` (an entry chain of the settling results) when one did not
            settle (it raised, or ran past its timeout), for :meth:`_park`; else ``None``.

        Raises:
            RetryLater: a transient failure (the delivery is retried).
        """
        node = self.graph.nodes.get(state.current_node)
        if node is None:  # the deployed graph dropped it: held until it is migrated
            return None
        scope = self._effects(node, "entry", state, work_item)
        ctx = self._context(node, "entry", {}, state, work_item, config)
        for position, call in enumerate(node.entry):
            settle = call.definition.on_settle
            if settle is None:
                continue
            outbox = scope(position, call)
            settling = dataclasses.replace(
                call, definition=dataclasses.replace(call.definition, fn=settle))
            result = call_hook(settling, dataclasses.replace(
                ctx, params=call.params, config=outbox.wrap(config)),
                on_timeout=outbox.close)
            if result.status == "block":
                return ChainResult(node.id, "entry", "block", "block", (result,))
        return None

    def _walk(
        self,
        state: WorkItemState,
        work_item: WorkItem,
        config: HookConfig,
        event: InboundEvent | None,
        repo: Path | None,
    ) -> AdvanceResult:
        held = self._check_graph(state)
        if state.risk_tier != work_item.risk_tier:
            self._log(state, "work-item.risk-tier",
                      {"from": state.risk_tier, "to": work_item.risk_tier}, event)
            state.risk_tier = work_item.risk_tier  # saved with what follows
        result = AdvanceResult(ref=state.ref, node=state.current_node, status=state.status,
                               state=state)
        if held:  # the graph changed under it: escalated until it is migrated
            if state.current_node in self.graph.nodes:
                self._publish(state, work_item, config, self.graph.node(state.current_node), ())
            return result
        self._retry_forced(state, work_item, config)
        if state.status == Status.DONE:
            return result
        if event is not None and event.kind == REMINDER:
            self._remind(state, work_item, config)  # a monitor's sweep: nothing to evaluate
            return result
        if event is not None and event.delivery_id == state.last_event:
            # The same delivery again (a retried job): it was consumed before; only what
            # it left unfinished (an entry chain, an effect) runs, on a tick.
            log.info("delivery %s already consumed by %s; evaluating on a tick",
                     event.delivery_id, state.ref)
            event = None
        if event is not None and event.kind in CHANGE_KINDS and _reapprove(config):
            changed = self._changed_approval(state, work_item, config)
            if changed is not None:
                gate, paths = changed
                state.last_event = event.delivery_id
                self._reopen(state, gate, via="reapproval", code="approval-invalidated",
                             text=(f"{', '.join(f'`{p}`' for p in paths)} changed after gate "
                                   f"`{gate}` approved it, so the work item is back at "
                                   f"`{gate}` for a new approval"),
                             data={"paths": paths}, event=event)
                event = None
        # Bound the walk: without new events, a cycle of passing nodes must not spin.
        for _ in range(2 * len(self.graph.nodes) + 2):
            node = self.graph.node(state.current_node)
            if state.entry_pending:
                chain = self._run(node, "entry", state, work_item, config, event, repo)
                result.chains.append(chain)
                config = with_moved_head(config, chain.results)
                if chain.status != "pass":
                    return self._park(state, work_item, config, chain, result)
                state.entry_pending = False
                self.store.save(state)
            if self.graph.is_terminal(node.id):
                state.status = Status.DONE
                state.parked_reason = None
                self.store.save(state)
                self._log(state, "work-item.done", {"node": node.id}, None)
                result.status, result.node = Status.DONE, node.id
                self._publish(state, work_item, config, node, ())
                return result
            ended: TurnEnded | None = None
            if self._works(node, state, config) and node.plan is not None:
                planned = PlanRun(self).step(state, work_item, config, node, event, result,
                                             repo)
                if planned is not None:  # the plan's waves are still running
                    return planned
                if state.turn is not None:  # a repair turn of the node's own session
                    ended = self._turn_ended(state, node, event)
                    if ended is None:
                        return self._await_turn(state, work_item, config, node, result)
            elif self._works(node, state, config):
                ended = self._turn_ended(state, node, event)
                if ended is None:  # the agent's turn is still to come: nothing to check yet
                    return self._await_turn(state, work_item, config, node, result)
            unrepaired = None
            if ended is None or ended.ok:
                unrepaired = self._unrepaired(node, state, work_item, config,
                                              after_turn=ended is not None)
            if ended is not None and not ended.ok:
                chain = self._failed_turn(node, ended)
                self._record(state, chain, event)
            elif unrepaired is not None:
                chain = unrepaired
                self._record(state, chain, event)
            else:
                chain = self._run(node, "exit", state, work_item, config, event, repo)
            if event is not None:
                state.last_event = event.delivery_id  # persisted with what follows
            event = None  # consumed by the first exit chain
            result.chains.append(chain)
            # A hook committed to the branch (a review record): what follows is evaluated
            # at the new head, so no check run lands on the commit it replaced.
            config = with_moved_head(config, chain.results)
            if chain.status != "pass":
                return self._park(state, work_item, config, chain, result)
            edge = self.graph.edge(node.id, chain.outcome)
            if edge is None:
                msg = Message(
                    f"no edge leaves node {node.id} on outcome {chain.outcome}; "
                    "the graph does not say where to go",
                    code="no-edge",
                )
                blocked = ChainResult(node.id, "exit", "block", "block",
                                      chain.results + (HookResult("block", "runtime", (msg,),
                                                                  retriable=False),))
                return self._park(state, work_item, config, blocked, result)
            state.outcomes[node.id] = chain.outcome
            state.next_input.pop(node.id, None)
            handoff = self._handoff(node, chain)
            rejected = self._rejected(node, chain, edge.target, work_item, config)
            self._enter(state, edge.target, via=chain.outcome)
            if handoff:
                state.next_input[edge.target] = {"feedback": handoff}
            if rejected:
                state.next_input.setdefault(edge.target, {})["rejected"] = rejected
            # Persist BEFORE the next node's entry hooks perform side effects.
            self.store.save(state)
            self._log(state, "edge.taken",
                      {"from": edge.source, "to": edge.target, "on": edge.on}, None)
            result.moves.append(Move(edge.source, edge.target, edge.on))
            result.node, result.status = edge.target, Status.ACTIVE
        return result

    def _handoff(self, node: Node, chain: ChainResult) -> dict[str, Any] | None:
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

    # -- repair after changes-requested -------------------------------------------------

    def _rejected(self, gate: Node, chain: ChainResult, target: str, work_item: WorkItem,
                  config: HookConfig) -> dict[str, Any] | None:
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
        produced = set(self.graph.node(target).produces)
        names = [a for a in gate_artifacts(self.graph, gate) if a in produced]
        base: dict[str, Any] = {"gate": gate.id, "outcome": chain.outcome}
        if names:
            blobs = {}
            for name in names:
                path = self.artifacts_for(work_item, name)
                blobs[path] = content_blob(config.files.read_text(path), strip)
            return {**base, "blobs": blobs}
        if config.head_sha:
            return {**base, "head_sha": config.head_sha}
        return None

    def _unrepaired(self, node: Node, state: WorkItemState, work_item: WorkItem,
                    config: HookConfig, *, after_turn: bool) -> ChainResult | None:
        """The verdict of a node a gate sent back while what the gate rejected is
        unchanged (specification: changes-requested means repair): a ``wait`` for the
        work (a push, the harness's turn), or, after a turn that changed nothing, a
        ``block`` whose message is the next turn's input. ``None``: repaired (or nothing
        was rejected), the exit chain runs."""
        rejected = (state.next_input.get(node.id) or {}).get("rejected")
        if not isinstance(rejected, Mapping):
            return None
        gate = self.graph.nodes.get(str(rejected.get("gate")))
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

    def _work_token(self, node: Node, state: WorkItemState, work_item: WorkItem,
                    config: HookConfig) -> str:
        """What changes when the node's work takes a turn: the harness turns ordered in
        this visit and the content of the node's artifacts (the pull request head for a
        node that declares none). Two blocks with the same token are not separated by
        a repair attempt."""
        parts = [str(state.turns.get(node.id, 0))]
        if node.produces:
            for name in node.produces:
                path = self.artifacts_for(work_item, name)
                parts.append(f"{path}={content_blob(config.files.read_text(path), None)}")
        else:
            parts.append(f"head={config.head_sha}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def _enter(self, state: WorkItemState, node_id: str, *, via: str,
               forced: bool = False, log_entry: bool = True) -> None:
        """Move the pointer and bind the node's harness session: an agent node keeps its
        own session across visits (so changes-requested returns to the same one); a gate
        with ``session: inherit`` reuses the session of the node that produces its
        artifacts (:meth:`_producers`), whatever path the work item took there, or starts
        a fresh one seeded with the artifacts. The step is logged (``node.entered``)
        unless ``log_entry`` is false (a scratch state)."""
        forget_reminders(state, node_id)
        entered = state.enter(node_id, via=via, forced=forced)
        if log_entry:
            self._log(state, "node.entered", entered, None)
        node = self.graph.node(node_id)
        session: dict[str, Any] | None = None
        if node.session == "inherit":
            inherited = next((state.sessions[p] for p in self._producers(node)
                              if state.sessions.get(p)), None)
            if inherited:
                session = dict(inherited)
            else:
                session = {"id": str(uuid.uuid4()), "runner": "harness", "cwd": None,
                           "seeded_with": gate_artifacts(self.graph, node)}
        elif node.actor == "agent":
            session = state.sessions.get(node_id) or {
                "id": str(uuid.uuid4()), "runner": "harness", "cwd": None}
        if session is not None:
            state.sessions[node_id] = session
        state.session = session

    def _producers(self, gate: Node) -> list[str]:
        """Nodes whose session a ``session: inherit`` gate takes, in preference order:
        those that produce the artifacts it reviews (``produces`` against
        :func:`gate_artifacts`), then the agent nodes with an edge into it."""
        reviewed = set(gate_artifacts(self.graph, gate))
        found = [n.id for n in self.graph.nodes.values()
                 if n.id != gate.id and reviewed & set(n.produces)]
        for edge in self.graph.edges:
            source = self.graph.node(edge.source)
            if edge.target == gate.id and source.actor == "agent" and source.id not in found:
                found.append(source.id)
        return found

    def _run(
        self,
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
        calls = node.entry if boundary == "entry" else node.exit
        ctx = self._context(node, boundary, {}, state, work_item, config, event=event,
                            repo=repo)
        effects = self._effects(node, boundary, state, work_item) if record else None
        chain = run_chain(calls, ctx, only_validating=only_validating, effects=effects)
        if record:
            self._record(state, chain, event)
        return chain

    def _context(self, node: Node, boundary: Boundary, params: Mapping[str, Any],
                 state: WorkItemState, work_item: WorkItem, config: HookConfig, *,
                 event: InboundEvent | None = None, repo: Path | None = None) -> HookContext:
        """The context a hook at ``node``'s ``boundary`` sees (``results`` empty). At a
        gate, ``artifacts`` are the artifacts it reviews and ``gate`` its visit."""
        gate = None
        artifacts = self.artifacts(node, work_item)
        if node.is_gate:
            artifacts = {name: self.artifacts_for(work_item, name)
                         for name in gate_artifacts(self.graph, node)}
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
            session=self._session(state),
            event=event,
            results=(),
            config=config,
            params=params,
            visit=state.visit,
            gate=gate,
        )

    def _effects(self, node: Node, boundary: Boundary, state: WorkItemState,
                 work_item: WorkItem) -> Callable[[int, HookCall], HookEffects]:
        """The outbox factory of one chain run: effect ids ``<ref>/<node>/<visit>/<hook>``
        + ``/<n>``, recorded in ``state.effects`` and saved before each side effect."""
        keys = hook_keys(tuple(c.name for c in node.entry), tuple(c.name for c in node.exit))

        def scope(position: int, call: HookCall) -> HookEffects:
            hook_key = keys.get((boundary, position), call.name)
            return HookEffects(state, self.store,
                               f"{work_item.ref}/{node.id}/{state.visit}/{hook_key}")

        return scope

    def _record(self, state: WorkItemState, chain: ChainResult, event: InboundEvent | None) -> None:
        state.results.setdefault(chain.node, {})[chain.boundary] = [
            r.to_dict() for r in chain.results
        ]
        for r in chain.results:
            decision = r.data.get("decision")
            if isinstance(decision, Mapping):
                self._log(state, "decision.recorded", state.record_decision(decision), event)
            vote = r.data.get("vote")
            if isinstance(vote, Mapping) and vote.get("source"):
                votes = state.votes.setdefault(chain.node, [])
                if all(v.get("source") != vote.get("source") for v in votes):
                    votes.append(dict(vote))
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
            if r.data.get("notification_failed"):
                self._log(state, "notification.failed",
                          {"channel": r.hook, "node": chain.node,
                           "error": r.data.get("error") or r.data.get("integration_failed")
                           or "failed"}, event)
        for r in chain.results:
            checkpoint = r.data.get("checkpoint")
            if isinstance(checkpoint, Mapping):
                self._log(state, "checkpoint", dict(checkpoint), event)

    def _park(
        self,
        state: WorkItemState,
        work_item: WorkItem,
        config: HookConfig,
        chain: ChainResult,
        result: AdvanceResult,
    ) -> AdvanceResult:
        """Stop at the current node: ``waiting`` on a wait; on a block, record the
        messages as the node's next input, count the attempt, and escalate to a human
        when the block is terminal, repeats the previous one, or exhausts ``attempts``."""
        node = self.graph.node(chain.node)
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
            fingerprint = _fingerprint(stop)
            token = self._work_token(node, state, work_item, config)
            previous_fp, _, previous_token = state.last_block.get(node.id, "").partition("/")
            worked = not previous_fp or previous_token != token
            attempts = state.attempts.get(node.id, 0) + (1 if worked else 0)
            state.attempts[node.id] = attempts
            repeated = worked and previous_fp == fingerprint
            state.last_block[node.id] = f"{fingerprint}/{token}"
            state.next_input.setdefault(node.id, {})["block"] = {
                "hook": stop.hook if stop else None,
                "boundary": chain.boundary,
                "messages": [m.to_dict() for m in chain.messages],
            }
            hook_name = stop.hook if stop else "?"
            if stop is not None and not stop.retriable:
                escalation = f"hook {hook_name} failed in a way retrying cannot fix"
            elif repeated:
                escalation = f"hook {hook_name} blocked twice with the same finding"
            elif attempts >= node.attempts:
                escalation = (f"node {node.id} blocked {attempts} times "
                              f"(its limit is {node.attempts})")
            if escalation:
                self._escalate(state, node, escalation, attempts=attempts)
            elif state.escalated:
                state.status = Status.ESCALATED
            else:
                state.status = Status.BLOCKED
                if chain.boundary == "exit" and self._works(node, state, config):
                    # do -> check -> repair: the block's messages are the next turn's input.
                    self._order_turn(state, work_item, config, node)
        self.store.save(state)
        result.status, result.node = state.status, state.current_node
        result.messages = chain.messages
        shown = chain.messages if chain.status == "block" else tuple(
            m for m in chain.messages if m.code in node.shown_waits | {AWAITING_REPAIR})
        self._publish(state, work_item, config, node, shown, hook=stop.hook if stop else None)
        return result

    # -- agent work (graph.work) -------------------------------------------------------

    @staticmethod
    def _works(node: Node, state: WorkItemState, config: HookConfig) -> bool:
        """Whether ``node``'s work is a harness turn the runtime orders: an agent node,
        a harness configured, and no human asked to step in (an escalated agent node is
        evaluated on every event, as when a person does the work)."""
        return node.actor == "agent" and config.work is not None and not state.escalated

    def _turn_ended(self, state: WorkItemState, node: Node,
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
        if ended.session_id:
            session["id"] = ended.session_id
        if ended.harness_session:
            session["resume"] = ended.harness_session
        state.session = session
        self._log(state, "turn.completed", {
            "node": node.id, "turn": live.get("number"), "status": ended.status,
            "cost_usd": ended.cost_usd, "seconds": ended.seconds, "head_sha": ended.head_sha,
            "session": session.get("id")}, event)
        return ended

    @staticmethod
    def _failed_turn(node: Node, ended: TurnEnded) -> ChainResult:
        """A turn that did not run to its end is a block of the work itself (cancelled by
        an operator: one retrying cannot fix)."""
        reason = ended.detail or ended.status
        message = Message(f"the agent's turn ended without completing ({ended.status}: "
                          f"{reason})", code=f"turn-{ended.status}")
        result = HookResult.blocked("harness", message,
                                    retriable=ended.status != CANCELLED)
        return ChainResult(node.id, "exit", "block", "block", (result,))

    def _await_turn(self, state: WorkItemState, work_item: WorkItem, config: HookConfig,
                    node: Node, result: AdvanceResult) -> AdvanceResult:
        """No report of the node's turn yet: order the first turn, or (an event while a
        turn is out, a retried delivery) place the outstanding order again, which the
        runner runs once."""
        work = config.work
        assert work is not None
        if state.turn is None:
            self._order_turn(state, work_item, config, node)
        else:
            state.status = Status.WORKING
            self.store.save(state)
            work.order(TurnOrder.from_dict(state.turn["order"]))
        result.status, result.node = state.status, state.current_node
        self._publish(state, work_item, config, node, ())
        return result

    def _order_turn(self, state: WorkItemState, work_item: WorkItem, config: HookConfig,
                    node: Node) -> None:
        """Order the node's next turn (status ``working``), or escalate when the visit's
        turns (``harness.maxTurns``) or the work item's cost cap are used up. The order
        is saved before it is placed (a crash in between places it again)."""
        work = config.work
        assert work is not None
        number = state.turns.get(node.id, 0) + 1
        spent = spend_of(state.spend)["cost_usd"]
        if number > work.max_turns:
            self._escalate(state, node, f"node {node.id} used its {work.max_turns} agent turns")
            return
        if work.cost_cap_usd is not None and spent >= work.cost_cap_usd:
            self._escalate(state, node, f"the agent's cost cap of ${work.cost_cap_usd:.2f} "
                                        f"for this work item is reached (${spent:.2f} spent)")
            return
        session = state.sessions.get(node.id) or {"id": str(uuid.uuid4()),
                                                  "runner": "harness", "cwd": None}
        state.sessions[node.id] = state.session = session
        order = TurnOrder(
            id=f"{work_item.ref}/{node.id}/{state.visit}/turn/{number}",
            ref=work_item.ref, node=node.id, visit=state.visit, number=number,
            max_turns=work.max_turns, session_id=str(session["id"]),
            resume=session.get("resume"), command=node.command, stage=node.stage,
            artifacts=tuple(self.artifacts(node, work_item).values()),
            checks=tuple({"hook": c.name, "with": plain(c.params)} for c in node.exit),
            feedback=dict(state.next_input.get(node.id) or {}),
            seeded_with=tuple(self.artifacts_for(work_item, a) for a in
                              gate_artifacts(self.graph, node)),
        )
        state.turns[node.id] = number
        state.turn = {"id": order.id, "node": node.id, "number": number,
                      "status": "ordered", "at": time.time(), "order": order.to_dict()}
        state.status = Status.WORKING
        state.parked_reason = working_line(number, work.max_turns, state.spend)
        self.store.save(state)
        self._log(state, "turn.ordered", {"node": node.id, "turn": number,
                                          "session": order.session_id,
                                          "resume": order.resume is not None}, None)
        work.order(order)

    def _escalate(self, state: WorkItemState, node: Node, reason: str, *,
                  attempts: int | None = None) -> None:
        """Ask a human to step in at ``node`` (status ``escalated`` until it moves on)."""
        state.status = Status.ESCALATED
        state.escalated = {"node": node.id, "reason": reason, "at": time.time()}
        state.turn = None
        data: dict[str, Any] = {"node": node.id, "reason": reason}
        if attempts is not None:
            data["attempts"] = attempts
        self._log(state, "work-item.escalated", data, None)

    def _publish(
        self,
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
        "Notification hook fails")."""
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
            outbox = HookEffects(state, self.store, f"{status_effect(state.ref)}/{call.name}")
            boundary: Boundary = "entry" if call in node.entry else "exit"
            ctx = self._context(node, boundary, call.params, state, work_item,
                                outbox.wrap(config))
            try:
                on_status(ctx, state.status, summary)
            except Exception as exc:  # noqa: BLE001  (recorded; the graph must not wedge)
                self._log(state, "notification.failed",
                          {"channel": call.name, "error": type(exc).__name__}, None)
        github = config.integrations.get("github")
        if github is None or work_item.repository is None or work_item.id is None:
            return
        effect = status_effect(state.ref)
        try:
            outbox = HookEffects(state, self.store, effect, own=config.own)
            outbox.github(github, effect=effect, in_place=True).comment(
                repo=work_item.repository, number=work_item.id, body=body)
        except Exception as exc:  # noqa: BLE001  (recorded; the graph must not wedge)
            log.warning("status comment for %s not published (%s)", state.ref,
                        type(exc).__name__)
            self._log(state, "notification.failed",
                      {"channel": "github-status", "error": type(exc).__name__}, None)
            return
        state.status_digest = body_digest
        self.store.save(state)

    # -- gates re-opened, notes ----------------------------------------------------------

    def reopen(self, work_item: WorkItem, config: HookConfig, gate: str, *, via: str,
               code: str, text: str, data: Mapping[str, Any] | None = None,
               event: InboundEvent | None = None,
               repo: Path | None = None) -> AdvanceResult | None:
        """Return the work item to ``gate`` for a new decision, loudly: the gate's latest
        decision is marked invalidated, the move is logged (``gate.reopened``), the
        status comment says why (``text``, the-loop's own words) and the gate's entry
        chain runs again (a new visit: a new review request, the check run in progress).

        Args:
            via: why, as the history records it (``reopened``, ``reapproval``, ``draft``).
            code: the note's code (``review-dismissed``...).

        Returns:
            the advance that followed, or ``None`` when ``work_item`` has no state.

        Raises:
            KeyError: ``gate`` is not a node of the graph.
        """
        self.graph.node(gate)
        state = self.load(work_item, config, repo=repo)
        if state is None:
            return None
        if event is not None:
            state.last_event = event.delivery_id
        self._reopen(state, gate, via=via, code=code, text=text, data=data or {}, event=event)
        return self._advance(state, work_item, config, None, repo)

    def _reopen(self, state: WorkItemState, gate: str, *, via: str, code: str, text: str,
                data: Mapping[str, Any], event: InboundEvent | None) -> None:
        source = state.current_node
        standing = state.standing.get(gate)
        if standing is not None and "invalidated" not in standing["decision"]:
            voided = {"via": via, "at": time.time()}
            standing["decision"]["invalidated"] = voided
            self._log(state, "decision.invalidated",
                      {"index": standing["index"], "node": gate, **voided}, event)
        self._enter(state, gate, via=via)
        state.note(code, text)
        self.store.save(state)
        self._log(state, "gate.reopened", {"gate": gate, "from": source, "via": via,
                                           "code": code, **data}, event)

    def note(self, work_item: WorkItem, config: HookConfig, code: str, text: str, *,
             data: Mapping[str, Any] | None = None,
             event: InboundEvent | None = None) -> bool:
        """Record ``text`` (the-loop's own words) in the event log (``note``) and show it
        in the status comment of the current node visit. Returns ``False`` when the work
        item has no state."""
        state = self.store.load(work_item.ref)
        if state is None:
            return False
        state.note(code, text)
        self.store.save(state)
        self._log(state, "note", {"code": code, "node": state.current_node, **(data or {})},
                  event)
        node = self.graph.node(state.current_node)
        block = (state.next_input.get(node.id) or {}).get("block") or {}
        messages = tuple(Message.from_dict(m) for m in block.get("messages") or ()
                         if state.status in (Status.BLOCKED, Status.ESCALATED))
        self._publish(state, work_item, config, node, messages,
                      hook=block.get("hook") if messages else None)
        return True

    def later_gate_passed(self, state: WorkItemState, index: int) -> bool:
        """Whether another gate's standing decision, recorded after the decision
        ``index``, passed it (one of its forward outcomes, not invalidated since)."""
        decided = state.decision(index)
        gate = decided.get("node") if decided is not None else None
        for later_index, later in state.standing_decisions():
            if later_index <= index:
                continue
            node = self.graph.nodes.get(str(later.get("node")))
            if (node is not None and node.id != gate and not later.get("invalidated")
                    and later.get("outcome") in node.forward_outcomes):
                return True
        return False

    def _changed_approval(self, state: WorkItemState, work_item: WorkItem,
                          config: HookConfig) -> tuple[str, list[str]] | None:
        """The first gate behind the work item whose standing approval is bound to
        artifacts that changed since (their fingerprint differs), with those paths."""
        behind = self._gates_between(self.graph.start, state.current_node)
        for gate_id in behind:
            if gate_id == state.current_node:
                continue
            gate = self.graph.node(gate_id)
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

    # -- monitors (graph.monitors) ------------------------------------------------------

    def remind(self, work_item: WorkItem, config: HookConfig) -> int | None:
        """Send the reminder of a stale gate if one is due (:func:`graph.monitors.
        due_reminder` at :attr:`clock`'s now).

        Returns:
            the freshness period reminded, or ``None`` (nothing due, or not a work item).
        """
        state = self.load(work_item, config)
        return None if state is None else self._remind(state, work_item, config)

    def _remind(self, state: WorkItemState, work_item: WorkItem,
                config: HookConfig) -> int | None:
        """Run the gate's ``notify`` calls with the reminder event, through the outbox
        (effect ``<ref>/<node>/<visit>/reminder-<k>/<hook>``: once per period), then
        record the period in state and the event log."""
        period = due_reminder(state, self.graph, self.clock())
        if period is None:
            return None
        node = self.graph.node(state.current_node)
        calls = tuple(dataclasses.replace(c, params=MappingProxyType(
            {**c.params, "event": REMINDER_EVENT})) for c in node.entry if c.name == "notify")
        key = reminder_key(node.id, state.visit)
        state.reminders[key] = period  # before the effects: a crash never sends it twice
        self.store.save(state)
        if calls:
            ctx = self._context(node, "entry", {}, state, work_item, config)

            def scope(position: int, call: HookCall) -> HookEffects:
                return HookEffects(state, self.store, f"{work_item.ref}/{node.id}/"
                                                      f"{state.visit}/reminder-{period}/"
                                                      f"{call.name}-{position}")

            chain = run_chain(calls, ctx, effects=scope)
            sent = [r.data.get("sent") for r in chain.results]
        else:
            sent = []
        self._log(state, "monitor.reminded", {"node": node.id, "period": period,
                                              "freshness": node.freshness,
                                              "sent": sent}, None)
        self.store.save(state)
        return period

    # -- the escape hatch -------------------------------------------------------------

    def force(
        self,
        work_item: WorkItem,
        config: HookConfig,
        target: str,
        reason: str,
        *,
        repo: Path | None = None,
        operator: str | None = None,
    ) -> ForceResult:
        """Move the pointer to ``target``; never forge a verdict (specification, "The
        escape hatch"). The move is recorded as forced in state, in the event log (an
        entry and an execution-log checkpoint) and in a marked comment on the work item;
        bypassed gates keep their real verdicts. The target's entry chain runs (so a
        backwards move re-enters the node).

        Raises:
            ForceError: empty ``reason``; unknown ``target`` (naming the valid ids); the
                work item has no state.
        """
        if not reason or not reason.strip():
            raise ForceError("--reason is required: an unexplained override is refused")
        if target not in self.graph.nodes:
            raise ForceError(f"unknown node {target!r}; valid ids: {', '.join(self.graph.nodes)}")
        state = self.load(work_item, config, repo=repo)
        if state is None:
            raise ForceError(f"{work_item.ref} is not a work item (no state)")
        source = state.current_node
        undeclared = target != source and not any(
            e.target == target for e in self.graph.outgoing(source))
        bypassed = self._gates_between(source, target)
        record = {"from": source, "to": target, "reason": reason.strip(),
                  "bypassed": bypassed, "undeclared": undeclared, "operator": operator,
                  "at": time.time()}
        warnings = self._force_warnings(record)
        state.forced_count += 1
        state.last_forced = record
        self._enter(state, target, via="forced", forced=True)
        self.store.save(state)
        self._log(state, "work-item.forced", record, None)
        self._log(state, "checkpoint", {"node": target, "boundary": "forced",
                                        "from": source, "reason": reason.strip()}, None)
        self._comment_forced(state, work_item, config, state.forced_count)
        node = self.graph.node(target)
        entry = self._run(node, "entry", state, work_item, config, None, repo)
        if entry.status == "pass":
            state.entry_pending = False
            entry = self._settle(state, work_item, config) or entry
        if entry.status != "pass":
            state.status = Status.BLOCKED
        self.store.save(state)
        return ForceResult(source, target, warnings, bypassed, entry)

    def _gates_between(self, source: str, target: str) -> list[str]:
        """Gates a forward move from ``source`` to ``target`` skips: those on the
        shortest path of forward edges (``source`` itself included when it is a gate).
        A target not reachable forwards is a backwards move and bypasses nothing."""
        if source == target:
            return []
        previous: dict[str, str | None] = {source: None}
        frontier = [source]
        while frontier and target not in previous:
            nxt = []
            for node_id in frontier:
                forward = self.graph.node(node_id).forward_outcomes
                for edge in self.graph.outgoing(node_id):
                    if edge.on in forward and edge.target not in previous:
                        previous[edge.target] = node_id
                        nxt.append(edge.target)
            frontier = nxt
        if target not in previous:
            return []  # not reachable forwards: a backwards move bypasses nothing
        path = []
        step = previous[target]
        while step is not None:
            path.append(step)
            step = previous[step]
        return [n for n in reversed(path) if self.graph.node(n).is_gate]

    def _retry_forced(self, state: WorkItemState, work_item: WorkItem,
                      config: HookConfig) -> None:
        """Post again the forced-move comments of this node visit still pending (a failed
        or unanswered post; the outbox finds one that landed by its marker). Entering a
        node replaces the outbox, so only the newest forced move's can be pending."""
        n = state.forced_count
        pending = state.effects.get(f"{state.ref}/forced/{n}") if n else None
        if pending and pending.get("status") == "pending" and state.last_forced:
            self._comment_forced(state, work_item, config, n)

    def _force_warnings(self, record: Mapping[str, Any]) -> list[str]:
        """What a forced move (a ``work-item.forced`` record) waives, in the-loop's words."""
        warnings = []
        if record.get("undeclared"):
            warnings.append(f"no edge leads from {record['from']} to {record['to']}: this move "
                            "is outside the graph's model")
        for gate in record.get("bypassed") or ():
            g = self.graph.nodes.get(gate)
            role, phase = (g.role, g.phase) if g is not None else ("?", gate)
            warnings.append(f"bypassing required gate {gate}: the guarantee that a person "
                            f"in role {role} approved phase {phase} is waived")
        return warnings

    def _comment_forced(self, state: WorkItemState, work_item: WorkItem, config: HookConfig,
                        n: int) -> None:
        """Post the comment of the ``n``-th forced move once, through the outbox (effect
        ``<ref>/forced/<n>``). One whose post failed stays pending and is posted again on
        the work item's next evaluation (:meth:`_retry_forced`), reconciled by its marker
        if it landed after all."""
        github = config.integrations.get("github")
        if github is None or work_item.repository is None or work_item.id is None:
            return
        record = state.last_forced or {}
        effect = f"{state.ref}/forced/{n}"
        lines = [f"**the-loop** · an operator forced this work item from `{record['from']}` "
                 f"to `{record['to']}`.", ""]
        lines += [f"- warning: {w}" for w in self._force_warnings(record)]
        lines += ["", "The operator's reason:", "", *forced_reason_quote(record.get("reason"))]
        lines += ["", "The bypassed gates keep their real verdicts: `the-loop check "
                  "--recompute` still reports them.", "", marker(effect)]
        try:
            outbox = HookEffects(state, self.store, effect, own=config.own)
            outbox.github(github, effect=effect).comment(
                repo=work_item.repository, number=work_item.id, body="\n".join(lines))
        except Exception as exc:  # noqa: BLE001  (recorded; never undoes the move)
            self._log(state, "notification.failed",
                      {"channel": "github-forced", "error": type(exc).__name__}, None)

    # -- verdicts from the artifacts ----------------------------------------------------

    def derive(
        self, work_item: WorkItem, config: HookConfig, *, repo: Path | None = None
    ) -> list[NodeVerdict]:
        """Re-derive verdicts from the artifacts alone, ignoring cached state: walk from
        the start node along the graph's forward edges, re-running each node's validating
        exit hooks (a gate is met only if its reviewed artifacts record an approval in
        their ``## Review comments`` section), and stop at the first node that is not met.
        Makes no network call: pass a ``config`` without integrations."""
        verdicts: list[NodeVerdict] = []
        scratch = WorkItemState(work_item.ref, self.graph.digest, self.graph.start)
        node_id: str | None = self.graph.start
        seen: set[str] = set()
        while node_id is not None and node_id not in seen:
            seen.add(node_id)
            node = self.graph.node(node_id)
            verdict = self._derive_node(node, scratch, work_item, config, repo)
            verdicts.append(verdict)
            if verdict.verdict == "unmet" or self.graph.is_terminal(node_id):
                break
            node_id = next((e.target for on in node.forward_outcomes
                            if (e := self.graph.edge(node_id, on)) is not None), None)
        return verdicts

    def _derive_node(self, node: Node, scratch: WorkItemState, work_item: WorkItem,
                     config: HookConfig, repo: Path | None) -> NodeVerdict:
        if node.is_gate:
            reviewed = gate_artifacts(self.graph, node)
            record = decision_record(node)
            if not reviewed or record is None:
                return NodeVerdict(node.id, "unverified", (Message(
                    f"gate {node.id} names no artifact that records its decision",
                    code="gate-unrecorded"),), gate=True)
            missing: list[Message] = []
            findings: list[Message] = []
            role = node.role

            def authorized(login: str, user_id: int | None) -> bool:
                if not role or not config.collaborators.is_authorized(login, str(role)):
                    return False
                # The login is the same person only while its account is (user id).
                known = (config.account_id(login)
                         if config.account_id is not None and user_id is not None else None)
                return known is None or known == user_id
            elsewhere = tuple(config.records_elsewhere()) if config.records_elsewhere else ()
            for name in reviewed:
                path = self.artifacts_for(work_item, name)
                check = RecordCheck(work_item.ref, node.id, path, config.record_keys,
                                    authorized, elsewhere)
                approval = record.approved(config.files.read_text(path), check)
                findings += approval.findings
                if not approval.approved:
                    missing.append(Message(
                        f"{path} records no verified approval of its current content under "
                        "'## Review comments' (none, or the artifact changed after it)",
                        path=path, code="gate-unmet"))
            return NodeVerdict(node.id, "unmet" if missing else "met", tuple(missing), True,
                               tuple(findings))
        validating = [c for c in node.exit if c.definition.validating]
        if not validating:
            return NodeVerdict(node.id, "unverified" if node.exit else "met", (Message(
                f"node {node.id} has no validating exit hook to re-run offline",
                code="not-rederivable"),) if node.exit else ())
        chain = self._run(node, "exit", scratch, work_item, config, None, repo,
                          only_validating=True, record=False)
        if chain.status == "pass":
            return NodeVerdict(node.id, "met")
        return NodeVerdict(node.id, "unmet", chain.messages)

    def reconstruct(
        self, work_item: WorkItem, config: HookConfig, *, repo: Path | None = None,
        verdicts: Sequence[NodeVerdict] | None = None,
    ) -> WorkItemState:
        """A fresh state at the first node whose verdict is not met (see :meth:`derive`;
        ``verdicts``: ones already derived)."""
        if verdicts is None:
            verdicts = self.derive(work_item, config, repo=repo)
        state = WorkItemState(work_item.ref, self.graph.digest, self.graph.start)
        self._enter(state, self.graph.start, via="reconstructed", log_entry=False)
        for previous, verdict in zip(verdicts, verdicts[1:], strict=False):
            if previous.verdict == "unmet":
                break
            self._enter(state, verdict.node, via="reconstructed", log_entry=False)
        last = verdicts[-1] if verdicts else None
        if last and last.verdict == "met" and self.graph.is_terminal(last.node):
            state.status, state.entry_pending = Status.DONE, False
        return state

    # -- helpers ----------------------------------------------------------------------

    def artifacts(self, node: Node, work_item: WorkItem) -> dict[str, str]:
        """Artifact name -> repository-relative path for ``node`` of ``work_item``."""
        return {name: self.artifacts_for(work_item, name) for name in node.produces}

    @staticmethod
    def artifacts_for(work_item: WorkItem, name: str) -> str:
        """Repository-relative path of artifact ``name`` in ``work_item``'s spec dir."""
        base = work_item.spec_dir.rstrip("/")
        return f"{base}/{name}" if base else name

    def _session(self, state: WorkItemState) -> Session | None:
        if not state.session:
            return None
        return Session(id=str(state.session["id"]), runner=str(state.session.get("runner")),
                       cwd=state.session.get("cwd"))

    def drift(self, state: WorkItemState) -> list[str]:
        """Nodes of the graph ``state`` was walked with that no longer match the deployed
        graph (boundaries changed, or gone), sorted, the current node first when it is
        one of them; ``[]`` when the item can go on: same digest, or its current node
        exists with the same boundaries (an item pinned before node digests were kept
        goes on as long as its node exists)."""
        if state.graph_digest == self.graph.digest and not state.drift:
            return []
        now = self.graph.node_digests()
        current = state.current_node
        if current not in self.graph.nodes:
            changed = {current}
        elif not state.node_digests:
            return []
        else:
            changed = {n for n, d in state.node_digests.items() if now.get(n) != d}
            if state.node_digests.get(current) == now.get(current):
                return []
        return sorted(changed, key=lambda n: (n != current, n))

    def _check_graph(self, state: WorkItemState) -> bool:
        """Pin the deployed graph, or hold the item: True when it must not be evaluated
        (its node changed or is gone; escalated, recorded, until ``the-loop state
        migrate``)."""
        if state.graph_digest == self.graph.digest and not state.drift:
            if not state.node_digests:
                state.node_digests = self.graph.node_digests()
                self.store.save(state)
            return False
        changed = self.drift(state)
        if not changed:
            log.info("graph changed under work item %s; node %s unchanged, going on",
                     state.ref, state.current_node)
            self._log(state, "graph.changed",
                      {"from": state.graph_digest, "to": self.graph.digest,
                       "node": state.current_node, "migrated": "unchanged-node"}, None)
            state.graph_digest = self.graph.digest
            state.node_digests = self.graph.node_digests()
            state.drift = None
            self.store.save(state)
            return False
        record = {"from": state.graph_digest, "to": self.graph.digest, "nodes": changed}
        if state.drift is None or state.drift.get("to") != self.graph.digest:
            reason = (f"the deployed graph ({self.graph.source}) changed node(s) "
                      f"{', '.join(changed)} under this work item at {state.current_node}; "
                      f"move it with `the-loop state migrate {state.ref} --to-current`")
            log.warning("work item %s: %s", state.ref, reason)
            state.drift = {**record, "at": self.clock()}
            state.status = Status.ESCALATED
            state.escalated = {"node": state.current_node, "reason": reason,
                               "at": self.clock()}
            self.store.save(state)
            self._log(state, "graph.drift", record, None)
        return True

    def migrate(self, work_item: WorkItem, config: HookConfig, *, reason: str,
                node: str | None = None, dry_run: bool = False, repo: Path | None = None,
                operator: str | None = None) -> dict[str, Any]:
        """Move a work item to the deployed graph explicitly (``the-loop state migrate
        REF --to-current``), recorded like a forced move: state (``migration_count``), the
        event log (an entry and a checkpoint) and a marked comment. When its node's
        boundaries changed (or ``node`` names another), the node is entered again under
        the new graph and its entry chain runs; otherwise only the pin moves.

        Returns:
            ``{from, to, node, target, changed, reentered, dry_run}``.

        Raises:
            ForceError: empty ``reason``; no state; the node is gone and ``node`` names
                none of the graph's ids.
        """
        if not reason or not reason.strip():
            raise ForceError("--reason is required: an unexplained migration is refused")
        state = self.load(work_item, config, repo=repo)
        if state is None:
            raise ForceError(f"{work_item.ref} is not a work item (no state)")
        target = node or state.current_node
        if target not in self.graph.nodes:
            raise ForceError(f"node {target!r} is not in the deployed graph; pass "
                             f"--node with one of: {', '.join(self.graph.nodes)}")
        changed = self.drift(state) if state.node_digests or \
            state.current_node not in self.graph.nodes else []
        reenter = target != state.current_node or state.current_node in changed
        record: dict[str, Any] = {
                  "from": state.graph_digest, "to": self.graph.digest,
                  "node": state.current_node, "target": target, "changed": changed,
                  "reentered": reenter, "reason": reason.strip(), "operator": operator,
                  "at": self.clock()}
        if dry_run:
            return {**record, "dry_run": True}
        state.migration_count += 1
        state.graph_digest = self.graph.digest
        state.node_digests = self.graph.node_digests()
        state.drift = None
        if reenter:
            self._enter(state, target, via="migrated", forced=True)
        elif state.escalated and state.status == Status.ESCALATED:
            state.escalated = None
            state.status = Status.ACTIVE
        self.store.save(state)
        self._log(state, "work-item.migrated", record, None)
        self._log(state, "checkpoint", {"node": target, "boundary": "migrated",
                                        "from": record["node"], "reason": record["reason"]},
                  None)
        github = config.integrations.get("github")
        if github is not None and work_item.repository is not None and work_item.id is not None:
            effect = f"{state.ref}/migrated/{state.migration_count}"
            body = (f"**the-loop** · an operator moved this work item to the deployed graph "
                    f"(`{record['from'][:12]}` → `{record['to'][:12]}`) at `{target}`"
                    + (f"; changed nodes: {', '.join(f'`{n}`' for n in changed)}"
                       if changed else "") + f".\n\n{marker(effect)}")
            try:
                outbox = HookEffects(state, self.store, effect, own=config.own)
                outbox.github(github, effect=effect).comment(
                    repo=work_item.repository, number=work_item.id, body=body)
            except Exception as exc:  # noqa: BLE001  (recorded; never undoes the migration)
                self._log(state, "notification.failed",
                          {"channel": "github-migrated", "error": type(exc).__name__}, None)
        if reenter:
            entry = self._run(self.graph.node(target), "entry", state, work_item, config,
                              None, repo)
            if entry.status == "pass":
                state.entry_pending = False
                entry = self._settle(state, work_item, config) or entry
            if entry.status != "pass":
                state.status = Status.BLOCKED
            self.store.save(state)
        return {**record, "dry_run": False}

    def _log(
        self, state: WorkItemState, type_: str, data: Mapping[str, Any], event: InboundEvent | None
    ) -> None:
        self.store.append_event(state.ref, type_, data, event.delivery_id if event else None)


def _reapprove(config: HookConfig) -> bool:
    """``gates.reapproveOnChange`` of the repository's harness config (default true)."""
    gates = config.harness.get("gates") if config.harness else None
    return not isinstance(gates, Mapping) or gates.get("reapproveOnChange", True) is not False
#: Longest operator's reason quoted in the forced-move comment (characters).
MAX_REASON_CHARS = 1000


def forced_reason_quote(reason: object) -> list[str]:
    """The operator's ``--reason`` as Markdown quote lines for the forced-move comment.

    The reason is operator input (``the-loop graph force --reason``), never payload text;
    it is still quoted, not rendered as the-loop's words: HTML comments (which could
    imitate the-loop's hidden marker) are dropped, ``@`` mentions are defused and the text
    is capped at :data:`MAX_REASON_CHARS` characters.

    Returns:
        one ``> ...`` line per line of the reason (``> (none given)`` when empty).
    """
    text = str(reason or "").replace("\r\n", "\n")
    text = re.sub(r"<!--.*?(?:-->|\Z)", "", text, flags=re.DOTALL)
    text = text.replace("<!--", "").replace("-->", "").replace("@", "@\u200b")
    if len(text) > MAX_REASON_CHARS:
        text = text[:MAX_REASON_CHARS] + " …"
    lines = [line.rstrip() for line in text.strip().splitlines()] or ["(none given)"]
    return [f"> {line}" if line else ">" for line in lines]


def decision_record(gate: Node) -> DecisionRecord | None:
    """How ``gate``'s decision is recorded in the artifacts: the declaration
    (``HookDef.records``) of its first hook that records one, exit chain first."""
    return next((c.definition.records for c in gate.exit + gate.entry
                 if c.definition.records is not None), None)


def gate_artifacts(graph: Graph, gate: Node) -> list[str]:
    """Artifacts whose recorded decision is ``gate``'s: those its hooks declare
    (``HookDef.records``, exit chain first, e.g. record-feedback's ``into``), else what the
    nodes leading into it produce."""
    for call in gate.exit + gate.entry:
        record = call.definition.records
        named = record.artifacts(call.params) if record is not None else ()
        if named:
            return list(named)
    produced: list[str] = []
    for edge in graph.edges:
        if edge.target == gate.id:
            produced += [p for p in graph.node(edge.source).produces if p not in produced]
    return produced
