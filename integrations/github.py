"""The GitHub ``api`` transport: an :class:`~graph.ports.Integration` built on PyGithub 2.x.

Three pieces, in the order they are built at start-up:

* :class:`GitHubSettings` -- one frozen object read from the environment (passed in as a
  mapping, so tests pass a dict). Fails fast with :class:`GitHubConfigError`, whose message
  names the variable and the fix and never contains a secret.
* :class:`GitHubClients` -- the composition point. It owns the credentials and hands out
  one :class:`GitHubApi` per GitHub App installation (or one for a personal token).
* :class:`GitHubApi` -- the provider the graph core calls: ``call(op, **params) -> dict``.

Protocol facts used here come from the GitHub REST API documentation pages named in the
docstrings ("Create an installation access token for an app", "Add labels to an issue",
...). PyGithub objects are created lazily (``Github(lazy=True)``): getting a repository,
issue or comment object costs no request; only reading an attribute that the object does
not hold yet (or calling a method such as ``create_comment``) sends one.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import requests
from github import Auth, Github, GithubException
from github.GithubException import RateLimitExceededException as _RateLimited
from github.GithubObject import CompletableGithubObject
from github.GithubRetry import GithubRetry
from github.IssueComment import IssueComment
from github.Repository import Repository
from urllib3.util.retry import Retry

from graph.ports import IntegrationError, NotFound, UnsupportedOperation

_T = TypeVar("_T", bound=CompletableGithubObject)

__all__ = [
    "DEFAULT_API_URL",
    "REACTIONS",
    "GitHubApi",
    "GitHubClients",
    "GitHubConfigError",
    "GitHubSettings",
]

DEFAULT_API_URL = "https://api.github.com"
USER_AGENT = "the-loop (PyGithub)"

#: Reaction contents GitHub accepts ("Create reaction for an issue comment").
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})

#: Longest rate-limit back-off (seconds) PyGithub may sleep inside one call. Longer waits
#: surface as a retriable IntegrationError so the job queue, not a blocked worker, waits.
MAX_RATE_LIMIT_WAIT = 10.0

#: HTTP methods PyGithub may retry on 5xx. POST is left out on purpose: a retried
#: "Create an issue comment" whose first attempt did reach GitHub posts the comment twice.
RETRY_METHODS = frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE"})

_ENV_API_URL = "THE_LOOP_GITHUB_API_URL"
_ENV_APP_ID = "THE_LOOP_GITHUB_APP_ID"
_ENV_KEY = "THE_LOOP_GITHUB_PRIVATE_KEY"
_ENV_KEY_PATH = "THE_LOOP_GITHUB_PRIVATE_KEY_PATH"
_ENV_WRITE = "THE_LOOP_GITHUB_WRITE_INTERVAL"
_ENV_READ = "THE_LOOP_GITHUB_READ_INTERVAL"
_ENV_TIMEOUT = "THE_LOOP_GITHUB_TIMEOUT"
_ENV_RETRIES = "THE_LOOP_GITHUB_RETRIES"


class GitHubConfigError(ValueError):
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

    Raises:
        GitHubConfigError: at construction, when the settings hold no credentials at all.
    """

    def __init__(self, settings: GitHubSettings, *, retry: int | Retry | None = None) -> None:
        if settings.mode is None:
            raise GitHubConfigError(
                "no GitHub credentials: set THE_LOOP_GITHUB_APP_ID and "
                "THE_LOOP_GITHUB_PRIVATE_KEY (or THE_LOOP_GITHUB_PRIVATE_KEY_PATH) for a GitHub "
                "App, or GH_TOKEN for a personal access token"
            )
        self.settings = settings
        self._retry: int | Retry = retry if retry is not None else _retry_policy(settings.retries)
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
                api = GitHubApi(self._new_github(key), installation_id=key)
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
    # raise_on_status=False: when retries run out, hand back the last response so PyGithub
    # raises a GithubException with its status (instead of requests' RetryError).
    # respect_retry_after_header=False: never sleep for a server-chosen Retry-After inside a
    # worker; a 429/503 comes back as a retriable IntegrationError instead.
    return GithubRetry(
        total=retries,
        backoff_factor=0.5,
        allowed_methods=RETRY_METHODS,
        raise_on_status=False,
        respect_retry_after_header=False,
        max_rate_limit_wait=MAX_RATE_LIMIT_WAIT,
    )


