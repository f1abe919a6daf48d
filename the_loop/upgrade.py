"""``the-loop upgrade``: migrate config files to the current version by deterministic key
moves.

* :func:`migrate_document` is the pure part: it edits a round-trip YAML document in place
  and returns what it did (:class:`Migration`).
* :func:`upgrade_text` and :func:`upgrade_file` wrap it for text and files.

Properties (specification, "Four properties the break must have"):

* deterministic: ``ghBinary`` keys are read in a stated order — ``webhooks.ghWebhook.routing``
  ``control``, ``reactions``, ``announce``, then any under ``poller``, then any other — and
  each moves to ``integrations.github.cli.binary``;
* non-clobbering: an existing ``integrations.github.cli.binary`` wins; otherwise the first
  ``ghBinary`` does. Every other ``ghBinary`` with a different value is reported as a
  conflict (and removed: version 2 has one place for the setting);
* idempotent: a file at the current version without legacy keys is left byte-for-byte
  untouched, and the report says so;
* reported: one line per moved key; ``--dry-run`` prints the same lines and writes nothing;
* comments survive (ruamel.yaml round trip): comment lines after a removed key are kept,
  its own end-of-line comment and the comment block directly above it go with it, and the
  winning ``ghBinary``'s end-of-line comment follows it to its new place.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken

from foundation.config import load_config
from foundation.config.legacy import GH_BINARY_TARGET, find_legacy_keys
from foundation.config.loader import (
    CLI_CONFIG,
    CURRENT_VERSION,
    KINDS,
    ConfigFileError,
    ConfigIssue,
    InvalidConfigError,
    dotted,
    kind_for_path,
    parse_yaml,
    schema,
    yaml_round_trip,
)


class UpgradeError(ConfigFileError):
    """The file cannot be migrated (not a mapping, a version this the-loop does not know)."""


@dataclass(frozen=True)
class Change:
    """One thing the migration did.

    Attributes:
        action: ``version`` (set or added the version), ``moved`` (a key moved),
            ``conflict`` (a key removed because the new key already had another value) or
            ``removed`` (an emptied section of the old layout removed).
        key: the old key's dotted path.
        target: the new key's dotted path (``moved``, ``conflict``).
        detail: the values involved, for ``version`` and ``conflict``.
    """

    action: str
    key: str
    target: str = ""
    detail: str = ""

    def __str__(self) -> str:
        if self.action == "moved":
            return f"moved {self.key} -> {self.target}"
        if self.action == "conflict":
            return f"conflict {self.key}: {self.detail}"
        if self.action == "removed":
            return f"removed empty {self.key}"
        return self.detail


@dataclass(frozen=True)
class Migration:
    """What :func:`migrate_document` did to one document."""

    kind: str
    from_version: int | None
    to_version: int
    changes: tuple[Change, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def count(self, action: str) -> int:
        return sum(1 for c in self.changes if c.action == action)


# -- the pure migration ----------------------------------------------------------------


def migrate_document(doc: Any, kind: str) -> Migration:
    """Migrate a round-trip document (from :func:`foundation.config.loader.parse_yaml`) of
    ``kind`` to the current version, in place.

    Raises:
        UpgradeError: not a mapping, or a ``version`` that is not a whole number or is
            newer than this the-loop reads.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown config kind {kind!r}")
    if not isinstance(doc, CommentedMap):
        raise UpgradeError("the top level must be a mapping of keys")
    current = CURRENT_VERSION[kind]
    version = doc.get("version")
    if "version" in doc and (isinstance(version, bool) or not isinstance(version, int)):
        raise UpgradeError(f"'version' must be a whole number; write 'version: {current}'")
    if isinstance(version, int) and (version > current or version < 1):
        raise UpgradeError(f"version {version} is not one this the-loop knows (it reads "
                           f"{current}); upgrade the-loop instead")
    changes: list[Change] = []
    if "version" not in doc:
        _insert(doc, 0, "version", current)
        changes.append(Change("version", "version", detail=f"added version: {current}"))
    elif version != current:
        doc["version"] = current
        changes.append(Change("version", "version", detail=f"version {version} -> {current}"))
    if kind == CLI_CONFIG:
        changes += _move_gh_binary(doc)
    return Migration(kind, version, current, tuple(changes))


