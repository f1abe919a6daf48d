"""People: "Get a user", "Get the authenticated user" and the membership endpoints that
"Sign in with GitHub" checks (organizations and teams, seeded with
:meth:`~the_loop.sandbox.fakegithub.http.fake.HttpFakeState.add_member`). Served at the
API root and under ``/api/v3``."""

from __future__ import annotations

from flask import Blueprint, Response, g, jsonify

from the_loop.sandbox.fakegithub.http.common import api_base, fake, not_found, requires_login
from the_loop.sandbox.fakegithub.http.shapes import user_json

__all__ = ["bp"]

bp = Blueprint("users", __name__)


@bp.get("/users/<login>")
def get_user_by_login(login: str) -> Response:
    """"Get a user" (a public user): the account that has ``login`` now."""
    public = {"name": None, "company": None, "blog": "", "location": None,
              "email": None, "hireable": None, "bio": None, "public_repos": 0,
              "public_gists": 0, "followers": 0, "following": 0,
              "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z"}
    return jsonify(user_json(str(fake().user(login)["login"])) | public)


@bp.get("/user")
def get_user() -> Response:
    """"Get the authenticated user"."""
    denied = requires_login()
    if denied is not None:
        return denied
    return jsonify(user_json(g.login))


@bp.get("/user/memberships/orgs/<org>")
def get_own_membership(org: str) -> Response:
    """"Get an organization membership for the authenticated user": 404 when not a
    member."""
    denied = requires_login()
    if denied is not None:
        return denied
    state = fake().membership(org, g.login)
    if state is None:
        return not_found()
    return jsonify({"url": f"{api_base()}/orgs/{org}/memberships/{g.login}",
                    "state": state, "role": "member",
                    "organization": {"login": org, "url": f"{api_base()}/orgs/{org}"},
                    "user": user_json(g.login)})


@bp.get("/orgs/<org>/teams/<team>/memberships/<username>")
def get_team_membership(org: str, team: str, username: str) -> Response:
    """"Get team membership for a user": 404 when not a member."""
    denied = requires_login()
    if denied is not None:
        return denied
    state = fake().membership(org, username, team)
    if state is None:
        return not_found()
    return jsonify({"url": f"{api_base()}/teams/{team}/memberships/{username}",
                    "role": "member", "state": state})
