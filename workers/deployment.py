"""``cli-config.yaml``'s ``integrations`` block, applied to the providers' environment.

The providers read well-known variables (``THE_LOOP_GITHUB_TRANSPORT``, ``GH_TOKEN``,
``THE_LOOP_SLACK_TOKEN``...). The deployment file names transports, binaries, base URLs
and *which* environment variables hold credentials (never the credentials). This module
folds the file into those variables; a variable already set in the environment wins.
"""

from __future__ import annotations

from collections.abc import Mapping

from the_loop.config.deployment import CliConfig

GITHUB_API_DEFAULT = "https://api.github.com"


def effective_env(env: Mapping[str, str], config: CliConfig) -> dict[str, str]:
    """``env`` plus what ``config.integrations`` says, for the provider factories.

    Args:
        env: the process environment.
        config: the loaded ``cli-config.yaml``.

    Returns:
        a new mapping; values from ``env`` are never overridden.
    """
    out = dict(env)

    def default(name: str, value: str | None) -> None:
        if value and not out.get(name):
            out[name] = value

    def credential(target: str, sources: tuple[str, ...] | str) -> None:
        names = (sources,) if isinstance(sources, str) else sources
        for name in names:
            if env.get(name):
                default(target, env[name])
                return

    github = config.integrations.github
    default("THE_LOOP_GITHUB_TRANSPORT", github.transport)
    default("THE_LOOP_GITHUB_CLI_BINARY", github.cli.binary)
    if github.api.base_url and github.api.base_url.rstrip("/") != GITHUB_API_DEFAULT:
        default("THE_LOOP_GITHUB_API_URL", github.api.base_url)
    credential("GH_TOKEN", tuple(github.api.token_env))
    credential("THE_LOOP_GITHUB_APP_ID", github.api.app_id_env)
    credential("THE_LOOP_GITHUB_PRIVATE_KEY", github.api.private_key_env)
    credential("THE_LOOP_GITHUB_PRIVATE_KEY_PATH", github.api.private_key_path_env)

    slack = config.integrations.slack
    credential("THE_LOOP_SLACK_TOKEN", slack.token_env)
    credential("THE_LOOP_SLACK_WEBHOOK_URL", slack.url_env)
    if out.get("THE_LOOP_SLACK_TOKEN") or out.get("THE_LOOP_SLACK_WEBHOOK_URL"):
        default("THE_LOOP_SLACK_TRANSPORT", slack.transport)

    jira = config.integrations.jira
    credential("THE_LOOP_JIRA_TOKEN", jira.api.token_env)
    credential("THE_LOOP_JIRA_USER", jira.api.user_env)
    default("THE_LOOP_JIRA_URL", jira.api.base_url or None)
    if out.get("THE_LOOP_JIRA_TOKEN") or out.get("THE_LOOP_JIRA_URL"):
        default("THE_LOOP_JIRA_TRANSPORT", jira.transport)
        default("THE_LOOP_JIRA_CLI_BINARY", jira.cli.binary)
    return out