def _move_gh_binary(doc: CommentedMap) -> list[Change]:
    found = find_legacy_keys(doc)
    if not found:
        return []
    target = dotted(GH_BINARY_TARGET)
    kept = _lookup(doc, GH_BINARY_TARGET)
    if kept is _ABSENT:
        winner = found[0]
        parent = _lookup(doc, winner.path[:-1])
        kept = parent[winner.path[-1]]
        _set_target(doc, GH_BINARY_TARGET, kept, _eol_comment(parent, winner.path))
        kept = winner.value
    changes: list[Change] = []
    for legacy in found:
        if legacy.value == kept:
            changes.append(Change("moved", legacy.key, target))
        else:
            changes.append(Change(
                "conflict", legacy.key, target,
                f"{legacy.value!r} differs from {target}: {kept!r}; kept {kept!r} and "
                f"removed {legacy.key}"))
        parents = _chain(doc, legacy.path)
        container, key = parents[-1]
        _delete(container, key, parents[-2] if len(parents) > 1 else None)
        changes += _prune(doc, legacy.path[:-1])
    return changes


def _eol_comment(parent: Any, path: tuple[str | int, ...]) -> tuple[str, int] | None:
    """The end-of-line comment of ``parent[path[-1]]`` and the column that keeps its gap to
    the value once the key is ``GH_BINARY_TARGET`` (same indentation step as the file)."""
    key = path[-1]
    eol = _read(parent, key)[0]
    token = parent.ca.items.get(key, [None] * 3)[2]
    if not eol or token is None:
        return None
    try:
        key_column = parent.lc.key(key)[1]
    except (KeyError, TypeError, AttributeError):
        return eol, 0
    value_end = key_column + len(f"{key}: {parent[key]}")
    gap = max(1, (getattr(token.start_mark, "column", 0) or 0) - value_end)
    step = key_column // (len(path) - 1) if len(path) > 1 and key_column else 2
    new_key = GH_BINARY_TARGET[-1]
    new_end = step * (len(GH_BINARY_TARGET) - 1) + len(f"{new_key}: {parent[key]}")
    return eol, new_end + gap


def _prune(doc: CommentedMap, path: tuple[str | int, ...]) -> list[Change]:
    """Remove emptied mappings along ``path`` that the current schema does not have."""
    changes = []
    while path:
        node = _lookup(doc, path)
        if not isinstance(node, CommentedMap) or len(node) or _in_schema(path):
            break
        parents = _chain(doc, path)
        container, key = parents[-1]
        _delete(container, key, parents[-2] if len(parents) > 1 else None)
        changes.append(Change("removed", dotted(path)))
        path = path[:-1]
    return changes


def _in_schema(path: tuple[str | int, ...]) -> bool:
    node: Any = schema(CLI_CONFIG)
    for part in path:
        props = node.get("properties") if isinstance(node, dict) else None
        if not props or part not in props:
            return False
        node = props[part]
    return True


def _set_target(
    doc: CommentedMap, path: tuple[str, ...], value: Any, eol: tuple[str, int] | None
) -> None:
    """Set ``path`` to ``value``, creating the mappings it needs (a new top-level key goes
    right after ``version``); ``eol`` is an end-of-line comment and its column."""
    node = doc
    depth = 0
    while depth < len(path) - 1 and isinstance(node.get(path[depth]), CommentedMap):
        node = node[path[depth]]
        depth += 1
    if path[depth] in node:
        raise UpgradeError(f"{dotted(path[:depth + 1])} must be a mapping to receive "
                           f"{dotted(path)}; fix it by hand, then run the upgrade again")
    new: Any = value
    for part in reversed(path[depth + 1:]):
        new = CommentedMap([(part, new)])
    leaf = new
    for part in path[depth + 1:-1]:
        leaf = leaf[part]
    keys = list(node)
    pos = keys.index("version") + 1 if node is doc and "version" in keys else len(keys)
    _insert(node, pos, path[depth], new)
    if eol:
        holder = node if depth == len(path) - 1 else leaf
        entry = holder.ca.items.setdefault(path[-1], [None, None, None, None])
        _, lines = _read(holder, path[-1])
        entry[2] = CommentToken(_join(eol[0], lines), CommentMark(eol[1]))


