"""The one retry policy of the transports: urllib3's ``Retry``, bounded for a queue worker.

:class:`BoundedRetry` is PyGithub's ``GithubRetry`` (urllib3's ``Retry`` that also reads
GitHub's 403 rate-limit answers) with three parameters on top:

* ``max_wait``: the longest wait (``Retry-After``, or until a rate limit resets) slept
  inside one call. A longer one ends the retries at once and the last answer goes back to
  the caller, which raises a retriable :class:`~graph.ports.RateLimited`: the job queue
  waits, not a blocked worker.
* ``rate_limit_methods``: the methods retried on 429 even without ``Retry-After``
  (default: ``allowed_methods``). GitHub: only idempotent requests, because a rate-limited
  write may have landed. Jira: every method, because its 429 refuses the request before
  acting on it.
* ``github_rate_limits``: whether a 403 is read as PyGithub does (a primary limit waits for
  a near reset, a secondary one for ``Retry-After``). ``False`` for every other service,
  where a 403 is an answer and never retried.

Used by the GitHub ``api`` transport (through PyGithub), the ``cli`` transport (its own
loop around ``gh api``), the Jira ``api`` transport (a ``requests`` adapter) and, as a
plain attempt counter, the classifier. Slack's transports use slack-sdk's own retry
handlers (:mod:`integrations.slack`), which the SDK runs itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from github.GithubRetry import GithubRetry
from urllib3.exceptions import MaxRetryError, ResponseError
from urllib3.util.retry import Retry

__all__ = ["MAX_RATE_LIMIT_WAIT", "BoundedRetry"]

#: Longest ``Retry-After`` or rate-limit reset (seconds) slept inside one call.
MAX_RATE_LIMIT_WAIT = 10.0


class BoundedRetry(GithubRetry):
    """urllib3's ``Retry`` (through PyGithub's ``GithubRetry``) with a bounded wait.

    Args:
        max_wait: see the module docstring.
        rate_limit_methods: methods retried on 429 (default: ``allowed_methods``).
        github_rate_limits: read 403 answers as GitHub rate limits (default ``True``).
        **kw: urllib3 ``Retry`` arguments (``total``, ``backoff_factor``,
            ``allowed_methods``, ``status_forcelist``, ``raise_on_status``...).
    """

    def __init__(
        self,
        *,
        max_wait: float = MAX_RATE_LIMIT_WAIT,
        rate_limit_methods: Iterable[str] | None = None,
        github_rate_limits: bool = True,
        **kw: Any,
    ) -> None:
        if "status_forcelist" in kw:
            kw["status_forcelist"] = list(kw["status_forcelist"] or ())
        kw["max_rate_limit_wait"] = max_wait
        super().__init__(**kw)
        self.max_wait = max_wait
        self.github_rate_limits = github_rate_limits
        if not github_rate_limits:  # GithubRetry always adds 403 to the status list
            self.status_forcelist = frozenset(self.status_forcelist or ()) - {403}
        methods = self.allowed_methods if rate_limit_methods is None else rate_limit_methods
        self.rate_limit_methods = frozenset(m.upper() for m in methods or ())

    def new(self, **kw: Any) -> BoundedRetry:
        kw.setdefault("max_wait", self.max_wait)
        kw.setdefault("rate_limit_methods", self.rate_limit_methods)
        kw.setdefault("github_rate_limits", self.github_rate_limits)
        return super().new(**kw)  # type: ignore[return-value]

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if status_code == 429 and method.upper() in self.rate_limit_methods:
            return bool(self.total)
        return super().is_retry(method, status_code, has_retry_after)

    def increment(  # type: ignore[override]
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> Retry:
        """The next state, or ``MaxRetryError`` (urllib3 then hands back the last
        answer) when retries are used up or the wait asked for exceeds ``max_wait``."""
        if response is not None:
            wait = self.get_retry_after(response)
            if wait is not None and wait > self.max_wait:
                raise MaxRetryError(_pool, url or "", ResponseError("Retry-After too long"))
            if not self.github_rate_limits:
                return Retry.increment(self, method, url, response, error, _pool, _stacktrace)
        return super().increment(method, url, response, error, _pool, _stacktrace)
