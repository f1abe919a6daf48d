"""What the dashboard's blueprints share: the :class:`Web` record that
:func:`the_loop.web.app.register` stores on the Flask app, and :func:`web`, which gives it
back inside a request.

The blueprints (:mod:`the_loop.web.api`, :mod:`the_loop.web.ui`) import this module, and
:mod:`the_loop.web.app` imports the blueprints: nothing imports ``app`` back.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app, request

from foundation.settings import Settings
from the_loop.web.auth import SESSION_COOKIE, Auth, Principal
from the_loop.web.oauth import GitHubOAuth
from the_loop.web.readmodel import ReadModel

#: The key of :class:`Web` in ``app.extensions``.
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
    """The current app's :class:`Web` (inside a request or an app context).

    Raises:
        KeyError: the app was not given the dashboard (:func:`the_loop.web.app.register`).
    """
    found: Web = current_app.extensions[EXTENSION_KEY]
    return found
