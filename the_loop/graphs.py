"""Graph files: read one (the shipped default ``graph/pdlc.yaml`` when none is named) and
compile it against the built-in hooks (:mod:`foundation.hooks`).

The compiler itself (:mod:`graph.compile`) reads no file and imports no hook; this is
where the-loop's commands and processes get their :class:`~graph.model.Graph`.

Compiling needs nothing outside the Python package (a command that only reads a graph
runs from ``pip install .`` alone). What a hook call needs installed to *run* (Node and
Mermaid's npm packages for ``lint-artifacts`` with ``diagrams: true``) is checked by
:func:`require_tools`, at the start-up of the processes that run hooks: the worker,
``the-loop run``, ``decide`` and ``check --recompute``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from foundation.hooks import REGISTRY, lint_artifacts
from graph.compile import GraphError, compile_graph
from graph.model import Graph
from graph.registry import HookRegistry

DEFAULT_GRAPH_NAME = "pdlc.yaml"

#: Hook name -> the start-up check of one of its calls: the call's ``with:`` -> what a
#: process running it lacks, naming the fix, or ``None``.
TOOL_CHECKS: Mapping[str, Callable[[Mapping[str, Any]], str | None]] = {
    lint_artifacts.NAME: lint_artifacts.check_installed,
}


class MissingTool(GraphError):
    """A hook call of the graph cannot run in this process: something it needs is not
    installed. ``str()`` names the file, the node, the call, what is missing and the fix."""


def default_graph_path() -> Path:
    """Path of the shipped default graph ``graph/pdlc.yaml`` (package data)."""
    return Path(str(resources.files("graph").joinpath(DEFAULT_GRAPH_NAME)))


def load_graph(path: str | Path | None = None, registry: HookRegistry | None = None) -> Graph:
    """Read and compile a graph file.

    Args:
        path: a YAML graph file; the shipped default when ``None``.
        registry: hook registry to resolve names against; the built-in hooks by default.

    Returns:
        the compiled :class:`~graph.model.Graph`.

    Raises:
        GraphError: unreadable file, malformed YAML, or any structural error, naming the
            file, the node and the hook or field.
    """
    file = Path(path) if path is not None else default_graph_path()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise GraphError(f"{file}: cannot read graph file ({exc.strerror})") from None
    return compile_graph(text, source=str(file), registry=REGISTRY if registry is None
                         else registry)


def missing_tools(graph: Graph) -> list[str]:
    """What this process lacks to run the graph's hook calls (:data:`TOOL_CHECKS`).

    Returns:
        one line per call that could not run here, in node and chain order, each
        ``FILE: node 'ID': exit[N]: hook 'NAME': PROBLEM`` (the compiler's style); empty
        when every call can run.
    """
    problems = []
    for node in graph.nodes.values():
        for boundary, chain in (("entry", node.entry), ("exit", node.exit)):
            for j, call in enumerate(chain):
                check = TOOL_CHECKS.get(call.name)
                problem = check(call.params) if check is not None else None
                if problem:
                    problems.append(f"{graph.source}: node {node.id!r}: {boundary}[{j}]: "
                                    f"hook {call.name!r}: {problem}")
    return problems


def require_tools(graph: Graph) -> None:
    """The start-up check of a process that will run the graph's hooks.

    Raises:
        MissingTool: some call cannot run here; the message is the first of
            :func:`missing_tools` (the others have the same fix), with how many more.
    """
    problems = missing_tools(graph)
    if problems:
        more = f" ({len(problems) - 1} more calls need the same)" if len(problems) > 1 else ""
        raise MissingTool(problems[0] + more)
