"""A loopback HTTP front over the one fake GitHub, in the style of Prow's fakeghserver.

:class:`HttpFakeGitHub` *is* an :class:`the_loop.sandbox.fakegithub.state.FakeGitHub` (the same
state, the same operations, the same Prow-style :attr:`actions`); this module only adds
HTTP: it serves the REST endpoints that PyGithub and ``gh api`` call for the operations of
:class:`integrations.github.GitHubApi` (see :data:`ENDPOINTS`), both at ``/`` (github.com
layout) and under ``/api/v3`` (GitHub Enterprise Server layout). Each route checks the
request as GitHub does, performs the write through the fake's own operation (so an action
is recorded in one place) and renders GitHub's JSON from the shared state.

Use it in-process with Flask's test client (``fake.app.test_client()``), over loopback
with :func:`serve`, or standalone: ``python -m the_loop.sandbox.fakegithub.http --port 8765
--repo Codertocat/Hello-World``.

Authentication, roughly like GitHub: ``POST /app/installations/{id}/access_tokens``
needs ``Authorization: Bearer <JWT>`` (structure and ``iss`` are checked, not the
signature) and issues ``ghs_...`` tokens valid for one hour; every other endpoint needs
``Authorization: token <token>`` for writes (reads may be anonymous). Installation tokens
act as :attr:`HttpFakeGitHub.bot_login`, any other token as
:attr:`HttpFakeGitHub.user_login` (restrict them with ``tokens=``). As on GitHub, only
installation tokens may create or update check runs (others get 403 "You must
authenticate via a GitHub App."). Repositories must be created with ``add_repo`` (or by
seeding them) before they are served; any other is 404.

OAuth ("Sign in with GitHub", the web application flow of "Generating a user access
token for a GitHub App"): register a client with :meth:`HttpFakeGitHub.add_oauth_app` and
say who is signed in at the fake with :meth:`HttpFakeGitHub.sign_in_as`; then
``GET /login/oauth/authorize`` approves at once (no page: it redirects to
``redirect_uri`` with ``code`` and ``state``, or ``error=access_denied`` when nobody is
signed in), ``POST /login/oauth/access_token`` exchanges the code once for a ``ghu_...``
user token, which ``GET /user`` and the membership endpoints accept
(:meth:`HttpFakeGitHub.add_member` seeds organizations and teams).

Git: a repository backed by a bare git repository (``add_git_repo`` / ``add_repo(...,
git_dir=)``) is also served over git's smart HTTP protocol at ``/{owner}/{name}.git/...``
through ``git http-backend`` (clone, fetch, push), with HTTP Basic auth whose password
must be a token the fake issued (an installation token, or one of ``tokens=``); anything
else gets 401 with ``WWW-Authenticate: Basic realm="GitHub"``, as github.com answers.
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import io
import json
import random
import re
import subprocess
import threading
import urllib.parse
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple, cast

from flask import Blueprint, Flask, Response, g, jsonify, request
from werkzeug.serving import WSGIRequestHandler, make_server

from graph.ports import REACTIONS, IntegrationError
from the_loop.sandbox.fakegithub.state import GIT, FakeGitHub, Repo, blob_sha, git_env

__all__ = ["ENDPOINTS", "HttpFakeGitHub", "RecordedRequest", "serve"]

#: What the fake serves (each also under the ``/api/v3`` prefix).
ENDPOINTS = (
    "POST   /app/installations/{installation_id}/access_tokens",
    "GET    /app",
    "GET    /users/{username}",
    "GET    /repos/{owner}/{repo}",
    "GET    /repos/{owner}/{repo}/pulls/{number}",
    "GET    /repos/{owner}/{repo}/pulls",
    "POST   /repos/{owner}/{repo}/pulls",
    "PATCH  /repos/{owner}/{repo}/pulls/{number}",
    "GET    /repos/{owner}/{repo}/issues/{number}/labels",
    "POST   /repos/{owner}/{repo}/issues/{number}/labels",
    "DELETE /repos/{owner}/{repo}/issues/{number}/labels/{name}",
    "GET    /repos/{owner}/{repo}/labels/{name}",
    "POST   /repos/{owner}/{repo}/labels",
    "GET    /repos/{owner}/{repo}/issues/{number}/comments",
    "POST   /repos/{owner}/{repo}/issues/{number}/comments",
    "GET    /repos/{owner}/{repo}/issues/comments/{comment_id}",
    "PATCH  /repos/{owner}/{repo}/issues/comments/{comment_id}",
    "POST   /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
    "POST   /repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions",
    "GET    /repos/{owner}/{repo}/contents/{path}",
    "PUT    /repos/{owner}/{repo}/contents/{path}",
    "GET    /repos/{owner}/{repo}/git/blobs/{sha}",
    "GET    /repos/{owner}/{repo}/pulls/{number}/files",
    "POST   /repos/{owner}/{repo}/pulls/{number}/requested_reviewers",
    "GET    /repos/{owner}/{repo}/pulls/{number}/reviews",
    "GET    /repos/{owner}/{repo}/collaborators/{username}/permission",
    "POST   /repos/{owner}/{repo}/check-runs",
    "PATCH  /repos/{owner}/{repo}/check-runs/{check_run_id}",
    "GET    /repos/{owner}/{repo}/commits/{ref}/check-runs",
    "GET    /user",
    "GET    /user/memberships/orgs/{org}",
    "GET    /orgs/{org}/teams/{team_slug}/memberships/{username}",
    "GET    /login/oauth/authorize (web host only)",
    "POST   /login/oauth/access_token (web host only)",
    "GET    /{owner}/{repo}.git/info/refs?service=git-upload-pack|git-receive-pack",
    "POST   /{owner}/{repo}.git/git-upload-pack",
    "POST   /{owner}/{repo}.git/git-receive-pack",
    "POST   /app-manifests/{code}/conversions",
    "POST   /settings/apps/new?state=... (web form: the manifest flow)",
    "POST   /organizations/{org}/settings/apps/new?state=... (web form)",
)

GHES_PREFIX = "/api/v3"
#: The manifest flow's paths: the "new App" form and the code conversion.
_MANIFEST_PATH = re.compile(r"(^(/organizations/[^/]+)?/settings/apps/new$)"
                            r"|(/app-manifests/[^/]+/conversions$)")
#: "Get the authenticated app" (a JWT, checked by the route).
_APP_PATH = re.compile(r"^(/api/v3)?/app$")
#: Git's smart HTTP paths: ``/{owner}/{name}.git/{service path}``.
_GIT_PATH = re.compile(r"^/([A-Za-z0-9._-]+)/([A-Za-z0-9._-]+)\.git(/.*)$")
#: Seconds one ``git http-backend`` run may take.
GIT_BACKEND_TIMEOUT = 60.0
DOCS = "https://docs.github.com/rest"


class RecordedRequest(NamedTuple):
    """One request as the fake saw it. ``auth`` is bearer, token, basic, none or other;
    ``conditional``: it carried ``If-None-Match`` or ``If-Modified-Since``; ``status``:
    the status answered (0 until the answer is made)."""

    method: str
    path: str
    auth: str
    query: str = ""
    conditional: bool = False
    status: int = 0


@dataclass
class _Fault:
    pattern: re.Pattern[str]
    status: int
    headers: dict[str, str]
    body: Any
    method: str | None
    times: int
    after: bool = False  # handle the request, then answer with the fault (a lost answer)


@dataclass
class _Chaos:
    rate: float
    after_rate: float
    statuses: tuple[tuple[int, dict[str, str]], ...]
    rng: random.Random
    pattern: re.Pattern[str]


def _b64_lines(data: bytes) -> str:
    text = base64.b64encode(data).decode("ascii")
    return "".join(text[i : i + 60] + "\n" for i in range(0, len(text), 60))


class HttpFakeGitHub(FakeGitHub):
    """The fake GitHub's state and operations plus the Flask app that serves them.

    Args:
        bot_login: login that installation tokens act as (author of their comments).
        user_login: login that any other token acts as.
        tokens: if given, the only non-installation tokens accepted (others get 401).
        app_id: if given, the JWT ``iss`` the access-token endpoint accepts.
        installations: if given, the only installation ids that can get a token (404).

    Seeding and reading are :class:`~the_loop.sandbox.fakegithub.state.FakeGitHub`'s. Besides:
    :attr:`requests`, :attr:`token_requests`, :meth:`clear_records`; faults:
    :meth:`fail_next`, :meth:`chaos` (counted in :attr:`injected`); installations:
    :meth:`suspend_installation`, :meth:`expire_tokens`; renames: ``rename_repo``.

    Conditional requests and the primary rate limit, as GitHub answers them ("Best
    practices for using the REST API": use conditional requests; "Rate limits for the REST
    API"): every successful ``GET`` carries an ``ETag`` (a digest of the body) and a
    ``Last-Modified`` (when that body was first served); a ``GET`` whose
    ``If-None-Match`` matches (or, without one, whose ``If-Modified-Since`` is not older)
    is answered ``304 Not Modified`` with no body. Every API answer carries
    ``x-ratelimit-limit``/``-remaining``/``-used``/``-reset``/``-resource``; each request
    but a 304 counts against the caller's budget (per installation, else per login),
    renewed every hour: :meth:`set_rate_limit` sets it.
    """

    #: Files larger than this (bytes) come back from the contents API with
    #: ``encoding: "none"`` and no content, as GitHub does above 1 MB.
    contents_inline_limit = 1024 * 1024

    def __init__(
        self,
        *,
        bot_login: str = "the-loop[bot]",
        user_login: str = "octocat",
        tokens: Iterable[str] | None = None,
        app_id: int | None = None,
        installations: Iterable[int] | None = None,
    ) -> None:
        super().__init__(bot_login=bot_login, user_login=user_login)
        self._tokens = None if tokens is None else set(tokens)
        self.app_id = app_id
        self._installations = None if installations is None else set(installations)
        self._issued: dict[str, int] = {}  # installation token -> installation id
        self._faults: list[_Fault] = []
        self._chaos: _Chaos | None = None
        self._injected: collections.Counter[str] = collections.Counter()
        self._requests: list[RecordedRequest] = []
        self._token_requests: list[int] = []
        #: One-time codes of the manifest flow -> ``{"manifest", "owner"}``.
        self.manifests: dict[str, dict[str, Any]] = {}
        self._suspended: set[int] = set()
        self._oauth_apps: dict[str, str] = {}  # client id -> client secret
        self._signed_in: str | None = None  # who approves at the authorize page
        self._codes: dict[str, tuple[str, str, str]] = {}  # code -> (client, redirect, login)
        self._user_tokens: dict[str, str] = {}  # user access token -> login
        self._members: dict[tuple[str, str | None], dict[str, str]] = {}  # -> login: state
        #: ETag -> when a body with it was first served (its Last-Modified).
        self._first_served: dict[str, datetime] = {}
        #: The primary limit per hour the fake reports: GitHub's for an installation of
        #: a GitHub Enterprise Cloud organization ("Rate limits for the REST API"), so
        #: long tests keep full speed; :meth:`set_rate_limit` brings it down.
        self.rate_limit = 15000
        self._rate_used: collections.Counter[str] = collections.Counter()
        self._rate_reset = int(datetime.now(UTC).timestamp()) + 3600
        self.app = _create_app(self)

    # -- the primary rate limit ---------------------------------------------------------

    def set_rate_limit(self, *, remaining: int, reset_in: float = 3600.0,
                       who: str | None = None) -> None:
        """Make ``x-ratelimit-remaining`` ``remaining`` for ``who`` (``installation:ID``
        or a login; ``None``: every caller seen so far and the installations' default),
        resetting ``reset_in`` seconds from now."""
        with self.lock:
            self._rate_reset = int(datetime.now(UTC).timestamp() + reset_in)
            for key in ([who] if who else [*self._rate_used, "installation:1"]):
                self._rate_used[key] = max(0, self.rate_limit - remaining)

    # -- installations ----------------------------------------------------------------

    def suspend_installation(self, installation_id: int, suspended: bool = True) -> None:
        """Suspend (or unsuspend) an installation: its tokens stop working (401 "Bad
        credentials") and no new one is issued (403 "This installation has been
        suspended"), as GitHub answers a suspended App installation."""
        with self.lock:
            if suspended:
                self._suspended.add(installation_id)
            else:
                self._suspended.discard(installation_id)

    def expire_tokens(self, installation_id: int | None = None) -> int:
        """Revoke the installation tokens issued so far (of one installation, or all)
        before their hour is up, as GitHub does when a token is revoked or the App's
        permissions change; they then get 401. Returns how many were revoked."""
        with self.lock:
            dead = [t for t, i in self._issued.items()
                    if installation_id is None or i == installation_id]
            for token in dead:
                del self._issued[token]
            return len(dead)

    # -- OAuth and memberships ----------------------------------------------------------

    def add_oauth_app(self, client_id: str, client_secret: str) -> None:
        """Register an OAuth client (a GitHub App's client id and secret)."""
        with self.lock:
            self._oauth_apps[client_id] = client_secret

    def sign_in_as(self, login: str | None) -> None:
        """Who is signed in at the fake's web front: the authorize page approves for
        ``login`` (``None``: it answers ``error=access_denied``)."""
        with self.lock:
            self._signed_in = login

    def add_member(self, org: str, login: str, team: str | None = None, *,
                   state: str = "active") -> None:
        """Make ``login`` a member of ``org`` (or of its team ``team``, a slug) with
        membership ``state`` (``active`` or ``pending``)."""
        with self.lock:
            self._members.setdefault((org.casefold(), team.casefold() if team else None),
                                     {})[login.casefold()] = state

    def membership(self, org: str, login: str, team: str | None = None) -> str | None:
        """The membership state of ``login`` in ``org`` (or its team), or ``None``."""
        with self.lock:
            return self._members.get((org.casefold(), team.casefold() if team else None),
                                     {}).get(login.casefold())

    # -- faults -----------------------------------------------------------------------

    def fail_next(
        self,
        path_regex: str,
        status: int,
        headers: dict[str, str] | None = None,
        *,
        body: Any = None,
        method: str | None = None,
        times: int = 1,
        after: bool = False,
    ) -> None:
        """Answer the next ``times`` requests whose path matches ``path_regex``
        (``re.search``; the path includes any ``/api/v3`` prefix) and, if given, whose
        method is ``method``, with ``status``, ``headers`` and JSON ``body`` (default
        ``{"message": "Injected fault"}``) instead of handling them. Faults queue in order.
        With ``after=True`` the request is handled (a write lands) and the fault replaces
        its answer: the client sees an error for something that happened.
        """
        with self.lock:
            self._faults.append(
                _Fault(
                    re.compile(path_regex),
                    status,
                    dict(headers or {}),
                    {"message": "Injected fault"} if body is None else body,
                    method.upper() if method else None,
                    times,
                    after,
                )
            )

    def chaos(
        self,
        rate: float,
        *,
        after_rate: float = 0.0,
        statuses: tuple[tuple[int, dict[str, str]], ...] = (
            (502, {}),
            (403, {"retry-after": "1"}),
            (429, {"retry-after": "1"}),
        ),
        seed: int | None = None,
        path_regex: str = r"^(?!.*/access_tokens)",
    ) -> None:
        """Fail a random fraction ``rate`` of the requests matching ``path_regex`` (default:
        all but the installation-token endpoint) with one of ``statuses`` (default: 502,
        a secondary rate limit -- 403 with ``retry-after`` -- and 429); of those faults, a
        share ``after_rate`` is injected after handling (the answer is lost, the write
        landed). ``rate=0`` turns it off. Counts are in :attr:`injected`."""
        with self.lock:
            self._chaos = _Chaos(rate, after_rate, statuses, random.Random(seed),
                                 re.compile(path_regex)) if rate > 0 else None

    @property
    def injected(self) -> dict[str, int]:
        """Faults injected so far: ``{"<status>": n, "<status>-after": n}``."""
        with self.lock:
            return dict(self._injected)

    # -- reading ----------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Copy of every request received, in order (faulted ones included)."""
        with self.lock:
            return list(self._requests)

    @property
    def token_requests(self) -> list[int]:
        """Installation ids for which an access token was issued, in order."""
        with self.lock:
            return list(self._token_requests)

    def clear_records(self) -> None:
        """Forget recorded actions, requests and token requests (state stays)."""
        with self.lock:
            self.clear_actions()
            self._requests.clear()
            self._token_requests.clear()

    # -- internals (call with the lock held) ------------------------------------------

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        for fault in self._faults:
            if (fault.method is None or fault.method == method) and fault.pattern.search(path):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                self._injected[f"{fault.status}{'-after' if fault.after else ''}"] += 1
                return fault
        chaos = self._chaos
        if chaos is not None and chaos.pattern.search(path) and chaos.rng.random() < chaos.rate:
            status, headers = chaos.rng.choice(chaos.statuses)
            after = chaos.rng.random() < chaos.after_rate
            self._injected[f"{status}{'-after' if after else ''}"] += 1
            message = ("You have exceeded a secondary rate limit. Please wait a few minutes "
                       "before you try again." if status in (403, 429) else "Server Error")
            return _Fault(chaos.pattern, status, dict(headers), {"message": message}, None, 1,
                          after)
        return None


# ----------------------------------------------------------------------------- app


def _error(status: int, message: str, **extra: Any) -> Response:
    resp = jsonify({"message": message, "documentation_url": DOCS, **extra})
    resp.status_code = status
    return resp


def _auth_kind(header: str | None) -> tuple[str, str]:
    if not header:
        return "none", ""
    scheme, _, value = header.partition(" ")
    kind = scheme.lower()
    return (kind if kind in ("bearer", "token", "basic") else "other"), value.strip()


def _jwt_payload(token: str) -> dict[str, Any] | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, TypeError):
        return None
    return payload if isinstance(payload, dict) else None


def _create_app(fake: HttpFakeGitHub) -> Flask:
    app = Flask("fake_github")
    bp = Blueprint("github", __name__)

    # -- JSON shapes ------------------------------------------------------------------

    def api_base() -> str:
        prefix = GHES_PREFIX if request.path.startswith(GHES_PREFIX + "/") else ""
        return request.host_url.rstrip("/") + prefix

    def web_base() -> str:
        return request.host_url.rstrip("/")

    def user_json(login: str, user_id: int | None = None) -> dict[str, Any]:
        """GitHub's "simple-user" (every required field of its OpenAPI schema): the
        account that has ``login`` now, or the one with ``user_id`` (a comment's author
        keeps their id when a new account takes the login)."""
        api = f"{api_base()}/users/{login}"
        account = fake.user(login)
        return {
            "login": login,
            "id": int(account["id"]) if user_id is None else user_id,
            "node_id": f"U_{login}",
            "avatar_url": f"{web_base()}/avatars/{login}",
            "gravatar_id": "",
            "type": str(account["type"]),
            "site_admin": False,
            "url": api,
            "html_url": f"{web_base()}/{login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
        }

    def repo_json(r: Repo) -> dict[str, Any]:
        owner, _, name = r.full_name.partition("/")
        return {
            "id": r.id,
            "node_id": f"R_{r.id}",
            "name": name,
            "full_name": r.full_name,
            "owner": user_json(owner),
            "private": r.private,
            "visibility": "private" if r.private else "public",
            "fork": False,
            "archived": False,
            "html_url": f"{web_base()}/{r.full_name}",
            "url": f"{api_base()}/repos/{r.full_name}",
            "default_branch": r.default_branch,
        }

    def label_json(r: Repo, label: dict[str, Any]) -> dict[str, Any]:
        quoted = urllib.parse.quote(label["name"], safe="")
        return {
            "id": label["id"],
            "node_id": f"LA_{label['id']}",
            "url": f"{api_base()}/repos/{r.full_name}/labels/{quoted}",
            "name": label["name"],
            "color": label["color"],
            "description": label["description"] or None,
            "default": False,
        }

    def issue_labels_json(r: Repo, number: int) -> list[dict[str, Any]]:
        return [label_json(r, r.labels[n.lower()]) for n in r.issue_labels.get(number, [])]

    def comment_json(c: dict[str, Any]) -> dict[str, Any]:
        base = f"{api_base()}/repos/{c['repo']}/issues"
        return {
            "id": c["id"],
            "node_id": f"IC_{c['id']}",
            "url": f"{base}/comments/{c['id']}",
            "html_url": f"{web_base()}/{c['repo']}/issues/{c['number']}#issuecomment-{c['id']}",
            "issue_url": f"{base}/{c['number']}",
            "body": c["body"],
            "user": user_json(c["user"], c.get("user_id")),
            "created_at": c["created_at"],
            "updated_at": c["updated_at"],
            "author_association": "NONE",
        }

    def content_json(r: Repo, ref: str, path: str, text: str) -> dict[str, Any]:
        data = text.encode("utf-8")
        sha = blob_sha(data)
        inline = len(data) <= fake.contents_inline_limit
        url = f"{api_base()}/repos/{r.full_name}/contents/{path}?ref={ref}"
        return {
            "type": "file",
            "encoding": "base64" if inline else "none",
            "size": len(data),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "content": _b64_lines(data) if inline else "",
            "sha": sha,
            "url": url,
            "git_url": f"{api_base()}/repos/{r.full_name}/git/blobs/{sha}",
            "html_url": f"{web_base()}/{r.full_name}/blob/{ref}/{path}",
            "download_url": None,
            "_links": {"self": url},
        }

    # -- request gate -----------------------------------------------------------------

    @app.before_request
    def gate() -> Response | None:
        kind, credential = _auth_kind(request.headers.get("Authorization"))
        with fake.lock:
            g.request_index = len(fake._requests)
            fake._requests.append(
                RecordedRequest(
                    request.method, request.path, kind, request.query_string.decode("latin-1"),
                    conditional=bool(request.headers.get("If-None-Match")
                                     or request.headers.get("If-Modified-Since")),
                )
            )
            fault = fake._take_fault(request.method, request.path)
        g.after_fault = fault if fault is not None and fault.after else None
        if fault is not None and not fault.after:
            resp = jsonify(fault.body)
            resp.status_code = fault.status
            resp.headers.update(fault.headers)
            return resp
        g.login = None
        g.installation = None
        if ("/access_tokens" in request.path or _GIT_PATH.match(request.path)
                or _APP_PATH.match(request.path)
                or _MANIFEST_PATH.search(request.path)
                or request.path.startswith("/login/oauth/")):
            return None  # checked by the route (the manifest flow and OAuth need no token)
        if kind == "token":
            with fake.lock:
                installation = fake._issued.get(credential)
                user = fake._user_tokens.get(credential)
            if installation is not None and installation in fake._suspended:
                return _error(401, "Bad credentials")
            if user is not None:
                g.login = user
            elif installation is not None:
                g.login = fake.bot_login
                g.installation = installation
            elif credential.startswith("ghs_") or (
                fake._tokens is not None and credential not in fake._tokens
            ):
                return _error(401, "Bad credentials")
            else:
                g.login = fake.user_login
        elif kind != "none":
            return _error(401, "Bad credentials")
        elif request.method != "GET":
            return _error(401, "Requires authentication")
        return None

    @app.after_request
    def conditional(resp: Response) -> Response:
        """ETag / Last-Modified on a successful GET, 304 for a matching conditional GET
        (werkzeug's ``make_conditional``), the rate-limit headers on every API answer,
        and the status in the request log. Registered before ``lose_answer``, so it sees
        the final answer (Flask runs these in reverse)."""
        api = not (_GIT_PATH.match(request.path) or request.path.startswith("/login/oauth/"))
        if (request.method == "GET" and resp.status_code == 200 and api
                and not resp.is_streamed and resp.mimetype == "application/json"):
            resp.add_etag(weak=True)
            etag = str(resp.headers.get("ETag"))
            with fake.lock:
                first = fake._first_served.setdefault(etag, datetime.now(UTC).replace(
                    microsecond=0))
            resp.last_modified = first
            resp.make_conditional(request)
        if api:
            who = (f"installation:{g.installation}" if g.get("installation") is not None
                   else g.get("login") or request.remote_addr or "anonymous")
            with fake.lock:
                if datetime.now(UTC).timestamp() >= fake._rate_reset:  # a new hour
                    fake._rate_used.clear()
                    fake._rate_reset = int(datetime.now(UTC).timestamp()) + 3600
                if resp.status_code != 304:
                    fake._rate_used[who] += 1
                used = fake._rate_used[who]
                reset = fake._rate_reset
            for header, value in (
                    ("x-ratelimit-limit", fake.rate_limit),
                    ("x-ratelimit-remaining", max(0, fake.rate_limit - used)),
                    ("x-ratelimit-used", used), ("x-ratelimit-reset", reset),
                    ("x-ratelimit-resource", "core")):
                if header not in resp.headers:  # an injected fault's own headers win
                    resp.headers[header] = str(value)
        index = g.get("request_index")
        if index is not None:
            with fake.lock:
                if index < len(fake._requests):
                    fake._requests[index] = fake._requests[index]._replace(
                        status=resp.status_code)
        return resp

    @app.after_request
    def lose_answer(resp: Response) -> Response:
        """A fault injected ``after``: the request was handled, its answer is lost."""
        fault = g.get("after_fault")
        if fault is None:
            return resp
        lost = jsonify(fault.body)
        lost.status_code = fault.status
        lost.headers.update(fault.headers)
        return lost

    @app.errorhandler(404)
    def not_found(_: Exception) -> Response:
        return _error(404, "Not Found")

    @app.errorhandler(405)
    def not_allowed(_: Exception) -> Response:
        return _error(404, "Not Found")

    def lookup(owner: str, name: str) -> Repo | None:
        return fake.lookup(f"{owner}/{name}")

    def json_body() -> Any:
        return request.get_json(silent=True)

    # -- apps -------------------------------------------------------------------------

    @bp.post("/app/installations/<int:installation_id>/access_tokens")
    def access_token(installation_id: int) -> Response:
        kind, credential = _auth_kind(request.headers.get("Authorization"))
        payload = _jwt_payload(credential) if kind == "bearer" else None
        if payload is None or "iss" not in payload or "exp" not in payload:
            return _error(401, "A JSON web token could not be decoded")
        if fake.app_id is not None and str(payload["iss"]) != str(fake.app_id):
            return _error(401, "Integration not found")
        with fake.lock:
            if fake._installations is not None and installation_id not in fake._installations:
                return _error(404, "Not Found")
            if installation_id in fake._suspended:
                return _error(403, "This installation has been suspended")
            token = f"ghs_fake{installation_id}x{fake.next_id()}"
            fake._issued[token] = installation_id
            fake._token_requests.append(installation_id)
        expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        resp = jsonify(
            {
                "token": token,
                "expires_at": expires,
                "permissions": {
                    "issues": "write",
                    "pull_requests": "write",
                    "contents": "read",
                    "metadata": "read",
                },
                "repository_selection": "all",
            }
        )
        resp.status_code = 201
        return resp

    @bp.get("/app")
    def get_app() -> Response:
        """"Get the authenticated app": a JWT only (an installation token gets 401)."""
        kind, credential = _auth_kind(request.headers.get("Authorization"))
        payload = _jwt_payload(credential) if kind == "bearer" else None
        if payload is None or "iss" not in payload:
            return _error(401, "A JSON web token could not be decoded")
        if fake.app_id is not None and str(payload["iss"]) != str(fake.app_id):
            return _error(401, "Integration not found")
        app_id = fake.app_id or 1
        slug = fake.bot_login.removesuffix("[bot]")
        return jsonify({
            "id": app_id, "slug": slug, "node_id": f"A_{app_id}", "name": slug,
            "owner": user_json(fake.user_login), "description": None,
            "external_url": web_base(), "html_url": f"{web_base()}/apps/{slug}",
            "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
            "permissions": {"issues": "write", "pull_requests": "write",
                            "contents": "write", "checks": "write", "metadata": "read"},
            "events": ["issues", "issue_comment", "pull_request", "pull_request_review"]})

    @bp.get("/users/<login>")
    def get_user_by_login(login: str) -> Response:
        """"Get a user" (a public user): the account that has ``login`` now."""
        public = {"name": None, "company": None, "blog": "", "location": None,
                  "email": None, "hireable": None, "bio": None, "public_repos": 0,
                  "public_gists": 0, "followers": 0, "following": 0,
                  "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z"}
        return jsonify(user_json(str(fake.user(login)["login"])) | public)

    # -- repositories and pulls -------------------------------------------------------

    @bp.get("/repos/<owner>/<name>")
    def get_repo(owner: str, name: str) -> Response:
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            return jsonify(repo_json(r))

    @bp.get("/repos/<owner>/<name>/pulls/<int:number>")
    def get_pull(owner: str, name: str, number: int) -> Response:
        with fake.lock:
            r = lookup(owner, name)
            pr = r.pulls.get(number) if r else None
            if r is None or pr is None:
                return _error(404, "Not Found")
            return jsonify(pull_json(r, number, pr))

    @bp.get("/repos/<owner>/<name>/pulls")
    def list_pulls(owner: str, name: str) -> Response:
        """"List pull requests": ``state`` (open|closed|all, default open) and ``head``
        (``OWNER:BRANCH``) filter, oldest first, paged."""
        state = request.args.get("state", "open")
        head = request.args.get("head")
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            if state not in ("open", "closed", "all"):
                return _error(422, "Validation Failed")
            items = []
            for number, pr in sorted(r.pulls.items()):
                if state != "all" and pr["state"] != state:
                    continue
                if head is not None:
                    head_owner, _, branch = head.partition(":")
                    if head_owner.lower() != owner.lower() or branch != pr["head_ref"]:
                        continue
                items.append((number, pr))
            return paged(items, lambda item: pull_json(r, item[0], item[1]))

    @bp.post("/repos/<owner>/<name>/pulls")
    def create_pull(owner: str, name: str) -> Response:
        """"Create a pull request": 422 for a missing field or branch, an existing open
        pull request from the head, or no commits between."""
        body = json_body()
        fields = ("title", "head", "base")
        if not isinstance(body, dict) or not all(
                isinstance(body.get(f), str) and body[f] for f in fields):
            return _error(422, "Validation Failed", errors=[
                {"resource": "PullRequest", "code": "missing_field", "field": "title"}])
        head = body["head"].split(":", 1)[-1]
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            try:
                with fake.acting_as(g.login or fake.user_login):
                    created = fake.create_pull_request(
                        r.full_name, head, body["base"], body["title"],
                        str(body.get("body") or ""), bool(body.get("draft", False)))
            except IntegrationError as exc:
                return _error(422, "Validation Failed", errors=[
                    {"resource": "PullRequest", "code": (exc.codes or ("custom",))[0],
                     "message": str(exc).removeprefix("github create-pull-request: ")}])
            number = created["number"]
            resp = jsonify(pull_json(r, number, r.pulls[number]))
        resp.status_code = 201
        return resp

    @bp.patch("/repos/<owner>/<name>/pulls/<int:number>")
    def update_pull(owner: str, name: str, number: int) -> Response:
        body = json_body()
        if not isinstance(body, dict):
            return _error(422, "Invalid request.")
        with fake.lock:
            r = lookup(owner, name)
            pr = r.pulls.get(number) if r else None
            if r is None or pr is None:
                return _error(404, "Not Found")
            title, text = body.get("title"), body.get("body")
            if title is None and text is None:
                return jsonify(pull_json(r, number, pr))  # GitHub: nothing changes
            fake.update_pull_request(r.full_name, number, title=title, body=text)
            return jsonify(pull_json(r, number, pr))

    def pull_json(r: Repo, number: int, pr: dict[str, Any]) -> dict[str, Any]:
        rj = repo_json(r)
        owner_login = r.full_name.split("/")[0]
        fork = pr.get("head_repo") or r.full_name
        holder = fake.lookup(fork)
        head_json = rj if holder is r else (
            repo_json(holder) if holder else {"full_name": fork, "fork": True})
        head_owner = fork.split("/")[0]
        return {
            "id": pr["id"],
            "node_id": f"PR_{pr['id']}",
            "number": number,
            "url": f"{api_base()}/repos/{r.full_name}/pulls/{number}",
            "html_url": f"{web_base()}/{r.full_name}/pull/{number}",
            "issue_url": f"{api_base()}/repos/{r.full_name}/issues/{number}",
            "state": pr["state"],
            "title": pr["title"],
            "body": pr.get("body") or None,
            "user": user_json(pr["user"]),
            "draft": bool(pr.get("draft", False)),
            "maintainer_can_modify": bool(pr.get("maintainer_can_modify")),
            "merged": False,
            "labels": issue_labels_json(r, number),
            "requested_reviewers": [user_json(u) for u in pr["requested"]],
            "head": {
                "label": f"{head_owner}:{pr['head_ref']}",
                "ref": pr["head_ref"],
                "sha": fake.pull_head(r, pr),
                "user": user_json(head_owner),
                "repo": head_json,
            },
            "base": {
                "label": f"{owner_login}:{pr['base_ref']}",
                "ref": pr["base_ref"],
                "sha": fake.branch_sha(r, pr["base_ref"]) or "0" * 40,
                "user": user_json(owner_login),
                "repo": rj,
            },
        }

    # -- labels -----------------------------------------------------------------------

    @bp.get("/repos/<owner>/<name>/issues/<int:number>/labels")
    def list_issue_labels(owner: str, name: str, number: int) -> Response:
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            return jsonify(issue_labels_json(r, number))

    @bp.post("/repos/<owner>/<name>/issues/<int:number>/labels")
    def add_issue_labels(owner: str, name: str, number: int) -> Response:
        body = json_body()
        raw = body.get("labels") if isinstance(body, dict) else body
        if not isinstance(raw, list) or not raw:
            return _error(422, "Invalid request.")
        wanted = [x.get("name") if isinstance(x, dict) else x for x in raw]
        if not all(isinstance(n, str) and n.strip() for n in wanted):
            return _error(422, "Invalid request.")
        names = [str(n) for n in wanted]
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            for n in names:
                fake.add_label(r.full_name, number, n)
            return jsonify(issue_labels_json(r, number))

    @bp.delete("/repos/<owner>/<name>/issues/<int:number>/labels/<path:label>")
    def remove_issue_label(owner: str, name: str, number: int, label: str) -> Response:
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            current = r.issue_labels.get(number, [])
            if not any(n.lower() == label.lower() for n in current):
                return _error(404, "Label does not exist")
            fake.remove_label(r.full_name, number, label)
            return jsonify(issue_labels_json(r, number))

    @bp.get("/repos/<owner>/<name>/labels/<path:label>")
    def get_label(owner: str, name: str, label: str) -> Response:
        with fake.lock:
            r = lookup(owner, name)
            found = r.labels.get(label.lower()) if r else None
            if r is None or found is None:
                return _error(404, "Not Found")
            return jsonify(label_json(r, found))

    @bp.post("/repos/<owner>/<name>/labels")
    def create_label(owner: str, name: str) -> Response:
        body = json_body()
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return _error(
                422,
                "Validation Failed",
                errors=[{"resource": "Label", "code": "missing_field", "field": "name"}],
            )
        color = str(body.get("color") or "ededed").lstrip("#")
        if not re.fullmatch(r"[0-9a-fA-F]{6}", color):
            return _error(
                422,
                "Validation Failed",
                errors=[{"resource": "Label", "code": "invalid", "field": "color"}],
            )
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            if body["name"].lower() in r.labels:
                return _error(
                    422,
                    "Validation Failed",
                    errors=[{"resource": "Label", "code": "already_exists", "field": "name"}],
                )
            fake.ensure_label(r.full_name, body["name"], color, str(body.get("description") or ""))
            resp = jsonify(label_json(r, r.labels[body["name"].lower()]))
            resp.status_code = 201
            return resp

    # -- comments and reactions -------------------------------------------------------

    def paged(
        items: list[Any],
        to_json: Callable[[Any], Any],
        envelope: Callable[[list[Any]], Any] | None = None,
    ) -> Response:
        """One page of ``items`` (``per_page``/``page`` query) with GitHub's Link header;
        other query parameters are kept in the links."""
        try:
            per_page = max(1, min(100, int(request.args.get("per_page", 30))))
            page = max(1, int(request.args.get("page", 1)))
        except ValueError:
            return _error(422, "Invalid pagination")
        chunk = [to_json(x) for x in items[(page - 1) * per_page : page * per_page]]
        resp = jsonify(envelope(chunk) if envelope else chunk)
        last = max(1, -(-len(items) // per_page))
        url = f"{api_base()}{request.path.removeprefix(GHES_PREFIX)}"
        extra = "".join(
            f"&{urllib.parse.quote(k)}={urllib.parse.quote(v)}"
            for k, v in request.args.items()
            if k not in ("per_page", "page")
        )
        links = []
        if page < last:
            links.append(f'<{url}?per_page={per_page}&page={page + 1}{extra}>; rel="next"')
            links.append(f'<{url}?per_page={per_page}&page={last}{extra}>; rel="last"')
        if page > 1:
            links.append(f'<{url}?per_page={per_page}&page={page - 1}{extra}>; rel="prev"')
            links.append(f'<{url}?per_page={per_page}&page=1{extra}>; rel="first"')
        if links:
            resp.headers["Link"] = ", ".join(links)
        return resp

    @bp.get("/repos/<owner>/<name>/issues/<int:number>/comments")
    def list_comments(owner: str, name: str, number: int) -> Response:
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            since = request.args.get("since")  # ISO 8601: compared as GitHub's own stamps
            return paged([c for c in fake.comments_on(r.full_name, number)
                          if not since or c["updated_at"] >= since], comment_json)

    @bp.post("/repos/<owner>/<name>/issues/<int:number>/comments")
    def create_comment(owner: str, name: str, number: int) -> Response:
        body = json_body()
        if not isinstance(body, dict) or not isinstance(body.get("body"), str) or not body["body"]:
            return _error(
                422,
                "Validation Failed",
                errors=[{"resource": "IssueComment", "code": "missing_field", "field": "body"}],
            )
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            with fake.acting_as(g.login or fake.user_login):
                posted = fake.comment(r.full_name, number, body["body"])
            resp = jsonify(comment_json(fake.comment_store[posted["id"]]))
        resp.status_code = 201
        return resp

    def find_comment(owner: str, name: str, comment_id: int) -> dict[str, Any] | None:
        return fake.find_comment(f"{owner}/{name}", comment_id)

    @bp.get("/repos/<owner>/<name>/issues/comments/<int:comment_id>")
    def get_comment(owner: str, name: str, comment_id: int) -> Response:
        with fake.lock:
            c = find_comment(owner, name, comment_id)
            return _error(404, "Not Found") if c is None else jsonify(comment_json(c))

    @bp.patch("/repos/<owner>/<name>/issues/comments/<int:comment_id>")
    def update_comment(owner: str, name: str, comment_id: int) -> Response:
        body = json_body()
        if not isinstance(body, dict) or not isinstance(body.get("body"), str) or not body["body"]:
            return _error(
                422,
                "Validation Failed",
                errors=[{"resource": "IssueComment", "code": "missing_field", "field": "body"}],
            )
        with fake.lock:
            c = find_comment(owner, name, comment_id)
            if c is None:
                return _error(404, "Not Found")
            fake.update_comment(c["repo"], comment_id, body["body"])
            return jsonify(comment_json(c))

    @bp.post("/repos/<owner>/<name>/issues/comments/<int:comment_id>/reactions")
    def create_reaction(owner: str, name: str, comment_id: int) -> Response:
        body = json_body()
        content = body.get("content") if isinstance(body, dict) else None
        if content not in REACTIONS:
            return _error(
                422,
                "Validation Failed",
                errors=[{"resource": "Reaction", "code": "invalid", "field": "content"}],
            )
        with fake.lock:
            c = find_comment(owner, name, comment_id)
            if c is None:
                return _error(404, "Not Found")
            user = g.login or fake.user_login
            fresh = (user, content) not in fake.reactions(c["repo"], comment_id)
            with fake.acting_as(user):
                added = fake.add_reaction(c["repo"], comment_id, content)
            found = next(x for x in fake.reaction_store[comment_id] if x["id"] == added["id"])
            resp = jsonify(
                {
                    "id": found["id"],
                    "node_id": f"REA_{found['id']}",
                    "user": user_json(user),
                    "content": content,
                    "created_at": found["created_at"],
                }
            )
        resp.status_code = 201 if fresh else 200
        return resp

    @bp.post("/repos/<owner>/<name>/pulls/comments/<int:comment_id>/reactions")
    def create_review_comment_reaction(owner: str, name: str, comment_id: int) -> Response:
        body = json_body()
        content = body.get("content") if isinstance(body, dict) else None
        if content not in REACTIONS:
            return _error(
                422,
                "Validation Failed",
                errors=[{"resource": "Reaction", "code": "invalid", "field": "content"}],
            )
        with fake.lock:
            r = lookup(owner, name)
            c = fake.review_comment_store.get(comment_id)
            if r is None or c is None or c["repo"] != r.full_name:
                return _error(404, "Not Found")
            user = g.login or fake.user_login
            fresh = (user, content) not in fake.review_reactions(r.full_name, comment_id)
            with fake.acting_as(user):
                added = fake.add_review_comment_reaction(r.full_name, comment_id, content)
            found = next(x for x in fake.review_reaction_store[comment_id]
                         if x["id"] == added["id"])
            resp = jsonify(
                {
                    "id": found["id"],
                    "node_id": f"REA_{found['id']}",
                    "user": user_json(user),
                    "content": content,
                    "created_at": found["created_at"],
                }
            )
        resp.status_code = 201 if fresh else 200
        return resp

    # -- contents ---------------------------------------------------------------------

    @bp.get("/repos/<owner>/<name>/contents/", defaults={"path": ""})
    @bp.get("/repos/<owner>/<name>/contents/<path:path>")
    def get_contents(owner: str, name: str, path: str) -> Response:
        path = path.strip("/")
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            ref = request.args.get("ref") or r.default_branch
            if r.git_dir is not None:
                return git_contents(r, ref, path)
            text = r.files.get((ref, path))
            if text is not None:
                return jsonify(content_json(r, ref, path, text))
            prefix = f"{path}/" if path else ""
            entries: dict[str, dict[str, Any]] = {}
            for (file_ref, file_path), file_text in sorted(r.files.items()):
                if file_ref != ref or not file_path.startswith(prefix):
                    continue
                head, sep, _ = file_path[len(prefix) :].partition("/")
                child = prefix + head
                if sep:
                    entries.setdefault(
                        child,
                        {
                            "type": "dir",
                            "name": head,
                            "path": child,
                            "sha": blob_sha(child.encode()),
                            "size": 0,
                        },
                    )
                else:
                    item = content_json(r, ref, child, file_text)
                    for key in ("content", "encoding"):
                        item.pop(key)
                    entries[child] = item
            if not entries:
                return _error(404, "Not Found")
            return jsonify(list(entries.values()))

    def git_contents(r: Repo, ref: str, path: str) -> Response:
        """The contents endpoint of a git-backed repository, read with git at ``ref``."""
        text = fake.git_text(r, ref, path) if path else None
        if text is not None:
            return jsonify(content_json(r, ref, path, text))
        entries = fake.git_tree(r, ref, path)
        if not entries:
            return _error(404, "Not Found")
        listing = []
        for kind, sha, child in entries:
            if kind == "tree":
                listing.append({"type": "dir", "name": child.rsplit("/", 1)[-1],
                                "path": child, "sha": sha, "size": 0})
            elif kind == "blob":
                item = content_json(r, ref, child, fake.git_text(r, ref, child) or "")
                for key in ("content", "encoding"):
                    item.pop(key)
                listing.append(item)
        return jsonify(listing)

    @bp.get("/repos/<owner>/<name>/git/blobs/<sha>")
    def get_blob(owner: str, name: str, sha: str) -> Response:
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            if r.git_dir is not None:
                blob = fake.git_blob(r, sha) if re.fullmatch(r"[0-9a-f]{40}", sha) else None
                if blob is None:
                    return _error(404, "Not Found")
                return jsonify({"sha": sha, "node_id": f"B_{sha}", "size": len(blob),
                                "url": f"{api_base()}/repos/{r.full_name}/git/blobs/{sha}",
                                "content": _b64_lines(blob), "encoding": "base64"})
            for text in r.files.values():
                data = text.encode("utf-8")
                if blob_sha(data) == sha:
                    return jsonify(
                        {
                            "sha": sha,
                            "node_id": f"B_{sha}",
                            "size": len(data),
                            "url": f"{api_base()}/repos/{r.full_name}/git/blobs/{sha}",
                            "content": _b64_lines(data),
                            "encoding": "base64",
                        }
                    )
            return _error(404, "Not Found")

    @bp.put("/repos/<owner>/<name>/contents/<path:path>")
    def put_contents(owner: str, name: str, path: str) -> Response:
        path = path.strip("/")
        body = json_body()
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("message"), str)
            or not isinstance(body.get("content"), str)
        ):
            return _error(422, "Invalid request.")
        try:
            data = base64.b64decode(body["content"], validate=True)
            text = data.decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return _error(422, "content is not valid Base64")
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            branch = body.get("branch") or r.default_branch
            existed = fake.file(r.full_name, path, branch) is not None
            sha = body.get("sha")
            try:
                put = fake.put_file(r.full_name, path, branch, text, sha=sha or None,
                                    message=body["message"])
            except IntegrationError as exc:
                if exc.status == 409:
                    return _error(409, f"{path} does not match {sha}")
                return _error(422, 'Invalid request.\n\n"sha" wasn\'t supplied.')
            item = content_json(r, branch, path, text)
            for key in ("content", "encoding"):
                item.pop(key)
            resp = jsonify(
                {
                    "content": item,
                    "commit": {
                        "sha": put["commit"],
                        "message": body["message"],
                        "url": f"{api_base()}/repos/{r.full_name}/git/commits/{put['commit']}",
                    },
                }
            )
        resp.status_code = 200 if existed else 201
        return resp

    # -- pull request files, reviewers and reviews ------------------------------------

    def find_pull(owner: str, name: str, number: int) -> tuple[Repo | None, Any]:
        r = lookup(owner, name)
        return r, (r.pulls.get(number) if r else None)

    @bp.get("/repos/<owner>/<name>/pulls/<int:number>/files")
    def list_pull_files(owner: str, name: str, number: int) -> Response:
        with fake.lock:
            r, pr = find_pull(owner, name, number)
            if pr is None:
                return _error(404, "Not Found")

            def file_json(f: dict[str, Any]) -> dict[str, Any]:
                return {
                    "sha": blob_sha(f["filename"].encode()),
                    "filename": f["filename"],
                    "status": f["status"],
                    "additions": 1,
                    "deletions": 0,
                    "changes": 1,
                    **({"previous_filename": f["previous_filename"]}
                       if "previous_filename" in f else {}),
                }

            return paged(pr["files"], file_json)

    @bp.post("/repos/<owner>/<name>/pulls/<int:number>/requested_reviewers")
    def request_reviewers(owner: str, name: str, number: int) -> Response:
        body = json_body()
        reviewers = body.get("reviewers") if isinstance(body, dict) else None
        if not isinstance(reviewers, list) or not all(isinstance(x, str) for x in reviewers):
            return _error(422, "Invalid request.")
        with fake.lock:
            r, pr = find_pull(owner, name, number)
            if r is None or pr is None:
                return _error(404, "Not Found")
            try:
                fake.request_reviewers(r.full_name, number, reviewers)
            except IntegrationError:
                return _error(422, "Review cannot be requested from pull request author.")
            resp = jsonify(pull_json(r, number, pr))
        resp.status_code = 201
        return resp

    @bp.get("/repos/<owner>/<name>/pulls/<int:number>/reviews")
    def list_reviews(owner: str, name: str, number: int) -> Response:
        with fake.lock:
            r, pr = find_pull(owner, name, number)
            if r is None or pr is None:
                return _error(404, "Not Found")

            def review_json(v: dict[str, Any]) -> dict[str, Any]:
                return {
                    "id": v["id"],
                    "node_id": f"PRR_{v['id']}",
                    "user": user_json(v["user"]),
                    "body": v["body"],
                    "state": v["state"],
                    "commit_id": v["commit_id"],
                    "submitted_at": v["submitted_at"],
                    "author_association": "COLLABORATOR",
                    "html_url": f"{web_base()}/{r.full_name}/pull/{number}"
                    f"#pullrequestreview-{v['id']}",
                }

            return paged(pr["reviews"], review_json)

    @bp.get("/repos/<owner>/<name>/collaborators/<login>/permission")
    def get_permission(owner: str, name: str, login: str) -> Response:
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            role, permission = r.permissions.get(login.lower(), ("none", "none"))
            return jsonify(
                {"permission": permission, "role_name": role, "user": user_json(login)}
            )

    # -- check runs -------------------------------------------------------------------

    def check_run_json(r: Repo, c: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": c["id"],
            "node_id": f"CR_{c['id']}",
            "name": c["name"],
            "head_sha": c["head_sha"],
            "status": c["status"],
            "conclusion": c["conclusion"],
            "output": c["output"],
            "details_url": c.get("details_url"),
            "url": f"{api_base()}/repos/{r.full_name}/check-runs/{c['id']}",
            "html_url": f"{web_base()}/{r.full_name}/runs/{c['id']}",
            "app": {"id": fake.app_id or 1, "slug": "the-loop"},
        }

    def check_run_args(body: dict[str, Any]) -> dict[str, Any]:
        raw = body.get("output")
        output: dict[str, Any] = raw if isinstance(raw, dict) else {}
        return {
            "status": body.get("status"),
            "conclusion": body.get("conclusion"),
            "title": output.get("title"),
            "summary": output.get("summary"),
            "details_url": body.get("details_url"),
        }

    def needs_app() -> Response | None:
        if g.installation is None:
            return _error(403, "You must authenticate via a GitHub App.")
        return None

    @bp.post("/repos/<owner>/<name>/check-runs")
    def create_check_run(owner: str, name: str) -> Response:
        denied = needs_app()
        if denied is not None:
            return denied
        body = json_body()
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("name"), str)
            or not isinstance(body.get("head_sha"), str)
        ):
            return _error(422, "Invalid request.")
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            try:
                created = fake.create_check_run(r.full_name, body["head_sha"], body["name"],
                                                **check_run_args(body))
            except IntegrationError:
                return _error(422, "Invalid request.")
            resp = jsonify(check_run_json(r, r.check_runs[created["id"]]))
        resp.status_code = 201
        return resp

    @bp.patch("/repos/<owner>/<name>/check-runs/<int:check_run_id>")
    def update_check_run(owner: str, name: str, check_run_id: int) -> Response:
        denied = needs_app()
        if denied is not None:
            return denied
        body = json_body()
        if not isinstance(body, dict):
            return _error(422, "Invalid request.")
        with fake.lock:
            r = lookup(owner, name)
            c = r.check_runs.get(check_run_id) if r else None
            if r is None or c is None:
                return _error(404, "Not Found")
            try:
                fake.update_check_run(r.full_name, check_run_id, **check_run_args(body))
            except IntegrationError:
                return _error(422, "Invalid request.")
            return jsonify(check_run_json(r, c))

    @bp.get("/repos/<owner>/<name>/commits/<ref>/check-runs")
    def list_check_runs(owner: str, name: str, ref: str) -> Response:
        with fake.lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            items = fake.latest_check_runs(r.full_name, ref, request.args.get("check_name"))
            return paged(
                items,
                lambda c: check_run_json(r, c),
                lambda chunk: {"total_count": len(items), "check_runs": chunk},
            )

    # -- users, memberships and OAuth ---------------------------------------------------

    @bp.get("/user")
    def get_user() -> Response:
        """"Get the authenticated user"."""
        if g.login is None:
            return _error(401, "Requires authentication")
        return jsonify(user_json(g.login))

    @bp.get("/user/memberships/orgs/<org>")
    def get_own_membership(org: str) -> Response:
        """"Get an organization membership for the authenticated user": 404 when not a
        member."""
        if g.login is None:
            return _error(401, "Requires authentication")
        state = fake.membership(org, g.login)
        if state is None:
            return _error(404, "Not Found")
        return jsonify({"url": f"{api_base()}/orgs/{org}/memberships/{g.login}",
                        "state": state, "role": "member",
                        "organization": {"login": org, "url": f"{api_base()}/orgs/{org}"},
                        "user": user_json(g.login)})

    @bp.get("/orgs/<org>/teams/<team>/memberships/<username>")
    def get_team_membership(org: str, team: str, username: str) -> Response:
        """"Get team membership for a user": 404 when not a member."""
        if g.login is None:
            return _error(401, "Requires authentication")
        state = fake.membership(org, username, team)
        if state is None:
            return _error(404, "Not Found")
        return jsonify({"url": f"{api_base()}/teams/{team}/memberships/{username}",
                        "role": "member", "state": state})

    @app.get("/login/oauth/authorize")
    def oauth_authorize() -> Response:
        """GitHub's authorize page, approving at once for whoever :meth:`sign_in_as`
        named: a redirect to ``redirect_uri`` with ``code`` and ``state``."""
        client = request.args.get("client_id", "")
        redirect_uri = request.args.get("redirect_uri", "")
        with fake.lock:
            known = client in fake._oauth_apps
            login = fake._signed_in
        if not known or not redirect_uri.startswith(("http://", "https://")):
            return Response("Not Found", 404, mimetype="text/plain")
        query: dict[str, str] = {"state": request.args.get("state", "")}
        if login is None:
            query["error"] = "access_denied"
        else:
            code = f"code{fake.next_id()}x{random.getrandbits(64):x}"
            with fake.lock:
                fake._codes[code] = (client, redirect_uri, login)
            query["code"] = code
        separator = "&" if "?" in redirect_uri else "?"
        return Response(status=302, headers={
            "Location": f"{redirect_uri}{separator}{urllib.parse.urlencode(query)}"})

    @app.post("/login/oauth/access_token")
    def oauth_access_token() -> Response:
        """Exchange a code for a user access token, once; errors come with status 200
        and an ``error`` field, as GitHub sends them."""
        sent = request.get_json(silent=True) if request.is_json else request.form
        form = sent if sent is not None and hasattr(sent, "get") else {}
        client, secret = form.get("client_id", ""), form.get("client_secret", "")
        code, redirect_uri = form.get("code", ""), form.get("redirect_uri")
        with fake.lock:
            if not client or fake._oauth_apps.get(client) != secret:
                result = {"error": "incorrect_client_credentials"}
            elif code not in fake._codes or fake._codes[code][0] != client:
                result = {"error": "bad_verification_code"}
            elif redirect_uri and fake._codes[code][1] != redirect_uri:
                result = {"error": "redirect_uri_mismatch"}
            else:
                _, _, login = fake._codes.pop(code)
                token = f"ghu_fake{fake.next_id()}x{random.getrandbits(64):x}"
                fake._user_tokens[token] = login
                result = {"access_token": token, "token_type": "bearer", "scope": ""}
        if "json" in request.headers.get("Accept", ""):
            return jsonify(result)
        return Response(urllib.parse.urlencode(result), 200,
                        mimetype="application/x-www-form-urlencoded")

    # -- git smart HTTP ---------------------------------------------------------------

    @app.route("/<owner>/<repo_git>/<path:rest>", methods=["GET", "POST"])
    def git_smart_http(owner: str, repo_git: str, rest: str) -> Response:
        """Git's smart HTTP protocol ("git-http-backend", gitprotocol-http) for a
        git-backed repository, through ``git http-backend`` as a CGI program. As on
        github.com, it needs HTTP Basic auth whose password is a token the fake issued
        (an installation token, or one of ``tokens=``): 401 with ``WWW-Authenticate``
        otherwise, so git asks its credential helper or ``GIT_ASKPASS`` and retries."""
        match = _GIT_PATH.match(request.path)
        with fake.lock:
            r = lookup(owner, repo_git.removesuffix(".git")) if match else None
        if match is None or r is None or r.git_dir is None:
            return _error(404, "Not Found")
        login = git_login()
        if login is None:
            resp = Response("Invalid username or token. Password authentication is not "
                            "supported for Git operations.\n", status=401,
                            mimetype="text/plain")
            resp.headers["WWW-Authenticate"] = 'Basic realm="GitHub"'
            return resp
        return http_backend(r.git_dir, "/" + rest, login)

    def git_login() -> str | None:
        kind, credential = _auth_kind(request.headers.get("Authorization"))
        if kind != "basic":
            return None
        try:
            _user, _, password = base64.b64decode(credential).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        with fake.lock:
            if password in fake._issued:
                return fake.bot_login
            if fake._tokens is not None and password in fake._tokens:
                return fake.user_login
        return None

    def http_backend(git_dir: Path, rest: str, login: str) -> Response:
        env = git_env(
            GIT_PROJECT_ROOT=str(git_dir.parent),
            GIT_HTTP_EXPORT_ALL="1",
            PATH_INFO=f"/{git_dir.name}{rest}",
            REQUEST_METHOD=request.method,
            QUERY_STRING=request.query_string.decode("latin-1"),
            CONTENT_TYPE=request.headers.get("Content-Type", ""),
            REMOTE_USER=login,  # enables receive-pack (push) for this request
            REMOTE_ADDR=request.remote_addr or "127.0.0.1",
            GATEWAY_INTERFACE="CGI/1.1",
        )
        for header, variable in (("Content-Length", "CONTENT_LENGTH"),
                                 ("Content-Encoding", "HTTP_CONTENT_ENCODING"),
                                 ("Git-Protocol", "GIT_PROTOCOL")):
            if request.headers.get(header):
                env[variable] = request.headers[header]
        proc = subprocess.Popen([GIT, "http-backend"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        killer = threading.Timer(GIT_BACKEND_TIMEOUT, proc.kill)
        killer.daemon = True
        killer.start()
        stream = request.stream

        def feed() -> None:  # the request body, streamed into the CGI's stdin
            assert proc.stdin is not None
            with contextlib.suppress(OSError, ValueError):
                while chunk := stream.read(65536):
                    proc.stdin.write(chunk)
            with contextlib.suppress(OSError):
                proc.stdin.close()

        feeder = threading.Thread(target=feed, name="git-http-backend-stdin", daemon=True)
        feeder.start()
        out = cast(io.BufferedReader, proc.stdout)
        head = b""
        while b"\r\n\r\n" not in head and b"\n\n" not in head:
            chunk = out.read1(65536)
            if not chunk:
                break
            head += chunk
        sep = b"\r\n\r\n" if b"\r\n\r\n" in head else b"\n\n"
        raw_headers, _, first = head.partition(sep)
        status, headers = 200, []
        for line in raw_headers.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key.strip(), value.strip()))

        def body() -> Iterator[bytes]:  # the CGI's answer, streamed to the client
            try:
                if first:
                    yield first
                while chunk := out.read1(65536):
                    yield chunk
            finally:
                feeder.join(timeout=GIT_BACKEND_TIMEOUT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=GIT_BACKEND_TIMEOUT)
                killer.cancel()

        return Response(body(), status=status, headers=headers)

    _manifest_routes(fake, app, bp)
    app.register_blueprint(bp)
    app.register_blueprint(bp, url_prefix=GHES_PREFIX, name="ghes")
    return app


