"""GitHub operations, written once against a small REST transport.

Both GitHub transports subclass :class:`GitHubOperations` and implement only
:meth:`GitHubOperations._send` (one REST request):

* ``api`` -- :class:`integrations.github.GitHubApi`, PyGithub's requester (App or token auth);
* ``cli`` -- :class:`integrations.github_cli.GitHubCli`, ``gh api`` (the operator's gh auth).

Every operation is therefore the same sequence of REST requests on both transports, which
``tests/integrations/test_contract.py`` checks request by request. Paths are relative to
the API root (``/repos/OWNER/NAME/...``); pagination follows GitHub's ``Link: rel="next"``
URLs as they come. Writes (POST/PATCH/PUT/DELETE) pass through an optional cross-worker
:class:`integrations.throttle.WriteThrottle` first.

Endpoints are those of the GitHub REST API documentation, named in each docstring ("Add
labels to an issue", ...).
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from graph.ports import OPERATIONS as PORT_OPERATIONS
from graph.ports import (
    PERMISSIONS,
    REACTIONS,
    CheckRuns,
    Comments,
    Committed,
    Created,
    EnsuredLabel,
    File,
    GitHub,
    IntegrationError,
    Labels,
    NotFound,
    Operation,
    Permission,
    Posted,
    PullFiles,
    PullRequest,
    RateLimited,
    Repository,
    Reviewers,
    Reviews,
    Transport,
    Unavailable,
    User,
)
from integrations import metrics
from integrations.github_cache import memo

if TYPE_CHECKING:
    from integrations.github_cache import ConditionalCache
    from integrations.throttle import WriteThrottle

log = logging.getLogger("the_loop.integrations.github")

__all__ = [
    "API_HEADERS",
    "API_VERSION",
    "CHECK_CONCLUSIONS",
    "CHECK_STATUSES",
    "OPERATIONS",
    "PERMISSIONS",
    "REACTIONS",
    "GitHubOperations",
    "Reply",
    "fields",
    "http_error",
]

#: Operation name -> :class:`graph.ports.Operation` (method, read or write): the
#: operations every GitHub transport implements, declared once on the ports.
OPERATIONS: Mapping[str, Operation] = PORT_OPERATIONS["github"]

#: The REST API version and media type every request names ("API Versions", "Getting
#: started with the REST API": ``Accept: application/vnd.github+json``).
API_VERSION = "2022-11-28"
ACCEPT = "application/vnd.github+json"
#: The headers of every REST request, on every transport.
API_HEADERS: Mapping[str, str] = {"Accept": ACCEPT, "X-GitHub-Api-Version": API_VERSION}

#: Check run statuses an App may set ("Create a check run").
CHECK_STATUSES = frozenset({"queued", "in_progress", "completed"})
CHECK_CONCLUSIONS = frozenset(
    {"action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out"}
)
#: Requests that change something on GitHub; these are throttled.
WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
#: Upper bound of pages one list operation follows (100 items each).
MAX_PAGES = 100

_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


@dataclass(frozen=True)
class Reply:
    """One successful REST answer: lower-cased ``headers``, the decoded JSON ``data``
    (``None`` for an empty body) and the HTTP ``status`` (304: not modified, ``data``
    is then the cached body)."""

    headers: Mapping[str, str] = field(default_factory=dict)
    data: Any = None
    status: int = 200


class GitHubOperations(Transport):
    """The GitHub operations (see :data:`OPERATIONS`), for one identity.

    Implements the port :class:`graph.ports.GitHub` (each operation a method:
    ``add-label`` -> :meth:`add_label`) and, through :class:`graph.ports.Transport`,
    ``call(op, **params) -> dict``. ``repo`` is always ``"OWNER/NAME"``; ``number`` is an
    issue or pull-request number (they share one sequence).

    Errors (every method and :meth:`call`):
        Unsupported: ``op`` is not in :attr:`operations`.
        IntegrationError: bad or missing parameters (``status`` None, not retriable); GitHub
            answered with an error status (``status`` set; ``retriable`` for 5xx, 429 and
            403 rate limits); the network or the transport failed (``status`` None,
            retriable).
        NotFound: GitHub answered 404 (missing, or not visible to this identity).
        Messages name the operation, target and HTTP status, never the response body or a
        credential.

    Subclasses set :attr:`transport` and implement :meth:`_send`.
    """

    name = "github"
    transport = "?"
    operations: frozenset[str] = frozenset(OPERATIONS)

    #: Cross-worker write spacing and primary-limit pacing (``None``: only the
    #: transport's own pacing).
    throttle: WriteThrottle | None = None
    #: The shared conditional-request cache of ``GET`` answers (``None``: none).
    cache: ConditionalCache | None = None
    #: The throttle bucket: ``installation:<id>``, ``token`` or ``cli``.
    throttle_key: str = "token"

    # -- transport ----------------------------------------------------------------------

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
        """Send one request. ``path`` is ``/repos/...`` (relative to the API root) or an
        absolute URL GitHub handed out (a pagination link); ``headers`` are sent besides
        the transport's own (the conditional ``If-None-Match``/``If-Modified-Since``).

        Returns:
            the answer; a 304 comes back as ``Reply(status=304)`` (no data).

        Raises:
            IntegrationError / NotFound: built with :func:`http_error` for HTTP errors.
        """
        raise NotImplementedError

    def _request(
        self,
        op: str,
        method: str,
        path: str,
        *,
        target: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        expected: frozenset[int] = frozenset(),
    ) -> Reply:
        """Send one request the way GitHub's budget wants it, and log a failure.

        * a ``GET`` made already within this delivery is answered from its memo
          (:func:`integrations.github_cache.memo`), with no request;
        * a ``GET`` with a cached answer is sent conditionally; a 304 is answered with the
          cached body (:class:`integrations.github_cache.ConditionalCache`);
        * a write waits for its slot (:meth:`WriteThrottle.acquire`) and drops what it
          may change from the memo; any request that counts against the primary rate
          limit waits as :meth:`WriteThrottle.pace` says, and every answer's
          ``x-ratelimit-*`` headers are kept (:meth:`WriteThrottle.observe`);
        * every request is counted (:func:`integrations.metrics.observe_request`).

        Failures: 401/403 and rate limits are logged as warnings, 404 at info (a
        repository the App cannot see answers 404) -- unless its status is ``expected``
        by the operation (a label that is not there)."""
        bucket = self.throttle_key
        url = _url_key(path, query)
        delivery = memo()
        cached = None
        if method == "GET":
            if delivery is not None:
                remembered = delivery.get(bucket, url)
                if remembered is not None:
                    return cast(Reply, remembered)
            cached = self.cache.get(bucket, url) if self.cache is not None else None
        conditional = cached.validators() if cached is not None else {}
        if self.throttle is not None:
            if method in WRITE_METHODS:
                self.throttle.acquire(bucket, op=op)
            if not conditional:  # a conditional GET answered 304 costs nothing
                self.throttle.pace(bucket, op=op)
        try:
            reply = self._send(op, method, path, target=target, query=query, body=body,
                               headers=conditional or None)
        except IntegrationError as exc:
            metrics.observe_request(self.installation_label, op, method, exc.status)
            if delivery is not None and method != "GET":
                delivery.wrote(bucket, url)  # it may have landed all the same
            if exc.status not in expected:
                _log_failure(exc)
            raise
        metrics.observe_request(self.installation_label, op, method, reply.status,
                                reply.headers)
        if self.throttle is not None:
            self.throttle.observe(bucket, reply.headers)
        if method == "GET":
            if reply.status == 304 and cached is not None:
                reply = Reply({**reply.headers, "link": cached.link} if cached.link
                              else reply.headers, cached.data, 304)
            elif self.cache is not None and reply.status == 200:
                self.cache.put(bucket, url, reply.headers, reply.data)
            if delivery is not None:
                delivery.put(bucket, url, reply)
        elif delivery is not None:
            delivery.wrote(bucket, url, method, reply.data)
        return reply

    @property
    def installation_label(self) -> str:
        """The ``installation`` label of this identity's metrics (its id, ``token`` or
        ``cli``)."""
        return self.throttle_key.removeprefix("installation:")

    def _paginate(
        self,
        op: str,
        path: str,
        *,
        target: str,
        query: Mapping[str, Any] | None = None,
        list_item: str | None = None,
    ) -> list[Any]:
        """GET ``path`` 100 per page, following ``Link: rel="next"`` (at most
        :data:`MAX_PAGES` pages)."""
        items: list[Any] = []
        url: str | None = path
        params: Mapping[str, Any] | None = {"per_page": 100, **(query or {})}
        for _ in range(MAX_PAGES):
            assert url is not None
            reply = self._request(op, "GET", url, target=target, query=params)
            page = reply.data
            if list_item is not None and isinstance(page, dict):
                page = page.get(list_item)
            items.extend(page if isinstance(page, list) else [])
            url = next_link(reply.headers.get("link"))
            if url is None:
                break
            params = None  # the next link carries the query
        return items

    # -- repositories and pull requests -------------------------------------------------

    def get_repository(self, repo: str) -> Repository:
        """``get-repository``: ``GET /repos/{owner}/{repo}`` ("Get a repository").

        Returns:
            ``{"full_name": str, "default_branch": str}`` as GitHub spells them.
        """
        op = "get-repository"
        data = self._request(op, "GET", _repo_path(op, repo), target=repo).data
        return {"full_name": data["full_name"], "default_branch": data["default_branch"]}

    def get_pull_request(self, repo: str, number: int) -> PullRequest:
        """``get-pull-request``: ``GET /repos/{owner}/{repo}/pulls/{pull_number}``
        ("Get a pull request").

        Returns:
            ``{"number": int, "head_sha": str, "head_ref": str, "base_ref": str,
            "state": "open" | "closed", "draft": bool, "html_url": str, "head_repo": str
            | None, "maintainer_can_modify": bool}`` (a merged pull request is
            ``"closed"``; ``head_repo`` is ``head.repo.full_name``, a fork's for a pull
            request from a fork, ``None`` when the fork was deleted).
        """
        op = "get-pull-request"
        n = _number(op, "number", number)
        path = f"{_repo_path(op, repo)}/pulls/{n}"
        return _pull(self._request(op, "GET", path, target=f"{repo}#{n}").data)

    def find_pull_request(self, repo: str, head: str) -> PullRequest | None:
        """``find-pull-request``: ``GET /repos/{owner}/{repo}/pulls?head=OWNER:BRANCH&
        state=open`` ("List pull requests"; ``head`` filters by "user or organization name
        and branch name", so only branches of ``repo`` itself match, never a fork's).

        Args:
            head: the branch name, e.g. ``the-loop/12-login-page`` (no ``owner:`` prefix).

        Returns:
            the open pull request from that branch (the lowest number if GitHub lists
            several), as :meth:`get_pull_request` returns it, or ``None`` when there is none.
            Through :meth:`call` the result is then ``None`` too.
        """
        op = "find-pull-request"
        branch = _branch(op, "head", head)
        base = _repo_path(op, repo)
        owner = repo.partition("/")[0]
        query = {"head": f"{owner}:{branch}", "state": "open"}
        found = [
            pr
            for pr in self._paginate(op, f"{base}/pulls", target=f"{repo}:{branch}", query=query)
            if isinstance(pr, dict) and (pr.get("head") or {}).get("ref") == branch
        ]
        if not found:
            return None
        return _pull(min(found, key=lambda pr: int(pr["number"])))

    def create_pull_request(
        self, repo: str, head: str, base: str, title: str, body: str, draft: bool = True
    ) -> PullRequest:
        """``create-pull-request``: ``POST /repos/{owner}/{repo}/pulls`` with ``{"title",
        "head", "base", "body", "draft"}`` ("Create a pull request"). GitHub answers 422
        when ``head`` has no commits beyond ``base``, when a branch does not exist, or
        when an open pull request from ``head`` already exists; in that last case (a
        retried create whose first answer was lost) the existing one is returned.

        Args:
            head: branch of ``repo`` with the changes; base: the branch to merge into.
            draft: open it as a draft (GitHub's "About pull requests": drafts need a
                public repository or a paid plan; otherwise GitHub answers 422).

        Returns:
            the pull request, as :meth:`get_pull_request` returns it.

        Raises:
            IntegrationError: status 422 (validation failed), not retriable. Never
                retried on 5xx by the transport (a POST).
        """
        op = "create-pull-request"
        if not isinstance(body, str):
            raise _bad(op, f"body must be a string, got {type(body).__name__}")
        payload = {
            "title": _text(op, "title", title),
            "head": _branch(op, "head", head),
            "base": _branch(op, "base", base),
            "body": body,
            "draft": _flag(op, "draft", draft),
        }
        path = f"{_repo_path(op, repo)}/pulls"
        try:
            data = self._request(op, "POST", path, target=f"{repo}:{head}", body=payload,
                                 expected=frozenset({422})).data
        except IntegrationError as exc:
            if exc.status != 422:
                raise
            existing = self.find_pull_request(repo, head)
            if existing is None or existing["base_ref"] != base:
                _log_failure(exc)
                raise
            return existing
        return _pull(data)

    def update_pull_request(
        self, repo: str, number: int, title: str | None = None, body: str | None = None
    ) -> PullRequest:
        """``update-pull-request``: ``PATCH /repos/{owner}/{repo}/pulls/{pull_number}``
        with the fields given (``title``, ``body``) ("Update a pull request").

        Returns:
            the pull request after the change, as :meth:`get_pull_request` returns it.

        Raises:
            IntegrationError: neither ``title`` nor ``body`` given (bad parameters).
        """
        op = "update-pull-request"
        n = _number(op, "number", number)
        payload: dict[str, Any] = {}
        if title is not None:
            payload["title"] = _text(op, "title", title)
        if body is not None:
            if not isinstance(body, str):
                raise _bad(op, f"body must be a string, got {type(body).__name__}")
            payload["body"] = body
        if not payload:
            raise _bad(op, "nothing to update: give title or body")
        path = f"{_repo_path(op, repo)}/pulls/{n}"
        return _pull(self._request(op, "PATCH", path, target=f"{repo}#{n}", body=payload).data)

    def list_pull_files(self, repo: str, number: int) -> PullFiles:
        """``list-pull-files``: ``GET /repos/{owner}/{repo}/pulls/{pull_number}/files``
        ("List pull requests files"), every page (GitHub lists at most 3000 files).

        Returns:
            ``{"files": [str, ...]}`` -- every path the pull request touches, in GitHub's
            order: each file's path and, for a rename, also its previous path.
        """
        op = "list-pull-files"
        n = _number(op, "number", number)
        path = f"{_repo_path(op, repo)}/pulls/{n}/files"
        paths: list[str] = []
        for item in self._paginate(op, path, target=f"{repo}#{n}"):
            for key in ("filename", "previous_filename"):
                value = item.get(key) if isinstance(item, dict) else None
                if isinstance(value, str) and value and value not in paths:
                    paths.append(value)
        return {"files": paths}

    def request_reviewers(self, repo: str, number: int, reviewers: list[str]) -> Reviewers:
        """``request-reviewers``: ``POST /repos/{owner}/{repo}/pulls/{pull_number}/
        requested_reviewers`` with ``{"reviewers": [...]}`` ("Request reviewers for a pull
        request"). GitHub answers 422 for a login that cannot review (the author, or not
        a collaborator).

        Returns:
            ``{"requested": [str, ...]}`` -- every login with a pending review request
            after the call, as GitHub reports it.
        """
        op = "request-reviewers"
        n = _number(op, "number", number)
        if (
            not isinstance(reviewers, list | tuple)
            or not reviewers
            or not all(isinstance(r, str) and r.strip() for r in reviewers)
        ):
            raise _bad(op, f"reviewers must be a non-empty list of logins, got {reviewers!r}")
        path = f"{_repo_path(op, repo)}/pulls/{n}/requested_reviewers"
        data = self._request(
            op, "POST", path, target=f"{repo}#{n}", body={"reviewers": list(reviewers)}
        ).data
        requested = (data or {}).get("requested_reviewers") or []
        return {"requested": [u["login"] for u in requested if isinstance(u, dict)]}

    def list_reviews(self, repo: str, number: int) -> Reviews:
        """``list-reviews``: ``GET /repos/{owner}/{repo}/pulls/{pull_number}/reviews``
        ("List reviews for a pull request"), every page, oldest first.

        Returns:
            ``{"reviews": [{"id": int, "user": str, "state": str, "commit_id": str|None}]}``
            -- ``state`` as GitHub spells it (``APPROVED``, ``CHANGES_REQUESTED``,
            ``COMMENTED``, ``DISMISSED``, ``PENDING``); ``user`` is ``"ghost"`` for a
            deleted account.
        """
        op = "list-reviews"
        n = _number(op, "number", number)
        path = f"{_repo_path(op, repo)}/pulls/{n}/reviews"
        return {
            "reviews": [
                {
                    "id": r["id"],
                    "user": _login(r.get("user")),
                    "state": str(r.get("state") or ""),
                    "commit_id": r.get("commit_id"),
                }
                for r in self._paginate(op, path, target=f"{repo}#{n}")
                if isinstance(r, dict)
            ]
        }

    def get_permission(self, repo: str, login: str) -> Permission:
        """``get-permission``: ``GET /repos/{owner}/{repo}/collaborators/{username}/
        permission`` ("Get repository permissions for a user").

        GitHub's ``permission`` is one of admin/write/read/none (maintain counts as write,
        triage as read); ``role_name`` is the finer role. The role name is returned when
        it is one of :data:`PERMISSIONS`, else (a custom role) the base ``permission``.

        Returns:
            ``{"permission": "admin" | "maintain" | "write" | "triage" | "read" | "none"}``

        Raises:
            NotFound: no such user (or repository not visible).
        """
        op = "get-permission"
        user = _text(op, "login", login)
        path = f"{_repo_path(op, repo)}/collaborators/{_quote(user)}/permission"
        data = self._request(op, "GET", path, target=f"{repo} user {user}").data or {}
        for key in ("role_name", "permission"):
            if data.get(key) in PERMISSIONS:
                return {"permission": data[key]}
        return {"permission": "none"}

    def get_user(self, login: str) -> User:
        """``get-user``: ``GET /users/{username}`` ("Get a user"): the account that has
        ``login`` now (a login freed by a rename or a deleted account can be taken by a
        new account, with a new ``id``).

        Returns:
            ``{"login": str, "id": int, "type": "User" | "Bot" | "Organization"}``

        Raises:
            NotFound: no account has that login.
        """
        op = "get-user"
        user = _text(op, "login", login)
        return _account(op, self._request(op, "GET", f"/users/{_quote(user)}",
                                          target=f"user {user}").data)

    def get_authenticated_user(self) -> User:
        """``get-authenticated-user``: ``GET /user`` ("Get the authenticated user"): who a
        person's token acts as (an App installation's token cannot ask).

        Returns:
            ``{"login": str, "id": int, "type": str}``
        """
        op = "get-authenticated-user"
        return _account(op, self._request(op, "GET", "/user", target="the token's user").data)

    # -- labels -------------------------------------------------------------------------

    def add_label(self, repo: str, number: int, label: str) -> Labels:
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
        path = f"{_repo_path(op, repo)}/issues/{n}/labels"
        data = self._request(op, "POST", path, target=f"{repo}#{n}", body={"labels": [name]}).data
        return {"labels": _label_names(data)}

    def remove_label(self, repo: str, number: int, label: str) -> Labels:
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
        path = f"{_repo_path(op, repo)}/issues/{n}/labels/{_quote(name)}"
        try:
            data = self._request(
                op, "DELETE", path, target=f"{repo}#{n}", expected=frozenset({404})
            ).data
        except NotFound:
            return {"labels": None}
        return {"labels": _label_names(data)}

    def ensure_label(
        self, repo: str, label: str, color: str = "ededed", description: str = ""
    ) -> EnsuredLabel:
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
        base = _repo_path(op, repo)
        target = f"{repo} label {name!r}"
        try:
            existing = self._request(
                op, "GET", f"{base}/labels/{_quote(name)}", target=target,
                expected=frozenset({404}),
            )
            return {"label": existing.data["name"], "created": False}
        except NotFound:
            pass
        try:
            created = self._request(
                op,
                "POST",
                f"{base}/labels",
                target=target,
                body={"name": name, "color": color, "description": description},
                expected=frozenset({422}),
            )
        except IntegrationError as exc:
            if exc.status == 422 and "already_exists" in exc.codes:
                return {"label": name, "created": False}
            raise
        return {"label": created.data["name"], "created": True}

    # -- comments and reactions ---------------------------------------------------------

    def comment(self, repo: str, number: int, body: str) -> Posted:
        """``comment``: ``POST /repos/{owner}/{repo}/issues/{issue_number}/comments``
        ("Create an issue comment"; works for pull requests too). Never retried on 5xx, so
        a comment is never posted twice by this call.

        Returns:
            ``{"id": int, "url": str}`` -- the comment id and its ``html_url``.
        """
        op = "comment"
        n = _number(op, "number", number)
        text = _text(op, "body", body)
        path = f"{_repo_path(op, repo)}/issues/{n}/comments"
        data = self._request(op, "POST", path, target=f"{repo}#{n}", body={"body": text}).data
        return {"id": data["id"], "url": data["html_url"]}

    def update_comment(self, repo: str, comment_id: int, body: str) -> Posted:
        """``update-comment``: ``PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}``
        ("Update an issue comment").

        Returns:
            ``{"id": int, "url": str}`` -- the comment id and its ``html_url``.
        """
        op = "update-comment"
        cid = _number(op, "comment_id", comment_id)
        text = _text(op, "body", body)
        path = f"{_repo_path(op, repo)}/issues/comments/{cid}"
        data = self._request(
            op, "PATCH", path, target=f"{repo} comment {cid}", body={"body": text}
        ).data
        return {"id": data["id"], "url": data["html_url"]}

    def list_comments(self, repo: str, number: int, since: str | None = None) -> Comments:
        """``list-comments``: ``GET /repos/{owner}/{repo}/issues/{issue_number}/comments``
        ("List issue comments"), 100 per page, following ``Link: rel="next"`` to the end;
        with ``since`` (ISO 8601 ``YYYY-MM-DDTHH:MM:SSZ``) only the comments updated at or
        after it.

        Returns:
            ``{"comments": [{"id": int, "user": str, "user_id": int | None, "body":
            str}, ...]}`` oldest first; ``user`` is the login (``"ghost"`` for a deleted
            account), ``user_id`` its account's id.
        """
        op = "list-comments"
        n = _number(op, "number", number)
        path = f"{_repo_path(op, repo)}/issues/{n}/comments"
        query = {"since": _text(op, "since", since)} if since is not None else None
        return {
            "comments": [
                {"id": c["id"], "user": _login(c.get("user")),
                 "user_id": _user_id(c.get("user")), "body": c.get("body") or ""}
                for c in self._paginate(op, path, target=f"{repo}#{n}", query=query)
                if isinstance(c, dict)
            ]
        }

    def add_reaction(self, repo: str, comment_id: int, content: str) -> Created:
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
        path = f"{_repo_path(op, repo)}/issues/comments/{cid}/reactions"
        data = self._request(
            op, "POST", path, target=f"{repo} comment {cid}", body={"content": content}
        ).data
        return {"id": data["id"]}

    def add_review_comment_reaction(self, repo: str, comment_id: int,
                                    content: str) -> Created:
        """``add-review-comment-reaction``: ``POST /repos/{owner}/{repo}/pulls/comments/
        {comment_id}/reactions`` ("Create reaction for a pull request review comment"; a
        review comment's id is not an issue comment's). Adding the same reaction twice
        returns the existing one (200 instead of 201).

        Args:
            content: one of :data:`REACTIONS`.

        Returns:
            ``{"id": int}`` -- the reaction id.
        """
        op = "add-review-comment-reaction"
        cid = _number(op, "comment_id", comment_id)
        if content not in REACTIONS:
            allowed = ", ".join(sorted(REACTIONS))
            raise _bad(op, f"content must be one of {allowed}, got {content!r}")
        path = f"{_repo_path(op, repo)}/pulls/comments/{cid}/reactions"
        data = self._request(
            op, "POST", path, target=f"{repo} review comment {cid}",
            body={"content": content}).data
        return {"id": data["id"]}

    # -- files --------------------------------------------------------------------------

    def get_file(self, repo: str, path: str, ref: str | None = None) -> File:
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
        base = _repo_path(op, repo)
        target = f"{repo}:{clean}" + (f"@{ref}" if ref else "")
        query = {"ref": ref} if ref is not None else None
        content = self._request(
            op, "GET", f"{base}/contents/{urllib.parse.quote(clean)}", target=target, query=query
        ).data
        if not isinstance(content, dict) or content.get("type") != "file":
            kind = "directory" if isinstance(content, list) else (content or {}).get("type")
            raise NotFound(
                f"github {op}: {target} is a {kind}, not a file",
                integration=self.name,
                op=op,
                status=None,
            )
        if content.get("encoding") == "base64":
            raw_b64, sha = content.get("content"), content["sha"]
        else:  # "none": a file larger than 1 MB; fetch the blob instead
            blob = self._request(
                op, "GET", f"{base}/git/blobs/{content['sha']}", target=target
            ).data
            raw_b64, sha = blob.get("content"), blob["sha"]
        try:
            text = base64.b64decode(raw_b64 or "").decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise IntegrationError(
                f"github {op}: {target} is not UTF-8 text", integration=self.name, op=op
            ) from None
        return {"path": content["path"], "sha": sha, "ref": ref, "text": text}

    def put_file(
        self,
        repo: str,
        path: str,
        branch: str,
        text: str,
        sha: str | None = None,
        message: str | None = None,
    ) -> Committed:
        """``put-file``: ``PUT /repos/{owner}/{repo}/contents/{path}`` ("Create or update
        file contents"): one commit on ``branch`` that sets ``path`` to ``text``.

        Args:
            sha: the blob sha the caller read (``get-file``); GitHub refuses the write with
                409 when the file has changed since (a precondition). ``None`` creates the
                file (GitHub answers 422 when it already exists).
            message: the commit message (default ``the-loop: update <path>``).

        Returns:
            ``{"path": str, "sha": str, "commit": str}`` -- the new blob sha and the commit.

        Raises:
            IntegrationError: status 409 (stale ``sha``) or 422, not retriable. Never
                retried on 5xx either: a retried write could land on top of itself.
        """
        op = "put-file"
        clean = _text(op, "path", path).strip("/")
        where = _text(op, "branch", branch)
        if not isinstance(text, str):
            raise _bad(op, f"text must be a string, got {type(text).__name__}")
        if sha is not None:
            sha = _text(op, "sha", sha)
        msg = message if message is not None else f"the-loop: update {clean}"
        msg = _text(op, "message", msg)
        body: dict[str, Any] = {
            "message": msg,
            "content": base64.b64encode(text.encode("utf-8")).decode("ascii"),
            "branch": where,
        }
        if sha is not None:
            body["sha"] = sha
        target = f"{repo}:{clean}@{where}"
        url = f"{_repo_path(op, repo)}/contents/{urllib.parse.quote(clean)}"
        data = self._request(op, "PUT", url, target=target, body=body).data
        return {
            "path": data["content"]["path"],
            "sha": data["content"]["sha"],
            "commit": data["commit"]["sha"],
        }

    # -- check runs ---------------------------------------------------------------------

    def create_check_run(
        self,
        repo: str,
        head_sha: str,
        name: str,
        status: str,
        conclusion: str | None = None,
        title: str | None = None,
        summary: str | None = None,
        details_url: str | None = None,
    ) -> Created:
        """``create-check-run``: ``POST /repos/{owner}/{repo}/check-runs`` ("Create a check
        run"). Needs a GitHub App with ``checks: write`` (a personal token gets 403).

        Args:
            status: ``queued``, ``in_progress`` or ``completed``.
            conclusion: required with ``completed`` and only then: ``success``,
                ``failure``, ``neutral``, ``cancelled``, ``skipped``, ``timed_out``,
                ``action_required``.
            title, summary: the check run's output (``summary`` defaults to ``title``).
            details_url: the run's "Details" link (``details_url``: an http(s) URL of
                the integrator's site), or ``None``.

        Returns:
            ``{"id": int}``
        """
        op = "create-check-run"
        body = {
            "name": _text(op, "name", name),
            "head_sha": _text(op, "head_sha", head_sha),
            **_check_fields(op, status, conclusion, title, summary, required_status=True),
            **_details(op, details_url),
        }
        path = f"{_repo_path(op, repo)}/check-runs"
        data = self._request(op, "POST", path, target=f"{repo}@{head_sha}", body=body).data
        return {"id": data["id"]}

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        status: str | None = None,
        conclusion: str | None = None,
        title: str | None = None,
        summary: str | None = None,
        details_url: str | None = None,
    ) -> Created:
        """``update-check-run``: ``PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}``
        ("Update a check run"); only the fields given change (see
        :meth:`create_check_run` for their values).

        Returns:
            ``{"id": int}``
        """
        op = "update-check-run"
        cid = _number(op, "check_run_id", check_run_id)
        body = {**_check_fields(op, status, conclusion, title, summary, required_status=False),
                **_details(op, details_url)}
        if not body:
            raise _bad(op, "nothing to update: give status, conclusion or title")
        path = f"{_repo_path(op, repo)}/check-runs/{cid}"
        data = self._request(op, "PATCH", path, target=f"{repo} check run {cid}", body=body).data
        return {"id": data["id"]}

    def list_check_runs(
        self, repo: str, head_sha: str, name: str | None = None
    ) -> CheckRuns:
        """``list-check-runs``: ``GET /repos/{owner}/{repo}/commits/{ref}/check-runs``
        ("List check runs for a Git reference"; the latest run of each name), every page,
        filtered by ``check_name`` when ``name`` is given.

        Returns:
            ``{"check_runs": [{"id": int, "name": str, "status": str,
            "conclusion": str | None}, ...]}``
        """
        op = "list-check-runs"
        sha = _text(op, "head_sha", head_sha)
        query = {"check_name": _text(op, "name", name)} if name is not None else None
        path = f"{_repo_path(op, repo)}/commits/{_quote(sha)}/check-runs"
        runs = self._paginate(op, path, target=f"{repo}@{sha}", query=query, list_item="check_runs")
        return {
            "check_runs": [
                {
                    "id": r["id"],
                    "name": r.get("name"),
                    "status": r.get("status"),
                    "conclusion": r.get("conclusion"),
                }
                for r in runs
                if isinstance(r, dict)
            ]
        }


# ----------------------------------------------------------------------------- errors


def http_error(
    op: str,
    target: str,
    status: int | None,
    headers: Mapping[str, Any] | None,
    *,
    rate_limited: bool = False,
    codes: tuple[str, ...] = (),
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
    ``codes`` are GitHub's ``errors[].code`` values (e.g. ``already_exists``).
    """
    lower = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    message = f"github {op} on {target} failed: HTTP {status}"
    codes = tuple(codes)
    if status == 404:
        return NotFound(
            f"{message} (not found, or not visible to this installation/token)",
            integration="github", op=op, status=status, codes=codes,
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
        )
    if isinstance(status, int) and status >= 500:
        return Unavailable(message, integration="github", op=op, status=status, codes=codes)
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
    return IntegrationError(message, integration="github", op=op, status=status, codes=codes)


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


def says_rate_limit(data: Any) -> bool:
    """Whether a GitHub error body's ``message`` names a (primary or secondary) rate limit."""
    message = data.get("message") if isinstance(data, dict) else None
    return isinstance(message, str) and "rate limit" in message.lower()


def _url_key(path: str, query: Mapping[str, Any] | None) -> str:
    """``path`` with its query in a fixed order: the identity of a ``GET`` for the cache
    and the memo."""
    if not query:
        return path
    sep = "&" if "?" in path else "?"
    return path + sep + urllib.parse.urlencode(sorted((str(k), str(v))
                                                      for k, v in query.items()))


def next_link(header: str | None) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header, or ``None``."""
    if not header:
        return None
    match = _NEXT_LINK.search(header)
    return match.group(1) if match else None


# ----------------------------------------------------------------------------- helpers


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _check_fields(
    op: str,
    status: str | None,
    conclusion: str | None,
    title: str | None,
    summary: str | None,
    *,
    required_status: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if status is None and required_status:
        raise _bad(op, "status is required")
    if status is not None:
        if status not in CHECK_STATUSES:
            raise _bad(op, f"status must be one of {', '.join(sorted(CHECK_STATUSES))}")
        body["status"] = status
    if conclusion is not None:
        if conclusion not in CHECK_CONCLUSIONS:
            raise _bad(op, f"conclusion must be one of {', '.join(sorted(CHECK_CONCLUSIONS))}")
        if status not in (None, "completed"):
            raise _bad(op, "a conclusion needs status 'completed'")
        body["conclusion"] = conclusion
    elif status == "completed":
        raise _bad(op, "status 'completed' needs a conclusion")
    if title is not None or summary is not None:
        if title is None:
            raise _bad(op, "an output summary needs a title")
        body["output"] = {
            "title": _text(op, "title", title),
            "summary": summary if isinstance(summary, str) and summary.strip() else title,
        }
    return body


def _repo_path(op: str, repo: str) -> str:
    if not isinstance(repo, str):
        raise _bad(op, f"repo must be 'OWNER/NAME', got {repo!r}")
    owner, _, name = repo.partition("/")
    if not owner or not name or "/" in name or any(c.isspace() for c in repo):
        raise _bad(op, f"repo must be 'OWNER/NAME', got {repo!r}")
    if not re.fullmatch(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+", repo):
        raise _bad(op, f"repo must be 'OWNER/NAME', got {repo!r}")
    return f"/repos/{repo}"


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _login(user: Any) -> str:
    if isinstance(user, dict) and isinstance(user.get("login"), str):
        return user["login"]
    return "ghost"


def fields(op: str, data: Any, **types: type) -> dict[str, Any]:
    """``data`` (a JSON object) when each named field has its type, else the error saying
    which are missing (never the answer's text)."""
    if isinstance(data, dict) and all(
            isinstance(data.get(k), t) and not isinstance(data.get(k), bool)
            for k, t in types.items()):
        return data
    raise IntegrationError(f"github {op}: no {' and '.join(types)} in GitHub's answer",
                           integration="github", op=op)


def _account(op: str, data: Any) -> User:
    """GitHub's user JSON as ``{"login", "id", "type"}``."""
    found = fields(op, data, login=str, id=int)
    return {"login": found["login"], "id": found["id"], "type": str(found.get("type") or "User")}


def _user_id(user: Any) -> int | None:
    uid = user.get("id") if isinstance(user, dict) else None
    return uid if isinstance(uid, int) and not isinstance(uid, bool) else None


def _label_names(data: Any) -> list[str]:
    if isinstance(data, dict):  # tolerate a {"labels": [...]} envelope
        data = data.get("labels", [])
    return [item["name"] for item in data or [] if isinstance(item, dict) and "name" in item]


def _pull(pr: Any) -> PullRequest:
    """The :class:`~graph.ports.PullRequest` of GitHub's pull request JSON."""
    return {
        "number": pr["number"],
        "head_sha": pr["head"]["sha"],
        "head_ref": pr["head"]["ref"],
        "base_ref": pr["base"]["ref"],
        "state": pr["state"],
        "draft": bool(pr.get("draft", False)),
        "html_url": str(pr.get("html_url") or ""),
        "head_repo": _head_repo(pr["head"]),
        "maintainer_can_modify": pr.get("maintainer_can_modify") is True,
    }


def _head_repo(head: Any) -> str | None:
    """``head.repo.full_name`` (``null`` when the fork was deleted)."""
    repo = head.get("repo") if isinstance(head, dict) else None
    name = repo.get("full_name") if isinstance(repo, dict) else None
    return name if isinstance(name, str) else None


def _branch(op: str, name: str, value: Any) -> str:
    text = _text(op, name, value)
    if ":" in text or any(c.isspace() for c in text) or text.startswith(("-", "/")):
        raise _bad(op, f"{name} must be a branch name of the repository, got {value!r}")
    return text


def _flag(op: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _bad(op, f"{name} must be true or false, got {value!r}")
    return value


def _bad(op: str, detail: str) -> IntegrationError:
    return IntegrationError(f"github {op}: bad parameters ({detail})", integration="github", op=op)


def _number(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        if isinstance(value, str) and value.isdigit() and int(value) >= 1:
            return int(value)
        raise _bad(op, f"{name} must be a positive integer, got {value!r}")
    return value


def _details(op: str, url: str | None) -> dict[str, str]:
    """``{"details_url": url}`` for an http(s) URL, ``{}`` for ``None``."""
    if url is None:
        return {}
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise _bad(op, "details_url must be an http(s) URL")
    return {"details_url": url}


def _text(op: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(op, f"{name} must be a non-empty string, got {value!r}")
    return value


if TYPE_CHECKING:  # mypy checks that every GitHub transport implements the port

    def _implements_the_port(transport: GitHubOperations) -> GitHub:
        return transport
