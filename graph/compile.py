"""Compile a graph file: parse, validate, resolve, index, freeze (specification,
"What compiling means here").

Every structural failure is a load error naming the file, the node and the hook or field,
never a surprise three nodes into a traversal.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from graph.errors import LoopError
from graph.registry import DEFAULT_REGISTRY, HookDef, HookRegistry

ACTORS = ("agent", "human", "system")
SESSION_MODES = ("new", "inherit")
NODE_KEYS = frozenset(
    {"id", "phase", "actor", "produces", "command", "stage", "session", "entry", "exit",
     "attempts", "description", "role"}
)
EDGE_KEYS = frozenset({"from", "to", "on"})
GRAPH_KEYS = frozenset({"version", "name", "start", "nodes", "edges"})
DEFAULT_GRAPH_NAME = "pdlc.yaml"


class GraphLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2 booleans: only ``true``/``false`` are booleans.

    Under YAML 1.1 the edge key ``on`` (and ``yes``/``no``/``off``) would load as a
    boolean; graphs use ``on:`` on every edge, so it must stay a string.
    """


GraphLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
GraphLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


class GraphError(LoopError, ValueError):
    """A graph file failed to compile. ``str()`` names the file and the offending item."""


class AmbiguousEdgeWarning(LoopError, UserWarning):
    """Two edges leave one node on one outcome; the first declared wins."""


@dataclass(frozen=True)
class HookCall:
    """One hook in a chain: the resolved definition and its ``with:`` parameters."""

    name: str
    definition: HookDef = field(repr=False, compare=False)
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Node:
    """A step of the PDLC: a place the work item is (specification, "Data models").

    Attributes:
        id: unique node id.
        phase: the phase name label hooks sync (``phase:<phase>``).
        actor: ``agent``, ``human`` (a gate) or ``system`` (e.g. the terminal node).
        produces: artifact file names, relative to the work item's spec directory.
        session: ``new``, ``inherit`` (reuse the producing node's session) or ``None``.
        entry, exit: hook chains, in declared order.
        attempts: how many blocks the node tolerates before escalating.
        role: collaborators role whose people decide a gate (default ``approver``).
        command, stage: the-loop command and model tier for agent nodes.
    """

    id: str
    phase: str
    actor: str
    produces: tuple[str, ...] = ()
    session: str | None = None
    entry: tuple[HookCall, ...] = ()
    exit: tuple[HookCall, ...] = ()
    attempts: int = 3
    role: str = "approver"
    command: str | None = None
    stage: str | None = None

    @property
    def is_gate(self) -> bool:
        """A human gate node (specification, "Is the human gate a node or a hook?")."""
        return self.actor == "human"


@dataclass(frozen=True)
class Edge:
    """``{from, to, on}``: leave ``source`` for ``target`` when the exit chain's outcome is
    ``on``."""

    source: str
    target: str
    on: str


@dataclass(frozen=True)
class Graph:
    """A compiled, immutable graph.

    Attributes:
        name: the graph's name.
        source: the file it was compiled from (for messages).
        start: id of the node a new work item enters.
        nodes: id -> node, in declared order.
        edges: all edges, in declared order.
        digest: SHA-256 hex of the canonical JSON form (pinned in work item state).
    """

    name: str
    source: str
    start: str
    nodes: Mapping[str, Node]
    edges: tuple[Edge, ...]
    index: Mapping[tuple[str, str], Edge] = field(repr=False)
    digest: str

    def node(self, node_id: str) -> Node:
        """Return node ``node_id``.

        Raises:
            KeyError: naming the valid ids.
        """
        try:
            return self.nodes[node_id]
        except KeyError:
            raise KeyError(
                f"no node {node_id!r} in {self.source}; valid ids: {', '.join(self.nodes)}"
            ) from None

    def edge(self, node_id: str, outcome: str) -> Edge | None:
        """The edge leaving ``node_id`` on ``outcome``, or ``None``."""
        return self.index.get((node_id, outcome))

    def outgoing(self, node_id: str) -> tuple[Edge, ...]:
        """Edges leaving ``node_id`` in declared order."""
        return tuple(e for e in self.edges if e.source == node_id)

    def is_terminal(self, node_id: str) -> bool:
        """A node with no outgoing edge: reaching it means the work item is done."""
        return not self.outgoing(node_id)

    def required_operations(self) -> dict[str, frozenset[str]]:
        """Integration name -> operations needed by every hook the graph uses."""
        needed: dict[str, set[str]] = {}
        for node in self.nodes.values():
            for call in node.entry + node.exit:
                for integration, ops in call.definition.requires.items():
                    needed.setdefault(integration, set()).update(ops)
        return {k: frozenset(v) for k, v in sorted(needed.items())}

    def canonical(self) -> dict[str, Any]:
        """The canonical, JSON-serialisable form (sorted keys, declared order kept)."""
        return canonical_form(self.name, self.start, self.nodes.values(), self.edges)


