"""The portable graph of one work item: the ``the-loop.graph/v1`` envelope.

A read-only projection of the compiled graph and a work item's state and event log, in
the shape of the execution-graph envelopes that tools beside such a runtime exchange:
typed nodes and edges, metadata only, canonical order and bytes, bounded size.

* **Nodes** (``id``, ``kind``, ``data_classification: metadata_only``, ``attributes``):
  ``the-loop/work-item/<ref>``; ``the-loop/node/<id>`` for every node of the graph (and
  any node the state names that the graph no longer has, ``declared: false``);
  ``the-loop/session/<id>`` per harness session; ``the-loop/decision/<n>`` per recorded
  gate decision.
* **Edges** (``source``, ``target``, ``kind``, ``attributes``): ``routes_to`` (the
  graph's edges, with the outcome ``on`` and how often the work item took them),
  ``visited`` and ``at`` (work item -> node), ``forced`` (an operator's move),
  ``bound_to`` (node -> its session), ``decides`` (decision -> gate). No edge names a
  node the envelope does not hold (:func:`validate`).
* **Events**: the work item's event log, oldest first, each with its ``subject`` node.

Privacy: nothing a person wrote is carried, only metadata. Values behind sensitive
attribute names (:data:`SENSITIVE`: reasons, bodies, messages, paths of a machine,
resume ids), text longer than :data:`MAX_TEXT` characters, and nested objects are
replaced by their SHA-256 digest under the key ``<name>_sha256`` (:func:`metadata`).

Determinism: the same graph, state and events give the same bytes (:func:`encode`:
sorted keys, compact separators, UTF-8; nodes sorted by id, edges by their endpoints,
events by sequence; times as RFC 3339 UTC strings with milliseconds).

Limits (:data:`LIMITS`): 250 nodes, 500 edges, 500 events and 1 MiB of encoded bytes;
past any of them :func:`build` raises :class:`EnvelopeLimitError`, naming the count and
the limit, rather than cutting the graph silently.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from graph.errors import LoopError
from graph.model import Graph
from graph.state import LogEvent, Past, WorkItemState
from graph.work import spend_of

__all__ = ["LIMITS", "SCHEMA", "SENSITIVE", "EnvelopeError", "EnvelopeLimitError", "Limits",
           "build", "encode", "metadata", "node_id", "timestamp", "validate"]

#: The envelope's schema name and version.
SCHEMA = "the-loop.graph/v1"
#: Every node's classification: no content, only metadata and digests.
METADATA_ONLY = "metadata_only"
#: Attribute names whose values are never carried, only their SHA-256 digest.
SENSITIVE = frozenset({
    "body", "comment", "cwd", "detail", "error_message", "message", "messages", "reason",
    "previous_reason", "resume", "harness_session", "summary", "text", "title", "token",
})
#: Longest text value carried as is; a longer one is replaced by its digest.
MAX_TEXT = 200


@dataclass(frozen=True)
class Limits:
    """The most an envelope may hold; ``bytes`` is the size of :func:`encode`'s output."""

    nodes: int = 250
    edges: int = 500
    events: int = 500
    bytes: int = 1024 * 1024

    def to_dict(self) -> dict[str, int]:
        return {"nodes": self.nodes, "edges": self.edges, "events": self.events,
                "bytes": self.bytes}


LIMITS = Limits()


class EnvelopeError(LoopError, ValueError):
    """An envelope does not hold together (an edge or event names a node it lacks)."""


class EnvelopeLimitError(EnvelopeError):
    """The work item's graph is larger than a limit.

    Attributes:
        what: ``nodes``, ``edges``, ``events`` or ``bytes``.
        count: how many there are.
        limit: the limit.
    """

    def __init__(self, ref: str, what: str, count: int, limit: int, limits: Limits) -> None:
        self.what, self.count, self.limit = what, count, limit
        super().__init__(
            f"the graph of {ref} has {count} {what}, over the limit of {limit} ({SCHEMA} "
            f"holds at most {limits.nodes} nodes, {limits.edges} edges, {limits.events} "
            f"events and {limits.bytes} bytes)")


# -- values --------------------------------------------------------------------------


def digest(value: Any) -> str:
    """SHA-256 hex of ``value``: of its UTF-8 bytes for a string, else of its canonical
    JSON."""
    data = value if isinstance(value, str) else json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def timestamp(seconds: float | int | None) -> str | None:
    """Unix seconds as RFC 3339 UTC with milliseconds (``2026-05-01T12:00:00.000Z``),
    ``None`` for ``None``."""
    if seconds is None or isinstance(seconds, bool):
        return None
    moment = datetime.fromtimestamp(round(float(seconds), 3), tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float) or (
        isinstance(value, str) and len(value) <= MAX_TEXT)


