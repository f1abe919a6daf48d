"""What the runtime hands back and the graph facts it reads off a gate.

The result shapes of an advance, a forced move and a re-derived verdict, the runtime's
errors, the :data:`UNLOADED` sentinel of ``Runtime.enrol``/``Runtime.advance``, and the
pure functions over a compiled graph that the walk and the operator verbs share (which
artifacts a gate's decision is recorded in, which gates a forward move skips).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from graph.errors import LoopError
from graph.model import DecisionRecord, Graph, Message, Node, Status
from graph.runtime.chains import ChainResult
from graph.state import WorkItemState

#: Event kinds after which approved artifacts are compared with what was approved (a push
#: to the pull request; the-loop's own review-record commits change nothing that counts).
CHANGE_KINDS = frozenset({"pull_request.synchronize"})

#: Message code of a node a gate sent back, waiting for the rejected artifact to change.
AWAITING_REPAIR = "awaiting-repair"


class Unloaded:
    """The type of :data:`UNLOADED`: "the caller did not load the work item's state"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNLOADED"


#: ``state=UNLOADED`` (the default of ``Runtime.enrol``/``Runtime.advance``): the runtime
#: loads the work item's state itself (``Runtime.load``). A caller that loaded it already
#: (the delivery worker, once per delivery) passes the ``WorkItemState``, or ``None`` for
#: a work item that is not enrolled.
UNLOADED = Unloaded()


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


def content_blob(text: str | None, strip: Callable[[str], str] | None) -> str | None:
    """The git blob SHA-1 of ``text`` less what ``strip`` removes (the-loop's own review
    record, ``DecisionRecord.strip``): what "the artifact changed" compares (Git's object
    format: ``sha1(b"blob <size>\\0" + content)``, Pro Git, "Git Objects"). ``None`` for an
    absent file."""
    if text is None:
        return None
    data = (strip(text) if strip is not None else text).encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


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


def gates_between(graph: Graph, source: str, target: str) -> list[str]:
    """Gates a forward move from ``source`` to ``target`` skips: those on the shortest
    path of forward edges (``source`` itself included when it is a gate). A target not
    reachable forwards is a backwards move and bypasses nothing.

    Returns:
        gate node ids, in path order (``[]`` when ``source == target``).
    """
    if source == target:
        return []
    previous: dict[str, str | None] = {source: None}
    frontier = [source]
    while frontier and target not in previous:
        nxt = []
        for node_id in frontier:
            forward = graph.node(node_id).forward_outcomes
            for edge in graph.outgoing(node_id):
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
    return [n for n in reversed(path) if graph.node(n).is_gate]


def artifact_path(spec_dir: str, name: str) -> str:
    """Repository-relative path of artifact ``name`` in the spec directory ``spec_dir``."""
    base = spec_dir.rstrip("/")
    return f"{base}/{name}" if base else name
