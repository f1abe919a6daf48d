"""The other integrations' settings: Slack, Jira and the gate-feedback classifier."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

from foundation.config.deployment import Classification

#: ``THE_LOOP_JIRA_API_VERSION``'s values: Jira Data Center / Server's REST v2 and Jira
#: Cloud's REST v3.
JIRA_API_VERSIONS = (2, 3)


@dataclass(frozen=True)
class SlackSettings:
    """Slack, when configured (``transport`` is ``None`` otherwise: its hooks skip).

    Attributes:
        transport: ``sdk`` or ``webhook`` (``THE_LOOP_SLACK_TRANSPORT`` or
            ``integrations.slack.transport``), or ``None``: not configured.
        token: the bot token (``THE_LOOP_SLACK_TOKEN``, or the variable
            ``integrations.slack.tokenEnv`` names); hidden from repr.
        webhook_url: the incoming-webhook URL (``THE_LOOP_SLACK_WEBHOOK_URL`` or
            ``urlEnv``); hidden from repr.
    """

    transport: str | None = None
    token: str | None = field(default=None, repr=False)
    webhook_url: str | None = field(default=None, repr=False)

    @property
    def configured(self) -> bool:
        return self.transport is not None


@dataclass(frozen=True)
class JiraSettings:
    """Jira, when configured (``transport`` is ``None`` otherwise: its hooks skip).

    Attributes:
        transport: ``api`` or ``cli`` (``THE_LOOP_JIRA_TRANSPORT`` or
            ``integrations.jira.transport``), or ``None``: not configured.
        base_url: the site (``THE_LOOP_JIRA_URL`` or ``integrations.jira.api.baseUrl``).
        user: the account e-mail (``THE_LOOP_JIRA_USER`` or ``userEnv``).
        token: the API token (``THE_LOOP_JIRA_TOKEN`` or ``tokenEnv``); hidden from repr.
        binary: the Jira CLI (``THE_LOOP_JIRA_CLI_BINARY`` or ``integrations.jira.cli.binary``).
        auth: ``basic`` (Jira Cloud: the account's e-mail and an API token, "Basic auth for
            REST APIs") or ``bearer`` (a Data Center personal access token,
            ``THE_LOOP_JIRA_AUTH=bearer``).
        api_version: the REST API version ``THE_LOOP_JIRA_API_VERSION`` sets, ``2``
            (Jira Data Center / Server: plain-text comment bodies) or ``3`` (Jira Cloud:
            Atlassian Document Format), or ``None``: the transport asks the site once
            (``GET /rest/api/2/serverInfo``'s ``deploymentType``) and, when the site
            cannot tell, uses :attr:`site_api_version`.
    """

    transport: str | None = None
    base_url: str | None = None
    user: str | None = None
    token: str | None = field(default=None, repr=False)
    binary: str = "jira"
    auth: str = "basic"
    api_version: int | None = None

    @property
    def configured(self) -> bool:
        return self.transport is not None

    @property
    def site_api_version(self) -> int:
        """The REST version the site's host name suggests: 3 for Jira Cloud
        (``*.atlassian.net``, or no URL), 2 for any other host (Data Center / Server,
        whose REST reference has no v3)."""
        url = self.base_url
        host = (urllib.parse.urlparse(url).hostname or "").lower() if url else ""
        return 3 if host.endswith(".atlassian.net") or not host else 2

@dataclass(frozen=True)
class ClassifierSettings:
    """``cli-config.yaml``'s ``classification`` block and the endpoint's API key (read
    from the variable ``classification.endpoint.tokenEnv`` names; hidden from repr)."""

    config: Classification = field(default_factory=Classification)
    token: str | None = field(default=None, repr=False)
