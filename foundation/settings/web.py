"""Where the processes listen (:class:`WebSettings`, gunicorn's too) and the read API and
dashboard the receiver serves (:class:`DashboardSettings`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from foundation.settings.github import DEFAULT_API_URL

ENV_API_TOKENS = "THE_LOOP_API_TOKENS"
ENV_PUBLIC_URL = "THE_LOOP_PUBLIC_URL"
ENV_CLIENT_ID = "THE_LOOP_GITHUB_CLIENT_ID"
ENV_CLIENT_SECRET = "THE_LOOP_GITHUB_CLIENT_SECRET"
ENV_UI_MEMBERS = "THE_LOOP_UI_GITHUB_MEMBERS"
ENV_SESSION_SECRET = "THE_LOOP_UI_SESSION_SECRET"
ENV_SESSION_TTL = "THE_LOOP_UI_SESSION_TTL"
#: Where Mermaid's npm packages are (``tools/mermaid``, installed by ``make venv``); the
#: lint-artifacts hook's parser and the dashboard's drawing share them.
ENV_MERMAID_DIR = "THE_LOOP_MERMAID_PARSER"
#: Shortest API token accepted: 128 bits of a random hex or base64 string.
MIN_TOKEN_CHARS = 24


@dataclass(frozen=True)
class WebSettings:
    """Where processes listen, and the receiver's gunicorn.

    Attributes:
        host: ``THE_LOOP_HOST`` (default ``0.0.0.0``): ``the-loop serve``'s and the
            worker's metrics address.
        port: ``PORT`` (default 8080): ``the-loop serve``'s port.
        bind: gunicorn's ``bind`` when it is run directly with ``the_loop/gunicorn_conf.py``:
            ``THE_LOOP_BIND`` (e.g. ``0.0.0.0:8080``), else ``0.0.0.0:$PORT`` when ``PORT``
            is set, else ``127.0.0.1:8000``.
        workers: ``THE_LOOP_WEB_WORKERS`` gunicorn processes (default 2).
        threads: ``THE_LOOP_WEB_THREADS`` threads per process (default 1: gunicorn's
            gevent worker; more than 1: gthread, see the_loop/gunicorn_conf.py).
        access_log: ``THE_LOOP_ACCESS_LOG`` access log target (``-``: stdout), or
            ``None`` (off; the receiver logs one line per delivery).
    """

    host: str = "0.0.0.0"
    port: int = 8080
    bind: str = "127.0.0.1:8000"
    workers: int = 2
    threads: int = 1
    access_log: str | None = None


@dataclass(frozen=True)
class DashboardSettings:
    """The read API (``/api/v1/``) and the dashboard (``/ui/``) the receiver serves.

    Attributes:
        token_digests: SHA-256 hex digests of the bearer tokens ``THE_LOOP_API_TOKENS``
            lists (comma-separated; each a token of at least 24 characters, or
            ``sha256:HEX``, its digest, so the deployment need not hold the token
            itself). Only digests are kept; a request's token is hashed and compared in
            constant time.
        public_url: ``THE_LOOP_PUBLIC_URL``, where people reach the receiver (e.g.
            ``https://loop.example.com``, no trailing slash), or ``None``. The status
            comment and the ``the-loop`` check run link to a work item's page under it,
            and "Sign in with GitHub" sends GitHub back to it.
        github_client_id: ``THE_LOOP_GITHUB_CLIENT_ID``, the GitHub App's client id
            (App settings > General), or ``None``: no "Sign in with GitHub".
        github_client_secret: ``THE_LOOP_GITHUB_CLIENT_SECRET`` (hidden from repr).
        github_members: ``THE_LOOP_UI_GITHUB_MEMBERS``: who may sign in with GitHub,
            each ``ORG`` (a member of the organization) or ``ORG/TEAM`` (a member of the
            team, by its slug). Required with a client id: never every GitHub user.
        github_api_url: the REST API root (``THE_LOOP_GITHUB_API_URL``, as the worker's).
        github_web_url: GitHub's web root derived from it (``https://github.com``; for
            Enterprise Server ``https://HOST``): where OAuth's authorize page, issues
            and comments are.
        session_secret: the key signing the dashboard's session cookie:
            ``THE_LOOP_UI_SESSION_SECRET`` (at least 32 characters), else derived from
            the first webhook secret (HMAC-SHA256); ``None`` without either. Hidden.
        session_ttl: seconds a dashboard session lasts, ``THE_LOOP_UI_SESSION_TTL``
            (default 28800, 8 hours); membership is checked again at the next sign-in.
        mermaid_dir: the directory holding Mermaid's npm packages (``mermaid/dist``
            under ``node_modules``): ``THE_LOOP_MERMAID_PARSER``, else ``<venv>/mermaid``.
    """

    token_digests: tuple[str, ...] = field(default=(), repr=False)
    public_url: str | None = None
    github_client_id: str | None = None
    github_client_secret: str | None = field(default=None, repr=False)
    github_members: tuple[str, ...] = ()
    github_api_url: str = DEFAULT_API_URL
    github_web_url: str = "https://github.com"
    session_secret: bytes | None = field(default=None, repr=False)
    session_ttl: int = 8 * 3600
    mermaid_dir: str = field(default_factory=lambda: str(Path(sys.prefix) / "mermaid"))

    @property
    def oauth(self) -> bool:
        """Whether "Sign in with GitHub" is configured."""
        return self.github_client_id is not None and bool(self.github_members)

    def __repr__(self) -> str:
        return (f"DashboardSettings(tokens=<{len(self.token_digests)} hidden>, "
                f"public_url={self.public_url!r}, oauth={self.oauth}, "
                f"github_members={self.github_members!r}, "
                f"github_web_url={self.github_web_url!r}, session_ttl={self.session_ttl})")
