"""The GitHub ``api`` transport: an :class:`~graph.ports.Integration` built on PyGithub 2.x.

Three pieces, in the order they are built at start-up:

* :class:`GitHubSettings` -- one frozen object read from the environment (passed in as a
  mapping, so tests pass a dict). Fails fast with :class:`GitHubConfigError`, whose message
  names the variable and the fix and never contains a secret.
* :class:`GitHubClients` -- the composition point. It owns the credentials and hands out
  one :class:`GitHubApi` per GitHub App installation (or one for a personal token).
* :class:`GitHubApi` -- the provider the graph core calls: ``call(op, **params) -> dict``.
  The operations themselves live in :mod:`integrations.github_ops`, shared with the
  ``cli`` transport (:mod:`integrations.github_cli`); this module only sends their REST
  requests through PyGithub's requester (authentication, App installation tokens,
  pacing, retries).

Protocol facts used here come from the GitHub REST API documentation pages named in the
docstrings ("Create an installation access token for an app", "Add labels to an issue",
...).

Limits: PyGithub paces requests per process (``seconds_between_requests`` /
``seconds_between_writes``); :func:`_retry_policy` (an
:class:`integrations.retry.BoundedRetry`) retries rate limits and idempotent 5xx a
bounded number of times and never sleeps longer than :data:`MAX_RATE_LIMIT_WAIT`; an
optional :class:`integrations.throttle.WriteThrottle` spaces writes per installation
across every worker through Redis.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
from github import Auth, Github, GithubException
from github.GithubException import RateLimitExceededException as _RateLimited
from urllib3.util.retry import Retry

from graph.errors import LoopError
from graph.ports import IntegrationError, Unavailable
from integrations.github_ops import (
    OPERATIONS,
    REACTIONS,
    GitHubOperations,
    Reply,
    error_codes,
    http_error,
    says_rate_limit,
)
from integrations.retry import MAX_RATE_LIMIT_WAIT, BoundedRetry

if TYPE_CHECKING:
    from integrations.throttle import WriteThrottle

__all__ = [
    "DEFAULT_API_URL",
    "OPERATIONS",
    "REACTIONS",
    "GitHubApi",
    "GitHubClients",
    "GitHubConfigError",
    "GitHubSettings",
]

DEFAULT_API_URL = "https://api.github.com"
USER_AGENT = "the-loop (PyGithub)"

#: HTTP methods PyGithub may retry (5xx, rate limits). POST and PUT are left out on
#: purpose: a retried "Create an issue comment" whose first attempt did reach GitHub posts
#: the comment twice, and a retried "Create or update file contents" would commit on top
#: of itself.
RETRY_METHODS = frozenset({"GET", "HEAD", "PATCH", "DELETE"})

_ENV_API_URL = "THE_LOOP_GITHUB_API_URL"
_ENV_APP_ID = "THE_LOOP_GITHUB_APP_ID"
_ENV_KEY = "THE_LOOP_GITHUB_PRIVATE_KEY"
_ENV_KEY_PATH = "THE_LOOP_GITHUB_PRIVATE_KEY_PATH"
_ENV_WRITE = "THE_LOOP_GITHUB_WRITE_INTERVAL"
_ENV_READ = "THE_LOOP_GITHUB_READ_INTERVAL"
_ENV_TIMEOUT = "THE_LOOP_GITHUB_TIMEOUT"
_ENV_RETRIES = "THE_LOOP_GITHUB_RETRIES"


class GitHubConfigError(LoopError, ValueError):
    """The GitHub settings in the environment are missing or malformed.

    The message names the environment variable and how to fix it; it never contains the
    value of a secret (private key, token).
    """


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class GitHubSettings:
    """How to reach and authenticate to GitHub (github.com or GitHub Enterprise Server).

    Attributes:
        api_url: REST API root without trailing slash; ``https://api.github.com`` or, for
            GitHub Enterprise Server, ``https://HOST/api/v3``.
        app_id: the GitHub App's numeric id, or ``None``.
        private_key: the App's PEM private key text (not shown by ``repr``), or ``None``.
        token: a personal access / ``GITHUB_TOKEN``-style token (not shown by ``repr``).
        write_interval: minimum seconds between two write requests (PyGithub's
            ``seconds_between_writes``; GitHub's "best practices" ask for >= 1 s).
        read_interval: minimum seconds between any two requests
            (``seconds_between_requests``).
        timeout: HTTP timeout in whole seconds per request.
        retries: how many times PyGithub retries a GET/PUT/PATCH/DELETE answered with 5xx or
            a short rate limit before the error reaches the caller (0 disables retries).
    """

    api_url: str = DEFAULT_API_URL
    app_id: int | None = None
    private_key: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    write_interval: float = 1.0
    read_interval: float = 0.25
    timeout: int = 15
    retries: int = 2

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GitHubSettings:
        """Build settings from an environment mapping (``os.environ`` or a test dict).

        Variables (empty values count as unset):
            ``THE_LOOP_GITHUB_API_URL`` (default ``https://api.github.com``),
            ``THE_LOOP_GITHUB_APP_ID`` (positive integer),
            ``THE_LOOP_GITHUB_PRIVATE_KEY`` (PEM text; ``\\n`` escapes are accepted) or
            ``THE_LOOP_GITHUB_PRIVATE_KEY_PATH`` (file holding the PEM text),
            ``GH_TOKEN``, else ``GITHUB_TOKEN``,
            ``THE_LOOP_GITHUB_WRITE_INTERVAL`` (seconds, float >= 0, default 1.0),
            ``THE_LOOP_GITHUB_READ_INTERVAL`` (seconds, float >= 0, default 0.25),
            ``THE_LOOP_GITHUB_TIMEOUT`` (whole seconds > 0, default 15),
            ``THE_LOOP_GITHUB_RETRIES`` (integer >= 0, default 2).

        When both App credentials and a token are set, :attr:`mode` is ``"app"``.

        Raises:
            GitHubConfigError: a value is malformed, a key file is unreadable, the key is
                not a PEM private key, only one of app id / private key is set, or both
                ``THE_LOOP_GITHUB_PRIVATE_KEY`` and ``..._PATH`` are set.
        """

        def get(name: str) -> str | None:
            value = env.get(name)
            if value is None or not value.strip():
                return None
            return value.strip()

        api_url = _parse_api_url(get(_ENV_API_URL))
        app_id = _parse_int(_ENV_APP_ID, get(_ENV_APP_ID), minimum=1, what="the App's numeric id")
        key = _read_private_key(env.get(_ENV_KEY), get(_ENV_KEY_PATH))
        if key is not None and app_id is None:
            raise GitHubConfigError(
                f"{_ENV_KEY} (or {_ENV_KEY_PATH}) is set but {_ENV_APP_ID} is not: set "
                f"{_ENV_APP_ID} to the App ID shown on the GitHub App's settings page"
            )
        if app_id is not None and key is None:
            raise GitHubConfigError(
                f"{_ENV_APP_ID} is set but no private key: set {_ENV_KEY} to the App's PEM "
                f"private key, or {_ENV_KEY_PATH} to the .pem file downloaded from the App's "
                "settings page"
            )
        token = get("GH_TOKEN") or get("GITHUB_TOKEN")
        write = _parse_float(_ENV_WRITE, get(_ENV_WRITE), default=1.0)
        read = _parse_float(_ENV_READ, get(_ENV_READ), default=0.25)
        timeout = _parse_int(_ENV_TIMEOUT, get(_ENV_TIMEOUT), minimum=1, what="whole seconds")
        retries = _parse_int(_ENV_RETRIES, get(_ENV_RETRIES), minimum=0, what="a count")
        return cls(
            api_url=api_url,
            app_id=app_id,
            private_key=key,
            token=token,
            write_interval=write,
            read_interval=read,
            timeout=15 if timeout is None else timeout,
            retries=2 if retries is None else retries,
        )

    @property
    def mode(self) -> str | None:
        """``"app"`` with app id and private key, ``"token"`` with a token, else ``None``."""
        if self.app_id is not None and self.private_key:
            return "app"
        if self.token:
            return "token"
        return None


def _parse_api_url(value: str | None) -> str:
    if value is None:
        return DEFAULT_API_URL
    parsed = urllib.parse.urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise GitHubConfigError(
            f"{_ENV_API_URL} must be an http(s) URL such as {DEFAULT_API_URL} or, for GitHub "
            f"Enterprise Server, https://HOST/api/v3 (got {value!r})"
        )
    return value.rstrip("/")


def _parse_int(name: str, value: str | None, *, minimum: int, what: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise GitHubConfigError(f"{name} must be an integer ({what}), got {value!r}") from None
    if number < minimum:
        raise GitHubConfigError(f"{name} must be >= {minimum} ({what}), got {number}")
    return number


def _parse_float(name: str, value: str | None, *, default: float) -> float:
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise GitHubConfigError(
            f"{name} must be a number of seconds such as {default}, got {value!r}"
        ) from None
    if not number >= 0:  # also rejects NaN
        raise GitHubConfigError(f"{name} must be >= 0 seconds, got {value!r}")
    return number


def _read_private_key(inline: str | None, path: str | None) -> str | None:
    if inline is not None and not inline.strip():
        inline = None
    if inline is not None and path is not None:
        raise GitHubConfigError(
            f"both {_ENV_KEY} and {_ENV_KEY_PATH} are set: keep only one of them"
        )
    if path is not None:
        try:
            key = Path(path).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise GitHubConfigError(
                f"{_ENV_KEY_PATH} names a file that cannot be read ({type(exc).__name__}: "
                f"{getattr(exc, 'strerror', None) or 'not UTF-8 text'}): point it at the .pem "
                "file downloaded from the GitHub App's settings page"
            ) from None
        source = _ENV_KEY_PATH
    elif inline is not None:
        key = inline.strip()
        if "\n" not in key and "\\n" in key:  # a PEM squeezed into one line by a .env file
            key = key.replace("\\n", "\n")
        source = _ENV_KEY
    else:
        return None
    _check_pem(key, source)
    return key


def _check_pem(key: str, source: str) -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        load_pem_private_key(key.encode("utf-8"), password=None)
    except (ValueError, TypeError):
        raise GitHubConfigError(
            f"{source} does not hold an unencrypted PEM private key: use the .pem file "
            "generated on the GitHub App's settings page (it starts with "
            "'-----BEGIN RSA PRIVATE KEY-----')"
        ) from None


# --------------------------------------------------------------------------- clients


class GitHubClients:
    """Hands out authenticated :class:`GitHubApi` objects; the only place that builds them.

    App mode ("Authenticating as a GitHub App installation"): a JWT signed with the App's
    private key is exchanged for an installation access token at
    ``POST /app/installations/{installation_id}/access_tokens`` ("Create an installation
    access token for an app"). PyGithub's ``AppInstallationAuth`` keeps the token (valid one
    hour) and requests a new one shortly (20 s) before it expires. One ``GitHubApi`` -- and
    so one token -- is cached per installation id for the life of this object.

    Token mode: every request carries ``Authorization: token <GH_TOKEN>``; the installation
    id is ignored.

    Args:
        settings: the GitHub settings.
        retry: overrides the retry policy derived from ``settings.retries``: an int (plain
            urllib3 retries), a ``urllib3.Retry``, or ``None`` for the settings' policy.
        throttle: cross-worker write spacing handed to every :class:`GitHubApi` (keyed by
            installation id), or ``None``.

    Raises:
        GitHubConfigError: at construction, when the settings hold no credentials at all.
    """

    transport = "api"
    operations = frozenset(OPERATIONS)

    def __init__(
        self,
        settings: GitHubSettings,
        *,
        retry: int | Retry | None = None,
        throttle: WriteThrottle | None = None,
    ) -> None:
        if settings.mode is None:
            raise GitHubConfigError(
                "no GitHub credentials: set THE_LOOP_GITHUB_APP_ID and "
                "THE_LOOP_GITHUB_PRIVATE_KEY (or THE_LOOP_GITHUB_PRIVATE_KEY_PATH) for a GitHub "
                "App, or GH_TOKEN for a personal access token"
            )
        self.settings = settings
        self._retry: int | Retry = retry if retry is not None else _retry_policy(settings.retries)
        self.throttle = throttle
        self._lock = threading.Lock()
        self._apis: dict[int | None, GitHubApi] = {}
        self._app_auth: Auth.AppAuth | None = None
        if settings.mode == "app":
            assert settings.app_id is not None and settings.private_key is not None
            self._app_auth = Auth.AppAuth(settings.app_id, settings.private_key)

    def __repr__(self) -> str:
        return f"GitHubClients(mode={self.settings.mode!r}, api_url={self.settings.api_url!r})"

    def for_installation(self, installation_id: int | None) -> GitHubApi:
        """Return the cached :class:`GitHubApi` for a webhook delivery's installation.

        Args:
            installation_id: ``installation.id`` from the delivery payload; ignored in
                token mode.

        Raises:
            IntegrationError: App mode and ``installation_id`` is ``None`` or not a positive
                integer (the delivery carries no installation).
        """
        if self._app_auth is None:
            key: int | None = None
        else:
            if installation_id is None:
                raise IntegrationError(
                    "GitHub App mode needs an installation id, but the delivery carries no "
                    "'installation' object: is the event sent by the App's webhook?",
                    integration="github",
                    op="authenticate",
                )
            if (
                isinstance(installation_id, bool)
                or not isinstance(installation_id, int)
                or (installation_id < 1)
            ):
                raise IntegrationError(
                    f"installation id must be a positive integer, got {installation_id!r}",
                    integration="github",
                    op="authenticate",
                )
            key = installation_id
        with self._lock:
            api = self._apis.get(key)
            if api is None:
                api = GitHubApi(
                    self._new_github(key), installation_id=key, throttle=self.throttle
                )
                self._apis[key] = api
            return api

    def close(self) -> None:
        """Close the HTTP connections of every cached client."""
        with self._lock:
            apis, self._apis = list(self._apis.values()), {}
        for api in apis:
            api.close()

    def _new_github(self, installation_id: int | None) -> Github:
        auth: Auth.Auth
        if self._app_auth is not None:
            assert installation_id is not None
            auth = self._app_auth.get_installation_auth(installation_id)
        else:
            assert self.settings.token is not None
            auth = Auth.Token(self.settings.token)
        return Github(
            auth=auth,
            base_url=self.settings.api_url,
            timeout=self.settings.timeout,
            user_agent=USER_AGENT,
            per_page=100,
            retry=self._retry,
            seconds_between_requests=self.settings.read_interval,
            seconds_between_writes=self.settings.write_interval,
            lazy=True,
        )


def _retry_policy(retries: int) -> Retry:
    """GitHub's :class:`~integrations.retry.BoundedRetry`: only :data:`RETRY_METHODS` are
    retried -- on 5xx and on rate limits (429, and 403 with ``Retry-After`` or a rate-limit
    message) alike. A POST or PUT is never sent twice by the transport: if the first
    attempt's write landed and only its answer was lost, a second one would duplicate it.
    Those come back as retriable errors, and the runtime's outbox (``graph/effects.py``)
    retries them idempotently, reconciling with what GitHub already holds. A wait longer
    than :data:`MAX_RATE_LIMIT_WAIT` comes back at once as a retriable
    :class:`~graph.ports.RateLimited` (with ``retry_after``) and the job queue waits.

    ``raise_on_status=False``: when retries run out, hand back the last response so
    PyGithub raises a GithubException with its status (instead of requests' RetryError).
    """
    return BoundedRetry(
        total=retries,
        backoff_factor=0.5,
        allowed_methods=RETRY_METHODS,
        raise_on_status=False,
        respect_retry_after_header=True,
        max_wait=MAX_RATE_LIMIT_WAIT,
    )


# --------------------------------------------------------------------------- the API


class GitHubApi(GitHubOperations):
    """The ``api`` transport: the GitHub operations over PyGithub's requester.

    See :class:`integrations.github_ops.GitHubOperations` for the operations, their
    results and errors. Build instances through :class:`GitHubClients`; the constructor
    takes a ready ``github.Github`` (created with ``lazy=True``).

    Args:
        gh: the PyGithub client (its requester sends every request).
        installation_id: the App installation this client acts for (``None``: a token).
        throttle: cross-worker write spacing, keyed by installation.
    """

    transport = "api"

    def __init__(
        self,
        gh: Github,
        *,
        installation_id: int | None = None,
        throttle: WriteThrottle | None = None,
    ) -> None:
        self._gh = gh
        self.installation_id = installation_id
        self.throttle = throttle
        self.throttle_key = (
            f"installation:{installation_id}" if installation_id is not None else "token"
        )

    def __repr__(self) -> str:
        return f"GitHubApi(installation_id={self.installation_id!r})"

    @property
    def rate_limit_remaining(self) -> int | None:
        """``X-RateLimit-Remaining`` of the last answer (PyGithub's requester keeps it;
        no request is made), or ``None`` before the first. Read by integrations.metrics."""
        remaining = self._gh.requester.rate_limiting[0]
        return remaining if isinstance(remaining, int) and remaining >= 0 else None

    def close(self) -> None:
        """Close the underlying HTTP connection pool."""
        self._gh.close()

    def _send(
        self,
        op: str,
        method: str,
        path: str,
        *,
        target: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Reply:
        try:
            headers, data = self._gh.requester.requestJsonAndCheck(
                method, path, parameters=dict(query) if query else None, input=body
            )
        except GithubException as exc:
            raise _from_github(op, target, exc) from exc
        except requests.exceptions.RequestException as exc:
            raise Unavailable(
                f"github {op} on {target}: request failed ({type(exc).__name__})",
                integration=self.name,
                op=op,
            ) from exc
        return Reply({str(k).lower(): str(v) for k, v in (headers or {}).items()}, data)


def _from_github(op: str, target: str, exc: GithubException) -> IntegrationError:
    return http_error(
        op,
        target,
        exc.status,
        exc.headers,
        rate_limited=isinstance(exc, _RateLimited) or says_rate_limit(exc.data),
        codes=error_codes(exc.data),
    )


# --------------------------------------------------------------------------- logging


class _RedactRequesterLog(logging.Filter):
    """PyGithub's requester logs every request and response body at DEBUG: installation
    access tokens, file contents and comment text. Keep the method, URL, status and
    headers (its auth header is already masked); drop the bodies."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 9:
            record.args = (*args[:5], "<body omitted>", *args[6:8], "<body omitted>")
            return True
        return record.levelno > logging.DEBUG  # an unknown DEBUG shape: drop it


_REQUESTER_LOG = logging.getLogger("github.Requester")
if not any(isinstance(f, _RedactRequesterLog) for f in _REQUESTER_LOG.filters):
    _REQUESTER_LOG.addFilter(_RedactRequesterLog())
