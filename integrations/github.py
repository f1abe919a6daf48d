"""The GitHub ``api`` transport: an :class:`~graph.ports.Integration` built on PyGithub 2.x.

Three pieces, in the order they are built at start-up:

* :class:`~foundation.settings.GitHubSettings` -- the GitHub section of the settings, read
  once at start-up by :class:`foundation.settings.Settings` (re-exported here).
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

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import requests
from github import Auth, Github, GithubException
from github.GithubException import RateLimitExceededException as _RateLimited
from github.Requester import Requester
from urllib3.util.retry import Retry

from foundation.settings import DEFAULT_API_URL, GitHubSettings
from graph.errors import LoopError
from graph.ports import App, IntegrationError, Unavailable, Unsupported
from integrations.github_ops import (
    API_HEADERS,
    OPERATIONS,
    REACTIONS,
    GitHubOperations,
    Reply,
    error_codes,
    error_reason,
    fields,
    http_error,
    next_link,
    says_rate_limit,
)
from integrations.retry import MAX_RATE_LIMIT_WAIT, BoundedRetry

if TYPE_CHECKING:
    from integrations.github_cache import ConditionalCache
    from integrations.throttle import WriteThrottle

__all__ = [
    "DEFAULT_API_URL",
    "OPERATIONS",
    "REACTIONS",
    "GitHubApi",
    "GitHubAppApi",
    "GitHubClients",
    "GitHubConfigError",
    "GitHubSettings",
]

USER_AGENT = "the-loop (PyGithub)"

log = logging.getLogger("the_loop.integrations.github")

#: HTTP methods PyGithub may retry (5xx, rate limits). POST and PUT are left out on
#: purpose: a retried "Create an issue comment" whose first attempt did reach GitHub posts
#: the comment twice, and a retried "Create or update file contents" would commit on top
#: of itself.
RETRY_METHODS = frozenset({"GET", "HEAD", "PATCH", "DELETE"})

class GitHubConfigError(LoopError, ValueError):
    """The GitHub settings hold no credentials a client can use.

    The message names the environment variables to set; it never contains the value of
    a secret (private key, token).
    """


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
        cache: the shared conditional-request cache handed to every :class:`GitHubApi`,
            or ``None``.

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
        cache: ConditionalCache | None = None,
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
        self.cache = cache
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
                    self._new_github(key), installation_id=key, throttle=self.throttle,
                    app=self.for_app if self._app_auth is not None else None,
                    cache=self.cache,
                )
                self._apis[key] = api
            return api

    def for_app(self) -> GitHubAppApi:
        """A client acting as the App itself (a JWT signed with its private key, renewed
        by PyGithub's ``AppAuth``), for the App's own endpoints.

        Raises:
            GitHubConfigError: token mode (a token cannot act as the App).
        """
        if self._app_auth is None:
            raise GitHubConfigError(
                "acting as the GitHub App needs the App's credentials: set "
                "THE_LOOP_GITHUB_APP_ID and THE_LOOP_GITHUB_PRIVATE_KEY (or "
                "THE_LOOP_GITHUB_PRIVATE_KEY_PATH); a personal token cannot")
        return GitHubAppApi(self._new_github(None, app=True))

    def installation_token(self, installation_id: int | None) -> str:
        """A short-lived token for git over HTTPS (clone, fetch, push) as the installation.

        App mode: the installation access token of ``POST /app/installations/
        {installation_id}/access_tokens`` ("Create an installation access token for an
        app"; valid one hour, used as the password of user ``x-access-token``). It is the
        same token the installation's :class:`GitHubApi` sends, kept and renewed by
        PyGithub's ``AppInstallationAuth`` (a new one about 20 s before expiry), so call
        this per git operation rather than keeping the value. Token mode: the configured
        token (``installation_id`` ignored).

        Raises:
            IntegrationError: App mode and no valid installation id (see
                :meth:`for_installation`), or GitHub refused the token request (``status``
                set: 401 a bad App key or id, 404 no such installation); the message never
                holds a credential.
            Unavailable: GitHub could not be reached.
        """
        api = self.for_installation(installation_id)
        if self._app_auth is None:
            assert self.settings.token is not None
            return self.settings.token
        auth = api._gh.requester.auth
        op, target = "installation-token", f"installation {installation_id}"
        try:
            token = getattr(auth, "token", None)
        except GithubException as exc:
            raise _from_github(op, target, exc) from exc
        except requests.exceptions.RequestException as exc:
            raise Unavailable(f"github {op} on {target}: request failed ({type(exc).__name__})",
                              integration="github", op=op) from exc
        if not isinstance(token, str) or not token:
            raise IntegrationError(f"github {op} on {target}: no token in GitHub's answer",
                                   integration="github", op=op)
        return token

    def forget(self, installation_id: int | None) -> None:
        """Drop the cached client (and so the access token) of ``installation_id``: the
        next request mints a new token, which carries the installation's access as it is
        now (after ``installation`` or ``installation_repositories`` deliveries)."""
        with self._lock:
            api = self._apis.pop(installation_id, None)
        if api is not None:
            api.close()

    def close(self) -> None:
        """Close the HTTP connections of every cached client."""
        with self._lock:
            apis, self._apis = list(self._apis.values()), {}
        for api in apis:
            api.close()

    def _new_github(self, installation_id: int | None, *, app: bool = False) -> Github:
        auth: Auth.Auth
        if app and self._app_auth is not None:
            auth = self._app_auth
        elif self._app_auth is not None:
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
        app: makes the client acting as the App itself (App mode), for ``get-app``;
            ``None``: a token, which has no App (it has ``get-authenticated-user``).
        cache: the shared conditional-request cache (``None``: every GET is sent whole).
    """

    transport = "api"
    #: Headers sent with every request besides PyGithub's own: the media type and the
    #: REST API version, as every other GitHub call of the project sends them.
    request_headers: Mapping[str, str] = API_HEADERS

    def __init__(
        self,
        gh: Github,
        *,
        installation_id: int | None = None,
        throttle: WriteThrottle | None = None,
        app: Callable[[], GitHubAppApi] | None = None,
        cache: ConditionalCache | None = None,
    ) -> None:
        self._gh = gh
        self._app = app
        # Who the client acts as: the App (asked with its JWT), else the token's user.
        self.operations = frozenset(OPERATIONS) | {
            "get-app" if app is not None else "get-authenticated-user"}
        self.installation_id = installation_id
        self.throttle = throttle
        self.cache = cache
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

    def get_app(self) -> App:
        """``get-app`` (App mode only): the App this installation's client acts for,
        asked as the App (see :meth:`GitHubAppApi.get_app`).

        Raises:
            Unsupported: a token, not an App.
        """
        if self._app is None:
            raise Unsupported("github (api) acts for a token, not an App: no get-app",
                              integration=self.name, op="get-app")
        return self._app().get_app()

    def forget_token(self) -> bool:
        """Drop the cached installation access token, so the next request mints a new one
        ("Create an installation access token for an app"). Returns whether there was an
        installation token to drop (``False`` for a personal token)."""
        auth = self._gh.requester.auth
        if not isinstance(auth, Auth.AppInstallationAuth):
            return False
        # PyGithub keeps the token in a private attribute and offers no reset.
        auth._AppInstallationAuth__installation_authorization = None  # type: ignore[attr-defined]
        return True

    @property
    def graphql_path(self) -> str:
        """The GraphQL endpoint of this client's base URL, as PyGithub's requester derives
        it: ``https://api.github.com/graphql``; ``https://HOST/api/graphql`` for a GitHub
        Enterprise Server root ``https://HOST/api/v3`` ("Forming calls with GraphQL":
        "The GraphQL endpoint"; GHES docs: ``http(s)://HOSTNAME/api/graphql``)."""
        return str(self._gh.requester.graphql_url)

    def _send(
        self,
        op: str,
        method: str,
        path: str,
        *,
        target: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """One request; a 401 answered to an installation token drops the token, mints a
        new one and sends the request once more (a token GitHub revoked or expired
        early); an HTML answer (a web page: the base URL is not the API root) is a clear,
        not retriable error. A 304 (to a conditional ``headers``) is ``Reply(status=304)``.
        """
        sent = {**self.request_headers, **(headers or {})}
        for attempt in (1, 2):
            try:
                status, answer, output = self._gh.requester.requestJson(
                    method, path, parameters=dict(query) if query else None,
                    headers=dict(sent) or None, input=body
                )
                data = _decoded(output)
                if status >= 400:
                    raise Requester.createException(status, answer, data)
            except GithubException as exc:
                html = _html_answer(op, target, exc.status, exc.headers)
                if html is not None:
                    raise html from None
                if exc.status == 401 and attempt == 1 and self.forget_token():
                    log.warning("github %s on %s: HTTP 401 with the installation token; "
                                "dropped it, minting a new one and trying once more", op,
                                target)
                    continue
                raise _from_github(op, target, exc) from exc
            except requests.exceptions.RequestException as exc:
                raise Unavailable(
                    f"github {op} on {target}: request failed ({type(exc).__name__})",
                    integration=self.name,
                    op=op,
                ) from exc
            lower = {str(k).lower(): str(v) for k, v in (answer or {}).items()}
            html = _html_answer(op, target, status, lower)
            if html is not None:
                raise html
            return Reply(lower, data, status)
        raise AssertionError("unreachable")  # pragma: no cover


class GitHubAppApi(GitHubApi):
    """The App itself (JWT authentication): its webhook delivery log, "REST API endpoints
    for GitHub App webhooks". Build it with :meth:`GitHubClients.for_app`.

    Errors: :class:`~graph.ports.IntegrationError` (``status`` set for an HTTP error),
    :class:`~graph.ports.Unavailable` when GitHub cannot be reached.
    """

    #: None of the work item operations: the App's JWT acts on the App's own endpoints
    #: only (an installation's client does the rest).
    operations: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return "GitHubAppApi()"

    def get_app(self) -> App:
        """``GET /app`` ("Get the authenticated app", a JWT only): ``{"id", "slug"}``;
        the App's bot user is ``<slug>[bot]``.

        Raises:
            IntegrationError: GitHub refused (``status`` set) or answered no slug.
        """
        op = "get-app"
        data = fields(op, self._request(op, "GET", "/app", target="the App").data,
                      id=int, slug=str)
        return {"id": data["id"], "slug": data["slug"]}

    def hook_delivery_pages(self) -> Iterator[list[dict[str, Any]]]:
        """``GET /app/hook/deliveries?per_page=100`` ("List deliveries for an app
        webhook"): pages newest first, following ``Link: rel="next"`` (it carries the
        ``cursor``) for as long as the caller takes pages."""
        op = "list-hook-deliveries"
        url: str | None = "/app/hook/deliveries"
        params: Mapping[str, Any] | None = {"per_page": 100}
        while url is not None:
            reply = self._request(op, "GET", url, target="the App", query=params)
            if not isinstance(reply.data, list):
                raise IntegrationError(f"github {op}: the answer is not a list",
                                       integration=self.name, op=op)
            yield reply.data
            url = next_link(reply.headers.get("link"))
            params = None  # the next link carries per_page and the cursor

    def redeliver_hook_delivery(self, delivery_id: int) -> None:
        """``POST /app/hook/deliveries/{delivery_id}/attempts`` ("Redeliver a delivery for
        an app webhook"; 202: queued by GitHub). Never retried by the transport."""
        self._request("redeliver-hook-delivery", "POST",
                      f"/app/hook/deliveries/{int(delivery_id)}/attempts", target="the App")


def _decoded(output: str) -> Any:
    """A REST answer's JSON body as PyGithub decodes it (``None`` when empty; a body that
    is not JSON comes back as ``{"data": text}``)."""
    if not output:
        return None
    try:
        return json.loads(output)
    except ValueError:
        if output.lstrip().startswith(("{", "[")):
            raise
        return {"data": output}


def _html_answer(op: str, target: str, status: int | None,
                 headers: Mapping[str, Any] | None) -> IntegrationError | None:
    """The error for an answer that is a web page rather than the REST API's JSON (a base
    URL without ``/api/v3`` on GitHub Enterprise Server reaches its web UI), or ``None``.

    Only a 2xx/3xx web page means a wrong URL: GitHub answers an outage (500, 502, 503)
    with its HTML error page too, and that is a 5xx like any other (retried, see
    :func:`~integrations.github_ops.errors.http_error`); a 4xx page goes the same way."""
    lower = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    if "text/html" not in lower.get("content-type", "").lower():
        return None
    if status is not None and status >= 400:
        return None
    return IntegrationError(
        f"github {op} on {target}: GitHub answered HTTP {status} with an HTML page, not "
        "the REST API's JSON; set THE_LOOP_GITHUB_API_URL to the API root "
        "(https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise Server)",
        integration="github", op=op, status=status)


def _from_github(op: str, target: str, exc: GithubException) -> IntegrationError:
    return http_error(
        op,
        target,
        exc.status,
        exc.headers,
        rate_limited=isinstance(exc, _RateLimited) or says_rate_limit(exc.data),
        codes=error_codes(exc.data),
        reason=error_reason(exc.data),
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
