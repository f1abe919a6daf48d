"""Choosing and building the transport of each integration (the provider factory).

Each integration has named transports (:data:`TRANSPORTS`)::

    github: auto | api | cli        slack: sdk | webhook        jira: api | cli

The factories take plain arguments -- a transport name and typed settings -- read once by
:class:`foundation.settings.Settings` from the environment and ``cli-config.yaml``'s
``integrations:`` block; :mod:`the_loop.wiring` calls them. Credentials come from the
environment only and are held by the provider objects, never put in a hook's context,
the state or a log line.

GitHub ``auto`` resolves in this order and never guesses silently: ``api`` when GitHub
credentials are present (App id + private key, or a token); else ``cli`` when the gh
binary is on ``PATH``; else start-up fails naming both fixes. An explicit ``api`` or
``cli`` is honoured verbatim and never falls back to the other.
"""

from __future__ import annotations

import logging
import shutil
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from graph.errors import LoopError
from graph.ports import Integration
from integrations.github import DEFAULT_API_URL, GitHubApi, GitHubClients, GitHubSettings
from integrations.github_cache import ConditionalCache
from integrations.github_cli import DEFAULT_BINARY, DEFAULT_MAX_OUTPUT, GitHubCli
from integrations.github_ops import OPERATIONS as GITHUB_OPERATIONS
from integrations.jira import JiraApi, JiraCli
from integrations.slack import SlackSdk, SlackWebhook
from integrations.throttle import WriteThrottle

__all__ = [
    "TRANSPORTS",
    "GitHubProvider",
    "ProviderConfigError",
    "github_provider",
    "jira_provider",
    "resolve_github_transport",
    "slack_provider",
]

log = logging.getLogger("the_loop.integrations")

#: integration -> transport name -> provider class. The contract suite runs every
#: operation of every class listed here.
TRANSPORTS: dict[str, dict[str, type]] = {
    "github": {"api": GitHubApi, "cli": GitHubCli},
    "slack": {"sdk": SlackSdk, "webhook": SlackWebhook},
    "jira": {"api": JiraApi, "cli": JiraCli},
}

ENV_GITHUB_TRANSPORT = "THE_LOOP_GITHUB_TRANSPORT"
ENV_GITHUB_CLI_BINARY = "THE_LOOP_GITHUB_CLI_BINARY"
ENV_SLACK_TRANSPORT = "THE_LOOP_SLACK_TRANSPORT"
ENV_SLACK_TOKEN = "THE_LOOP_SLACK_TOKEN"
ENV_SLACK_WEBHOOK_URL = "THE_LOOP_SLACK_WEBHOOK_URL"
ENV_JIRA_TRANSPORT = "THE_LOOP_JIRA_TRANSPORT"
ENV_JIRA_URL = "THE_LOOP_JIRA_URL"
ENV_JIRA_USER = "THE_LOOP_JIRA_USER"
ENV_JIRA_TOKEN = "THE_LOOP_JIRA_TOKEN"
ENV_JIRA_CLI_BINARY = "THE_LOOP_JIRA_CLI_BINARY"


class ProviderConfigError(LoopError, ValueError):
    """A transport choice or its settings are wrong. The message names the setting and
    the fix, never a secret value."""


# ----------------------------------------------------------------------------- GitHub


@dataclass(frozen=True)
class GitHubCliSettings:
    """How to run gh. ``host``: GitHub Enterprise Server host for ``GH_HOST``."""

    binary: str = DEFAULT_BINARY
    host: str | None = None
    timeout: float = 30.0
    max_output: int = DEFAULT_MAX_OUTPUT
    retries: int = 2


