"""Issues' labels, comments and reactions (they work on pull requests too: a pull
request is an issue), and reactions to pull request review comments."""

from __future__ import annotations

from graph.ports import (
    REACTIONS,
    Comments,
    Created,
    EnsuredLabel,
    IntegrationError,
    Labels,
    NotFound,
    Posted,
)
from integrations.github_ops.params import (
    _bad,
    _label_names,
    _login,
    _number,
    _quote,
    _repo_path,
    _text,
    _user_id,
)
from integrations.github_ops.transport import RestTransport


class IssueOperations(RestTransport):
    """``add-label``, ``remove-label``, ``ensure-label``, ``comment``, ``update-comment``,
    ``list-comments``, ``add-reaction``, ``add-review-comment-reaction``."""

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
