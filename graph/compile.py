"""Compile a graph: parse, validate, resolve, index, freeze (specification, "What
compiling means here").

The graph's shape has one authority, the shipped ``graph/graph.schema.json`` (JSON Schema
draft 2020-12): ``the-loop graph validate`` and the runtime both compile through here, so
what one accepts the other accepts. The schema fixes ``version`` and the form of node ids
(``^[a-z0-9][a-z0-9-]*$``, which effect markers rely on); the compiler then resolves what
a schema cannot know: hook names against the registry it is handed, each call's ``with:``
parameters, edge endpoints and outcomes. Every failure is a load error naming the file,
the node and the hook or field, never a surprise three nodes into a traversal.

The compiler reads no file and imports no hook: a driver reads the file and passes the
registry (see :mod:`the_loop.graphs`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import PurePath
from types import MappingProxyType
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from graph.errors import LoopError
from graph.model import Edge, Graph, HookCall, Node, canonical_form
from graph.registry import HookRegistry

SCHEMA_NAME = "graph.schema.json"


@functools.cache
def schema() -> Mapping[str, Any]:
    """The graph's JSON Schema (``graph/graph.schema.json``, package data)."""
    loaded: dict[str, Any] = json.loads(
        resources.files("graph").joinpath(SCHEMA_NAME).read_text(encoding="utf-8"))
    return loaded


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema())


#: The graph file version this the-loop reads (the schema's ``version`` const).
GRAPH_VERSION: int = int(schema()["properties"]["version"]["const"])
#: What a node id (and a hook name, an outcome) must match (the schema's ``id`` pattern).
ID_PATTERN: str = str(schema()["$defs"]["id"]["pattern"])


class GraphError(LoopError, ValueError):
    """A graph failed to compile. ``str()`` names the file and the offending item."""


class AmbiguousEdgeWarning(LoopError, UserWarning):
    """Two edges leave one node on one outcome; the first declared wins."""


def parse_graph(text: str, source: str) -> Any:
    """Parse graph YAML ``text`` as YAML 1.2 (only ``true``/``false`` are booleans, so
    every edge's ``on:`` stays a string; a duplicate key is an error).

    Returns:
        plain Python (dicts, lists, scalars).

    Raises:
        GraphError: malformed YAML, naming ``source`` and the line.
    """
    try:
        return YAML(typ="safe", pure=True).load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = f": {exc.problem}" if exc.problem else ""
        raise GraphError(f"{source}: malformed YAML{where}{problem}") from None
    except YAMLError:
        raise GraphError(f"{source}: malformed YAML") from None


def compile_graph(text: str, *, source: str, registry: HookRegistry) -> Graph:
    """Compile graph YAML ``text``; ``source`` names it in errors.

    Args:
        text: the graph file's text.
        source: the file as named to the user.
        registry: the hooks to resolve names against (frozen once compiled).

    Returns:
        the compiled :class:`~graph.model.Graph`.

    Raises:
        GraphError: malformed YAML, a shape the schema rejects (an unknown field, a
            ``version`` other than :data:`GRAPH_VERSION`, a node id not matching
            :data:`ID_PATTERN`...), or an unresolved hook, parameter, node or outcome,
            naming the file, the node and the hook or field.
    """
    doc = parse_graph(text, source)
    validate_shape(doc, source)
    nodes: dict[str, Node] = {}
    for raw in doc["nodes"]:
        node = _compile_node(raw, source, registry)
        if node.id in nodes:
            raise GraphError(f"{source}: node {node.id!r}: duplicate id")
        nodes[node.id] = node

    edges: list[Edge] = []
    index: dict[tuple[str, str], Edge] = {}
    for i, raw in enumerate(doc.get("edges") or []):
        where = f"{source}: edges[{i}]"
        edge = Edge(source=raw["from"], target=raw["to"], on=raw["on"])
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
    name = str(doc.get("name") or PurePath(source).stem)
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


def validate_shape(doc: Any, source: str) -> None:
    """Check ``doc`` (a parsed graph) against :func:`schema`.

    Raises:
        GraphError: for the first problem in document order, naming ``source``, the item
            (``node 'ID'``, ``edges[N]``, ``the top level``) and the field.
    """
    if not isinstance(doc, Mapping):
        raise GraphError(f"{source}: the top level must be a mapping with 'nodes' and 'edges'")
    keys = list(doc)

    def in_document_order(err: ValidationError) -> list[tuple[int, int | str]]:
        path = list(err.absolute_path)
        top = [(keys.index(path[0]) if path and path[0] in keys else len(keys), "")]
        return top + [(0, p) if isinstance(p, int) else (1, str(p)) for p in path[1:]]

    errors = sorted(_validator().iter_errors(doc), key=in_document_order)
    if errors:
        raise GraphError(f"{source}: {_describe(_leaf(errors[0]), doc)}")


def _leaf(err: ValidationError) -> ValidationError:
    """For a failed ``oneOf`` (a hook call is a name or a mapping), the branch that fits
    the value's type, when there is one."""
    if err.validator == "oneOf" and err.context:
        wanted = "object" if isinstance(err.instance, Mapping) else "string"
        branches = err.validator_value if isinstance(err.validator_value, list) else []
        for sub in err.context:
            index = sub.relative_schema_path[0] if sub.relative_schema_path else None
            branch = branches[index] if isinstance(index, int) and index < len(branches) \
                else {}
            is_object = isinstance(branch, Mapping) and branch.get("type") == "object"
            if is_object == (wanted == "object"):
                return _leaf(sub)
    return err


