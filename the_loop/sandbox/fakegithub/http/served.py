"""The fake GitHub with its HTTP front: :class:`HttpFakeGitHub` is
:class:`~the_loop.sandbox.fakegithub.http.fake.HttpFakeState` and the Flask app that
serves it (:func:`the_loop.sandbox.fakegithub.http.factory.create_app`)."""

from __future__ import annotations

from typing import Any

from the_loop.sandbox.fakegithub.http.factory import create_app
from the_loop.sandbox.fakegithub.http.fake import HttpFakeState

__all__ = ["HttpFakeGitHub"]


class HttpFakeGitHub(HttpFakeState):
    """The fake's state (arguments as :class:`HttpFakeState`) and ``app``, the Flask app
    whose blueprints serve it (a WSGI app: :func:`~.serving.serve` runs it on loopback)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.app = create_app(self)