# -- comment-preserving edits ----------------------------------------------------------
#
# ruamel.yaml keeps the comment lines after a node with that node: for a mapping entry in
# ca.items[key][2], for a sequence item in ca.items[index][0]; that token's text is the
# end-of-line comment (or nothing) followed by the full lines after it, indentation
# included. Lines between a key and the first entry of its block value may instead sit in
# ca.items[key][3] (a list of one-line tokens, placed by column; shared with the value's
# ca.comment[1]). A plain ``del`` drops the lines after the deleted entry, which belong to
# whatever comes next; the helpers below move them.


_ABSENT: Any = object()


def _lookup(doc: Any, path: Sequence[str | int]) -> Any:
    node = doc
    for part in path:
        found = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node))
        if not found:
            return _ABSENT
        node = node[part]
    return node


def _chain(doc: Any, path: Sequence[str | int]) -> list[tuple[Any, Any]]:
    """``[(container, key), ...]`` from the root down to ``path``'s last key."""
    out = []
    node = doc
    for part in path:
        out.append((node, part))
        node = node[part]
    return out


def _is_flow(node: Any) -> bool:
    try:
        return bool(node.fa.flow_style())
    except AttributeError:
        return False


def _is_block(value: Any) -> bool:
    return isinstance(value, CommentedMap | CommentedSeq) and len(value) > 0 \
        and not _is_flow(value)


def _last_leaf(container: Any, key: Any) -> tuple[Any, Any]:
    """The entry whose comment token holds the lines after ``container[key]``'s subtree."""
    value = container[key]
    if _is_block(value):
        return _last_leaf(value, list(value)[-1] if isinstance(value, CommentedMap)
                          else len(value) - 1)
    return container, key


def _index(container: Any) -> int:
    return 0 if isinstance(container, CommentedSeq) else 2


def _token_lines(token: CommentToken) -> list[str]:
    """A one-line "pre" token as raw lines (its column becomes indentation)."""
    column = getattr(token.start_mark, "column", 0) or 0
    lines = token.value.splitlines(keepends=True)
    if lines and lines[0].strip() and not lines[0].startswith(" "):
        lines[0] = " " * column + lines[0]
    return lines


def _split(value: str) -> tuple[str | None, list[str]]:
    """A trailing comment token's text as (end-of-line comment, following full lines)."""
    if value.startswith("#"):
        eol, _, rest = value.partition("\n")
        return eol, rest.splitlines(keepends=True)
    rest = value[1:] if value.startswith("\n") else value
    return None, rest.splitlines(keepends=True)


def _join(eol: str | None, lines: Sequence[str]) -> str:
    body = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return (eol or "") + "\n" + body


def _read(container: Any, key: Any) -> tuple[str | None, list[str]]:
    """(end-of-line comment, full comment lines) after the line of ``container[key]``."""
    entry = container.ca.items.get(key)
    if not entry:
        return None, []
    token = entry[_index(container)]
    eol, lines = _split(token.value) if isinstance(token, CommentToken) else (None, [])
    if _index(container) == 2 and len(entry) > 3 and entry[3]:
        for pre in entry[3]:
            lines += _token_lines(pre)
    return eol, lines