def canonical_form(name: str, start: str, nodes: Any, edges: Any) -> dict[str, Any]:
    """Canonical dict of a graph's parts; the digest is taken over its JSON bytes."""

    def chain(calls: tuple[HookCall, ...]) -> list[dict[str, Any]]:
        return [{"hook": c.name, "with": _plain(c.params)} for c in calls]

    return {
        "name": name,
        "start": start,
        "nodes": [
            {
                "id": n.id,
                "phase": n.phase,
                "actor": n.actor,
                "produces": list(n.produces),
                "session": n.session,
                "role": n.role,
                "attempts": n.attempts,
                "command": n.command,
                "stage": n.stage,
                "entry": chain(n.entry),
                "exit": chain(n.exit),
            }
            for n in nodes
        ],
        "edges": [{"from": e.source, "to": e.target, "on": e.on} for e in edges],
    }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def default_graph_path() -> Path:
    """Path of the shipped default graph ``graph/pdlc.yaml`` (package data)."""
    return Path(str(resources.files("graph").joinpath(DEFAULT_GRAPH_NAME)))


def load_graph(path: str | Path | None = None, registry: HookRegistry | None = None) -> Graph:
    """Read and compile a graph file (the shipped default when ``path`` is ``None``).

    Args:
        path: a YAML graph file.
        registry: hook registry to resolve names against; the built-in hooks by default.

    Returns:
        the compiled :class:`Graph`.

    Raises:
        GraphError: unreadable file, malformed YAML, or any structural error, naming the
            file, the node and the hook or field.
    """
    if registry is None:
        import graph.hooks  # noqa: F401  (registers the built-in hooks)

        registry = DEFAULT_REGISTRY
    file = Path(path) if path is not None else default_graph_path()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise GraphError(f"{file}: cannot read graph file ({exc.strerror})") from None
    return compile_graph(text, source=str(file), registry=registry)


