"""Loading the configuration files: YAML with line numbers, JSON Schema validation,
problems rendered with the key, the line and the fix, and the typed build of a file's
dataclass.

=====================================  ======================  =========================
file                                   answers                 current ``version``
=====================================  ======================  =========================
``cli-config.yaml`` (deployment)       *how*: transports,      2 (1 was the layout with
path from ``$THE_LOOP_CONFIG``         credentials, routing    ``ghBinary`` per feature)
``.the-loop/harness-config.yaml``      *what*: events, specs,  1
                                       enrolment, policy
``.the-loop/collaborators.yaml``       *who*: role -> people   1
=====================================  ======================  =========================

The files' shapes are :mod:`foundation.config.deployment` and
:mod:`foundation.config.repository`; every problem raises :class:`ConfigFileError` (in
practice one of its subclasses here) whose message names the file, the key path, the line
where known, and the fix:

* :class:`InvalidConfigError` — not YAML, unknown key (with the allowed keys and the
  closest one), wrong type or value. ``.issues`` lists every problem found, by line.
* :class:`LegacyConfigError` — an older ``version`` (or none), or a key removed by a
  breaking change (``ghBinary`` anywhere, see :mod:`foundation.config.legacy`); names each
  key, its replacement and the exact ``the-loop upgrade PATH`` command to run (see
  :mod:`the_loop.upgrade`).

The schemas ship as package data in ``foundation/config/schemas/*.schema.json`` (JSON Schema
draft 2020-12, ``additionalProperties: false`` everywhere).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import os
import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, get_args, get_origin, get_type_hints

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from graph.errors import LoopError

CLI_CONFIG = "cli-config"
HARNESS_CONFIG = "harness-config"
COLLABORATORS = "collaborators"
KINDS = (CLI_CONFIG, HARNESS_CONFIG, COLLABORATORS)
CURRENT_VERSION: Mapping[str, int] = MappingProxyType(
    {CLI_CONFIG: 2, HARNESS_CONFIG: 1, COLLABORATORS: 1}
)

Path_ = tuple[str | int, ...]


# -- errors ----------------------------------------------------------------------------


class ConfigFileError(LoopError, ValueError):
    """A config file is malformed; the message names the file and key."""

@dataclass(frozen=True)
class ConfigIssue:
    """One problem in one file.

    Attributes:
        source: the file as named to the user (e.g. ``cli-config.yaml`` or
            ``octo/repo:.the-loop/collaborators.yaml``).
        key: dotted key path (``webhooks.ghWebhook.routing.reactions.started``, list items
            as ``roles.approver[0]``); empty for the whole file.
        line: 1-based line, when known.
        problem: what is wrong.
        fix: what to do about it.
    """

    source: str
    key: str
    line: int | None
    problem: str
    fix: str = ""

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        key = f" {self.key}:" if self.key else ""
        fix = f"; {self.fix}" if self.fix else ""
        return f"{where}:{key} {self.problem}{fix}"


class InvalidConfigError(ConfigFileError):
    """A config file is not valid YAML or does not match its schema.

    ``str()`` is one line per issue, in line order; ``issues`` holds them structured.
    """

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = tuple(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class LegacyConfigError(ConfigFileError):
    """A config file is at an older version or carries keys a breaking change removed.

    Attributes:
        source: the file.
        found_version: its ``version`` (``None`` when it has none).
        current_version: the version this the-loop reads.
        command: the exact command that migrates it (``the-loop upgrade PATH``).
        issues: one per legacy key: its path, line, and replacement in ``fix``.
    """

    def __init__(
        self,
        source: str,
        found_version: int | None,
        current_version: int,
        issues: Sequence[ConfigIssue],
    ) -> None:
        self.source = source
        self.found_version = found_version
        self.current_version = current_version
        self.command = upgrade_command(source)
        self.issues = tuple(issues)
        if found_version is None:
            head = (f"{source} has no 'version' key; this the-loop reads version "
                    f"{current_version}")
        elif found_version < current_version:
            head = (f"{source} is version {found_version}; this the-loop reads version "
                    f"{current_version}")
        else:
            head = f"{source} still carries keys removed in version {current_version}"
        lines = [f"{head}. Run: {self.command}"]
        lines += [str(i) for i in self.issues]
        super().__init__("\n".join(lines))


def upgrade_command(source: str) -> str:
    """The command that migrates ``source``; an ``owner/repo:`` prefix (a file read from
    GitHub) is dropped, leaving the path in the checkout."""
    match = re.match(r"^[\w.-]+/[\w.-]+:(?!//)(.+)$", source)
    path = match.group(1) if match else source
    return f"the-loop upgrade {shlex.quote(path)}"



def kind_for_path(path: str | os.PathLike[str]) -> str:
    """The config kind of a file by its name: ``harness-config.yaml`` and
    ``collaborators.yaml`` (``.yml`` too) are the per-repository files; any other name is a
    ``cli-config.yaml``."""
    name = Path(path).name.lower()
    stem = name.rsplit(".", 1)[0] if name.endswith((".yaml", ".yml")) else name
    if stem == HARNESS_CONFIG:
        return HARNESS_CONFIG
    if stem == COLLABORATORS:
        return COLLABORATORS
    return CLI_CONFIG



def read_file(path: str | os.PathLike[str]) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigError(
            [ConfigIssue(str(path), "", None, f"cannot be read ({type(exc).__name__})",
                         "check the path and its permissions; the file must be UTF-8")]
        ) from None



# -- YAML with line numbers ------------------------------------------------------------


def yaml_round_trip() -> YAML:
    """The round-trip YAML 1.2 parser/emitter used by the loaders and ``the-loop upgrade``
    (keeps comments, key order and line numbers; duplicate keys are errors)."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def parse_yaml(text: str, source: str) -> Any:
    """Parse ``text`` round-trip (``CommentedMap``/``CommentedSeq`` with ``.lc`` lines).

    Raises:
        InvalidConfigError: naming the line and the YAML problem.
    """
    try:
        return yaml_round_trip().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = (exc.problem or exc.context or "syntax error").strip()
        if "duplicate key" in str(exc.problem or ""):
            first = exc.context_mark
            fix = "keep one of the two keys" + (
                f" (the other is at line {first.line + 1})" if first is not None else "")
        else:
            col = f", column {mark.column + 1}" if mark is not None else ""
            fix = f"fix the YAML syntax near line {line}{col}"
        raise InvalidConfigError(
            [ConfigIssue(source, "", line, f"not valid YAML: {problem}", fix)]) from None
    except YAMLError as exc:
        raise InvalidConfigError(
            [ConfigIssue(source, "", None, f"not valid YAML ({type(exc).__name__})",
                         "fix the YAML syntax")]) from None