# --------------------------------------------------------------------------- the API


_OPERATIONS: dict[str, str] = {
    "get-repository": "get_repository",
    "get-pull-request": "get_pull_request",
    "add-label": "add_label",
    "remove-label": "remove_label",
    "ensure-label": "ensure_label",
    "comment": "comment",
    "update-comment": "update_comment",
    "list-comments": "list_comments",
    "add-reaction": "add_reaction",
    "get-file": "get_file",
}


class GitHubApi:
    """GitHub operations for one identity (an App installation or a token).

    Implements :class:`graph.ports.Integration`: ``call(op, **params) -> dict``. ``repo``
    is always ``"OWNER/NAME"``; ``number`` is an issue or pull-request number (they share
    one sequence). Each operation is also a method (``add-label`` -> :meth:`add_label`).

    Errors (every method and :meth:`call`):
        UnsupportedOperation: ``op`` is not in :attr:`operations`.
        IntegrationError: bad or missing parameters (``status`` None, not retriable); GitHub
            answered with an error status (``status`` set; ``retriable`` for 5xx, 429 and
            403 rate limits); the network failed or timed out (``status`` None, retriable).
        NotFound: GitHub answered 404 (missing, or not visible to this identity).
        Messages name the operation, target and HTTP status, never the response body or a
        credential.

    Build instances through :class:`GitHubClients`; the constructor takes a ready
    ``github.Github`` (created with ``lazy=True``).
    """

    name = "github"
    operations: frozenset[str] = frozenset(_OPERATIONS)

    def __init__(self, gh: Github, *, installation_id: int | None = None) -> None:
        self._gh = gh
        self.installation_id = installation_id

    def __repr__(self) -> str:
        return f"GitHubApi(installation_id={self.installation_id!r})"

    def close(self) -> None:
        """Close the underlying HTTP connection pool."""
        self._gh.close()

    # -- dispatch ---------------------------------------------------------------------

    def call(self, op: str, **params: Any) -> dict[str, Any]:
        """Perform operation ``op`` with keyword ``params``; see the method of that name.

        Raises:
            UnsupportedOperation: unknown ``op``.
            IntegrationError: parameters do not fit the operation, or GitHub refused it.
        """
        method_name = _OPERATIONS.get(op)
        if method_name is None:
            raise UnsupportedOperation(
                f"github does not implement operation {op!r}; it implements: "
                f"{', '.join(sorted(self.operations))}",
                integration=self.name,
                op=op,
            )
        method: Callable[..., dict[str, Any]] = getattr(self, method_name)
        try:
            inspect.signature(method).bind(**params)
        except TypeError as exc:
            raise IntegrationError(
                f"github {op}: bad parameters ({exc})", integration=self.name, op=op
            ) from None
        return method(**params)

    # -- operations -------------------------------------------------------------------

    def get_repository(self, repo: str) -> dict[str, Any]:
        """``get-repository``: ``GET /repos/{owner}/{repo}`` ("Get a repository").

        Returns:
            ``{"full_name": str, "default_branch": str}``
        """
        op = "get-repository"
        r = self._repo(op, repo)
        with self._errors(op, repo):
            _fetch(r)  # a lazy Repository answers full_name from its URL without a GET
            return {"full_name": r.full_name, "default_branch": r.default_branch}

    def get_pull_request(self, repo: str, number: int) -> dict[str, Any]:
        """``get-pull-request``: ``GET /repos/{owner}/{repo}/pulls/{pull_number}``
        ("Get a pull request").

        Returns:
            ``{"number": int, "head_sha": str, "head_ref": str, "base_ref": str,
            "state": "open" | "closed"}`` (a merged pull request is ``"closed"``).
        """
        op = "get-pull-request"
        n = _number(op, "number", number)
        r = self._repo(op, repo)
        with self._errors(op, f"{repo}#{n}"):
            pr = _fetch(r.get_pull(n))
            return {
                "number": pr.number,
                "head_sha": pr.head.sha,
                "head_ref": pr.head.ref,
                "base_ref": pr.base.ref,
                "state": pr.state,
            }

    def add_label(self, repo: str, number: int, label: str) -> dict[str, Any]:
        """``add-label``: ``POST /repos/{owner}/{repo}/issues/{issue_number}/labels`` with
        ``{"labels": [label]}`` ("Add labels to an issue"). Adding a label already present is
        a no-op; GitHub creates a repository label that does not exist yet.

        Returns:
            ``{"labels": [str, ...]}`` -- every label name on the issue after the call, as
            GitHub reports it in the response.
        """
        op = "add-label"
        n = _number(op, "number", number)
        name = _text(op, "label", label)
        r = self._repo(op, repo)
        with self._errors(op, f"{repo}#{n}"):
            issue = r.get_issue(n)
            _, data = self._gh.requester.requestJsonAndCheck(
                "POST", f"{issue.url}/labels", input={"labels": [name]}
            )
            return {"labels": _label_names(data)}

    def remove_label(self, repo: str, number: int, label: str) -> dict[str, Any]:
        """``remove-label``: ``DELETE /repos/{owner}/{repo}/issues/{issue_number}/labels/{name}``
        ("Remove a label from an issue").

        Set semantics: GitHub answers 404 when the label is not on the issue; that counts
        as success, and because the 404 carries no label list the result is then
        ``{"labels": None}`` ("unknown"). Note that a 404 cannot be told apart from a
        missing issue or repository, which therefore also returns ``{"labels": None}``.

        Returns:
            ``{"labels": [str, ...]}`` (names left on the issue) or ``{"labels": None}``.
        """
        op = "remove-label"
        n = _number(op, "number", number)
        name = _text(op, "label", label)
        r = self._repo(op, repo)
        try:
            with self._errors(op, f"{repo}#{n}"):
                issue = r.get_issue(n)
                _, data = self._gh.requester.requestJsonAndCheck(
                    "DELETE", f"{issue.url}/labels/{urllib.parse.quote(name, safe='')}"
                )
                return {"labels": _label_names(data)}
        except NotFound:
            return {"labels": None}

    def ensure_label(
        self, repo: str, label: str, color: str = "ededed", description: str = ""
    ) -> dict[str, Any]:
        """``ensure-label``: make sure the repository has a label named ``label``.

        ``GET /repos/{owner}/{repo}/labels/{name}`` ("Get a label"); on 404,
        ``POST /repos/{owner}/{repo}/labels`` ("Create a label"). A 422 ``already_exists``
        (another worker created it in between) counts as ``created: False``. An existing
        label's color and description are left as they are.

        Args:
            color: six hex digits without ``#`` (a leading ``#`` is dropped).

        Returns:
            ``{"label": str, "created": bool}`` -- the label's name as GitHub spells it.
        """
        op = "ensure-label"
        name = _text(op, "label", label)
        color = _text(op, "color", color).lstrip("#")
        if not isinstance(description, str):
            raise _bad(op, "description must be a string")
        r = self._repo(op, repo)
        target = f"{repo} label {name!r}"
        try:
            with self._errors(op, target):
                existing = _fetch(r.get_label(name))  # lazy Label knows its name from its URL
                return {"label": existing.name, "created": False}
        except NotFound:
            pass
        try:
            with self._errors(op, target):
                created = r.create_label(name, color, description)
                return {"label": created.name, "created": True}
        except IntegrationError as exc:
            if exc.status == 422 and _already_exists(exc.__cause__):
                return {"label": name, "created": False}
            raise

    def comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        """``comment``: ``POST /repos/{owner}/{repo}/issues/{issue_number}/comments``
        ("Create an issue comment"; works for pull requests too). Not retried on 5xx, so a
        comment is never posted twice by this call.

        Returns:
            ``{"id": int, "url": str}`` -- the comment id and its ``html_url``.
        """
        op = "comment"
        n = _number(op, "number", number)
        text = _text(op, "body", body)
        r = self._repo(op, repo)
        with self._errors(op, f"{repo}#{n}"):
            created = r.get_issue(n).create_comment(text)
            return {"id": created.id, "url": created.html_url}

    def update_comment(self, repo: str, comment_id: int, body: str) -> dict[str, Any]:
        """``update-comment``: ``PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}``
        ("Update an issue comment").

        Returns:
            ``{"id": int, "url": str}`` -- the comment id and its ``html_url``.
        """
        op = "update-comment"
        cid = _number(op, "comment_id", comment_id)
        text = _text(op, "body", body)
        comment = self._comment(op, repo, cid)
        with self._errors(op, f"{repo} comment {cid}"):
            comment.edit(text)
            return {"id": comment.id, "url": comment.html_url}

    def list_comments(self, repo: str, number: int) -> dict[str, Any]:
        """``list-comments``: ``GET /repos/{owner}/{repo}/issues/{issue_number}/comments``
        ("List issue comments"), 100 per page, following ``Link: rel="next"`` to the end.

        Returns:
            ``{"comments": [{"id": int, "user": str, "body": str}, ...]}`` oldest first;
            ``user`` is the login (``"ghost"`` for a deleted account).
        """
        op = "list-comments"
        n = _number(op, "number", number)
        r = self._repo(op, repo)
        with self._errors(op, f"{repo}#{n}"):
            return {
                "comments": [
                    {
                        "id": c.id,
                        "user": c.user.login if c.user is not None else "ghost",
                        "body": c.body or "",
                    }
                    for c in r.get_issue(n).get_comments()
                ]
            }

    def add_reaction(self, repo: str, comment_id: int, content: str) -> dict[str, Any]:
        """``add-reaction``: ``POST /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions``
        ("Create reaction for an issue comment"). Adding the same reaction twice returns the
        existing one (GitHub answers 200 instead of 201).

        Args:
            content: one of :data:`REACTIONS` (``+1 -1 laugh confused heart hooray rocket eyes``).

        Returns:
            ``{"id": int}`` -- the reaction id.
        """
        op = "add-reaction"
        cid = _number(op, "comment_id", comment_id)
        if content not in REACTIONS:
            allowed = ", ".join(sorted(REACTIONS))
            raise _bad(op, f"content must be one of {allowed}, got {content!r}")
        comment = self._comment(op, repo, cid)
        with self._errors(op, f"{repo} comment {cid}"):
            return {"id": comment.create_reaction(content).id}

    def get_file(self, repo: str, path: str, ref: str | None = None) -> dict[str, Any]:
        """``get-file``: ``GET /repos/{owner}/{repo}/contents/{path}?ref=`` ("Get repository
        content"). Files of 1-100 MB, for which that endpoint returns no content, are read
        through ``GET /repos/{owner}/{repo}/git/blobs/{file_sha}`` ("Get a blob").

        Args:
            path: file path in the repository (a leading ``/`` is ignored).
            ref: branch, tag or commit sha; ``None`` means the default branch.

        Returns:
            ``{"path": str, "sha": str, "ref": ref, "text": str}`` -- ``sha`` is the blob
            sha, ``ref`` echoes the argument, ``text`` is the UTF-8-decoded content.

        Raises:
            NotFound: no such path or ref, or the path is a directory, symlink or submodule.
            IntegrationError: the file is not UTF-8 text (not retriable).
        """
        op = "get-file"
        clean = _text(op, "path", path).strip("/")
        if not clean:
            raise NotFound(
                f"github {op}: {repo}: the repository root is a directory, not a file",
                integration=self.name,
                op=op,
                status=None,
            )
        if ref is not None:
            ref = _text(op, "ref", ref)
        r = self._repo(op, repo)
        target = f"{repo}:{clean}" + (f"@{ref}" if ref else "")
        with self._errors(op, target):
            content = r.get_contents(clean, ref=ref) if ref is not None else r.get_contents(clean)
            if isinstance(content, list) or content.type != "file":
                kind = "directory" if isinstance(content, list) else content.type
                raise NotFound(
                    f"github {op}: {target} is a {kind}, not a file",
                    integration=self.name,
                    op=op,
                    status=None,
                )
            if content.encoding == "base64":
                raw_b64, sha = content.content, content.sha
            else:  # "none": file larger than 1 MB, fetch the blob instead
                blob = r.get_git_blob(content.sha)
                raw_b64, sha = blob.content, blob.sha
            try:
                raw = base64.b64decode(raw_b64 or "")
                text = raw.decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raise IntegrationError(
                    f"github {op}: {target} is not UTF-8 text",
                    integration=self.name,
                    op=op,
                ) from None
            return {"path": content.path, "sha": sha, "ref": ref, "text": text}

    # -- helpers ----------------------------------------------------------------------

    def _repo(self, op: str, repo: str) -> Repository:
        if not isinstance(repo, str):
            raise _bad(op, f"repo must be 'OWNER/NAME', got {repo!r}")
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name or any(c.isspace() for c in repo):
            raise _bad(op, f"repo must be 'OWNER/NAME', got {repo!r}")
        return self._gh.get_repo(repo)  # lazy: no request yet

    def _comment(self, op: str, repo: str, comment_id: int) -> IssueComment:
        r = self._repo(op, repo)
        # Lazy object; PyGithub builds it the same way in Issue.get_comment().
        return IssueComment(self._gh.requester, url=f"{r.url}/issues/comments/{comment_id}")

    @contextmanager
    def _errors(self, op: str, target: str) -> Iterator[None]:
        try:
            yield
        except GithubException as exc:
            raise _from_github(op, target, exc) from exc
        except requests.exceptions.RequestException as exc:
            raise IntegrationError(
                f"github {op} on {target}: request failed ({type(exc).__name__})",
                integration=self.name,
                op=op,
                retriable=True,
            ) from exc


