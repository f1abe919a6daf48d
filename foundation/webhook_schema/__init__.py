"""Check a delivery's payload against GitHub's published JSON Schema of its event.

The schema is ``@octokit/webhooks-schemas`` (:data:`SCHEMA_VERSION`), vendored as
``schema.json`` beside this module (see its ``README.md``: version, digest, licence).
One definition is compiled per ``(event, action)`` with fastjsonschema on first use and
kept for the life of the process (shared by every instance), so a check costs well under
a millisecond once warm.

What a check says (:class:`SchemaCheck`):

- ``valid``: the payload matches its event and action's definition;
- ``invalid``: it does not; :attr:`SchemaCheck.path` is the JSON path of the first
  failing place and :attr:`SchemaCheck.rule` the JSON Schema keyword it breaks. The
  path holds only names the schema itself declares and array indices (any other
  payload key is written ``*``), and no value of the payload, so it is safe to log and
  to show;
- ``unvalidated``: the package has no schema for the event, or the deployment talks to
  GitHub Enterprise Server (the package describes github.com's payloads, GHES sends older
  shapes), or the event is the-loop's own (:data:`foundation.events.INTERNAL_EVENTS`).

An action the package does not list for an event that has per-action schemas is
``invalid`` at ``$.action`` (rule ``enum``): GitHub added it after the vendored version,
or the payload is not GitHub's. Formats (``date-time``, ``uri``) are not checked, and the
payload is never changed (no defaults filled in).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import fastjsonschema

from foundation.events import INTERNAL_EVENTS

__all__ = ["INVALID", "SCHEMA_PATH", "SCHEMA_VERSION", "UNVALIDATED", "VALID", "PayloadSchemas",
           "SchemaCheck"]

#: The vendored package's version (``README.md`` beside this module).
SCHEMA_VERSION: Final = "7.6.1"
SCHEMA_PATH: Final = Path(__file__).with_name("schema.json")

VALID, INVALID, UNVALIDATED = "valid", "invalid", "unvalidated"
_INDEX = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True, slots=True)
class SchemaCheck:
    """The verdict on one payload.

    Attributes:
        outcome: ``valid``, ``invalid`` or ``unvalidated``.
        path: for ``invalid``, the JSON path of the failing place (``$.issue.number``,
            ``$.pull_request.labels[0]``; ``*`` for a key the schema does not name).
        rule: for ``invalid``, the JSON Schema keyword broken (``required``, ``type``,
            ``enum``, ``additionalProperties``, ``oneOf``...).
        reason: one line in the-loop's own words, for logs and the operator's list;
            never a payload value.
    """

    outcome: str
    path: str | None = None
    rule: str | None = None
    reason: str = ""


class PayloadSchemas:
    """The vendored schemas, compiled per ``(event, action)`` on first use and cached.

    Args:
        enterprise: the deployment talks to GitHub Enterprise Server
            (``THE_LOOP_GITHUB_API_URL`` is not ``https://api.github.com``); every payload
            is then ``unvalidated``.
        path: the schema document (default :data:`SCHEMA_PATH`).

    No I/O in the constructor: the document is read on the first check. The document and
    the compiled definitions are kept per process (every instance shares them).
    Thread-safe.
    """

    def __init__(self, *, enterprise: bool = False, path: Path = SCHEMA_PATH) -> None:
        self.enterprise = enterprise
        self._path = path

    def _load(self) -> dict[str, Any]:
        return _document(self._path)[0]

    @property
    def _names(self) -> frozenset[str]:
        return _document(self._path)[1]

    def definition(self, event: str, action: str | None) -> str | None:
        """The name of the definition a payload of ``(event, action)`` must match
        (``issues$labeled``, ``push$event``), the event's union of actions
        (``issues_event``) when the action is not one the package lists, or ``None``
        when the package has no schema for the event."""
        definitions = self._load()
        if action and f"{event}${action}" in definitions:
            return f"{event}${action}"
        for name in (f"{event}$event", f"{event}_event"):
            if name in definitions:
                return name
        return None

    def check(self, event: str, action: str | None, payload: Any) -> SchemaCheck:
        """Check ``payload`` (the parsed body) of an ``event`` delivery whose ``action``
        the receiver read from it.

        Returns:
            The :class:`SchemaCheck`. Never raises for any payload.
        """
        if event in INTERNAL_EVENTS:
            return SchemaCheck(UNVALIDATED, reason="the-loop's own event")
        if self.enterprise:
            return SchemaCheck(UNVALIDATED, reason=(
                "GitHub Enterprise Server: the vendored schemas describe github.com"))
        name = self.definition(event, action)
        if name is None:
            return SchemaCheck(UNVALIDATED, reason=(
                f"no schema for this event in @octokit/webhooks-schemas {SCHEMA_VERSION}"))
        if name.endswith("_event"):
            # The event has per-action schemas and none for this action (or none given).
            rule = "required" if not action else "enum"
            return SchemaCheck(INVALID, "$.action", rule, _reason("$.action", rule))
        try:
            _validator(self._path, name)(payload)
        except fastjsonschema.JsonSchemaValueException as error:
            path, rule = self._where(error)
            return SchemaCheck(INVALID, path, rule, _reason(path, rule))
        except RecursionError:  # nested deeper than the validator's recursion allows
            return SchemaCheck(INVALID, "$", "depth", _reason("$", "depth"))
        return SchemaCheck(VALID)

    def _where(self, error: fastjsonschema.JsonSchemaValueException) -> tuple[str, str]:
        """The failing place as a safe JSON path and the rule broken; a missing required
        property is named (the name is the schema's)."""
        parts = error.path[1:]  # the first is fastjsonschema's "data"
        rule = str(error.rule or "schema")
        path = "$" + "".join(self._step(part) for part in parts)
        if rule == "required" and isinstance(error.value, Mapping):
            missing = [k for k in (error.rule_definition or ()) if k not in error.value]
            if missing and isinstance(missing[0], str):
                path += self._step(missing[0])
        return path, rule

    def _step(self, part: object) -> str:
        text = str(part)
        if _INDEX.fullmatch(text):
            return f"[{text}]"
        return f".{text}" if text in self._names else ".*"


@functools.cache
def _document(path: Path) -> tuple[dict[str, Any], frozenset[str]]:
    """The schema document's definitions and every property name it declares."""
    document = json.loads(path.read_text(encoding="utf-8"))
    return document["definitions"], frozenset(_declared_names(document))


@functools.cache
def _validator(path: Path, name: str) -> Callable[[Any], Any]:
    """Definition ``name`` of the document at ``path``, compiled (formats not checked,
    no defaults filled in)."""
    return fastjsonschema.compile(
        {"$ref": f"#/definitions/{name}", "definitions": _document(path)[0]},
        use_formats=False, use_default=False)


def _reason(path: str, rule: str) -> str:
    return (f"payload does not match @octokit/webhooks-schemas {SCHEMA_VERSION} at {path} "
            f"({rule})")


def _declared_names(node: Any) -> Iterable[str]:
    """Every property name a ``properties`` or ``required`` of the schema declares."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            properties = item.get("properties")
            if isinstance(properties, dict):
                yield from properties
            required = item.get("required")
            if isinstance(required, list):
                yield from (r for r in required if isinstance(r, str))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