def _write(container: Any, key: Any, eol: str | None, lines: Sequence[str]) -> None:
    """Replace what :func:`_read` returns; the end-of-line token keeps its column."""
    index = _index(container)
    entry = container.ca.items.setdefault(key, [None, None, None, None])
    token = entry[index] if isinstance(entry[index], CommentToken) else None
    value = container[key]
    block = _is_block(value)
    if block and index == 2:
        first = eol + "\n" if eol else None
        rest = [CommentToken("".join(lines), CommentMark(0))] if lines else None
    else:
        first = _join(eol, lines) if eol or lines else None
        rest = None
    if first is None:
        entry[index] = None
    elif token is not None:
        token.value = first
    else:
        entry[index] = CommentToken(first, CommentMark(0))
    if index == 2:
        entry[3] = rest
    if isinstance(value, CommentedMap | CommentedSeq):
        value.ca.comment = [entry[index], rest] if block and (entry[index] or rest) else None
    if not any(entry):
        del container.ca.items[key]


def _take_trailing(container: Any, key: Any) -> list[str]:
    """Detach and return the comment lines after ``container[key]``'s subtree."""
    leaf = _last_leaf(container, key)
    eol, lines = _read(*leaf)
    if lines:
        _write(*leaf, eol, [])
    return lines


def _append(slot: tuple[Any, Any], lines: Sequence[str]) -> None:
    if not lines:
        return
    eol, existing = _read(*slot)
    lines = list(lines)
    while existing and lines and not existing[-1].strip() and not lines[0].strip():
        lines.pop(0)  # no doubled blank line where a removed key was
    _write(*slot, eol, [*existing, *lines])


def _strip_heading(slot: tuple[Any, Any], column: int) -> None:
    """Drop the comment block directly above a removed key (same column, no blank line)."""
    eol, lines = _read(*slot)
    kept = list(lines)
    while kept and kept[-1].lstrip().startswith("#") and \
            len(kept[-1]) - len(kept[-1].lstrip()) == column:
        kept.pop()
    if kept != lines:
        _write(*slot, eol, kept)


def _delete(container: CommentedMap, key: Any, parent: tuple[Any, Any] | None) -> None:
    """Delete ``container[key]`` with its own comments (end of line, the block directly
    above), keeping the comment lines after it in place."""
    keys = list(container)
    index = keys.index(key)
    try:
        column: int | None = container.lc.key(key)[1]
    except (KeyError, TypeError, AttributeError):
        column = None
    trailing = _take_trailing(container, key)
    before = _last_leaf(container, keys[index - 1]) if index else parent
    if before is not None and column is not None:
        _strip_heading(before, column)
    # Comments between the removed key's line and the first entry under the parent key.
    before_lines = _read(*parent) if parent is not None and not index else (None, [])
    container.ca.items.pop(key, None)
    del container[key]
    if not len(container):
        container.fa.set_flow_style()  # emitted as {} with its comments after it
    if index:
        _append(_last_leaf(container, keys[index - 1]), trailing)
    elif parent is not None:
        _write(*parent, before_lines[0], before_lines[1])  # re-place for the new shape
        _append(parent, trailing)
    elif trailing:
        comment = container.ca.comment
        pre = list(comment[1] or []) if comment else []
        pre.append(CommentToken("".join(trailing), CommentMark(0)))
        container.ca.comment = [comment[0] if comment else None, pre]


def _insert(container: CommentedMap, pos: int, key: Any, value: Any) -> None:
    """Insert ``key`` at ``pos``; comment lines that followed the previous entry (they
    introduce what comes next) move after the new entry."""
    keys = list(container)
    trailing = _take_trailing(container, keys[pos - 1]) if pos else []
    container.insert(pos, key, value)
    _append(_last_leaf(container, key), trailing)


# -- text and files --------------------------------------------------------------------


def _indentation(text: str) -> tuple[int, int, int]:
    """(mapping, sequence, offset) indentation used by ``text`` (default 2, 4, 2)."""
    mapping = sequence = offset = None
    previous: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if previous is not None and re.search(r":\s*(#.*)?$", previous):
            outer = len(previous) - len(previous.lstrip())
            inner = len(line) - len(line.lstrip())
            if stripped.startswith("- ") and offset is None and inner >= outer:
                offset = inner - outer
                sequence = offset + 2
            elif mapping is None and inner > outer and not previous.lstrip().startswith("- "):
                mapping = inner - outer
        previous = line
    return mapping or 2, sequence or 4, offset if offset is not None else 2