def _manifest_routes(fake: HttpFakeGitHub, app: Flask, bp: Blueprint) -> None:
    """GitHub's "Registering a GitHub App from a manifest" flow: the web form (``POST
    /settings/apps/new`` or ``/organizations/{org}/settings/apps/new`` with the form field
    ``manifest`` and ``?state=``) creates the App at once (no page to confirm) and
    redirects to the manifest's ``redirect_url`` with a one-time ``code`` and the
    ``state``; ``POST /app-manifests/{code}/conversions`` (no authentication) answers 201
    with the App's id, client id and secret, webhook secret and private key (``pem``),
    once; an unknown or used code is 404."""

    def new_app(org: str | None = None) -> Response:
        raw = request.form.get("manifest", "")
        try:
            manifest = json.loads(raw)
        except ValueError:
            manifest = None
        redirect = manifest.get("redirect_url") if isinstance(manifest, dict) else None
        hook = manifest.get("hook_attributes") if isinstance(manifest, dict) else None
        if (not isinstance(manifest, dict) or not isinstance(manifest.get("url"), str)
                or not isinstance(redirect, str) or not redirect.startswith(("http://",
                                                                              "https://"))
                or not isinstance(hook, dict) or not isinstance(hook.get("url"), str)):
            return Response("Invalid GitHub App configuration: the manifest needs url, "
                            "hook_attributes.url and redirect_url", status=422,
                            mimetype="text/plain")
        code = f"fake{fake.next_id()}x{random.randrange(16**8):08x}"
        with fake.lock:
            fake.manifests[code] = {"manifest": manifest, "owner": org or fake.user_login}
        query = urllib.parse.urlencode({"code": code, **({"state": request.args["state"]}
                                                         if "state" in request.args else {})})
        resp = Response(status=302)
        resp.headers["Location"] = f"{redirect}{'&' if '?' in redirect else '?'}{query}"
        return resp

    app.add_url_rule("/settings/apps/new", "manifest_new_app", new_app, methods=["POST"])
    app.add_url_rule("/organizations/<org>/settings/apps/new", "manifest_new_org_app",
                     new_app, methods=["POST"])

    @bp.post("/app-manifests/<code>/conversions")
    def manifest_conversion(code: str) -> Response:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        with fake.lock:
            found = fake.manifests.pop(code, None)
            app_id = fake.next_id()
        if found is None:
            return _error(404, "Not Found")
        manifest, owner = found["manifest"], found["owner"]
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode("ascii")
        name = str(manifest.get("name") or "the-loop")
        slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "app"
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        owner_json = {"login": owner, "id": zlib.crc32(owner.encode()) % 10**8,
                      "node_id": f"U_{owner}", "type": "User", "site_admin": False,
                      "url": f"{request.host_url.rstrip('/')}/users/{owner}",
                      "html_url": f"{request.host_url.rstrip('/')}/{owner}"}
        resp = jsonify({
            "id": app_id, "slug": slug, "node_id": f"A_{app_id}", "client_id":
            f"Iv1.fake{app_id:08x}", "client_secret": f"fake{random.randrange(16**32):032x}",
            "webhook_secret": f"{random.randrange(16**40):040x}", "pem": pem,
            "owner": owner_json, "name": name, "description": manifest.get("description"),
            "external_url": manifest["url"],
            "html_url": f"{request.host_url.rstrip('/')}/apps/{slug}",
            "created_at": stamp, "updated_at": stamp,
            "permissions": dict(manifest.get("default_permissions") or {}),
            "events": list(manifest.get("default_events") or [])})
        resp.status_code = 201
        return resp


