"""Prometheus metrics of the transports: every operation counted and timed.

:class:`ObservedIntegration` wraps any :class:`graph.ports.Integration`, and
:class:`ObservedFactory` a GitHub provider so each client it hands out is wrapped (the
worker does both at start-up, ``workers.metrics.instrument``); the graph core stays free
of Prometheus. Metrics (labels in braces):

- ``the_loop_transport_calls_total{integration, operation, outcome}``: ``outcome`` is
  ``ok``, ``not_found``, ``rate_limited``, ``error`` (the system refused or failed: an
  :class:`~graph.ports.IntegrationError`), ``unsupported`` (an operation the transport
  lacks) or ``exception`` (anything else raised);
- ``the_loop_transport_call_duration_seconds{integration, operation}``: wall time of a
  call, retries and pacing included;
- ``the_loop_github_rate_limit_remaining{installation}``: GitHub's
  ``X-RateLimit-Remaining`` after the last answer, per App installation id (``token``
  for a personal token, ``cli`` for gh), and ``the_loop_github_rate_limit_reset_seconds
  {installation}`` its ``X-RateLimit-Reset`` (epoch seconds);
- ``the_loop_github_requests_total{installation, operation, method, status}``: every
  REST request a GitHub transport sent (a read answered from the delivery's memo is
  none), by the status GitHub answered (``error`` when no answer came);
- ``the_loop_github_not_modified_total{installation, operation}``: of those, the
  conditional ``GET`` requests answered 304 (they do not count against the primary
  rate limit: GitHub's "Best practices for using the REST API").

``operation`` is one of the integration's own ``operations`` (else ``other``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import disable_created_metrics

from graph.ports import (
    OPERATIONS,
    Integration,
    IntegrationError,
    NotFound,
    Operation,
    RateLimited,
    Unsupported,
)

__all__ = ["ObservedFactory", "ObservedIntegration", "observe_request", "outcome_of"]

OTHER = "other"

disable_created_metrics()

CALLS = Counter(
    "the_loop_transport_calls",
    "Integration calls by integration, operation and outcome.",
    ("integration", "operation", "outcome"),
)
CALL_SECONDS = Histogram(
    "the_loop_transport_call_duration_seconds",
    "Wall time of integration calls (retries and request pacing included).",
    ("integration", "operation"),
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
RATE_LIMIT_REMAINING = Gauge(
    "the_loop_github_rate_limit_remaining",
    "GitHub's X-RateLimit-Remaining after the last answer, per App installation.",
    ("installation",),
    multiprocess_mode="mostrecent",
)

RATE_LIMIT_RESET = Gauge(
    "the_loop_github_rate_limit_reset_seconds",
    "GitHub's X-RateLimit-Reset (epoch seconds) after the last answer, per installation.",
    ("installation",),
    multiprocess_mode="mostrecent",
)
REQUESTS = Counter(
    "the_loop_github_requests",
    "GitHub REST requests sent, by installation, operation, method and answered status.",
    ("installation", "operation", "method", "status"),
)
NOT_MODIFIED = Counter(
    "the_loop_github_not_modified",
    "Conditional GitHub GET requests answered 304 Not Modified (free of the primary "
    "rate limit).",
    ("installation", "operation"),
)


def observe_request(installation: str, operation: str, method: str, status: int | None,
                    headers: Mapping[str, str] | None = None) -> None:
    """Count one REST request a GitHub transport sent (``status``: GitHub's answer, or
    ``None`` when none came) and keep the rate limit its lower-cased ``headers``
    report."""
    REQUESTS.labels(installation, operation, method,
                    "error" if status is None else str(status)).inc()
    if status == 304:
        NOT_MODIFIED.labels(installation, operation).inc()
    remaining = (headers or {}).get("x-ratelimit-remaining")
    reset = (headers or {}).get("x-ratelimit-reset")
    try:
        if remaining is not None:
            RATE_LIMIT_REMAINING.labels(installation).set(int(float(remaining)))
        if reset is not None:
            RATE_LIMIT_RESET.labels(installation).set(int(float(reset)))
    except ValueError:
        pass


def outcome_of(exc: BaseException | None) -> str:
    """The ``outcome`` label for a call that raised ``exc`` (``None``: it returned)."""
    if exc is None:
        return "ok"
    if isinstance(exc, NotFound):
        return "not_found"
    if isinstance(exc, Unsupported):
        return "unsupported"
    if isinstance(exc, RateLimited):
        return "rate_limited"
    if isinstance(exc, IntegrationError):
        return "error"
    return "exception"


class ObservedIntegration:
    """An :class:`~graph.ports.Integration` whose operations are counted and timed: its
    port methods (``add_label`` ...) and ``call("add-label", ...)`` alike.

    Everything else (``operations``, ``name``, ``close`` ...) is the wrapped object's.

    Args:
        inner: the integration to wrap.
        name: the ``integration`` label (default: ``inner.name``, else its class name).
    """

    def __init__(self, inner: Integration, *, name: str | None = None) -> None:
        self._inner = inner
        self.operations = frozenset(getattr(inner, "operations", ()))
        self._integration = str(
            name or getattr(inner, "name", None) or type(inner).__name__.lower())
        installation = getattr(inner, "installation_id", None)
        self._installation = "token" if installation is None else str(installation)
        self._ports: dict[str, Operation] = {
            spec.method: spec for spec in OPERATIONS.get(self._integration, {}).values()}

    def __getattr__(self, name: str) -> Any:
        spec = self.__dict__.get("_ports", {}).get(name)
        if spec is None:
            return getattr(self._inner, name)
        return functools.partial(self._observe, spec.name, getattr(self._inner, name))

    def __repr__(self) -> str:
        return f"ObservedIntegration({self._inner!r})"

    def call(self, op: str, **params: Any) -> dict[str, Any]:
        return self._observe(op, functools.partial(self._inner.call, op), **params)

    def _observe(self, op: str, method: Callable[..., dict[str, Any]],
                 **params: Any) -> dict[str, Any]:
        operation = op if op in self.operations else OTHER
        error: BaseException | None = None
        start = time.perf_counter()
        try:
            return method(**params)
        except BaseException as exc:
            error = exc
            raise
        finally:
            CALL_SECONDS.labels(self._integration, operation).observe(
                time.perf_counter() - start)
            CALLS.labels(self._integration, operation, outcome_of(error)).inc()
            remaining = getattr(self._inner, "rate_limit_remaining", None)
            if isinstance(remaining, int) and not isinstance(remaining, bool):
                RATE_LIMIT_REMAINING.labels(self._installation).set(remaining)


class ObservedFactory:
    """A GitHub provider (installation id -> integration) whose integrations are
    observed; every other attribute (``transport``, ``operations``, ``close`` ...) is the
    wrapped provider's.

    Args:
        inner: the provider, e.g. :class:`integrations.providers.GitHubProvider`.
        name: the ``integration`` label (default: the integrations' own ``name``).
    """

    def __init__(self, inner: Callable[[int | None], Integration], *,
                 name: str | None = None) -> None:
        self._inner = inner
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def __call__(self, installation_id: int | None) -> Integration:
        return ObservedIntegration(  # type: ignore[return-value]
            self._inner(installation_id), name=self._name)

    for_installation = __call__
