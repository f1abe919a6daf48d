"""The local-disk implementations of the core's interfaces.

* :class:`FileStateStore` — a :class:`graph.state.StateStore` in JSON files: mode 0600 in
  0700 directories, each state record sealed.
* :class:`LocalFiles` — a :class:`graph.context.FileReader` over a checkout.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graph.state import LogEvent, StateError, WorkItemState, new_event_id, now

log = logging.getLogger(__name__)

#: Modes of the store's directory and files: the owner's alone (state and the event log
#: hold who decided what; nobody else on the machine reads or edits them).
DIR_MODE = 0o700
FILE_MODE = 0o600
#: The key of a state file's seal.
SEAL = "seal"


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


def canonical(data: Mapping[str, Any]) -> bytes:
    """The canonical bytes a seal is taken over: JSON with sorted keys, no whitespace,
    UTF-8 (non-ASCII kept as is)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def seal_of(data: Mapping[str, Any], key: bytes | None) -> str:
    """The seal of a state record's content ``data`` (without its ``seal``):
    ``hmac-sha256:<hex>`` keyed with ``key``, else ``sha256:<hex>``."""
    body = canonical(data)
    if key:
        return "hmac-sha256:" + hmac.new(key, body, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(body).hexdigest()


class FileStateStore:
    """JSON-file state for local CLI use: ``<dir>/<slug>.json``, ``<slug>.events.jsonl``
    and ``<slug>.events.seq`` (the log's last sequence number, so an append writes one
    line and never reads the log).

    Writes are atomic (temporary file + rename) so a crash never leaves half a file. The
    directory is made (and kept) mode 0700, every file 0600. Each state record carries a
    ``seal``: a digest over its canonical content (:func:`canonical`), HMAC-SHA256 with
    ``seal_key`` when one is configured (``THE_LOOP_STATE_KEY``), else SHA-256. A record
    whose seal is missing or does not match fails closed like one that does not parse
    (:class:`~graph.state.StateError`): the runtime keeps the file aside, warns, and
    reconstructs the state from the artifacts' verified records.

    Args:
        directory: where the files live.
        seal_key: the seal's key (a secret; never stored or logged), or ``None``.
    """

    def __init__(self, directory: Path, *, seal_key: str | bytes | None = None) -> None:
        self.directory = directory
        self._key = seal_key.encode("utf-8") if isinstance(seal_key, str) else seal_key

    def __repr__(self) -> str:
        return f"FileStateStore({str(self.directory)!r}, keyed={self._key is not None})"

    def _ensure_directory(self) -> None:
        self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        if self.directory.stat().st_mode & 0o777 != DIR_MODE:
            os.chmod(self.directory, DIR_MODE)  # made earlier by an older the-loop

    def state_path(self, ref: str) -> Path:
        """Path of ``ref``'s state file."""
        return self.directory / f"{ref_slug(ref)}.json"

    def log_path(self, ref: str) -> Path:
        """Path of ``ref``'s JSONL event log."""
        return self.directory / f"{ref_slug(ref)}.events.jsonl"

    def seq_path(self, ref: str) -> Path:
        """Path of the file holding the sequence number of ``ref``'s last log entry."""
        return self.directory / f"{ref_slug(ref)}.events.seq"

    def load(self, ref: str) -> WorkItemState | None:
        """``ref``'s state, its seal verified.

        Raises:
            StateError: the file is not JSON, not a state record, or its seal is missing
                or does not match its content (naming the file, never the key).
        """
        path = self.state_path(ref)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StateError(f"{path}: not valid JSON ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise StateError(f"{path}: state must be a JSON object")
        seal = data.pop(SEAL, None)
        if not isinstance(seal, str) or not hmac.compare_digest(
                seal.encode(), seal_of(data, self._key).encode()):
            why = "has no seal" if seal is None else "fails its seal"
            raise StateError(f"{path}: the state record {why} (changed outside the-loop, "
                             "corrupted, or sealed with another THE_LOOP_STATE_KEY)")
        try:
            return WorkItemState.from_dict(data)
        except StateError as exc:
            raise StateError(f"{path}: {exc}") from None

    def save(self, state: WorkItemState) -> None:
        state.updated_at = now()
        self._ensure_directory()
        path = self.state_path(state.ref)
        data = state.to_dict()
        data[SEAL] = seal_of(data, self._key)
        # mkstemp creates the file 0600.
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".state-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))
            fh.write("\n")
        os.replace(tmp, path)
        state.effects_reset = False

    def save_effect(self, state: WorkItemState, effect: str) -> None:
        """The local store keeps the outbox in the state file: saved whole."""
        self.save(state)

    def quarantine(self, ref: str) -> str | None:
        path = self.state_path(ref)
        if not path.exists():
            return None
        aside = path.with_name(f"{path.stem}.corrupt-{int(now())}.json")
        os.replace(path, aside)
        os.chmod(aside, FILE_MODE)
        return str(aside)

    def append_event(
        self, ref: str, type: str, data: Mapping[str, Any], caused_by: str | None = None
    ) -> LogEvent:
        self._ensure_directory()
        seq = self._last_seq(ref) + 1
        event = LogEvent(seq, new_event_id(), type, dict(data), caused_by, now())
        path = self.log_path(ref)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            if os.fstat(fd).st_mode & 0o777 != FILE_MODE:
                os.fchmod(fd, FILE_MODE)  # written earlier by an older the-loop
            fh.write(json.dumps(event.to_dict(), sort_keys=True) + "\n")
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".seq-", suffix=".seq")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(str(seq))
        os.replace(tmp, self.seq_path(ref))
        return event

    def _last_seq(self, ref: str) -> int:
        """The sequence number of ``ref``'s last log entry, from its counter file; a log
        written before the counter existed is counted once."""
        try:
            return int(self.seq_path(ref).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return len(self.events(ref))

    def caused_by(self, ref: str, delivery: str) -> list[LogEvent]:
        """The entries ``delivery`` caused (the local log is read: no delivery path here)."""
        return [e for e in self.events(ref) if e.caused_by == delivery]

    def logged(self, ref: str, type: str) -> bool:
        """Whether the local log holds an entry of ``type`` (read, as :meth:`caused_by`)."""
        return any(e.type == type for e in self.events(ref))

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