def compile_graph(text: str, *, source: str, registry: HookRegistry) -> Graph:
    """Compile graph YAML ``text``; ``source`` names it in errors. See :func:`load_graph`."""
    try:
        doc = yaml.load(text, Loader=GraphLoader)  # noqa: S506  (a SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise GraphError(f"{source}: malformed YAML{where}") from None
    if not isinstance(doc, dict):
        raise GraphError(f"{source}: the top level must be a mapping with 'nodes' and 'edges'")
    _no_unknown(doc, GRAPH_KEYS, source, "the top level")
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise GraphError(f"{source}: 'nodes' must be a non-empty list")

    nodes: dict[str, Node] = {}
    for i, raw in enumerate(raw_nodes):
        node = _compile_node(raw, i, source, registry)
        if node.id in nodes:
            raise GraphError(f"{source}: node {node.id!r}: duplicate id")
        nodes[node.id] = node

    raw_edges = doc.get("edges") or []
    if not isinstance(raw_edges, list):
        raise GraphError(f"{source}: 'edges' must be a list of {{from, to, on}}")
    edges: list[Edge] = []
    index: dict[tuple[str, str], Edge] = {}
    for i, raw in enumerate(raw_edges):
        where = f"{source}: edges[{i}]"
        if not isinstance(raw, dict):
            raise GraphError(f"{where}: must be a mapping {{from, to, on}}")
        _no_unknown(raw, EDGE_KEYS, source, f"edges[{i}]")
        missing = [k for k in ("from", "to", "on") if not raw.get(k)]
        if missing:
            raise GraphError(f"{where}: missing field {missing[0]!r}")
        edge = Edge(source=str(raw["from"]), target=str(raw["to"]), on=str(raw["on"]))
        for end, node_id in (("from", edge.source), ("to", edge.target)):
            if node_id not in nodes:
                raise GraphError(
                    f"{where}: field {end!r} names unknown node {node_id!r}; "
                    f"valid ids: {', '.join(nodes)}"
                )
        _check_outcome(edge, nodes[edge.source], where)
        key = (edge.source, edge.on)
        if key in index:
            warnings.warn(
                f"{where}: a second edge from {edge.source!r} on {edge.on!r}; "
                "the first declared wins",
                AmbiguousEdgeWarning,
                stacklevel=2,
            )
        else:
            index[key] = edge
        edges.append(edge)

    start = str(doc.get("start") or next(iter(nodes)))
    if start not in nodes:
        raise GraphError(f"{source}: field 'start' names unknown node {start!r}")
    name = str(doc.get("name") or Path(source).stem)
    canonical = canonical_form(name, start, nodes.values(), edges)
    digest = hashlib.sha256(
        json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    registry.freeze()
    return Graph(
        name=name,
        source=source,
        start=start,
        nodes=MappingProxyType(nodes),
        edges=tuple(edges),
        index=MappingProxyType(index),
        digest=digest,
    )


def _no_unknown(raw: Mapping[str, Any], allowed: frozenset[str], source: str, where: str) -> None:
    unknown = sorted(set(map(str, raw)) - allowed)
    if unknown:
        raise GraphError(
            f"{source}: {where}: unknown field {unknown[0]!r} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )


def _compile_node(raw: Any, i: int, source: str, registry: HookRegistry) -> Node:
    if not isinstance(raw, dict):
        raise GraphError(f"{source}: nodes[{i}]: must be a mapping")
    node_id = raw.get("id")
    if not node_id or not isinstance(node_id, str):
        raise GraphError(f"{source}: nodes[{i}]: missing field 'id'")
    where = f"{source}: node {node_id!r}"
    _no_unknown(raw, NODE_KEYS, source, f"node {node_id!r}")
    actor = raw.get("actor", "agent")
    if actor not in ACTORS:
        raise GraphError(f"{where}: field 'actor' must be one of {', '.join(ACTORS)}")
    session = raw.get("session")
    if session is not None and session not in SESSION_MODES:
        raise GraphError(f"{where}: field 'session' must be one of {', '.join(SESSION_MODES)}")
    produces = raw.get("produces") or []
    if not isinstance(produces, list) or not all(isinstance(p, str) for p in produces):
        raise GraphError(f"{where}: field 'produces' must be a list of file names")
    attempts = raw.get("attempts", 3)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        raise GraphError(f"{where}: field 'attempts' must be a positive integer")
    return Node(
        id=node_id,
        phase=str(raw.get("phase") or node_id),
        actor=actor,
        produces=tuple(produces),
        session=session,
        entry=_compile_chain(raw.get("entry"), "entry", where, registry),
        exit=_compile_chain(raw.get("exit"), "exit", where, registry),
        attempts=attempts,
        role=str(raw.get("role") or "approver"),
        command=raw.get("command"),
        stage=raw.get("stage"),
    )


def _compile_chain(
    raw: Any, boundary: str, where: str, registry: HookRegistry
) -> tuple[HookCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise GraphError(f"{where}: field {boundary!r} must be a list of hooks")
    calls = []
    for j, item in enumerate(raw):
        if isinstance(item, str):
            name, params = item, {}  # type: ignore[var-annotated]
        elif isinstance(item, dict) and "hook" in item:
            extra = sorted(set(item) - {"hook", "with"})
            if extra:
                raise GraphError(f"{where}: {boundary}[{j}]: unknown field {extra[0]!r}")
            name, params = item["hook"], item.get("with") or {}
            if not isinstance(params, dict):
                raise GraphError(f"{where}: {boundary}[{j}]: field 'with' must be a mapping")
        else:
            raise GraphError(
                f"{where}: {boundary}[{j}]: must be a hook name or {{hook: NAME, with: {{...}}}}"
            )
        if name not in registry:
            raise GraphError(
                f"{where}: {boundary}[{j}]: unknown hook {name!r}; "
                f"registered hooks: {', '.join(registry.names())}"
            )
        definition = registry.get(name)
        if boundary not in definition.boundaries:
            raise GraphError(f"{where}: hook {name!r} cannot run at the {boundary} boundary")
        bad = sorted(set(params) - definition.params)
        if bad:
            raise GraphError(
                f"{where}: hook {name!r}: unknown parameter {bad[0]!r} "
                f"(accepted: {', '.join(sorted(definition.params)) or 'none'})"
            )
        frozen = _freeze(params)
        problem = definition.check(frozen) if definition.check is not None else None
        if problem:
            raise GraphError(f"{where}: {boundary}[{j}]: hook {name!r}: {problem}")
        calls.append(HookCall(name=name, definition=definition, params=frozen))
    return tuple(calls)


def _check_outcome(edge: Edge, node: Node, where: str) -> None:
    """An edge may only route on an outcome some exit hook of its node can produce."""
    possible = {"pass"}
    for call in node.exit:
        possible |= call.definition.outcomes
        declared = call.params.get("outcomes")
        if declared:
            possible |= set(declared)
    if edge.on not in possible:
        raise GraphError(
            f"{where}: field 'on' is {edge.on!r}, which no exit hook of node {node.id!r} "
            f"returns (possible: {', '.join(sorted(possible))})"
        )
