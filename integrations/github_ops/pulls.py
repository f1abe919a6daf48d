"""Pull requests and their reviews: find, open and edit a pull request, its files,
review requests and reviews."""

from __future__ import annotations

from typing import Any

from graph.ports import (
    Deleted,
    IntegrationError,
    Merged,
    PullFiles,
    PullRequest,
    Reviewers,
    Reviews,
)
from integrations.github_ops.errors import _log_failure
from integrations.github_ops.params import (
    _bad,
    _branch,
    _flag,
    _login,
    _number,
    _pull,
    _quote,
    _repo_path,
    _text,
)
from integrations.github_ops.transport import RestTransport

#: The GraphQL mutation of :meth:`PullRequestOperations.mark_pull_request_ready`: the
#: names are GitHub's published schema's (``markPullRequestReadyForReview``, its input
#: ``MarkPullRequestReadyForReviewInput.pullRequestId``, its payload's ``pullRequest``;
#: checked by tests/integrations/test_sandbox_graphql.py against @octokit/graphql-schema).
MARK_READY = """mutation MarkReady($id: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $id}) {
    pullRequest { id number isDraft }
  }
}"""


class PullRequestOperations(RestTransport):
    """``get-pull-request``, ``find-pull-request``, ``create-pull-request``,
    ``update-pull-request``, ``list-pull-files``, ``request-reviewers``,
    ``mark-pull-request-ready``, ``list-reviews``, ``merge-pull-request``,
    ``delete-branch``."""

    #: GitHub's ``merge_method`` values ("Merge a pull request").
    MERGE_METHODS = ("merge", "squash", "rebase")

    def get_pull_request(self, repo: str, number: int) -> PullRequest:
        """``get-pull-request``: ``GET /repos/{owner}/{repo}/pulls/{pull_number}``
        ("Get a pull request").

        Returns:
            ``{"number": int, "head_sha": str, "head_ref": str, "base_ref": str,
            "state": "open" | "closed", "draft": bool, "html_url": str, "head_repo": str
            | None, "maintainer_can_modify": bool, "merged": bool, "merged_by": str |
            None}`` (a merged pull request is ``"closed"`` with ``merged`` true and
            ``merged_by`` the login of who merged it; ``head_repo`` is
            ``head.repo.full_name``, a fork's for a pull request from a fork, ``None``
            when the fork was deleted).
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

    def request_reviewers(self, repo: str, number: int, reviewers: list[str],
                          team_reviewers: list[str] | None = None) -> Reviewers:
        """``request-reviewers``: ``POST /repos/{owner}/{repo}/pulls/{pull_number}/
        requested_reviewers`` with ``{"reviewers": [logins], "team_reviewers": [slugs]}``
        ("Request reviewers for a pull request"; 201 with the pull request). GitHub
        answers 422 for a login that cannot review (the author, or not a collaborator)
        and for a team that is not the repository's organization's.

        Args:
            reviewers: logins (may be empty when ``team_reviewers`` is not).
            team_reviewers: team slugs (``justice-league``, no organization prefix).

        Returns:
            ``{"requested": [str, ...], "teams": [str, ...]}`` -- every login and team
            slug with a pending review request after the call, as GitHub reports them.

        Raises:
            IntegrationError: neither a login nor a team given (bad parameters); 422 as
                above (``status`` 422, GitHub's message as ``reason``).
        """
        op = "request-reviewers"
        n = _number(op, "number", number)
        teams = [] if team_reviewers is None else team_reviewers
        for name, values in (("reviewers", reviewers), ("team_reviewers", teams)):
            if not isinstance(values, list | tuple) or not all(
                    isinstance(r, str) and r.strip() for r in values):
                raise _bad(op, f"{name} must be a list of names, got {values!r}")
        if not reviewers and not teams:
            raise _bad(op, "give at least one login (reviewers) or team (team_reviewers)")
        body: dict[str, Any] = {"reviewers": list(reviewers)}
        if teams:
            body["team_reviewers"] = list(teams)
        path = f"{_repo_path(op, repo)}/pulls/{n}/requested_reviewers"
        data = self._request(op, "POST", path, target=f"{repo}#{n}", body=body,
                             expected=frozenset({422})).data or {}
        requested = data.get("requested_reviewers") or []
        requested_teams = data.get("requested_teams") or []
        return {"requested": [u["login"] for u in requested if isinstance(u, dict)],
                "teams": [t["slug"] for t in requested_teams if isinstance(t, dict)
                          and isinstance(t.get("slug"), str)]}

    def mark_pull_request_ready(self, repo: str, number: int) -> PullRequest:
        """``mark-pull-request-ready``: GitHub's REST API cannot take a pull request out
        of draft ("Update a pull request" has no ``draft`` field); GraphQL's
        ``markPullRequestReadyForReview(input: {pullRequestId})`` does ("Mutations",
        GitHub GraphQL API), with the pull request's ``node_id``. It is read first
        (``GET /repos/{owner}/{repo}/pulls/{pull_number}``): one that is not a draft is
        returned as it is, with no write.

        Returns:
            the pull request, as :meth:`get_pull_request` returns it, ``draft`` false.

        Raises:
            NotFound: no such pull request (404), or GraphQL's ``NOT_FOUND``.
            IntegrationError: GraphQL refused it (``codes`` its error types, ``reason``
                GitHub's message), e.g. a closed pull request.
        """
        op = "mark-pull-request-ready"
        n = _number(op, "number", number)
        path = f"{_repo_path(op, repo)}/pulls/{n}"
        pull = _pull(self._request(op, "GET", path, target=f"{repo}#{n}").data)
        if not pull["draft"]:
            return pull
        if not pull["node_id"]:
            raise IntegrationError(f"github {op} on {repo}#{n}: the pull request has no "
                                   "node_id", integration=self.name, op=op)
        data = self._graphql(op, MARK_READY, {"id": pull["node_id"]}, target=f"{repo}#{n}")
        answer = ((data.get("markPullRequestReadyForReview") or {}).get("pullRequest")
                  or {})
        if answer.get("isDraft") is not False:
            raise IntegrationError(f"github {op} on {repo}#{n}: GitHub answered without "
                                   "taking it out of draft", integration=self.name, op=op)
        return {**pull, "draft": False}

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

    def merge_pull_request(self, repo: str, number: int, sha: str,
                           merge_method: str = "squash") -> Merged:
        """``merge-pull-request``: ``PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge``
        with ``{"sha", "merge_method"}`` ("Merge a pull request"): GitHub merges only
        while the head is still ``sha``.

        Args:
            sha: the head commit the merge is for (the approved one).
            merge_method: ``merge``, ``squash`` or ``rebase``.

        Returns:
            ``{"sha": str | None, "merged": bool, "message": str}`` -- GitHub's 200 answer
            (``sha``: the commit now on the base branch).

        Raises:
            IntegrationError: GitHub refused, not retriable, its ``message`` the error's
                ``reason``: 409 "Head branch was modified. Review and try the merge
                again." (the head is no longer ``sha``), 405 "Pull Request is not
                mergeable" (a conflict, a draft, or the base branch's protection: required
                checks or reviews), 403 (no permission), 422 (validation). Never retried on
                5xx by the transport (a PUT that may have merged).
        """
        op = "merge-pull-request"
        n = _number(op, "number", number)
        if merge_method not in self.MERGE_METHODS:
            raise _bad(op, f"merge_method must be one of {', '.join(self.MERGE_METHODS)}, "
                           f"got {merge_method!r}")
        head = _text(op, "sha", sha)
        path = f"{_repo_path(op, repo)}/pulls/{n}/merge"
        data = self._request(op, "PUT", path, target=f"{repo}#{n}",
                             body={"sha": head, "merge_method": merge_method}).data or {}
        return {"sha": data.get("sha") if isinstance(data.get("sha"), str) else None,
                "merged": data.get("merged") is True,
                "message": str(data.get("message") or "")}

    def delete_branch(self, repo: str, branch: str) -> Deleted:
        """``delete-branch``: ``DELETE /repos/{owner}/{repo}/git/refs/heads/{branch}``
        ("Delete a reference"; 204).

        Returns:
            ``{"deleted": True}``, or ``{"deleted": False}`` when GitHub answers 422
            "Reference does not exist" (deleted already: a retry, or by a person).
        """
        op = "delete-branch"
        name = _branch(op, "branch", branch)
        path = f"{_repo_path(op, repo)}/git/refs/heads/{'/'.join(map(_quote, name.split('/')))}"
        try:
            self._request(op, "DELETE", path, target=f"{repo}:{name}",
                          expected=frozenset({422}))
        except IntegrationError as exc:
            if exc.status != 422:
                raise
            return {"deleted": False}
        return {"deleted": True}
