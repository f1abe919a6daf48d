"""Deterministic projections of a compiled graph: JSON and Mermaid (same input, same bytes)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from graph.model import Graph


@dataclass(frozen=True)
class Overlay:
    """A work item drawn over the graph: the nodes it visited (in order, repeats kept)
    and where it is now."""

    ref: str
    current: str
    visited: tuple[str, ...]
    forced: tuple[str, ...] = ()
    status: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"ref": self.ref, "current": self.current, "visited": list(self.visited),
                "forced": list(self.forced), "status": self.status}


def to_json(graph: Graph, overlay: Overlay | None = None) -> str:
    """The canonical JSON form (sorted keys, declared node and edge order), newline-ended,
    with ``digest`` and, when given, the work item ``overlay``."""
    doc = graph.canonical()
    doc["digest"] = graph.digest
    if overlay is not None:
        doc["overlay"] = overlay.to_dict()
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _mermaid_id(node_id: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)


def to_mermaid(graph: Graph, overlay: Overlay | None = None) -> str:
    """A Mermaid ``flowchart`` of the graph: gates drawn as rhombi, the terminal node as a
    stadium, edges labelled with the outcome they route on; with an ``overlay``, visited
    nodes and the current node are styled."""
    lines = ["flowchart TD"]
    for node in graph.nodes.values():
        nid = _mermaid_id(node.id)
        label = node.id.replace('"', "'")
        if node.is_gate:
            lines.append(f'    {nid}{{"{label}"}}')
        elif graph.is_terminal(node.id):
            lines.append(f'    {nid}(["{label}"])')
        else:
            lines.append(f'    {nid}["{label}"]')
    for edge in graph.edges:
        lines.append(f"    {_mermaid_id(edge.source)} -->|{edge.on}| {_mermaid_id(edge.target)}")
    if overlay is not None:
        lines.append("    classDef visited fill:#dfe,stroke:#393")
        lines.append("    classDef current fill:#ffd,stroke:#c90,stroke-width:3px")
        lines.append("    classDef forced stroke:#c00,stroke-dasharray:4 2")
        visited = [n for n in graph.nodes if n in overlay.visited and n != overlay.current]
        if visited:
            lines.append(f"    class {','.join(_mermaid_id(n) for n in visited)} visited")
        if overlay.current in graph.nodes:
            lines.append(f"    class {_mermaid_id(overlay.current)} current")
        forced = [n for n in graph.nodes if n in overlay.forced]
        if forced:
            lines.append(f"    class {','.join(_mermaid_id(n) for n in forced)} forced")
    return "\n".join(lines) + "\n"