@dataclass
class GitHubProvider:
    """The configured GitHub transport, as the worker uses it: call it with a delivery's
    installation id to get the :class:`~graph.ports.Integration` acting for it.

    Attributes:
        transport: ``api`` or ``cli`` (what ``auto`` resolved to).
        operations: what the transport implements (checked against the graph).
        reason: how the transport was chosen, for the start-up log.
        clients: the API transport's per-installation clients (installation tokens for
            git); ``None`` for the cli transport.
    """

    transport: str
    factory: Callable[[int | None], Integration]
    reason: str
    operations: frozenset[str] = frozenset(GITHUB_OPERATIONS)
    name: str = "github"
    closers: list[Callable[[], None]] = field(default_factory=list)
    clients: GitHubClients | None = None

    def __call__(self, installation_id: int | None) -> Integration:
        return self.factory(installation_id)

    for_installation = __call__

    def forget(self, installation_id: int | None) -> None:
        """Drop the cached token of ``installation_id`` (the api transport's; the cli
        transport keeps none)."""
        if self.clients is not None:
            self.clients.forget(installation_id)

    def close(self) -> None:
        for close in self.closers:
            close()


def resolve_github_transport(
    transport: str,
    settings: GitHubSettings,
    binary: str = DEFAULT_BINARY,
    *,
    which: Callable[[str], str | None] = shutil.which,
) -> tuple[str, str]:
    """``(transport, reason)`` for a configured ``auto | api | cli``.

    ``auto``: ``api`` when ``settings`` hold credentials; else ``cli`` when ``binary`` is
    found by ``which``; else :class:`ProviderConfigError` naming both fixes. ``api`` and
    ``cli`` are returned as they are (their own checks happen when they are built).
    """
    chosen = (transport or "auto").strip().lower()
    if chosen not in ("auto", "api", "cli"):
        raise ProviderConfigError(
            f"{ENV_GITHUB_TRANSPORT} (integrations.github.transport) must be auto, api or "
            f"cli, e.g. {ENV_GITHUB_TRANSPORT}=auto"
        )
    if chosen != "auto":
        return chosen, f"{chosen} (configured)"
    if settings.mode is not None:
        return "api", f"api (auto: GitHub {settings.mode} credentials are set)"
    found = which(binary)
    if found:
        return "cli", f"cli (auto: no API credentials; {binary} found at {found})"
    raise ProviderConfigError(
        "no GitHub transport available (transport auto): set GH_TOKEN (or "
        "THE_LOOP_GITHUB_APP_ID and THE_LOOP_GITHUB_PRIVATE_KEY) for the api transport, or "
        f"install gh (the GitHub CLI; {ENV_GITHUB_CLI_BINARY} names another binary) and run "
        "`gh auth login` for the cli transport"
    )


