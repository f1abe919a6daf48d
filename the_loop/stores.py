"""The local-disk implementations of the core's interfaces.

* :class:`LocalFiles` — a :class:`graph.context.FileReader` over a checkout.
"""

from __future__ import annotations

from pathlib import Path


class LocalFiles:
    """A :class:`FileReader` over a local checkout."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    @property
    def revision(self) -> str:
        return "working tree"

    def read_text(self, path: str) -> str | None:
        target = (self.root / path).resolve()
        # Never read outside the checkout, whatever the graph or config says.
        if self.root != target and self.root not in target.parents:
            return None
        try:
            return target.read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

