"""A loopback fake of the GitHub REST API, in the style of Prow's fake GitHub client.

:class:`FakeGitHub` keeps repositories, files, pull requests, labels, comments and
reactions in memory, records every successful write in :attr:`FakeGitHub.actions` as a
Prow-style string, and serves the endpoints that PyGithub calls for the operations of
:class:`integrations.github.GitHubApi` (see :data:`ENDPOINTS`), both at ``/`` (github.com
layout) and under ``/api/v3`` (GitHub Enterprise Server layout).

Action strings::

    OWNER/NAME#1:add-label:phase:requirements     (one per label in the request)
    OWNER/NAME#1:remove-label:phase:requirements
    OWNER/NAME:create-label:phase:requirements
    OWNER/NAME#1:comment:<comment id>
    OWNER/NAME:update-comment:<comment id>
    OWNER/NAME:add-reaction:<comment id>:<content>

Use it in-process with Flask's test client (``fake.app.test_client()``), over loopback
with :func:`serve`, or standalone: ``python -m tests.support.fake_github --port 8765
--repo Codertocat/Hello-World``.

Authentication, roughly like GitHub: ``POST /app/installations/{id}/access_tokens``
needs ``Authorization: Bearer <JWT>`` (structure and ``iss`` are checked, not the
signature) and issues ``ghs_...`` tokens valid for one hour; every other endpoint needs
``Authorization: token <token>`` for writes (reads may be anonymous). Installation tokens
act as :attr:`FakeGitHub.bot_login`, any other token as :attr:`FakeGitHub.user_login`
(restrict them with ``tokens=``).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import itertools
import json
import re
import threading
import urllib.parse
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from flask import Blueprint, Flask, Response, g, jsonify, request
from werkzeug.serving import WSGIRequestHandler, make_server

__all__ = ["ENDPOINTS", "FakeGitHub", "RecordedRequest", "serve"]

#: What the fake serves (each also under the ``/api/v3`` prefix).
ENDPOINTS = (
    "POST   /app/installations/{installation_id}/access_tokens",
    "GET    /repos/{owner}/{repo}",
    "GET    /repos/{owner}/{repo}/pulls/{number}",
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
    "GET    /repos/{owner}/{repo}/contents/{path}",
    "GET    /repos/{owner}/{repo}/git/blobs/{sha}",
)

REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
GHES_PREFIX = "/api/v3"
DOCS = "https://docs.github.com/rest"


class RecordedRequest(NamedTuple):
    """One request as the fake saw it. ``auth`` is bearer, token, basic, none or other."""

    method: str
    path: str
    auth: str
    query: str = ""


@dataclass
class _Fault:
    pattern: re.Pattern[str]
    status: int
    headers: dict[str, str]
    body: Any
    method: str | None
    times: int


@dataclass
class _Repo:
    full_name: str
    id: int
    default_branch: str
    private: bool
    files: dict[tuple[str, str], str] = field(default_factory=dict)  # (ref, path) -> text
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    labels: dict[str, dict[str, Any]] = field(default_factory=dict)  # lower(name) -> label
    issue_labels: dict[int, list[str]] = field(default_factory=dict)  # number -> names


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _b64_lines(data: bytes) -> str:
    text = base64.b64encode(data).decode("ascii")
    return "".join(text[i : i + 60] + "\n" for i in range(0, len(text), 60))


class FakeGitHub:
    """In-memory GitHub state plus the Flask app that serves it.

    Args:
        bot_login: login that installation tokens act as (author of their comments).
        user_login: login that any other token acts as.
        tokens: if given, the only non-installation tokens accepted (others get 401).
        app_id: if given, the JWT ``iss`` the access-token endpoint accepts.
        installations: if given, the only installation ids that can get a token (404).

    Seeding (records no action): :meth:`add_repo`, :meth:`put_file`, :meth:`add_pull`,
    :meth:`add_label`, :meth:`set_issue_labels`, :meth:`add_comment`. Reading:
    :attr:`actions`, :attr:`requests`, :attr:`token_requests`, :meth:`comments`,
    :meth:`labels`, :meth:`repo_labels`, :meth:`reactions`. Faults: :meth:`fail_next`.
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
        self.bot_login = bot_login
        self.user_login = user_login
        self._tokens = None if tokens is None else set(tokens)
        self.app_id = app_id
        self._installations = None if installations is None else set(installations)
        self._lock = threading.RLock()
        self._ids = itertools.count(1001)
        self._repos: dict[str, _Repo] = {}
        self._comments: dict[int, dict[str, Any]] = {}  # id -> {repo, number, user, body, ...}
        self._reactions: dict[int, list[dict[str, Any]]] = {}  # comment id -> reactions
        self._issued: dict[str, int] = {}  # installation token -> installation id
        self._faults: list[_Fault] = []
        self._actions: list[str] = []
        self._requests: list[RecordedRequest] = []
        self._token_requests: list[int] = []
        self.app = _create_app(self)

    # -- seeding ----------------------------------------------------------------------

    def add_repo(
        self, full_name: str, *, default_branch: str = "main", private: bool = False
    ) -> None:
        """Create repository ``OWNER/NAME`` (idempotent; updates the default branch)."""
        with self._lock:
            repo = self._repos.get(full_name.lower())
            if repo is None:
                self._repos[full_name.lower()] = _Repo(
                    full_name, next(self._ids), default_branch, private
                )
            else:
                repo.default_branch = default_branch

    def put_file(self, repo: str, path: str, text: str, ref: str | None = None) -> None:
        """Store ``text`` at ``path`` on ``ref`` (default branch when ``None``)."""
        with self._lock:
            r = self._repo_or_raise(repo)
            r.files[(ref or r.default_branch, path.strip("/"))] = text

    def add_pull(
        self,
        repo: str,
        number: int,
        *,
        head_sha: str,
        head_ref: str,
        base_ref: str | None = None,
        state: str = "open",
        title: str = "A pull request",
        user: str | None = None,
    ) -> None:
        """Create pull request ``number`` (base defaults to the default branch)."""
        with self._lock:
            r = self._repo_or_raise(repo)
            r.pulls[number] = {
                "head_sha": head_sha,
                "head_ref": head_ref,
                "base_ref": base_ref or r.default_branch,
                "state": state,
                "title": title,
                "user": user or self.user_login,
                "id": next(self._ids),
            }

    def add_label(
        self, repo: str, name: str, *, color: str = "ededed", description: str = ""
    ) -> None:
        """Create repository label ``name``."""
        with self._lock:
            self._ensure_repo_label(self._repo_or_raise(repo), name, color, description)

    def set_issue_labels(self, repo: str, number: int, labels: Iterable[str]) -> None:
        """Put exactly ``labels`` on issue/PR ``number`` (creating repository labels)."""
        with self._lock:
            r = self._repo_or_raise(repo)
            names = [self._ensure_repo_label(r, n)["name"] for n in labels]
            r.issue_labels[number] = list(dict.fromkeys(names))

    def add_comment(self, repo: str, number: int, body: str, *, user: str = "octocat") -> int:
        """Add a comment by ``user`` to issue/PR ``number``; returns its id."""
        with self._lock:
            r = self._repo_or_raise(repo)
            return self._new_comment(r, number, body, user)["id"]

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
    ) -> None:
        """Answer the next ``times`` requests whose path matches ``path_regex``
        (``re.search``; the path includes any ``/api/v3`` prefix) and, if given, whose
        method is ``method``, with ``status``, ``headers`` and JSON ``body`` (default
        ``{"message": "Injected fault"}``) instead of handling them. Faults queue in order.
        """
        with self._lock:
            self._faults.append(
                _Fault(
                    re.compile(path_regex),
                    status,
                    dict(headers or {}),
                    {"message": "Injected fault"} if body is None else body,
                    method.upper() if method else None,
                    times,
                )
            )

    # -- reading ----------------------------------------------------------------------

    @property
    def actions(self) -> list[str]:
        """Copy of the successful writes, in order (see the module docstring)."""
        with self._lock:
            return list(self._actions)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Copy of every request received, in order (faulted ones included)."""
        with self._lock:
            return list(self._requests)

    @property
    def token_requests(self) -> list[int]:
        """Installation ids for which an access token was issued, in order."""
        with self._lock:
            return list(self._token_requests)

    def clear_records(self) -> None:
        """Forget recorded actions, requests and token requests (state stays)."""
        with self._lock:
            self._actions.clear()
            self._requests.clear()
            self._token_requests.clear()

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        """Comments on issue/PR ``number``, oldest first: ``[{"id", "user", "body"}]``."""
        with self._lock:
            key = self._repo_or_raise(repo).full_name
            return [
                {"id": c["id"], "user": c["user"], "body": c["body"]}
                for c in self._comments.values()
                if c["repo"] == key and c["number"] == number
            ]

    def labels(self, repo: str, number: int) -> list[str]:
        """Label names on issue/PR ``number``."""
        with self._lock:
            return list(self._repo_or_raise(repo).issue_labels.get(number, []))

    def repo_labels(self, repo: str) -> list[str]:
        """Label names defined in the repository."""
        with self._lock:
            return [lbl["name"] for lbl in self._repo_or_raise(repo).labels.values()]

    def reactions(self, repo: str, comment_id: int) -> list[tuple[str, str]]:
        """``(user, content)`` pairs on comment ``comment_id``."""
        with self._lock:
            self._repo_or_raise(repo)
            return [(x["user"], x["content"]) for x in self._reactions.get(comment_id, [])]

    # -- internals (call with the lock held) ------------------------------------------

    def _repo_or_raise(self, repo: str) -> _Repo:
        r = self._repos.get(repo.lower())
        if r is None:
            raise KeyError(f"fake GitHub has no repository {repo!r}; call add_repo() first")
        return r

    def _ensure_repo_label(
        self, r: _Repo, name: str, color: str = "ededed", description: str = ""
    ) -> dict[str, Any]:
        label = r.labels.get(name.lower())
        if label is None:
            label = {
                "id": next(self._ids),
                "name": name,
                "color": color,
                "description": description,
            }
            r.labels[name.lower()] = label
        return label

    def _new_comment(self, r: _Repo, number: int, body: str, user: str) -> dict[str, Any]:
        now = _now()
        c: dict[str, Any] = {
            "id": next(self._ids),
            "repo": r.full_name,
            "number": number,
            "user": user,
            "body": body,
            "created_at": now,
            "updated_at": now,
        }
        self._comments[c["id"]] = c
        return c

    def _record(self, action: str) -> None:
        self._actions.append(action)

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        for fault in self._faults:
            if (fault.method is None or fault.method == method) and fault.pattern.search(path):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
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


def _create_app(fake: FakeGitHub) -> Flask:
    app = Flask("fake_github")
    bp = Blueprint("github", __name__)

    # -- JSON shapes ------------------------------------------------------------------

    def api_base() -> str:
        prefix = GHES_PREFIX if request.path.startswith(GHES_PREFIX + "/") else ""
        return request.host_url.rstrip("/") + prefix

    def web_base() -> str:
        return request.host_url.rstrip("/")

    def user_json(login: str) -> dict[str, Any]:
        return {
            "login": login,
            "id": zlib.crc32(login.encode()) % 10**8,
            "node_id": f"U_{login}",
            "type": "Bot" if login.endswith("[bot]") else "User",
            "site_admin": False,
            "url": f"{api_base()}/users/{login}",
            "html_url": f"{web_base()}/{login}",
        }

    def repo_json(r: _Repo) -> dict[str, Any]:
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

    def label_json(r: _Repo, label: dict[str, Any]) -> dict[str, Any]:
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

    def issue_labels_json(r: _Repo, number: int) -> list[dict[str, Any]]:
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
            "user": user_json(c["user"]),
            "created_at": c["created_at"],
            "updated_at": c["updated_at"],
            "author_association": "NONE",
        }

    def content_json(r: _Repo, ref: str, path: str, text: str) -> dict[str, Any]:
        data = text.encode("utf-8")
        sha = _blob_sha(data)
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
        with fake._lock:
            fake._requests.append(
                RecordedRequest(
                    request.method, request.path, kind, request.query_string.decode("latin-1")
                )
            )
            fault = fake._take_fault(request.method, request.path)
        if fault is not None:
            resp = jsonify(fault.body)
            resp.status_code = fault.status
            resp.headers.update(fault.headers)
            return resp
        g.login = None
        if "/access_tokens" in request.path:
            return None  # checked by the route
        if kind == "token":
            with fake._lock:
                installation = fake._issued.get(credential)
            if installation is not None:
                g.login = fake.bot_login
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

    @app.errorhandler(404)
    def not_found(_: Exception) -> Response:
        return _error(404, "Not Found")

    @app.errorhandler(405)
    def not_allowed(_: Exception) -> Response:
        return _error(404, "Not Found")

    def lookup(owner: str, name: str) -> _Repo | None:
        return fake._repos.get(f"{owner}/{name}".lower())

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
        with fake._lock:
            if fake._installations is not None and installation_id not in fake._installations:
                return _error(404, "Not Found")
            token = f"ghs_fake{installation_id}x{next(fake._ids)}"
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

    # -- repositories and pulls -------------------------------------------------------

    @bp.get("/repos/<owner>/<name>")
    def get_repo(owner: str, name: str) -> Response:
        with fake._lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            return jsonify(repo_json(r))

    @bp.get("/repos/<owner>/<name>/pulls/<int:number>")
    def get_pull(owner: str, name: str, number: int) -> Response:
        with fake._lock:
            r = lookup(owner, name)
            pr = r.pulls.get(number) if r else None
            if r is None or pr is None:
                return _error(404, "Not Found")
            rj = repo_json(r)
            owner_login = r.full_name.split("/")[0]
            return jsonify(
                {
                    "id": pr["id"],
                    "node_id": f"PR_{pr['id']}",
                    "number": number,
                    "url": f"{api_base()}/repos/{r.full_name}/pulls/{number}",
                    "html_url": f"{web_base()}/{r.full_name}/pull/{number}",
                    "issue_url": f"{api_base()}/repos/{r.full_name}/issues/{number}",
                    "state": pr["state"],
                    "title": pr["title"],
                    "user": user_json(pr["user"]),
                    "draft": False,
                    "merged": False,
                    "labels": issue_labels_json(r, number),
                    "head": {
                        "label": f"{owner_login}:{pr['head_ref']}",
                        "ref": pr["head_ref"],
                        "sha": pr["head_sha"],
                        "user": user_json(owner_login),
                        "repo": rj,
                    },
                    "base": {
                        "label": f"{owner_login}:{pr['base_ref']}",
                        "ref": pr["base_ref"],
                        "sha": "0" * 40,
                        "user": user_json(owner_login),
                        "repo": rj,
                    },
                }
            )

    # -- labels -----------------------------------------------------------------------

    @bp.get("/repos/<owner>/<name>/issues/<int:number>/labels")
    def list_issue_labels(owner: str, name: str, number: int) -> Response:
        with fake._lock:
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
        with fake._lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            current = r.issue_labels.setdefault(number, [])
            for n in names:
                label = fake._ensure_repo_label(r, n)
                if label["name"] not in current:
                    current.append(label["name"])
                fake._record(f"{r.full_name}#{number}:add-label:{label['name']}")
            return jsonify(issue_labels_json(r, number))

    @bp.delete("/repos/<owner>/<name>/issues/<int:number>/labels/<path:label>")
    def remove_issue_label(owner: str, name: str, number: int, label: str) -> Response:
        with fake._lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            current = r.issue_labels.get(number, [])
            match = next((n for n in current if n.lower() == label.lower()), None)
            if match is None:
                return _error(404, "Label does not exist")
            current.remove(match)
            fake._record(f"{r.full_name}#{number}:remove-label:{match}")
            return jsonify(issue_labels_json(r, number))

    @bp.get("/repos/<owner>/<name>/labels/<path:label>")
    def get_label(owner: str, name: str, label: str) -> Response:
        with fake._lock:
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
        with fake._lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            if body["name"].lower() in r.labels:
                return _error(
                    422,
                    "Validation Failed",
                    errors=[{"resource": "Label", "code": "already_exists", "field": "name"}],
                )
            label = fake._ensure_repo_label(
                r, body["name"], color, str(body.get("description") or "")
            )
            fake._record(f"{r.full_name}:create-label:{label['name']}")
            resp = jsonify(label_json(r, label))
            resp.status_code = 201
            return resp

    # -- comments and reactions -------------------------------------------------------

    @bp.get("/repos/<owner>/<name>/issues/<int:number>/comments")
    def list_comments(owner: str, name: str, number: int) -> Response:
        try:
            per_page = max(1, min(100, int(request.args.get("per_page", 30))))
            page = max(1, int(request.args.get("page", 1)))
        except ValueError:
            return _error(422, "Invalid pagination")
        with fake._lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            items = [
                c
                for c in fake._comments.values()
                if c["repo"] == r.full_name and c["number"] == number
            ]
            chunk = items[(page - 1) * per_page : page * per_page]
            resp = jsonify([comment_json(c) for c in chunk])
        last = max(1, -(-len(items) // per_page))
        url = f"{api_base()}{request.path.removeprefix(GHES_PREFIX)}"
        links = []
        if page < last:
            links.append(f'<{url}?per_page={per_page}&page={page + 1}>; rel="next"')
            links.append(f'<{url}?per_page={per_page}&page={last}>; rel="last"')
        if page > 1:
            links.append(f'<{url}?per_page={per_page}&page={page - 1}>; rel="prev"')
            links.append(f'<{url}?per_page={per_page}&page=1>; rel="first"')
        if links:
            resp.headers["Link"] = ", ".join(links)
        return resp

    @bp.post("/repos/<owner>/<name>/issues/<int:number>/comments")
    def create_comment(owner: str, name: str, number: int) -> Response:
        body = json_body()
        if not isinstance(body, dict) or not isinstance(body.get("body"), str) or not body["body"]:
            return _error(
                422,
                "Validation Failed",
                errors=[{"resource": "IssueComment", "code": "missing_field", "field": "body"}],
            )
        with fake._lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            c = fake._new_comment(r, number, body["body"], g.login or fake.user_login)
            fake._record(f"{r.full_name}#{number}:comment:{c['id']}")
            resp = jsonify(comment_json(c))
        resp.status_code = 201
        return resp

    def find_comment(owner: str, name: str, comment_id: int) -> dict[str, Any] | None:
        r = lookup(owner, name)
        c = fake._comments.get(comment_id)
        if r is None or c is None or c["repo"] != r.full_name:
            return None
        return c

    @bp.get("/repos/<owner>/<name>/issues/comments/<int:comment_id>")
    def get_comment(owner: str, name: str, comment_id: int) -> Response:
        with fake._lock:
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
        with fake._lock:
            c = find_comment(owner, name, comment_id)
            if c is None:
                return _error(404, "Not Found")
            c["body"] = body["body"]
            c["updated_at"] = _now()
            fake._record(f"{c['repo']}:update-comment:{comment_id}")
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
        with fake._lock:
            c = find_comment(owner, name, comment_id)
            if c is None:
                return _error(404, "Not Found")
            user = g.login or fake.user_login
            existing = fake._reactions.setdefault(comment_id, [])
            found = next(
                (x for x in existing if x["user"] == user and x["content"] == content), None
            )
            status = 200
            if found is None:
                found = {
                    "id": next(fake._ids),
                    "user": user,
                    "content": content,
                    "created_at": _now(),
                }
                existing.append(found)
                status = 201
            fake._record(f"{c['repo']}:add-reaction:{comment_id}:{content}")
            resp = jsonify(
                {
                    "id": found["id"],
                    "node_id": f"REA_{found['id']}",
                    "user": user_json(user),
                    "content": content,
                    "created_at": found["created_at"],
                }
            )
        resp.status_code = status
        return resp

    # -- contents ---------------------------------------------------------------------

    @bp.get("/repos/<owner>/<name>/contents/", defaults={"path": ""})
    @bp.get("/repos/<owner>/<name>/contents/<path:path>")
    def get_contents(owner: str, name: str, path: str) -> Response:
        path = path.strip("/")
        with fake._lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            ref = request.args.get("ref") or r.default_branch
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
                            "sha": _blob_sha(child.encode()),
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

    @bp.get("/repos/<owner>/<name>/git/blobs/<sha>")
    def get_blob(owner: str, name: str, sha: str) -> Response:
        with fake._lock:
            r = lookup(owner, name)
            if r is None:
                return _error(404, "Not Found")
            for text in r.files.values():
                data = text.encode("utf-8")
                if _blob_sha(data) == sha:
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

    app.register_blueprint(bp)
    app.register_blueprint(bp, url_prefix=GHES_PREFIX, name="ghes")
    return app


# ----------------------------------------------------------------------------- serving


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


def serve(
    fake: FakeGitHub, host: str = "127.0.0.1", port: int = 0
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
    """``python -m tests.support.fake_github [--host H] [--port N] [--repo OWNER/NAME]...``"""
    parser = argparse.ArgumentParser(description="Serve a fake GitHub REST API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--repo", action="append", default=[], help="repository OWNER/NAME to create (repeatable)"
    )
    parser.add_argument("--default-branch", default="main")
    args = parser.parse_args(argv)
    fake = FakeGitHub()
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
