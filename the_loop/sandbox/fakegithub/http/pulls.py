"""Pull requests: get, list, create, update, close and merge them, their files, requested
reviewers and reviews; and deleting a branch (a merged pull request's). Served at the API
root and under ``/api/v3``; writes go through the fake's own operations (so the action is
recorded there) as the token's login."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, g, jsonify, request

from graph.ports import IntegrationError
from the_loop.sandbox.fakegithub.git import blob_sha
from the_loop.sandbox.fakegithub.http.common import (
    api_base,
    created,
    error,
    fake,
    invalid_request,
    json_body,
    lookup,
    missing_field,
    not_found,
    paged,
    validation_failed,
    web_base,
)
from the_loop.sandbox.fakegithub.http.shapes import issue_labels_json, repo_json, user_json
from the_loop.sandbox.fakegithub.store import Repo

__all__ = ["bp", "pull_json"]

bp = Blueprint("pulls", __name__)


def pull_json(r: Repo, number: int, pr: dict[str, Any]) -> dict[str, Any]:
    """GitHub's pull request ``number`` of ``r`` from its stored ``pr``: the head is
    its branch's tip in a git-backed repository, its repository the fork when it has one."""
    gh = fake()
    rj = repo_json(r)
    owner_login = r.full_name.split("/")[0]
    fork = pr.get("head_repo") or r.full_name
    holder = gh.lookup(fork)
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
        "merged": bool(pr.get("merged")),
        "merged_by": user_json(pr["merged_by"]) if pr.get("merged_by") else None,
        "merged_at": pr.get("merged_at"),
        "closed_at": pr.get("closed_at"),
        "merge_commit_sha": pr.get("merge_commit_sha"),
        "labels": issue_labels_json(r, number),
        "requested_reviewers": [user_json(u) for u in pr["requested"]],
        "requested_teams": [team_json(r, slug) for slug in pr.get("requested_teams") or ()],
        "head": {
            "label": f"{head_owner}:{pr['head_ref']}",
            "ref": pr["head_ref"],
            "sha": gh.pull_head(r, pr),
            "user": user_json(head_owner),
            "repo": head_json,
        },
        "base": {
            "label": f"{owner_login}:{pr['base_ref']}",
            "ref": pr["base_ref"],
            "sha": gh.branch_sha(r, pr["base_ref"]) or "0" * 40,
            "user": user_json(owner_login),
            "repo": rj,
        },
    }


def team_json(r: Repo, slug: str) -> dict[str, Any]:
    """GitHub's "team-simple" of team ``slug`` of ``r``'s owner (ids derived from the
    slug: the fake keeps no teams beyond memberships)."""
    org = r.full_name.split("/")[0]
    team_id = int.from_bytes(slug.encode()[:6].ljust(6, b"\0"), "big") % 1_000_000 + 1
    return {"id": team_id, "node_id": f"T_{team_id}", "name": slug, "slug": slug,
            "description": None, "privacy": "closed", "notification_setting":
            "notifications_enabled", "permission": "pull",
            "url": f"{api_base()}/orgs/{org}/teams/{slug}",
            "html_url": f"{web_base()}/orgs/{org}/teams/{slug}",
            "members_url": f"{api_base()}/orgs/{org}/teams/{slug}/members{{/member}}",
            "repositories_url": f"{api_base()}/orgs/{org}/teams/{slug}/repos",
            "parent": None}


def find_pull(owner: str, name: str, number: int) -> tuple[Repo | None, Any]:
    """``(repository, stored pull request)``; either is ``None`` when it is not there."""
    r = lookup(owner, name)
    return r, (r.pulls.get(number) if r else None)


@bp.get("/repos/<owner>/<name>/pulls/<int:number>")
def get_pull(owner: str, name: str, number: int) -> Response:
    """"Get a pull request"."""
    with fake().lock:
        r, pr = find_pull(owner, name, number)
        if r is None or pr is None:
            return not_found()
        return jsonify(pull_json(r, number, pr))


@bp.get("/repos/<owner>/<name>/pulls")
def list_pulls(owner: str, name: str) -> Response:
    """"List pull requests": ``state`` (open|closed|all, default open) and ``head``
    (``OWNER:BRANCH``) filter, oldest first, paged."""
    state = request.args.get("state", "open")
    head = request.args.get("head")
    with fake().lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        if state not in ("open", "closed", "all"):
            return error(422, "Validation Failed")
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
    gh = fake()
    body = json_body()
    fields = ("title", "head", "base")
    if not isinstance(body, dict) or not all(
            isinstance(body.get(f), str) and body[f] for f in fields):
        return missing_field("PullRequest", "title")
    head = body["head"].split(":", 1)[-1]
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        try:
            with gh.acting_as(g.login or gh.user_login):
                made = gh.create_pull_request(
                    r.full_name, head, body["base"], body["title"],
                    str(body.get("body") or ""), bool(body.get("draft", False)))
        except IntegrationError as exc:
            return validation_failed(
                "PullRequest", (exc.codes or ("custom",))[0],
                message=str(exc).removeprefix("github create-pull-request: "))
        number = made["number"]
        resp = jsonify(pull_json(r, number, r.pulls[number]))
    return created(resp)


