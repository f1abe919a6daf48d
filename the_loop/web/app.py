"""The read API and the dashboard on the receiver's Flask app.

:func:`register` adds two blueprints beside ``POST /webhook`` (never on its path: each
blueprint's request hooks run for its own routes only, and the receiver's own routes
are untouched): ``/api/v1/`` (:mod:`the_loop.web.api`) and ``/ui/``
(:mod:`the_loop.web.ui`). Both read through one :class:`~the_loop.web.readmodel.ReadModel`
and authenticate through one :class:`~the_loop.web.auth.Auth`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import redis
from flask import Flask, current_app, request

from foundation.settings import Settings
from graph.model import Graph
from the_loop.web.auth import SESSION_COOKIE, Auth, Principal
from the_loop.web.oauth import GitHubOAuth
from the_loop.web.readmodel import ReadModel

EXTENSION_KEY = "the_loop.web"


@dataclass(frozen=True)
class Web:
    """What the blueprints share (``app.extensions["the_loop.web"]``).

    Attributes:
        settings: the process's settings.
        model: the read model.
        auth: credentials.
        oauth: "Sign in with GitHub", or ``None`` when not configured.
    """

    settings: Settings
    model: ReadModel
    auth: Auth
    oauth: GitHubOAuth | None

    def principal(self) -> Principal | None:
        """Who the current request is from: its bearer token, else its session cookie;
        ``None`` without valid credentials."""
        header = request.headers.get("Authorization")
        if header:
            return self.auth.bearer(header)
        return self.auth.session(request.cookies.get(SESSION_COOKIE))


def web() -> Web:
    """The current app's :class:`Web`."""
    found: Web = current_app.extensions[EXTENSION_KEY]
    return found


def register(app: Flask, settings: Settings, connection: redis.Redis,
             graph: Callable[[], Graph]) -> None:
    """Add ``/api/v1/`` and ``/ui/`` to ``app``.

    Args:
        app: the receiver's app.
        settings: the settings it was built from.
        connection: its Redis client.
        graph: loads the compiled graph (called once, on the first page or answer that
            needs it).
    """
    from the_loop.web.api import api
    from the_loop.web.ui import ui

    dashboard = settings.dashboard
    app.extensions[EXTENSION_KEY] = Web(
        settings=settings, model=ReadModel(connection, settings, graph), auth=Auth(dashboard),
        oauth=GitHubOAuth(dashboard) if dashboard.oauth else None)
    app.register_blueprint(api)
    app.register_blueprint(ui)