def dotted(path: Sequence[str | int]) -> str:
    """``("roles", "approver", 0, "github")`` -> ``roles.approver[0].github``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def line_of(doc: Any, path: Sequence[str | int]) -> int | None:
    """1-based line of the key (or list item) at ``path`` in a round-trip document; the
    deepest line found when the path runs out."""
    node = doc
    line: int | None = None
    for part in path:
        if isinstance(node, CommentedMap):
            key = _find_key(node, part)
            if key is MISSING:
                break
            with contextlib.suppress(KeyError, TypeError, AttributeError):
                line = node.lc.key(key)[0] + 1
            node = node[key]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
            with contextlib.suppress(KeyError, TypeError, AttributeError):
                line = node.lc.item(part)[0] + 1
            node = node[part]
        else:
            break
    return line


MISSING: Any = object()


def _find_key(node: Mapping[Any, Any], part: str | int) -> Any:
    if part in node:
        return part
    for key in node:
        if str(key) == str(part):
            return key
    return MISSING


def to_plain(node: Any) -> Any:
    """A round-trip document as plain JSON-like Python (keys as strings)."""
    if isinstance(node, Mapping):
        return {k if isinstance(k, str) else str(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node



def walk_keys(node: Any, prefix: Path_) -> Iterator[Path_]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = (*prefix, key if isinstance(key, str | int) else str(key))
            yield path
            yield from walk_keys(value, path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk_keys(value, (*prefix, i))


def get_path(doc: Any, path: Sequence[str | int]) -> Any:
    node = doc
    for part in path:
        if isinstance(node, Mapping):
            key = _find_key(node, part)
            if key is MISSING:
                return MISSING
            node = node[key]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return MISSING
    return node



# -- validation ------------------------------------------------------------------------


@functools.cache
def schema(kind: str) -> Mapping[str, Any]:
    """The JSON Schema of ``kind`` (from ``foundation/config/schemas/<kind>.schema.json``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown config kind {kind!r}")
    schemas = resources.files("foundation.config").joinpath("schemas")
    text = schemas.joinpath(f"{kind}.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@functools.cache
def _validator(kind: str) -> Draft202012Validator:
    return Draft202012Validator(schema(kind))


#: Finds the keys a breaking change removed in a round-trip document (each with ``key``,
#: ``line`` and ``replacement``; see :class:`foundation.config.legacy.LegacyKey`).
LegacyFinder = Callable[[Any], Sequence[Any]]
#: Checks JSON Schema cannot express: (plain document, round-trip document, source) ->
#: issues.
Checks = Callable[[Any, Any, str], list["ConfigIssue"]]


def load_document(
    text: str | None,
    source: str,
    kind: str,
    *,
    legacy: LegacyFinder | None = None,
    checks: Checks | None = None,
) -> dict[str, Any] | None:
    """Parse, check the version and legacy keys, validate against ``kind``'s schema and
    ``checks``; ``None`` for no content (absent, empty, or ``{}``).

    Returns:
        The document as plain JSON-like Python (string keys), schema-valid.

    Raises:
        LegacyConfigError: an older ``version`` (or none), or a key ``legacy`` finds.
        InvalidConfigError: bad YAML, an unknown key, a wrong type or value.
    """
    if text is None:
        return None
    doc = parse_yaml(text, source)
    if doc is None or (isinstance(doc, CommentedMap) and not doc):  # empty, or "{}"
        return None
    if not isinstance(doc, CommentedMap):
        raise InvalidConfigError([ConfigIssue(
            source, "", 1, "the top level must be a mapping of keys",
            f"start the file with 'version: {CURRENT_VERSION[kind]}'")])
    current = CURRENT_VERSION[kind]
    version = doc.get("version")
    version_line = line_of(doc, ("version",))
    if "version" in doc and (isinstance(version, bool) or not isinstance(version, int)):
        raise InvalidConfigError([ConfigIssue(
            source, "version", version_line, "must be a whole number",
            f"write 'version: {current}' (or run {upgrade_command(source)})")])
    if isinstance(version, int) and version > current:
        raise InvalidConfigError([ConfigIssue(
            source, "version", version_line,
            f"version {version} is newer than this the-loop reads ({current})",
            "upgrade the-loop, or use a file of version "
            f"{current}")])
    if isinstance(version, int) and version < 1:
        raise InvalidConfigError([ConfigIssue(
            source, "version", version_line, f"there is no version {version}",
            f"write 'version: {current}'")])
    legacy_keys = list(legacy(doc)) if legacy is not None else []
    if version is None or version < current or legacy_keys:
        issues = [ConfigIssue(source, lk.key, lk.line,
                              f"removed in version {current}; replaced by "
                              f"{dotted(lk.replacement)}") for lk in legacy_keys]
        raise LegacyConfigError(source, version, current, issues)
    plain = to_plain(doc)
    issues = [issue for err in _validator(kind).iter_errors(plain)
              for issue in _issues(err, doc, source, schema(kind))]
    if checks is not None:
        issues += checks(plain, doc, source)
    if issues:
        issues.sort(key=lambda i: (i.line or 10**9, i.key))
        raise InvalidConfigError(issues)
    assert isinstance(plain, dict)
    return plain


_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _type_word(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _normal(word: str) -> str:
    return re.sub(r"[-_\s]", "", word).casefold()


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The choice closest to ``word`` (difflib; case, ``-`` and ``_`` ignored), if any."""
    normal = {_normal(c): c for c in choices}
    if _normal(word) in normal:
        return normal[_normal(word)]
    match = difflib.get_close_matches(_normal(word), list(normal), n=1, cutoff=0.6)
    return normal[match[0]] if match else None


def _issues(
    err: ValidationError, doc: Any, source: str, root: Mapping[str, Any]
) -> list[ConfigIssue]:
    path: list[str | int] = list(err.absolute_path)
    key = dotted(path)
    line = line_of(doc, path)
    hint = str(err.schema.get("x-hint", "")) if isinstance(err.schema, Mapping) else ""
    kind = err.validator
    if kind == "additionalProperties" and isinstance(err.instance, Mapping):
        allowed = sorted(err.schema.get("properties", {}))
        out = []
        for extra in err.instance:
            if extra in allowed:
                continue
            where = [*path, extra]
            elsewhere = _paths_named(extra, root)
            near = closest(extra, allowed) if allowed else None
            if elsewhere and not (near and _normal(near) == _normal(extra)):
                fix = f"it belongs at {' or '.join(elsewhere)}"
            elif not allowed:
                fix = "remove it: this section takes no keys"
            else:
                listed = ", ".join(allowed)
                fix = (f"did you mean '{near}'? (allowed here: {listed})" if near
                       else f"allowed here: {listed}")
            out.append(ConfigIssue(source, dotted(where), line_of(doc, where),
                                   "unknown key", fix))
        return out
    if kind == "type":
        expected = err.validator_value
        words = [expected] if isinstance(expected, str) else list(expected)
        want = " or ".join(_TYPE_WORDS.get(w, w) for w in words)
        if err.instance is None and "object" in words:
            fix = "write {} for an empty section, or remove the key"
        else:
            fix = hint or f"change the value to {want}"
        return [ConfigIssue(source, key, line, f"must be {want}, not {_type_word(err.instance)}",
                            fix)]
    if kind == "enum":
        # The value is never echoed (a misplaced secret must not reach a log); the
        # suggestion is one of the schema's own options.
        options = [o for o in err.validator_value]
        shown = ", ".join("null" if o is None else str(o) for o in options)
        fix = hint
        if isinstance(err.instance, str):
            near = closest(err.instance, [o for o in options if isinstance(o, str)])
            if near:
                fix = f"did you mean '{near}'?" + (f" ({hint})" if hint else "")
        if isinstance(err.instance, int) and not isinstance(err.instance, bool) \
                and f"{err.instance:+d}" in options:
            fix = f"quote it: \"{err.instance:+d}\" (unquoted, YAML reads a number)"
        return [ConfigIssue(source, key, line,
                            f"must be one of {shown}",
                            fix or f"use one of {shown}")]
    if kind == "pattern":
        # Never echo the value: a misplaced secret must not reach a log.
        return [ConfigIssue(source, key, line, "has a value of the wrong form",
                            hint or f"match the pattern {err.validator_value}")]
    if kind in ("minimum", "maximum"):
        word = "at least" if kind == "minimum" else "at most"
        return [ConfigIssue(source, key, line, f"must be {word} {err.validator_value}",
                            hint or f"use a value of {word} {err.validator_value}")]
    if kind == "minLength":
        return [ConfigIssue(source, key, line, "must not be empty", hint or "give a value")]
    if kind == "maxLength":
        return [ConfigIssue(source, key, line,
                            f"must be at most {err.validator_value} characters",
                            hint or "shorten it")]
    if kind == "minItems":
        return [ConfigIssue(source, key, line, "must not be an empty list",
                            hint or "list at least one value")]
    if kind == "uniqueItems":
        return [ConfigIssue(source, key, line, "lists a value twice", "remove the duplicate")]
    if kind == "const":
        return [ConfigIssue(source, key, line, f"must be {err.validator_value}",
                            f"write {err.validator_value}")]
    if kind == "required" and isinstance(err.instance, Mapping):
        missing = [r for r in err.validator_value if r not in err.instance]
        where = [*path, missing[0]] if missing else path
        return [ConfigIssue(source, dotted(where), line, "is missing", "add it")]
    if kind == "propertyNames":
        return [ConfigIssue(source, key, line, "has an empty key", "name every key")]
    return [ConfigIssue(source, key, line, f"is invalid ({kind})", hint or "fix the value")]


def _paths_named(name: str, root: Mapping[str, Any]) -> list[str]:
    """Dotted paths of every property called ``name`` (case, ``-``, ``_`` ignored)."""
    found: list[str] = []

    def walk(node: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for key, sub in (node.get("properties") or {}).items():
            here = (*prefix, key)
            if _normal(key) == _normal(name):
                found.append(dotted(here))
            if isinstance(sub, Mapping):
                walk(sub, here)

    walk(root, ())
    return found



# -- building dataclasses --------------------------------------------------------------

#: The ``metadata`` key of a section field that is not a key of the file: its value is
#: resolved at start-up (:meth:`foundation.settings.Settings.from_env`), never read from
#: the file nor written to it (e.g. ``harness.source``, the file's own path).
RESOLVED = "the-loop.resolved"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def build(cls: Any, data: Mapping[str, Any]) -> Any:
    """An instance of dataclass ``cls`` from a validated mapping; absent keys keep the
    field's default, a mapping field merges per key over its default."""
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        key = _camel(f.name)
        if f.metadata.get(RESOLVED) or key not in data or (
                data[key] is None and is_dataclass(hints[f.name])):
            continue
        value = data[key]
        hint = hints[f.name]
        if isinstance(hint, type) and is_dataclass(hint):
            kwargs[f.name] = build(hint, value)
        elif get_origin(hint) is tuple:
            kwargs[f.name] = (value,) if isinstance(value, str) else tuple(value)
        elif get_origin(hint) is Mapping:
            key_type, value_type = get_args(hint)
            default = f.default_factory() if callable(f.default_factory) else {}
            merged = dict(default)
            for k, v in value.items():
                merged[key_type(k)] = tuple(v) if get_origin(value_type) is tuple else v
            kwargs[f.name] = MappingProxyType(merged)
        else:
            kwargs[f.name] = value
    return cls(**kwargs)


def as_dict(obj: Any) -> Any:
    """A config dataclass as the file's shape (camelCase keys, lists, string keys)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {_camel(f.name): as_dict(getattr(obj, f.name)) for f in fields(obj)
                if not f.metadata.get(RESOLVED)}
    if isinstance(obj, Mapping):
        return {str(k): as_dict(v) for k, v in obj.items()}
    if isinstance(obj, tuple | list):
        return [as_dict(v) for v in obj]
    return obj

