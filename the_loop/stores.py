"""The local-disk implementations of the core's interfaces.

* :class:`FileStateStore` — a :class:`graph.state.StateStore` in JSON files.
* :class:`LocalFiles` — a :class:`graph.context.FileReader` over a checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graph.state import LogEvent, WorkItemState, new_event_id, now


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


def ref_slug(ref: str) -> str:
    """A file-name-safe, collision-free form of ``ref`` (``github_o_r_1-<hash>``)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", ref).strip("_")[:80]
    return f"{readable}-{hashlib.sha256(ref.encode()).hexdigest()[:8]}"


class FileStateStore:
    """JSON-file state for local CLI use: ``<dir>/<slug>.json`` and ``<slug>.events.jsonl``.

    Writes are atomic (temporary file + rename) so a crash never leaves half a file.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def state_path(self, ref: str) -> Path:
        """Path of ``ref``'s state file."""
        return self.directory / f"{ref_slug(ref)}.json"

    def log_path(self, ref: str) -> Path:
        """Path of ``ref``'s JSONL event log."""
        return self.directory / f"{ref_slug(ref)}.events.jsonl"

    def load(self, ref: str) -> WorkItemState | None:
        path = self.state_path(ref)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return WorkItemState.from_json(text, str(path))

    def save(self, state: WorkItemState) -> None:
        state.updated_at = now()
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.state_path(state.ref)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".state-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(state.to_json(indent=2))
            fh.write("\n")
        os.replace(tmp, path)

    def quarantine(self, ref: str) -> str | None:
        path = self.state_path(ref)
        if not path.exists():
            return None
        aside = path.with_name(f"{path.stem}.corrupt-{int(now())}.json")
        os.replace(path, aside)
        return str(aside)

    def append_event(
        self, ref: str, type: str, data: Mapping[str, Any], caused_by: str | None = None
    ) -> LogEvent:
        self.directory.mkdir(parents=True, exist_ok=True)
        seq = len(self.events(ref)) + 1
        event = LogEvent(seq, new_event_id(), type, dict(data), caused_by, now())
        with self.log_path(ref).open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(event.to_dict(), sort_keys=True) + "\n")
        return event

    def events(self, ref: str) -> list[LogEvent]:
        try:
            lines = self.log_path(ref).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            if line.strip():
                d = json.loads(line)
                out.append(LogEvent(d["seq"], d["id"], d["type"], d["data"],
                                    d.get("caused_by"), d.get("at", 0.0)))
        return out