@bp.patch("/repos/<owner>/<name>/pulls/<int:number>")
def update_pull(owner: str, name: str, number: int) -> Response:
    """"Update a pull request" (``title``, ``body``, ``state``: ``closed`` closes it
    unmerged, ``open`` is accepted for an open one); none given changes nothing; 422 for
    another ``state``."""
    gh = fake()
    body = json_body()
    if not isinstance(body, dict):
        return invalid_request()
    state = body.get("state")
    if state is not None and state not in ("open", "closed"):
        return validation_failed("PullRequest", "invalid", "state")
    with gh.lock:
        r, pr = find_pull(owner, name, number)
        if r is None or pr is None:
            return not_found()
        title, text = body.get("title"), body.get("body")
        with gh.acting_as(g.login or gh.user_login):
            if title is not None or text is not None:
                gh.update_pull_request(r.full_name, number, title=title, body=text)
            if state == "closed":
                gh.close_pull_request(r.full_name, number)
        return jsonify(pull_json(r, number, pr))


@bp.put("/repos/<owner>/<name>/pulls/<int:number>/merge")
def merge_pull(owner: str, name: str, number: int) -> Response:
    """"Merge a pull request" as the token's login: ``{"sha", "merged", "message"}``
    (200); 409 when ``sha`` is given and is not the head; 405 when it cannot be merged
    (closed, a draft, a conflict); 422 for a bad ``merge_method``; 401 anonymous."""
    gh = fake()
    if g.login is None:
        return error(401, "Requires authentication")
    body = json_body() or {}
    if not isinstance(body, dict):
        return invalid_request()
    method = body.get("merge_method", "merge")
    if method not in ("merge", "squash", "rebase"):
        return validation_failed("PullRequest", "invalid", "merge_method")
    with gh.lock:
        r, pr = find_pull(owner, name, number)
        if r is None or pr is None:
            return not_found()
        sha = body.get("sha")
        head = gh.pull_head(r, pr)
        try:
            with gh.acting_as(g.login):
                merged = gh.merge_pull_request(r.full_name, number,
                                               str(sha) if sha else head, method)
        except IntegrationError as exc:
            status = exc.status or 405
            return error(status, str(exc).removeprefix("github merge-pull-request: "))
        return jsonify(merged)


@bp.delete("/repos/<owner>/<name>/git/refs/heads/<path:branch>")
def delete_branch(owner: str, name: str, branch: str) -> Response:
    """"Delete a reference" for a branch: 204; 422 "Reference does not exist" for none
    (or the default branch, which GitHub refuses to delete); 401 anonymous."""
    gh = fake()
    if g.login is None:
        return error(401, "Requires authentication")
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        try:
            with gh.acting_as(g.login):
                deleted = gh.delete_branch(r.full_name, branch)
        except IntegrationError as exc:
            return error(422, str(exc).removeprefix("github delete-branch: "))
        if not deleted["deleted"]:
            return error(422, "Reference does not exist")
        return Response(status=204)


def file_json(f: dict[str, Any]) -> dict[str, Any]:
    """GitHub's "diff-entry" of a stored changed file (one line added, for the shape)."""
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


@bp.get("/repos/<owner>/<name>/pulls/<int:number>/files")
def list_pull_files(owner: str, name: str, number: int) -> Response:
    """"List pull requests files", paged."""
    with fake().lock:
        _, pr = find_pull(owner, name, number)
        if pr is None:
            return not_found()
        return paged(pr["files"], file_json)


@bp.post("/repos/<owner>/<name>/pulls/<int:number>/requested_reviewers")
def request_reviewers(owner: str, name: str, number: int) -> Response:
    """"Request reviewers for a pull request": ``reviewers`` (logins) and/or
    ``team_reviewers`` (slugs); 201 with the pull request; 422 for a request from its
    author."""
    gh = fake()
    body = json_body()
    if not isinstance(body, dict):
        return invalid_request()
    reviewers, teams = body.get("reviewers", []), body.get("team_reviewers", [])
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
               for v in (reviewers, teams)) or not (reviewers or teams):
        return invalid_request()
    with gh.lock:
        r, pr = find_pull(owner, name, number)
        if r is None or pr is None:
            return not_found()
        try:
            gh.request_reviewers(r.full_name, number, reviewers, teams)
        except IntegrationError:
            return error(422, "Review cannot be requested from pull request author.")
        resp = jsonify(pull_json(r, number, pr))
    return created(resp)


def review_json(r: Repo, number: int, v: dict[str, Any]) -> dict[str, Any]:
    """GitHub's review, from one stored on pull request ``number`` of ``r``."""
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


@bp.get("/repos/<owner>/<name>/pulls/<int:number>/reviews")
def list_reviews(owner: str, name: str, number: int) -> Response:
    """"List reviews for a pull request", oldest first, paged."""
    with fake().lock:
        r, pr = find_pull(owner, name, number)
        if r is None or pr is None:
            return not_found()
        return paged(pr["reviews"], lambda v: review_json(r, number, v))