def github_provider(
    transport: str,
    settings: GitHubSettings,
    cli: GitHubCliSettings | None = None,
    *,
    throttle: WriteThrottle | None = None,
    cache: ConditionalCache | None = None,
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> GitHubProvider:
    """Build the GitHub transport named ``transport`` (``auto``, ``api`` or ``cli``).

    Args:
        settings: API settings (credentials, base URL, pacing).
        cli: gh settings (binary, host); ``host`` defaults to the host of a GitHub
            Enterprise Server ``settings.api_url``.
        throttle: cross-worker write spacing for either transport.
        cache: the shared conditional-request cache of ``GET`` answers, for either
            transport.
        env: the complete environment gh runs with (``None``: an empty one).

    Raises:
        ProviderConfigError: an unknown transport, ``auto`` with nothing available, or
            ``cli`` whose binary is not found.
        integrations.github.GitHubConfigError: ``api`` without credentials.
    """
    cli = cli or GitHubCliSettings()
    chosen, reason = resolve_github_transport(transport, settings, cli.binary, which=which)
    if chosen == "api":
        clients = GitHubClients(settings, throttle=throttle, cache=cache)
        return GitHubProvider(
            "api", clients.for_installation, reason, GitHubApi.operations,
            closers=[clients.close], clients=clients)
    if not which(cli.binary):
        raise ProviderConfigError(
            f"GitHub transport cli is configured but {cli.binary!r} is not on PATH: install "
            f"gh or set {ENV_GITHUB_CLI_BINARY} to its path (cli never falls back to api)"
        )
    host = cli.host or _ghes_host(settings.api_url)
    gh = GitHubCli(
        cli.binary,
        host=host,
        env=env,
        timeout=cli.timeout,
        max_output=cli.max_output,
        retries=cli.retries,
        throttle=throttle,
        cache=cache,
    )
    return GitHubProvider("cli", lambda _installation: gh, reason, gh.operations)


def _ghes_host(api_url: str) -> str | None:
    if api_url.rstrip("/") == DEFAULT_API_URL:
        return None
    parsed = urllib.parse.urlparse(api_url)
    return parsed.netloc or None


# ----------------------------------------------------------------------------- Slack


def slack_provider(
    transport: str,
    *,
    token: str | None = None,
    webhook_url: str | None = None,
    base_url: str | None = None,
    timeout: int = 30,
) -> Integration:
    """Build the Slack transport ``sdk`` (a bot token) or ``webhook`` (an incoming
    webhook URL).

    Raises:
        ProviderConfigError: unknown transport, or its credential is missing.
    """
    chosen = (transport or "sdk").strip().lower()
    if chosen == "sdk":
        if not token:
            raise ProviderConfigError(
                f"Slack transport sdk needs a bot token: set {ENV_SLACK_TOKEN} (xoxb-...), "
                f"or choose the webhook transport ({ENV_SLACK_TRANSPORT}=webhook with "
                f"{ENV_SLACK_WEBHOOK_URL})"
            )
        return SlackSdk(token, base_url=base_url, timeout=timeout)
    if chosen == "webhook":
        if not webhook_url:
            raise ProviderConfigError(
                f"Slack transport webhook needs {ENV_SLACK_WEBHOOK_URL} (the incoming "
                "webhook URL from the Slack app's settings)"
            )
        return SlackWebhook(webhook_url, timeout=timeout)
    raise ProviderConfigError(
        f"{ENV_SLACK_TRANSPORT} (integrations.slack.transport) must be sdk or webhook, "
        f"e.g. {ENV_SLACK_TRANSPORT}=sdk"
    )


# ----------------------------------------------------------------------------- Jira


def jira_provider(
    transport: str,
    *,
    base_url: str | None = None,
    user: str | None = None,
    token: str | None = None,
    binary: str = "jira",
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    auth: str = "basic",
    api_version: int | None = None,
    fallback_version: int = 3,
) -> Integration:
    """Build the Jira transport ``api`` (REST v3 for Jira Cloud, v2 for Data Center:
    ``api_version``, or ``None`` to ask the site once, with ``fallback_version`` when it
    cannot tell; see :class:`integrations.jira.JiraApi`; base URL + API token or
    personal access token) or ``cli`` (a jira-cli compatible binary).

    Raises:
        ProviderConfigError: unknown transport, missing URL/token, or binary not found.
    """
    chosen = (transport or "api").strip().lower()
    if chosen == "api":
        if not base_url or not token:
            raise ProviderConfigError(
                f"Jira transport api needs {ENV_JIRA_URL} (https://YOUR-SITE.atlassian.net) "
                f"and {ENV_JIRA_TOKEN} (an API token; with {ENV_JIRA_USER}, the account's "
                "email, for Jira Cloud)"
            )
        if auth != "bearer" and not user:
            raise ProviderConfigError(
                f"Jira transport api with {ENV_JIRA_TOKEN} needs {ENV_JIRA_USER} (Jira Cloud's "
                "Basic auth: the account's e-mail and an API token); a Data Center personal "
                "access token needs THE_LOOP_JIRA_AUTH=bearer")
        return JiraApi(base_url, token, user=None if auth == "bearer" else user,
                       api_version=api_version, fallback_version=fallback_version)
    if chosen == "cli":
        if not which(binary):
            raise ProviderConfigError(
                f"Jira transport cli is configured but {binary!r} is not on PATH: install "
                f"jira-cli or set {ENV_JIRA_CLI_BINARY} to its path"
            )
        return JiraCli(binary, env=env)
    raise ProviderConfigError(
        f"{ENV_JIRA_TRANSPORT} (integrations.jira.transport) must be api or cli, "
        f"e.g. {ENV_JIRA_TRANSPORT}=api"
    )
