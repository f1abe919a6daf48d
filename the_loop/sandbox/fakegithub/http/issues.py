"""Issues' labels, comments and reactions: an issue's (or pull request's) labels and the
repository's, issue comments, and reactions on issue comments and on pull request review
comments. Served at the API root and under ``/api/v3``; writes go through the fake's own
operations as the token's login."""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, Response, g, jsonify, request

from the_loop.sandbox.fakegithub.http.common import (
    created,
    error,
    fake,
    invalid_reaction,
    invalid_request,
    json_body,
    lookup,
    missing_field,
    not_found,
    paged,
    reaction_content,
    validation_failed,
)
from the_loop.sandbox.fakegithub.http.shapes import (
    comment_json,
    issue_labels_json,
    label_json,
    user_json,
)

__all__ = ["bp"]

bp = Blueprint("issues", __name__)


# -- labels -----------------------------------------------------------------------------


@bp.get("/repos/<owner>/<name>/issues/<int:number>/labels")
def list_issue_labels(owner: str, name: str, number: int) -> Response:
    """"List labels for an issue"."""
    with fake().lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        return jsonify(issue_labels_json(r, number))


@bp.post("/repos/<owner>/<name>/issues/<int:number>/labels")
def add_issue_labels(owner: str, name: str, number: int) -> Response:
    """"Add labels to an issue": ``{"labels": [...]}`` or a bare list, of names or
    ``{"name"}`` objects; the repository's labels are made as needed."""
    gh = fake()
    body = json_body()
    raw = body.get("labels") if isinstance(body, dict) else body
    if not isinstance(raw, list) or not raw:
        return invalid_request()
    wanted = [x.get("name") if isinstance(x, dict) else x for x in raw]
    if not all(isinstance(n, str) and n.strip() for n in wanted):
        return invalid_request()
    names = [str(n) for n in wanted]
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        for n in names:
            gh.add_label(r.full_name, number, n)
        return jsonify(issue_labels_json(r, number))


@bp.delete("/repos/<owner>/<name>/issues/<int:number>/labels/<path:label>")
def remove_issue_label(owner: str, name: str, number: int, label: str) -> Response:
    """"Remove a label from an issue": 404 ``Label does not exist`` when it is not on."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        current = r.issue_labels.get(number, [])
        if not any(n.lower() == label.lower() for n in current):
            return error(404, "Label does not exist")
        gh.remove_label(r.full_name, number, label)
        return jsonify(issue_labels_json(r, number))


@bp.get("/repos/<owner>/<name>/labels/<path:label>")
def get_label(owner: str, name: str, label: str) -> Response:
    """"Get a label" (case-insensitive)."""
    with fake().lock:
        r = lookup(owner, name)
        found = r.labels.get(label.lower()) if r else None
        if r is None or found is None:
            return not_found()
        return jsonify(label_json(r, found))


@bp.post("/repos/<owner>/<name>/labels")
def create_label(owner: str, name: str) -> Response:
    """"Create a label": 422 for a missing name, a color that is not six hex digits, or
    a name the repository has already."""
    gh = fake()
    body = json_body()
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return missing_field("Label", "name")
    color = str(body.get("color") or "ededed").lstrip("#")
    if not re.fullmatch(r"[0-9a-fA-F]{6}", color):
        return validation_failed("Label", "invalid", "color")
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        if body["name"].lower() in r.labels:
            return validation_failed("Label", "already_exists", "name")
        gh.ensure_label(r.full_name, body["name"], color, str(body.get("description") or ""))
        return created(jsonify(label_json(r, r.labels[body["name"].lower()])))


# -- comments ---------------------------------------------------------------------------


def comment_body() -> str | None:
    """The non-empty ``body`` of a comment write, else ``None`` (answer
    :func:`missing_body`)."""
    body = json_body()
    if not isinstance(body, dict) or not isinstance(body.get("body"), str) or not body["body"]:
        return None
    return str(body["body"])


def missing_body() -> Response:
    """422 for a comment write without a body."""
    return missing_field("IssueComment", "body")


@bp.get("/repos/<owner>/<name>/issues/<int:number>/comments")
def list_comments(owner: str, name: str, number: int) -> Response:
    """"List issue comments", oldest first, paged; ``since`` keeps those updated then
    or later."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        since = request.args.get("since")  # ISO 8601: compared as GitHub's own stamps
        return paged([c for c in gh.comments_on(r.full_name, number)
                      if not since or c["updated_at"] >= since], comment_json)


