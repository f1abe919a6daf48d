"""The :class:`Runtime`: a state machine, not a scheduler (specification, "The runtime").

``Runtime.advance`` runs the current node's exit chain, persists, takes the edge the
outcome names and runs the next node's entry chain, until the work item waits, blocks,
escalates or is done. Every driver (the RQ worker, ``the-loop run``) calls these same
methods. The class is the package's public API: the walk (:mod:`graph.runtime.walk`),
agent turns (:mod:`~graph.runtime.turns`), publishing (:mod:`~graph.runtime.publish`),
notes and reminders (:mod:`~graph.runtime.notes`), the operator verbs
(:mod:`~graph.runtime.operator`) and the rebuild from the artifacts
(:mod:`~graph.runtime.rebuild`) are functions over it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import graph.runtime.calls as calls
import graph.runtime.notes as notes
import graph.runtime.operator as verbs
import graph.runtime.publish as publish
import graph.runtime.rebuild as rebuild
import graph.runtime.turns as turns
import graph.runtime.walk as walk
from graph.context import HookConfig
from graph.model import Boundary, Graph, InboundEvent, Message, Node, WorkItem
from graph.runtime.chains import ChainResult
from graph.runtime.shapes import (
    UNLOADED,
    AdvanceResult,
    ForceResult,
    NodeVerdict,
    Unloaded,
    artifact_path,
)
from graph.state import StateError, StateStore, WorkItemState

log = logging.getLogger(__name__)


class Runtime:
    """Drives work items through a compiled graph, persisting to a :class:`StateStore`.

    Args:
        graph: the compiled graph.
        store: where state and the event log live.
        clock: Unix seconds now: the monitors' and the joins' clock (controlled in tests).
    """

    def __init__(self, graph: Graph, store: StateStore, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.graph = graph
        self.store = store
        self.clock = clock

    # -- entry points -----------------------------------------------------------------

    def enrol(
        self,
        work_item: WorkItem,
        config: HookConfig,
        event: InboundEvent | None,
        *,
        repo: Path | None = None,
        state: WorkItemState | Unloaded | None = UNLOADED,
    ) -> AdvanceResult:
        """Make ``work_item`` a work item at the graph's start node (if it is not one yet)
        and advance it. Idempotent: an enrolled item is simply advanced.

        Args:
            state: :data:`UNLOADED` (the default): loaded here (:meth:`load`); a
                ``WorkItemState`` the caller loaded (:meth:`load`), used as is and not
                loaded again; ``None``: the caller found no state, so the work item is
                enrolled.
        """
        loaded = self.load(work_item, config, repo=repo) if isinstance(state, Unloaded) \
            else self._imported(state)
        if loaded is None:
            loaded = WorkItemState(work_item.ref, self.graph.digest, self.graph.start)
            self.enter(loaded, self.graph.start, via="enrolled")
            self.store.save(loaded)
            self.log(loaded, "work-item.enrolled", {"node": loaded.current_node}, event)
        return walk.advance(self, loaded, work_item, config, event, repo)

    def advance(
        self,
        work_item: WorkItem,
        config: HookConfig,
        event: InboundEvent | None,
        *,
        repo: Path | None = None,
        state: WorkItemState | Unloaded | None = UNLOADED,
    ) -> AdvanceResult | None:
        """Advance an enrolled work item on ``event``; ``None`` if it is not enrolled.

        The triggering event is seen by the first exit chain only; nodes entered during
        the same advance evaluate on a tick (``event=None``), so one ``/approve`` never
        approves two gates. A work item whose node the deployed graph changed or removed
        is not evaluated: it is escalated, naming the nodes, until it is migrated.

        Args:
            state: :data:`UNLOADED` (the default): loaded here (:meth:`load`); a
                ``WorkItemState`` the caller loaded (:meth:`load`), used as is and not
                loaded again; ``None``: the caller found no state (returns ``None``).
        """
        loaded = self.load(work_item, config, repo=repo) if isinstance(state, Unloaded) \
            else self._imported(state)
        if loaded is None:
            return None
        return walk.advance(self, loaded, work_item, config, event, repo)

    def load(
        self, work_item: WorkItem, config: HookConfig, *, repo: Path | None = None
    ) -> WorkItemState | None:
        """Load ``work_item``'s state. State is a cache: if it is unreadable, it is rebuilt
        by re-running the validators over the artifacts (:meth:`derive`), the bad copy is
        kept aside, and a warning is logged and recorded.

        Returns:
            the state, or ``None`` when ``work_item`` is not a work item (no state).
        """
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
            self.log(state, "state.reconstructed",
                     {"node": state.current_node, "kept_aside": aside,
                      "findings": findings}, None)
            self.log(state, "node.entered", {
                "node": state.current_node, "via": "reconstructed",
                "at": state.visit_started, "forced": False,
                "visit": state.visit}, None)
            return state
        return self._imported(state)

    def _imported(self, state: WorkItemState | None) -> WorkItemState | None:
        """``state``, a record of an older format's per-step lists moved into the event
        log (logged before the record without them is saved: a crash logs them twice,
        never loses them). A state the caller loaded from the store gets the same."""
        if state is not None and state.legacy:
            self.log(state, "history.imported", state.legacy, None)
            state.legacy = {}
            state.effects_reset = True  # its effects were inside the record
            self.store.save(state)
        return state

    # -- gates re-opened, notes, monitors ----------------------------------------------

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
        notes.reopen(self, state, gate, via=via, code=code, text=text, data=data or {},
                     event=event)
        return walk.advance(self, state, work_item, config, None, repo)

    def abandon(self, work_item: WorkItem, config: HookConfig, text: str, *,
                event: InboundEvent | None = None,
                state: WorkItemState | Unloaded | None = UNLOADED) -> AdvanceResult | None:
        """End the work item as ``abandoned`` (its pull request closed unmerged;
        :func:`graph.runtime.walk.abandon`). ``state`` as for :meth:`advance`.

        Returns:
            the result, or ``None`` when the work item has no state.
        """
        loaded = self.load(work_item, config) if isinstance(state, Unloaded) \
            else self._imported(state)
        if loaded is None:
            return None
        return walk.abandon(self, loaded, work_item, config, text, event)

    def merged(self, work_item: WorkItem, config: HookConfig, event: InboundEvent | None,
               *, by: str | None = None, repo: Path | None = None,
               state: WorkItemState | Unloaded | None = UNLOADED) -> AdvanceResult | None:
        """Advance the work item whose pull request was merged, moving it to the terminal
        node first when it was merged before its gates passed
        (:func:`graph.runtime.walk.merged`). ``state`` as for :meth:`advance`.

        Returns:
            the result, or ``None`` when the work item has no state.
        """
        loaded = self.load(work_item, config, repo=repo) if isinstance(state, Unloaded) \
            else self._imported(state)
        if loaded is None:
            return None
        return walk.merged(self, loaded, work_item, config, event, repo, by=by)

    def note(self, work_item: WorkItem, config: HookConfig, code: str, text: str, *,
             data: Mapping[str, Any] | None = None,
             event: InboundEvent | None = None) -> bool:
        """Record ``text`` (the-loop's own words) in the event log (``note``) and show it
        in the status comment of the current node visit. Returns ``False`` when the work
        item has no state."""
        return notes.note(self, work_item, config, code, text, data=data, event=event)

    def later_gate_passed(self, state: WorkItemState, index: int) -> bool:
        """Whether another gate's standing decision, recorded after the decision
        ``index``, passed it (one of its forward outcomes, not invalidated since)."""
        return notes.later_gate_passed(self, state, index)

    def remind(self, work_item: WorkItem, config: HookConfig) -> int | None:
        """Send the reminder of a stale gate if one is due (:func:`graph.monitors.
        due_reminder` at :attr:`clock`'s now).

        Returns:
            the freshness period reminded, or ``None`` (nothing due, or not a work item).
        """
        state = self.load(work_item, config)
        return None if state is None else notes.remind(self, state, work_item, config)

    # -- the operator verbs (graph.runtime.operator, graph.runtime.rebuild) -------------

    def force(self, work_item: WorkItem, config: HookConfig, target: str, reason: str, *,
              repo: Path | None = None, operator: str | None = None) -> ForceResult:
        """Move the pointer to ``target``, recorded as forced; never forge a verdict
        (:func:`graph.runtime.operator.force`).

        Raises:
            ForceError: empty ``reason``; unknown ``target``; the work item has no state.
        """
        return verbs.force(self, work_item, config, target, reason, repo=repo,
                           operator=operator)

    def migrate(self, work_item: WorkItem, config: HookConfig, *, reason: str,
                node: str | None = None, dry_run: bool = False, repo: Path | None = None,
                operator: str | None = None) -> dict[str, Any]:
        """Move a work item to the deployed graph explicitly
        (:func:`graph.runtime.operator.migrate`).

        Returns:
            ``{from, to, node, target, changed, reentered, dry_run}``.

        Raises:
            ForceError: empty ``reason``; no state; an unknown ``node``.
        """
        return verbs.migrate(self, work_item, config, reason=reason, node=node,
                             dry_run=dry_run, repo=repo, operator=operator)

    def drift(self, state: WorkItemState) -> list[str]:
        """Nodes of the graph ``state`` was walked with that no longer match the deployed
        graph, the current node first (:func:`graph.runtime.operator.drift`); ``[]``
        when the item can go on."""
        return verbs.drift(self.graph, state)

    def derive(self, work_item: WorkItem, config: HookConfig, *,
               repo: Path | None = None) -> list[NodeVerdict]:
        """Re-derive verdicts from the artifacts alone, ignoring cached state
        (:func:`graph.runtime.rebuild.derive`). Makes no network call: pass a
        ``config`` without integrations."""
        return rebuild.derive(self, work_item, config, repo=repo)

    def reconstruct(self, work_item: WorkItem, config: HookConfig, *,
                    repo: Path | None = None,
                    verdicts: Sequence[NodeVerdict] | None = None) -> WorkItemState:
        """A fresh state at the first node whose verdict is not met
        (:func:`graph.runtime.rebuild.reconstruct`; ``verdicts``: ones already
        derived)."""
        return rebuild.reconstruct(self, work_item, config, repo=repo, verdicts=verdicts)

    # -- the steps the plan runner and the operator verbs take ---------------------------

    def log(self, state: WorkItemState, type_: str, data: Mapping[str, Any],
            event: InboundEvent | None) -> None:
        """Append an entry of type ``type_`` with ``data`` to the work item's event log,
        naming ``event``'s delivery when there is one."""
        self.store.append_event(state.ref, type_, data, event.delivery_id if event else None)

    def enter(self, state: WorkItemState, node_id: str, *, via: str,
              forced: bool = False, log_entry: bool = True) -> None:
        """Move the pointer to ``node_id`` (a new visit) and bind its harness session
        (:func:`graph.runtime.walk.enter`); logged as ``node.entered`` unless not
        ``log_entry`` (a scratch state). Nothing is saved."""
        walk.enter(self, state, node_id, via=via, forced=forced, log_entry=log_entry)

    def run_boundary(self, node: Node, boundary: Boundary, state: WorkItemState,
                     work_item: WorkItem, config: HookConfig, event: InboundEvent | None,
                     repo: Path | None, *, only_validating: bool = False,
                     record: bool = True) -> ChainResult:
        """Run ``node``'s ``boundary`` chain for ``work_item`` through the outbox and
        record it (:func:`graph.runtime.calls.run_boundary`); ``record=False``: a
        check that writes nothing (``the-loop check``).

        Raises:
            RetryLater: a hook failed transiently.
        """
        return calls.run_boundary(self, node, boundary, state, work_item, config, event,
                                  repo, only_validating=only_validating, record=record)

    def record(self, state: WorkItemState, chain: ChainResult,
               event: InboundEvent | None) -> None:
        """Record ``chain``'s results, decisions and votes in ``state`` and log the run
        (:func:`graph.runtime.calls.record`); the caller saves."""
        calls.record(self, state, chain, event)

    def settle(self, state: WorkItemState, work_item: WorkItem,
               config: HookConfig) -> ChainResult | None:
        """Settle what shows the current node (``HookDef.on_settle``,
        :func:`graph.runtime.walk.settle`).

        Returns:
            the ``block`` of a hook that did not settle, else ``None``.
        """
        return walk.settle(self, state, work_item, config)

    def park(self, state: WorkItemState, work_item: WorkItem, config: HookConfig,
             chain: ChainResult, result: AdvanceResult) -> AdvanceResult:
        """Stop at the current node on ``chain``'s ``wait`` or ``block``: count the
        attempt, escalate or order the repair turn, save and publish
        (:func:`graph.runtime.walk.park`).

        Returns:
            ``result``, updated to where the work item stands.
        """
        return walk.park(self, state, work_item, config, chain, result)

    def escalate(self, state: WorkItemState, node: Node, reason: str, *,
                 attempts: int | None = None) -> None:
        """Ask a human to step in at ``node`` (status ``escalated`` until it moves on),
        logged as ``work-item.escalated``; the caller saves."""
        turns.escalate(self, state, node, reason, attempts=attempts)

    def publish(self, state: WorkItemState, work_item: WorkItem, config: HookConfig,
                node: Node, messages: tuple[Message, ...], *,
                hook: str | None = None) -> None:
        """Publish the status when it changed: the status comment and the node's
        ``on_status`` hooks, through the outbox (:func:`graph.runtime.publish.publish`).
        A failure is recorded, never raised."""
        publish.publish(self, state, work_item, config, node, messages, hook=hook)

    # -- artifacts --------------------------------------------------------------------

    def artifacts(self, node: Node, work_item: WorkItem) -> dict[str, str]:
        """Artifact name -> repository-relative path for ``node`` of ``work_item``."""
        return {name: self.artifacts_for(work_item, name) for name in node.produces}

    @staticmethod
    def artifacts_for(work_item: WorkItem, name: str) -> str:
        """Repository-relative path of artifact ``name`` in ``work_item``'s spec dir."""
        return artifact_path(work_item.spec_dir, name)
