"""GitHub's error answers as :class:`graph.ports.IntegrationError` subclasses.

:func:`http_error` builds the error of one failed request (the transports call it);
:func:`error_codes` and :func:`says_rate_limit` read GitHub's error body. Messages name the
operation, target, HTTP status and the fix, never the body or a credential.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from graph.ports import IntegrationError, NotFound, RateLimited, Unavailable

log = logging.getLogger("the_loop.integrations.github")


def http_error(
    op: str,
    target: str,
    status: int | None,
    headers: Mapping[str, Any] | None,
    *,
    rate_limited: bool = False,
    codes: tuple[str, ...] = (),
    reason: str = "",
) -> IntegrationError:
    """The IntegrationError for GitHub's error answer ``status`` to operation ``op``.

    * 404: :class:`NotFound`;
    * 429, and 403 with ``x-ratelimit-remaining: 0``, a ``retry-after`` header or
      ``rate_limited`` (the body said "rate limit"): :class:`RateLimited`, with
      ``retry_after`` (seconds, when GitHub said) and ``reset_at`` (``x-ratelimit-reset``,
      only when ``x-ratelimit-remaining`` is 0: the primary limit is used up);
    * 5xx: :class:`Unavailable` (retriable);
    * anything else: a plain :class:`IntegrationError`, not retriable -- in particular a
      repository the App cannot see (404, or 403 "Resource not accessible by integration").

    The message names the operation, target, status and the fix, never the body.
    ``codes`` are GitHub's ``errors[].code`` values (e.g. ``already_exists``);
    ``reason`` is GitHub's ``message`` (:func:`error_reason`), kept as the error's
    ``reason`` (bounded, control characters stripped), not in its message.
    """
    lower = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    message = f"github {op} on {target} failed: HTTP {status}"
    codes = tuple(codes)
    if status == 404:
        return NotFound(
            f"{message} (not found, or not visible to this installation/token)",
            integration="github", op=op, status=status, codes=codes, reason=reason,
        )
    limited = status == 429 or (
        status == 403
        and (rate_limited or lower.get("x-ratelimit-remaining") == "0" or "retry-after" in lower)
    )
    if limited:
        reset = lower.get("retry-after") or lower.get("x-ratelimit-reset")
        message += " (rate limited" + (f"; retry-after/reset {reset}" if reset else "") + ")"
        # GitHub ("Rate limits for the REST API"): wait ``retry-after`` seconds when it
        # is given; wait for ``x-ratelimit-reset`` only when ``x-ratelimit-remaining`` is
        # 0 (every answer carries the primary window's reset, a secondary limit too).
        exhausted = lower.get("x-ratelimit-remaining") == "0"
        return RateLimited(
            message, integration="github", op=op, status=status, codes=codes,
            retry_after=_seconds(lower.get("retry-after")),
            reset_at=_seconds(lower.get("x-ratelimit-reset")) if exhausted else None,
            reason=reason,
        )
    if isinstance(status, int) and status >= 500:
        return Unavailable(message, integration="github", op=op, status=status, codes=codes,
                       reason=reason)
    if status == 401:
        message += (
            " (credentials rejected: check THE_LOOP_GITHUB_APP_ID and the private key, "
            "or GH_TOKEN; for the cli transport run `gh auth status`)"
        )
    elif status == 403 and lower.get("x-accepted-github-permissions"):
        # "Resource not accessible by integration": GitHub names what the call needs
        # ("Permissions required for GitHub Apps": x-accepted-github-permissions).
        needed = _permissions_named(lower["x-accepted-github-permissions"])
        message += (
            f" (resource not accessible by integration: the App needs the {needed} "
            "permission; add it in the App's settings and have the installation accept "
            "it)"
        )
    elif status == 403:
        message += (
            " (forbidden: is the App installed on this repository, and does the "
            "installation or token have the permission this operation needs?)"
        )
    elif status == 410:
        message += " (gone: the issue, repository or feature was deleted or disabled)"
    elif status == 409:
        message += " (conflict: the target changed since it was read; re-read and retry)"
    elif status == 422:
        message += " (validation failed)"
    return IntegrationError(message, integration="github", op=op, status=status, codes=codes,
                       reason=reason)


def _permissions_named(header: str) -> str:
    """``x-accepted-github-permissions`` (``issues=write; pull_requests=write``: any one of
    the ``;``-separated sets suffices) as words: ``issues=write or pull_requests=write``.
    Only GitHub's permission names and levels are kept (a safe, bounded text)."""
    sets = [", ".join(p.strip() for p in part.split(",") if re.fullmatch(
                r"\s*[a-z_]+=[a-z]+\s*", p))
            for part in header.split(";")]
    named = " or ".join(s for s in sets if s)[:200]
    return named or "missing"


def _log_failure(exc: IntegrationError) -> None:
    if exc.status == 404:
        log.info("%s", exc)
    elif exc.status in (401, 403) or isinstance(exc, RateLimited):
        log.warning("%s", exc)


def error_codes(data: Any) -> tuple[str, ...]:
    """``errors[].code`` values of a GitHub error body (e.g. ``("already_exists",)``)."""
    if not isinstance(data, dict):
        return ()
    errors = data.get("errors") or []
    if not isinstance(errors, list):
        return ()
    return tuple(str(e["code"]) for e in errors if isinstance(e, dict) and "code" in e)


def error_reason(data: Any) -> str:
    """GitHub's error body's ``message`` (e.g. ``"Validation Failed"``), or ``""``; the
    caller's :class:`IntegrationError` makes it safe (``reason``)."""
    message = data.get("message") if isinstance(data, dict) else None
    return message if isinstance(message, str) else ""


def says_rate_limit(data: Any) -> bool:
    """Whether a GitHub error body's ``message`` names a (primary or secondary) rate limit."""
    message = data.get("message") if isinstance(data, dict) else None
    return isinstance(message, str) and "rate limit" in message.lower()



def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None

