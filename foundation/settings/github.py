"""GitHub's settings: how to reach and authenticate to GitHub
(:class:`GitHubSettings`) and the write budget per installation (:class:`WriteLimits`)."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_API_URL = "https://api.github.com"
GITHUB_TRANSPORTS = ("auto", "api", "cli", "none")

ENV_API_URL = "THE_LOOP_GITHUB_API_URL"
ENV_APP_ID = "THE_LOOP_GITHUB_APP_ID"
ENV_KEY = "THE_LOOP_GITHUB_PRIVATE_KEY"
ENV_KEY_PATH = "THE_LOOP_GITHUB_PRIVATE_KEY_PATH"
ENV_GITHUB_TRANSPORT = "THE_LOOP_GITHUB_TRANSPORT"
ENV_GITHUB_CLI_BINARY = "THE_LOOP_GITHUB_CLI_BINARY"


@dataclass(frozen=True)
class GitHubSettings:
    """How to reach and authenticate to GitHub (github.com or GitHub Enterprise Server).

    Attributes:
        api_url: REST API root without trailing slash; ``https://api.github.com`` or, for
            GitHub Enterprise Server, ``https://HOST/api/v3``
            (``THE_LOOP_GITHUB_API_URL`` or ``integrations.github.api.baseUrl``).
        app_id: the GitHub App's numeric id, or ``None``.
        private_key: the App's PEM private key text (not shown by ``repr``), or ``None``.
        token: a personal access / ``GITHUB_TOKEN``-style token (not shown by ``repr``).
        write_interval: minimum seconds between two write requests (PyGithub's
            ``seconds_between_writes``; GitHub's "best practices" ask for >= 1 s).
        read_interval: minimum seconds between any two requests
            (``seconds_between_requests``).
        timeout: HTTP timeout in whole seconds per request.
        retries: how many times PyGithub retries a GET/PUT/PATCH/DELETE answered with 5xx or
            a short rate limit before the error reaches the caller (0 disables retries).
        transport: ``auto``, ``api``, ``cli`` or ``none`` (``THE_LOOP_GITHUB_TRANSPORT`` or
            ``integrations.github.transport``; ``none``: deliveries are acknowledged and
            nothing advances).
        cli_binary: the gh executable (``THE_LOOP_GITHUB_CLI_BINARY`` or
            ``integrations.github.cli.binary``).
        cli_host: ``GH_HOST`` for gh, or ``None`` (then the host of a GitHub Enterprise
            Server ``api_url``).
    """

    api_url: str = DEFAULT_API_URL
    app_id: int | None = None
    private_key: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    write_interval: float = 1.0
    read_interval: float = 0.25
    timeout: int = 15
    retries: int = 2
    transport: str = "auto"
    cli_binary: str = "gh"
    cli_host: str | None = None

    @property
    def mode(self) -> str | None:
        """``"app"`` with app id and private key, ``"token"`` with a token, else ``None``."""
        if self.app_id is not None and self.private_key:
            return "app"
        if self.token:
            return "token"
        return None

@dataclass(frozen=True)
class WriteLimits:
    """GitHub's write budget per installation, spaced across every worker.

    Attributes:
        per_minute: ``THE_LOOP_GITHUB_WRITES_PER_MINUTE`` (default 80).
        per_hour: ``THE_LOOP_GITHUB_WRITES_PER_HOUR`` (default 500); GitHub's secondary
            rate limits for content creation (a GitHub Enterprise Server's admin may set
            others).
    """

    per_minute: int = 80
    per_hour: int = 500