def _item(path: Sequence[Any], doc: Any) -> tuple[str, list[Any]]:
    """(``node 'ID'`` / ``edges[N]`` / ``the top level``, the path below that item)."""
    if len(path) >= 2 and path[0] == "nodes" and isinstance(path[1], int):
        raw = doc["nodes"][path[1]]
        node_id = raw.get("id") if isinstance(raw, Mapping) else None
        name = f"node {node_id!r}" if isinstance(node_id, str) else f"nodes[{path[1]}]"
        return name, list(path[2:])
    if len(path) >= 2 and path[0] == "edges" and isinstance(path[1], int):
        return f"edges[{path[1]}]", list(path[2:])
    return "the top level", list(path)


def _describe(err: ValidationError, doc: Any) -> str:
    item, rest = _item(list(err.absolute_path), doc)
    where = item
    # The item, then the path to the value's container; the last key names the field.
    container = rest[:-1] if rest and isinstance(rest[-1], str) else rest
    if container:
        where += ": " + str(container[0]) + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in container[1:])
    rest = rest[len(container):]
    field = f"field {rest[0]!r}" if rest and isinstance(rest[0], str) else "the value"
    kind = err.validator
    if kind == "additionalProperties" and isinstance(err.instance, Mapping):
        allowed = sorted(err.schema.get("properties", {}))
        unknown = sorted(str(k) for k in err.instance if k not in allowed)
        return (f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(allowed)})")
    if kind == "required" and isinstance(err.instance, Mapping):
        missing = [r for r in err.validator_value if r not in err.instance]
        return f"{where}: missing field {missing[0]!r}"
    if kind == "const" and rest == ["version"]:
        return (f"field 'version' is {err.instance!r}; this the-loop reads graph version "
                f"{err.validator_value}: write 'version: {err.validator_value}'")
    if kind == "enum":
        return f"{where}: {field} must be one of {', '.join(map(str, err.validator_value))}"
    if kind == "pattern":
        return (f"{where}: {field} is {err.instance!r}, which does not match "
                f"{err.validator_value} (lower-case letters, digits and '-', starting with "
                "a letter or digit)")
    if kind == "type":
        words = {"object": "a mapping", "array": "a list", "string": "a string",
                 "integer": "a whole number", "number": "a number of seconds"}
        wanted = words.get(str(err.validator_value), str(err.validator_value))
        return f"{where}: {field} must be {wanted}"
    if kind == "minItems":
        return f"{where}: {field} must be a non-empty list"
    if kind == "minimum":
        return f"{where}: {field} must be at least {err.validator_value}"
    if kind == "exclusiveMinimum":
        return f"{where}: {field} must be more than {err.validator_value}"
    if kind == "maximum":
        return f"{where}: {field} must be at most {err.validator_value}"
    if kind == "minLength":
        return f"{where}: {field} must not be empty"
    if kind == "oneOf":
        return f"{where}: must be a hook name or {{hook: NAME, with: {{...}}}}"
    return f"{where}: {field} is invalid ({err.message})"


def _compile_node(raw: Mapping[str, Any], source: str, registry: HookRegistry) -> Node:
    """A schema-valid node mapping, its chains resolved against ``registry``."""
    node_id = raw["id"]
    where = f"{source}: node {node_id!r}"
    if "approvals" in raw and raw.get("actor") != "human":
        raise GraphError(f"{where}: approvals applies to a gate only (actor: human); "
                         "remove it or make the node a gate")
    return Node(
        id=node_id,
        phase=str(raw.get("phase") or node_id),
        actor=raw.get("actor", "agent"),
        produces=tuple(raw.get("produces") or ()),
        session=raw.get("session"),
        entry=_compile_chain(raw.get("entry"), "entry", where, registry),
        exit=_compile_chain(raw.get("exit"), "exit", where, registry),
        attempts=raw.get("attempts", 3),
        role=str(raw.get("role") or "approver"),
        approvals=int(raw.get("approvals", 1)),
        command=raw.get("command"),
        stage=raw.get("stage"),
        plan=_plan_of(raw, where),
        max_parallel=int(raw.get("maxParallel", 1)),
        freshness=duration(raw["freshness"]) if raw.get("freshness") else None,
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """Seconds of a schema-valid duration: ``90s``, ``30m``, ``72h``, ``7d``."""
    return float(int(text[:-1]) * _UNITS[text[-1]])


def _plan_of(raw: Mapping[str, Any], where: str) -> str | None:
    """A node's ``plan``: one of the artifacts of the graph (checked by name only), on
    an agent node."""
    plan = raw.get("plan")
    if plan is None:
        if "maxParallel" in raw:
            raise GraphError(f"{where}: maxParallel needs a plan (the task list it runs)")
        return None
    if raw.get("actor", "agent") != "agent":
        raise GraphError(f"{where}: only an agent node runs a plan")
    if "/" in plan or plan in (".", ".."):
        raise GraphError(f"{where}: plan must be an artifact name (e.g. tasks.md), "
                         f"got {plan!r}")
    return str(plan)


def _compile_chain(
    raw: Sequence[Any] | None, boundary: str, where: str, registry: HookRegistry
) -> tuple[HookCall, ...]:
    """A schema-valid chain (hook names or ``{hook, with}``), resolved and checked."""
    calls = []
    for j, item in enumerate(raw or ()):
        params: Mapping[str, Any]
        timeout: float | None = None
        if isinstance(item, str):
            name, params = item, {}
        else:
            name, params = item["hook"], item.get("with") or {}
            if item.get("timeout") is not None:
                timeout = float(item["timeout"])
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
        calls.append(HookCall(name=name, definition=definition, params=frozen,
                              timeout=timeout))
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


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value
