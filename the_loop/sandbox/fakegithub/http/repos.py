"""Repositories: "Get a repository" and a collaborator's permission. Served at the API
root and under ``/api/v3``; a repository the fake does not have is 404."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from the_loop.sandbox.fakegithub.http.common import fake, lookup, not_found
from the_loop.sandbox.fakegithub.http.shapes import repo_json, user_json

__all__ = ["bp"]

bp = Blueprint("repos", __name__)


@bp.get("/repos/<owner>/<name>")
def get_repo(owner: str, name: str) -> Response:
    """"Get a repository"."""
    with fake().lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        return jsonify(repo_json(r))


@bp.get("/repos/<owner>/<name>/collaborators/<login>/permission")
def get_permission(owner: str, name: str, login: str) -> Response:
    """"Get repository permissions for a user": ``permission`` (the coarse one),
    ``role_name`` and the user; ``none`` for someone without a role."""
    with fake().lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        role, permission = r.permissions.get(login.lower(), ("none", "none"))
        return jsonify(
            {"permission": permission, "role_name": role, "user": user_json(login)}
        )
