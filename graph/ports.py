"""Narrow ports the graph core calls out through.

The core never imports an HTTP, Redis or Flask library. It reaches people's tools only
through objects that satisfy :class:`Integration`, the contract of the specification's
"Tool access" section: every provider declares the operations it implements and is
called with one operation name and keyword parameters.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Integration(Protocol):
    """A provider of operations on one external system (GitHub, Slack, Jira).

    Attributes:
        operations: the operation names this provider implements, e.g.
            ``frozenset({"add-label", "comment"})``.

    ``call(op, **params)`` performs one operation and returns a JSON-serialisable dict.
    It raises :class:`UnsupportedOperation` for an operation outside ``operations`` and
    :class:`IntegrationError` (or a subclass) when the target system refuses the call.
    """

    operations: frozenset[str]

    def call(self, op: str, **params: Any) -> dict[str, Any]: ...


class IntegrationError(Exception):
    """An external system refused or failed an operation.

    Attributes:
        integration: provider name, e.g. ``"github"``.
        op: operation name, e.g. ``"add-label"``.
        status: HTTP status code when there was one, else ``None``.
        retriable: whether trying again later may succeed (5xx, rate limits).
    """

    def __init__(
        self,
        message: str,
        *,
        integration: str,
        op: str,
        status: int | None = None,
        retriable: bool = False,
    ) -> None:
        super().__init__(message)
        self.integration = integration
        self.op = op
        self.status = status
        self.retriable = retriable


class NotFound(IntegrationError):
    """The target (repository, issue, file, label) does not exist or is not visible."""


class UnsupportedOperation(IntegrationError):
    """The provider does not implement the requested operation."""
