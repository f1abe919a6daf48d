"""Narrow ports the graph core calls out through.

The core never imports an HTTP, Redis or Flask library. It reaches people's tools only
through objects that satisfy :class:`Integration`, the contract of the specification's
"Tool access" section: every provider declares the operations it implements and is
called with one operation name and keyword parameters.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from graph.errors import LoopError


@runtime_checkable
class Integration(Protocol):
    """A provider of operations on one external system (GitHub, Slack, Jira).

    Attributes:
        operations: the operation names this provider implements, e.g.
            ``frozenset({"add-label", "comment"})``.

    ``call(op, **params)`` performs one operation and returns a JSON-serialisable dict.
    It raises :class:`Unsupported` for an operation outside ``operations`` and
    :class:`IntegrationError` (or a subclass) when the target system refuses the call.
    """

    operations: frozenset[str]

    def call(self, op: str, **params: Any) -> dict[str, Any]: ...


class IntegrationError(LoopError):
    """An external system refused or failed an operation.

    Attributes:
        integration: provider name, e.g. ``"github"``.
        op: operation name, e.g. ``"add-label"``.
        status: HTTP status code when there was one, else ``None``.
        retriable: whether trying again later may succeed (5xx, rate limits, network).
        codes: the system's own error codes when it gave any (GitHub's ``errors[].code``,
            e.g. ``("already_exists",)``), else ``()``.
    """

    def __init__(
        self,
        message: str,
        *,
        integration: str,
        op: str,
        status: int | None = None,
        retriable: bool = False,
        codes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.integration = integration
        self.op = op
        self.status = status
        self.retriable = retriable
        self.codes = tuple(codes)


class NotFound(IntegrationError):
    """The target (repository, issue, file, label) does not exist or is not visible."""


class RateLimited(IntegrationError):
    """The system asked to slow down (GitHub's 429, or 403 with a rate-limit answer;
    Slack's and Jira's 429). Always retriable.

    Attributes:
        retry_after: seconds the system asked to wait (``Retry-After``), else ``None``.
        reset_at: when the limit resets, seconds since the epoch (GitHub's
            ``X-RateLimit-Reset``), else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        integration: str,
        op: str,
        status: int | None = None,
        codes: tuple[str, ...] = (),
        retry_after: float | None = None,
        reset_at: float | None = None,
    ) -> None:
        super().__init__(message, integration=integration, op=op, status=status,
                         retriable=True, codes=codes)
        self.retry_after = retry_after
        self.reset_at = reset_at


class Unavailable(IntegrationError):
    """The system or the way to it failed: a 5xx answer, a network error, a command that
    timed out or ran without an answer. Always retriable."""

    def __init__(
        self,
        message: str,
        *,
        integration: str,
        op: str,
        status: int | None = None,
        codes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, integration=integration, op=op, status=status,
                         retriable=True, codes=codes)


class Unsupported(IntegrationError):
    """The provider does not implement the requested operation."""


class RetryLater(IntegrationError):  # noqa: N818  (a verdict, not an error class name)
    """A transient failure (rate limit, 5xx, network): retry the delivery later.

    Raised by the outbox (:mod:`graph.effects`) for every retriable failure of a call
    made through it. Always ``retriable``. A hook may catch it as an
    ``IntegrationError`` (to record and go on); uncaught, it stops the chain without a
    verdict (see :func:`graph.runtime.call_hook`).

    Attributes:
        retry_after: seconds the system asked to wait, when the failure said so.
    """

    def __init__(self, message: str, *, integration: str, op: str,
                 status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, integration=integration, op=op, status=status,
                         retriable=True)
        self.retry_after = retry_after

    @classmethod
    def from_error(cls, exc: IntegrationError) -> RetryLater:
        """The retry verdict for a retriable integration error (its message is the-loop's
        own: operation, target, status; never a response body)."""
        return cls(str(exc), integration=exc.integration, op=exc.op, status=exc.status,
                   retry_after=getattr(exc, "retry_after", None))