def metadata(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` reduced to metadata (the privacy normalization).

    Scalars (numbers, booleans, ``None``, short strings) are kept, but a string or an
    object under a :data:`SENSITIVE` name, a longer string, and anything else are
    replaced by ``<name>_sha256``. Lists of scalars are kept;
    lists of objects are normalized item by item; keys ending in ``_sha256`` and ``at``
    times (Unix seconds -> RFC 3339) pass. Keys come out sorted.

    Args:
        data: an event's ``data``, a decision, a forced move...

    Returns:
        A new dict.
    """
    out: dict[str, Any] = {}
    for key in sorted(str(k) for k in data):
        value = data[key]
        if key.endswith("_sha256"):
            out[key] = value if value is None or isinstance(value, str) else digest(value)
        elif key in SENSITIVE and not (value is None or isinstance(value, bool | int | float)):
            out[f"{key}_sha256"] = digest(value)
        elif key == "at" and isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = timestamp(value)
        elif _scalar(value):
            out[key] = value
        elif isinstance(value, list | tuple) and all(_scalar(v) for v in value):
            out[key] = list(value)
        elif isinstance(value, list | tuple) and all(isinstance(v, Mapping) for v in value):
            out[key] = [metadata(v) for v in value]
        else:
            out[f"{key}_sha256"] = digest(value)
    return out


# -- building ------------------------------------------------------------------------


def node_id(kind: str, key: str) -> str:
    """``the-loop/<kind>/<key>``."""
    return f"the-loop/{kind}/{key}"


def _node(kind: str, key: str, attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": node_id(kind, key), "kind": kind, "data_classification": METADATA_ONLY,
            "attributes": dict(attributes)}


def _edge(source: str, target: str, kind: str, **attributes: Any) -> dict[str, Any]:
    return {"source": source, "target": target, "kind": kind, "attributes": attributes}


def _taken(past: Past) -> dict[tuple[str, str, str], int]:
    """(from, to, outcome) -> times the work item moved along that edge (history)."""
    taken: dict[tuple[str, str, str], int] = {}
    for before, after in zip(past.history, past.history[1:], strict=False):
        via = str(after.get("via"))
        if after.get("forced") or via in ("enrolled", "forced"):
            continue
        key = (str(before.get("node")), str(after.get("node")), via)
        taken[key] = taken.get(key, 0) + 1
    return taken


def _sessions(state: WorkItemState, events: Sequence[LogEvent]) -> dict[str, dict[str, Any]]:
    """Session id -> its attributes: runner, digests of its resume id and working
    directory, and its turns' count, cost and seconds (from ``turn.completed`` events)."""
    sessions: dict[str, dict[str, Any]] = {}
    bound = [s for s in [*state.sessions.values(), state.session] if isinstance(s, Mapping)]
    for session in bound:
        sid = session.get("id")
        if not sid:
            continue
        entry = sessions.setdefault(str(sid), {"turns": 0, "cost_usd": 0.0, "seconds": 0.0})
        entry.update(metadata({k: session.get(k) for k in ("runner", "resume", "cwd")}))
    for event in events:
        if event.type == "turn.completed" and event.data.get("session") in sessions:
            entry = sessions[str(event.data["session"])]
            entry["turns"] += 1
            entry["cost_usd"] = round(entry["cost_usd"] + float(event.data.get("cost_usd")
                                                                or 0), 6)
            entry["seconds"] = round(entry["seconds"] + float(event.data.get("seconds")
                                                              or 0), 3)
    return sessions


def build(graph: Graph, state: WorkItemState, events: Sequence[LogEvent], *,
          since: int = 0, limits: Limits = LIMITS) -> dict[str, Any]:
    """The envelope of ``state``'s work item drawn over ``graph``.

    Args:
        graph: the compiled graph the work item walks.
        state: its state.
        events: its event log, oldest first (:meth:`graph.state.StateStore.events`).
        since: only events whose sequence number is above this (0: all).
        limits: the limits to enforce.

    Returns:
        The envelope as JSON data (see the module docstring); :func:`encode` gives its
        bytes.

    Raises:
        EnvelopeLimitError: more nodes, edges, events or bytes than ``limits`` allow.
    """
    ref = state.ref
    past = Past.of(events, state.legacy)
    item = node_id("work-item", ref)
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []

    nodes[item] = _node("work-item", ref, {
        "status": str(state.status), "current_node": state.current_node,
        "entry_pending": state.entry_pending, "graph_digest": state.graph_digest,
        "parked": state.parked_reason is not None, "escalated": state.escalated is not None,
        "held_by_delivery": state.blocked_by_delivery is not None,
        "created_at": timestamp(state.created_at), "updated_at": timestamp(state.updated_at),
        "decisions": len(past.decisions), "forced_moves": len(past.forced),
        **{f"spend_{k}": v for k, v in spend_of(state.spend).items()},
    })

    referenced = {state.current_node, *state.visits, *state.outcomes, *state.sessions}
    referenced |= {str(d.get("node")) for d in past.decisions if d.get("node")}
    for move in past.forced:
        referenced |= {str(move.get("from")), str(move.get("to"))}
    terminal = {n for n in graph.nodes if graph.is_terminal(n)}
    for nid in [*graph.nodes, *sorted(referenced - set(graph.nodes))]:
        declared = graph.nodes.get(nid)
        attributes: dict[str, Any] = {
            "declared": declared is not None,
            "visits": state.visits.get(nid, 0),
            "current": nid == state.current_node,
            "last_outcome": state.outcomes.get(nid),
            "blocks": state.attempts.get(nid, 0),
            "turns": state.turns.get(nid, 0),
        }
        if declared is not None:
            attributes.update({
                "phase": declared.phase, "actor": declared.actor, "gate": declared.is_gate,
                "terminal": nid in terminal, "produces": list(declared.produces),
                "entry": [c.name for c in declared.entry],
                "exit": [c.name for c in declared.exit],
            })
        nodes[node_id("node", nid)] = _node("node", nid, attributes)

    taken = _taken(past)
    for edge in graph.edges:
        edges.append(_edge(node_id("node", edge.source), node_id("node", edge.target),
                           "routes_to", on=edge.on,
                           taken=taken.get((edge.source, edge.target, edge.on), 0)))
    for nid, visits in state.visits.items():
        edges.append(_edge(item, node_id("node", nid), "visited", visits=visits))
    edges.append(_edge(item, node_id("node", state.current_node), "at",
                       status=str(state.status)))
    for index, move in enumerate(past.forced, start=1):
        attributes = metadata({k: v for k, v in move.items() if k not in ("from", "to")})
        edges.append(_edge(node_id("node", str(move.get("from"))),
                           node_id("node", str(move.get("to"))), "forced", index=index,
                           **attributes))

    for sid, attributes in _sessions(state, events).items():
        nodes[node_id("session", sid)] = _node("session", sid, attributes)
    for nid, session in state.sessions.items():
        if isinstance(session, Mapping) and session.get("id"):
            edges.append(_edge(node_id("node", nid), node_id("session", str(session["id"])),
                               "bound_to"))
    for index, decision in enumerate(past.decisions, start=1):
        key = str(index)
        nodes[node_id("decision", key)] = _node("decision", key, metadata(decision))
        if decision.get("node"):
            edges.append(_edge(node_id("decision", key), node_id("node", str(decision["node"])),
                               "decides", outcome=decision.get("outcome")))

    picked = [e for e in events if e.seq > since]
    out_events = []
    for event in picked:
        subject = node_id("node", str(event.data.get("node"))) if event.data.get("node") \
            else item
        out_events.append({
            "seq": event.seq, "type": event.type, "at": timestamp(event.at),
            "caused_by": event.caused_by if _scalar(event.caused_by) else digest(
                event.caused_by),
            "subject": subject if subject in nodes else item,
            "attributes": metadata(event.data),
        })

    def sort_key(e: dict[str, Any]) -> tuple[str, str, str, str, int]:
        a = e["attributes"]
        return (e["source"], e["target"], e["kind"], str(a.get("on") or ""),
                int(a.get("index") or 0))

    envelope: dict[str, Any] = {
        "schema": SCHEMA,
        "subject": item,
        "graph": {"name": graph.name, "digest": graph.digest, "start": graph.start},
        "nodes": [nodes[k] for k in sorted(nodes)],
        "edges": sorted(edges, key=sort_key),
        "events": out_events,
        "events_since": since,
        "limits": limits.to_dict(),
    }
    for what in ("nodes", "edges", "events"):
        count, limit = len(envelope[what]), getattr(limits, what)
        if count > limit:
            raise EnvelopeLimitError(ref, what, count, limit, limits)
    validate(envelope)
    size = len(encode(envelope))
    if size > limits.bytes:
        raise EnvelopeLimitError(ref, "bytes", size, limits.bytes, limits)
    return envelope


def validate(envelope: Mapping[str, Any]) -> None:
    """Check that ``envelope`` holds together: its schema, unique node ids, every edge's
    ends and every event's subject among its nodes.

    Raises:
        EnvelopeError: naming the first thing that does not.
    """
    if envelope.get("schema") != SCHEMA:
        raise EnvelopeError(f"not a {SCHEMA} envelope (schema {envelope.get('schema')!r})")
    ids = [n["id"] for n in envelope["nodes"]]
    if len(set(ids)) != len(ids):
        raise EnvelopeError("the envelope repeats a node id")
    known = set(ids)
    for edge in envelope["edges"]:
        for end in ("source", "target"):
            if edge[end] not in known:
                raise EnvelopeError(f"edge {edge['kind']} names {edge[end]}, which is not a "
                                    "node of the envelope")
    for event in envelope["events"]:
        if event["subject"] not in known:
            raise EnvelopeError(f"event {event['seq']} names {event['subject']}, which is not "
                                "a node of the envelope")


def encode(document: Any) -> bytes:
    """The canonical bytes of a JSON document: sorted keys, compact, UTF-8, one final
    newline (the same document gives the same bytes)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8") + b"\n"
