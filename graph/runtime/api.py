"""The runtime's public API, as the plan runner and the operator verbs see it.

:class:`RuntimeAPI` is the structural type of :class:`graph.runtime.Runtime`: the
modules that work *with* a runtime (the plan runner :mod:`graph.runtime.waves`, the
operator verbs :mod:`graph.runtime.operator` and :mod:`graph.runtime.rebuild`, and the
walk's own modules) are typed against it, so none of them imports the class that
imports them, and none reaches past these methods into the runtime's privates
(``tests/graph/test_runtime_api.py`` checks that nothing outside the package does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from graph.context import HookConfig
from graph.model import Boundary, Graph, InboundEvent, Message, Node, WorkItem
from graph.runtime.chains import ChainResult
from graph.runtime.shapes import AdvanceResult, NodeVerdict
from graph.state import StateStore, WorkItemState


class RuntimeAPI(Protocol):
    """What may be called on a runtime from outside its walk.

    Attributes:
        graph: the compiled graph it drives work items through.
        store: where state and the event log live.
        clock: Unix seconds now (the monitors' and the joins' clock).
    """

    graph: Graph
    store: StateStore
    clock: Callable[[], float]

    def load(self, work_item: WorkItem, config: HookConfig, *,
             repo: Path | None = None) -> WorkItemState | None:
        """``work_item``'s state (rebuilt from the artifacts when unreadable), or
        ``None`` when it is not a work item."""
        ...

    def log(self, state: WorkItemState, type_: str, data: Mapping[str, Any],
            event: InboundEvent | None) -> None:
        """Append one entry of type ``type_`` to the work item's event log."""
        ...

    def enter(self, state: WorkItemState, node_id: str, *, via: str,
              forced: bool = False, log_entry: bool = True) -> None:
        """Move the pointer to ``node_id`` (a new visit) and bind its harness session."""
        ...

    def run_boundary(self, node: Node, boundary: Boundary, state: WorkItemState,
                     work_item: WorkItem, config: HookConfig, event: InboundEvent | None,
                     repo: Path | None, *, only_validating: bool = False,
                     record: bool = True) -> ChainResult:
        """Run ``node``'s ``boundary`` chain for the work item (recorded unless not
        ``record``)."""
        ...

    def record(self, state: WorkItemState, chain: ChainResult,
               event: InboundEvent | None) -> None:
        """Record ``chain``'s results in state and the event log."""
        ...

    def settle(self, state: WorkItemState, work_item: WorkItem,
               config: HookConfig) -> ChainResult | None:
        """Settle what shows the current node; the ``block`` of a hook that did not."""
        ...

    def park(self, state: WorkItemState, work_item: WorkItem, config: HookConfig,
             chain: ChainResult, result: AdvanceResult) -> AdvanceResult:
        """Stop at the current node on ``chain``'s ``wait`` or ``block``."""
        ...

    def escalate(self, state: WorkItemState, node: Node, reason: str, *,
                 attempts: int | None = None) -> None:
        """Ask a human to step in at ``node``."""
        ...

    def publish(self, state: WorkItemState, work_item: WorkItem, config: HookConfig,
                node: Node, messages: tuple[Message, ...], *,
                hook: str | None = None) -> None:
        """Publish the work item's status when it changed."""
        ...

    def artifacts(self, node: Node, work_item: WorkItem) -> dict[str, str]:
        """Artifact name -> repository-relative path for ``node`` of ``work_item``."""
        ...

    def artifacts_for(self, work_item: WorkItem, name: str) -> str:
        """Repository-relative path of artifact ``name`` in ``work_item``'s spec dir."""
        ...

    def drift(self, state: WorkItemState) -> list[str]:
        """Nodes of ``state``'s pinned graph that no longer match the deployed one."""
        ...

    def derive(self, work_item: WorkItem, config: HookConfig, *,
               repo: Path | None = None) -> list[NodeVerdict]:
        """Verdicts re-derived from the artifacts alone."""
        ...
