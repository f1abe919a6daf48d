"""The Flask app of the fake GitHub's HTTP front: :func:`create_app` puts the fake in the
app's extensions (where every route finds it, :func:`~the_loop.sandbox.fakegithub.http.
common.fake`), installs the request gate and registers one blueprint per resource family,
the API ones both at ``/`` (github.com layout) and under ``/api/v3`` (GitHub Enterprise
Server layout), the web host's (OAuth, git over HTTP, the App manifest form) at ``/``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Blueprint, Flask

from the_loop.sandbox.fakegithub.http import (
    apps,
    checks,
    contents,
    gate,
    git,
    graphql,
    issues,
    oauth,
    pulls,
    repos,
    users,
)
from the_loop.sandbox.fakegithub.http.common import EXTENSION, GHES_PREFIX

if TYPE_CHECKING:
    from the_loop.sandbox.fakegithub.http.fake import HttpFakeState

__all__ = ["create_app"]

#: The REST API's blueprints, each served at both roots.
API = (apps.bp, users.bp, repos.bp, pulls.bp, issues.bp, contents.bp, checks.bp)
#: The blueprints served at ``/`` only: the web host's, and GraphQL (its two paths,
#: ``/graphql`` and GHES's ``/api/graphql``, are its own).
WEB = (oauth.web, git.web, apps.web, graphql.bp)


def create_app(fake: HttpFakeState) -> Flask:
    """The app that serves ``fake`` (its state and operations; its request log, faults,
    tokens and rate limit). Returns a new app each call; routes reach ``fake`` through
    ``app.extensions["fake_github"]``."""
    app = Flask("fake_github")
    app.extensions[EXTENSION] = fake
    gate.install(app)
    for blueprint in WEB:
        app.register_blueprint(blueprint)
    api = Blueprint("github", __name__)
    for blueprint in API:
        api.register_blueprint(blueprint)
    app.register_blueprint(api)
    app.register_blueprint(api, url_prefix=GHES_PREFIX, name="ghes")
    return app
