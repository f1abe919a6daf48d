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

=============  =========================================================================
module         its one job
=============  =========================================================================
``chains``     one boundary's hooks in order, each under its timeout (``run_chain``)
``shapes``     the result shapes, errors, ``UNLOADED``, and what a gate records where
``api``        ``RuntimeAPI``: the public methods the modules below work through
``calls``      a chain run for a work item: the hook context, the outbox, the record
``walk``       one delivery's evaluation: exit chain, edge, entry chain, park, settle
``turns``      agent work: the harness turn ordered, its report, the escalation
``publish``    the status comment and the hooks' status publications
``notes``      gates re-opened, the-loop's notes, the reminders of a stale gate
``waves``      the plan runner: one harness session per task, wave by wave
``operator``   the operator verbs: forced move, graph drift, migration
``rebuild``    verdicts from the artifacts alone, state rebuilt from them
``core``       the ``Runtime`` class
=============  =========================================================================
"""

from graph.runtime.api import RuntimeAPI
from graph.runtime.chains import ChainResult, call_hook, run_chain, with_moved_head
from graph.runtime.core import Runtime
from graph.runtime.operator import MAX_REASON_CHARS, forced_reason_quote
from graph.runtime.shapes import (
    AWAITING_REPAIR,
    CHANGE_KINDS,
    UNLOADED,
    AdvanceResult,
    ForceError,
    ForceResult,
    GraphMismatch,
    Move,
    NodeVerdict,
    Unloaded,
    content_blob,
    decision_record,
    gate_artifacts,
)

__all__ = [
    "AWAITING_REPAIR",
    "CHANGE_KINDS",
    "MAX_REASON_CHARS",
    "UNLOADED",
    "AdvanceResult",
    "ChainResult",
    "ForceError",
    "ForceResult",
    "GraphMismatch",
    "Move",
    "NodeVerdict",
    "Runtime",
    "RuntimeAPI",
    "Unloaded",
    "call_hook",
    "content_blob",
    "decision_record",
    "forced_reason_quote",
    "gate_artifacts",
    "run_chain",
    "with_moved_head",
]
