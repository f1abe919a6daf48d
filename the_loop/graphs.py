"""Graph files: read one (the shipped default ``graph/pdlc.yaml`` when none is named) and
compile it against the built-in hooks (:mod:`foundation.hooks`).

The compiler itself (:mod:`graph.compile`) reads no file and imports no hook; this is
where the-loop's commands and processes get their :class:`~graph.model.Graph`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from foundation.hooks import REGISTRY
from graph.compile import GraphError, compile_graph
from graph.model import Graph
from graph.registry import HookRegistry

DEFAULT_GRAPH_NAME = "pdlc.yaml"


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