def upgrade_text(text: str, kind: str, source: str) -> tuple[str, Migration]:
    """Migrate the text of a config file of ``kind``; returns the new text (``text`` itself,
    unchanged, when there is nothing to do) and the migration.

    Raises:
        InvalidConfigError: the text is not YAML.
        UpgradeError: see :func:`migrate_document`.
    """
    doc = parse_yaml(text, source)
    if doc is None:  # empty: every default, nothing to migrate
        return text, Migration(kind, None, CURRENT_VERSION[kind])
    migration = migrate_document(doc, kind)
    if not migration.changed:
        return text, migration
    yaml = yaml_round_trip()
    mapping, sequence, offset = _indentation(text)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.explicit_start = text.lstrip().startswith("---")
    out = io.StringIO()
    yaml.dump(doc, out)
    new_text = out.getvalue()
    try:
        parse_yaml(new_text, source)
    except InvalidConfigError as exc:  # a bug here must never reach the operator's file
        raise UpgradeError(f"{source}: the migrated text would not parse ({exc}); nothing "
                           "written — please report this with the file") from None
    return new_text, migration


@dataclass(frozen=True)
class UpgradeResult:
    """One file's upgrade.

    Attributes:
        path: the file.
        kind: ``cli-config``, ``harness-config`` or ``collaborators``.
        migration: what changed (or would change).
        text: the migrated text.
        written: whether the file was rewritten (never on a dry run or without changes).
        problems: the loader's message if the migrated file still does not load (an
            unknown key, a bad value), else ``None``.
    """

    path: str
    kind: str
    migration: Migration
    text: str
    written: bool
    problems: str | None

    def report(self, dry_run: bool = False) -> list[str]:
        """The lines ``the-loop upgrade`` prints for this file."""
        m = self.migration
        if not m.changed:
            lines = [f"{self.path}: already at version {m.to_version}; nothing to change"]
        else:
            lines = [f"{self.path}:"] + [f"  {c}" for c in m.changes]
            moved, conflicts = m.count("moved"), m.count("conflict")
            summary = (f" ({moved} moved, {conflicts} conflict{'' if conflicts == 1 else 's'})"
                       if moved or conflicts else "")
            if dry_run:
                lines.append(f"{self.path}: dry run, nothing written; would upgrade to "
                             f"version {m.to_version}{summary}")
            else:
                lines.append(f"{self.path}: upgraded to version {m.to_version}{summary}")
        if self.problems:
            lines.append(f"{self.path}: still does not load (lines of the migrated text):")
            lines += [f"  {line}" for line in self.problems.splitlines()]
        return lines


def upgrade_file(
    path: str | os.PathLike[str], *, kind: str | None = None, dry_run: bool = False
) -> UpgradeResult:
    """Migrate the file at ``path`` in place (atomically; not at all on ``dry_run`` or when
    nothing changes). ``kind`` defaults to :func:`foundation.config.loader.kind_for_path`.

    Raises:
        InvalidConfigError: the file is missing, unreadable or not YAML.
        UpgradeError: see :func:`migrate_document`.
    """
    file = Path(path)
    kind = kind or kind_for_path(file)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidConfigError([ConfigIssue(str(file), "", None, "does not exist",
                                              "pass the path of an existing file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigError([ConfigIssue(str(file), "", None,
                                              f"cannot be read ({type(exc).__name__})",
                                              "check the path and its permissions")]) from None
    new_text, migration = upgrade_text(text, kind, str(file))
    problems = None
    try:
        load_config(kind, new_text, str(file))
    except ConfigFileError as exc:
        problems = str(exc)
    written = False
    if migration.changed and not dry_run:
        _write_atomically(file, new_text)
        written = True
    return UpgradeResult(str(file), kind, migration, new_text, written, problems)


def _write_atomically(file: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".tmp", dir=file.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, file.stat().st_mode & 0o7777)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
