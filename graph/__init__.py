"""the-loop's pure core: the graph's mechanics, and nothing else.

=============  =========================================================================
module         its one job
=============  =========================================================================
``model``      the graph model (Node, Edge, Graph) and the hook contract (HookDef,
               HookContext, HookResult, Message, WorkItem, InboundEvent, Status)
``context``    what hooks are handed besides the work item: HookConfig and its handles
``compile``    YAML text -> a frozen Graph, validated by ``graph.schema.json``
``registry``   hook name -> HookDef (the plugins register themselves elsewhere)
``runtime``    the ``Runtime`` (a package): runs chains, walks edges, parks, escalates,
               orders agent turns and task-plan waves, publishes status; operator verbs
               (force, drift, migrate) and the rebuild from the artifacts (derive)
``effects``    the outbox: every visible effect recorded before it is performed
``markers``    the hidden marker that names an effect in a comment
``status``     the status comment's text and effect id
``state``      WorkItemState, the StateStore protocol, MemoryStateStore
``ports``      the transport ports and their errors
``export``     a Graph as JSON or Mermaid
``errors``     LoopError, the root of the project's exception tree
=============  =========================================================================

Nothing here imports Flask, Redis, RQ, an HTTP client, ``subprocess`` or another package
of the project, reads the environment or a file the caller did not hand over (checked by
``tests/test_layering.py``); side effects reach the outside world only through
:class:`graph.ports.Integration` objects handed in by the caller, and state is persisted
through :class:`graph.state.StateStore`.
"""

from graph.model import (
    Boundary,
    HookContext,
    HookResult,
    InboundEvent,
    Message,
    Session,
    WorkItem,
)

__all__ = [
    "Boundary",
    "HookContext",
    "HookResult",
    "InboundEvent",
    "Message",
    "Session",
    "WorkItem",
]
