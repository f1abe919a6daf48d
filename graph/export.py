"""Deterministic projections of a compiled graph: JSON and Mermaid (same input, same bytes)."""

from __future__ import annotations

import json
import re

from graph.compile import Graph


def to_json(graph: Graph) -> str:
    """The canonical JSON form (sorted keys, declared node and edge order), newline-ended,
    with ``digest``."""
    doc = graph.canonical()
    doc["digest"] = graph.digest
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _mermaid_id(node_id: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)


def to_mermaid(graph: Graph) -> str:
    """A Mermaid ``flowchart`` of the graph: gates drawn as rhombi, the terminal node as a
    stadium, edges labelled with the outcome they route on."""
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
    return "\n".join(lines) + "\n"