# ----------------------------------------------------------------------------- serving


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


def serve(
    fake: HttpFakeGitHub, host: str = "127.0.0.1", port: int = 0
) -> tuple[str, Callable[[], None]]:
    """Serve ``fake`` from a background thread (threaded werkzeug server).

    Args:
        port: 0 picks a free port.

    Returns:
        ``(base_url, stop)``: ``base_url`` like ``http://127.0.0.1:54321`` (append
        ``/api/v3`` for the GHES layout); ``stop()`` shuts the server down and joins the
        thread.
    """
    server = make_server(host, port, fake.app, threaded=True, request_handler=_QuietHandler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-github", daemon=True
    )
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return f"http://{host}:{server.port}", stop


def main(argv: list[str] | None = None) -> None:
    """``python -m the_loop.sandbox.fakegithub.http [--host H] [--port N]
    [--repo OWNER/NAME]...``"""
    parser = argparse.ArgumentParser(description="Serve a fake GitHub REST API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--repo", action="append", default=[], help="repository OWNER/NAME to create (repeatable)"
    )
    parser.add_argument("--default-branch", default="main")
    args = parser.parse_args(argv)
    fake = HttpFakeGitHub()
    for full_name in args.repo:
        fake.add_repo(full_name, default_branch=args.default_branch)
    server = make_server(args.host, args.port, fake.app, threaded=True)
    print(
        f"fake GitHub listening on http://{args.host}:{server.port} "
        f"(GHES layout: http://{args.host}:{server.port}{GHES_PREFIX})",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