@bp.post("/repos/<owner>/<name>/issues/<int:number>/comments")
def create_comment(owner: str, name: str, number: int) -> Response:
    """"Create an issue comment" as the token's login."""
    gh = fake()
    text = comment_body()
    if text is None:
        return missing_body()
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        with gh.acting_as(g.login or gh.user_login):
            posted = gh.comment(r.full_name, number, text)
        resp = jsonify(comment_json(gh.comment_store[posted["id"]]))
    return created(resp)


@bp.get("/repos/<owner>/<name>/issues/comments/<int:comment_id>")
def get_comment(owner: str, name: str, comment_id: int) -> Response:
    """"Get an issue comment"."""
    gh = fake()
    with gh.lock:
        c = gh.find_comment(f"{owner}/{name}", comment_id)
        return not_found() if c is None else jsonify(comment_json(c))


@bp.patch("/repos/<owner>/<name>/issues/comments/<int:comment_id>")
def update_comment(owner: str, name: str, comment_id: int) -> Response:
    """"Update an issue comment"."""
    gh = fake()
    text = comment_body()
    if text is None:
        return missing_body()
    with gh.lock:
        c = gh.find_comment(f"{owner}/{name}", comment_id)
        if c is None:
            return not_found()
        gh.update_comment(c["repo"], comment_id, text)
        return jsonify(comment_json(c))


# -- reactions --------------------------------------------------------------------------


def reaction_answer(found: dict[str, Any], user: str, content: str, fresh: bool) -> Response:
    """GitHub's reaction, 201 when it is new, 200 when ``user`` had made it already."""
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


@bp.post("/repos/<owner>/<name>/issues/comments/<int:comment_id>/reactions")
def create_reaction(owner: str, name: str, comment_id: int) -> Response:
    """"Create reaction for an issue comment" as the token's login."""
    gh = fake()
    content = reaction_content()
    if content is None:
        return invalid_reaction()
    with gh.lock:
        c = gh.find_comment(f"{owner}/{name}", comment_id)
        if c is None:
            return not_found()
        user = g.login or gh.user_login
        fresh = (user, content) not in gh.reactions(c["repo"], comment_id)
        with gh.acting_as(user):
            added = gh.add_reaction(c["repo"], comment_id, content)
        found = next(x for x in gh.reaction_store[comment_id] if x["id"] == added["id"])
        return reaction_answer(found, user, content, fresh)


@bp.post("/repos/<owner>/<name>/pulls/comments/<int:comment_id>/reactions")
def create_review_comment_reaction(owner: str, name: str, comment_id: int) -> Response:
    """"Create reaction for a pull request review comment" as the token's login."""
    gh = fake()
    content = reaction_content()
    if content is None:
        return invalid_reaction()
    with gh.lock:
        r = lookup(owner, name)
        c = gh.review_comment_store.get(comment_id)
        if r is None or c is None or c["repo"] != r.full_name:
            return not_found()
        user = g.login or gh.user_login
        fresh = (user, content) not in gh.review_reactions(r.full_name, comment_id)
        with gh.acting_as(user):
            added = gh.add_review_comment_reaction(r.full_name, comment_id, content)
        found = next(x for x in gh.review_reaction_store[comment_id]
                     if x["id"] == added["id"])
        return reaction_answer(found, user, content, fresh)
