"""The read API and the dashboard on the receiver's Flask app.

:func:`register` adds two blueprints beside ``POST /webhook`` (never on its path: each
blueprint's request hooks run for its own routes only, and the receiver's own routes
are untouched): ``/api/v1/`` (:mod:`the_loop.web.api`) and ``/ui/``
(:mod:`the_loop.web.ui`). Both read through one :class:`~the_loop.web.readmodel.ReadModel`
and authenticate through one :class:`~the_loop.web.auth.Auth`; what they share is in
:mod:`the_loop.web.common`.
"""

from __future__ import annotations

from collections.abc import Callable

import redis
from flask import Flask

from foundation.settings import Settings
from graph.model import Graph
from the_loop.web.api import api
from the_loop.web.auth import Auth
from the_loop.web.common import EXTENSION_KEY, Web
from the_loop.web.oauth import GitHubOAuth
from the_loop.web.readmodel import ReadModel
from the_loop.web.ui import ui


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
    dashboard = settings.dashboard
    app.extensions[EXTENSION_KEY] = Web(
        settings=settings, model=ReadModel(connection, settings, graph), auth=Auth(dashboard),
        oauth=GitHubOAuth(dashboard) if dashboard.oauth else None)
    app.register_blueprint(api)
    app.register_blueprint(ui)