def _from_github(op: str, target: str, exc: GithubException) -> IntegrationError:
    status = exc.status
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    message = f"github {op} on {target} failed: HTTP {status}"
    if status == 404:
        return NotFound(
            f"{message} (not found, or not visible to this installation/token)",
            integration="github",
            op=op,
            status=status,
        )
    rate_limited = status == 429 or (
        status == 403
        and (
            isinstance(exc, _RateLimited)
            or headers.get("x-ratelimit-remaining") == "0"
            or "retry-after" in headers
        )
    )
    retriable = rate_limited or (isinstance(status, int) and status >= 500)
    if rate_limited:
        reset = headers.get("retry-after") or headers.get("x-ratelimit-reset")
        message += " (rate limited" + (f"; retry-after/reset {reset}" if reset else "") + ")"
    elif status == 401:
        message += (
            " (credentials rejected: check THE_LOOP_GITHUB_APP_ID and the private key, or GH_TOKEN)"
        )
    elif status == 403:
        message += " (forbidden: does the App installation or token have this permission?)"
    elif status == 422:
        message += " (validation failed)"
    return IntegrationError(
        message, integration="github", op=op, status=status, retriable=retriable
    )


def _fetch(obj: _T) -> _T:
    """Complete a lazy PyGithub object now (one GET), so attributes that a lazy object
    derives from its URL (``Repository.full_name``, ``Label.name``, ``PullRequest.number``)
    come from GitHub's answer instead."""
    _ = obj.raw_data  # public property; completes the object when it is not yet complete
    return obj


def _already_exists(exc: BaseException | None) -> bool:
    if not isinstance(exc, GithubException) or not isinstance(exc.data, dict):
        return False
    errors = exc.data.get("errors") or []
    return any(isinstance(e, dict) and e.get("code") == "already_exists" for e in errors)


def _label_names(data: Any) -> list[str]:
    if isinstance(data, dict):  # tolerate a {"labels": [...]} envelope
        data = data.get("labels", [])
    return [item["name"] for item in data or [] if isinstance(item, dict) and "name" in item]


def _bad(op: str, detail: str) -> IntegrationError:
    return IntegrationError(f"github {op}: bad parameters ({detail})", integration="github", op=op)


def _number(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        if isinstance(value, str) and value.isdigit() and int(value) >= 1:
            return int(value)
        raise _bad(op, f"{name} must be a positive integer, got {value!r}")
    return value


def _text(op: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(op, f"{name} must be a non-empty string, got {value!r}")
    return value
