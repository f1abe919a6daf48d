"""Transport choice (providers) and the start-up capability check (capabilities)."""

from __future__ import annotations

from typing import Any

import pytest

from foundation.settings import Settings, SettingsError
from integrations.capabilities import CapabilityError, check_capabilities, hooks_needing
from integrations.github import GitHubApi, GitHubConfigError, GitHubSettings
from integrations.github_cli import GitHubCli
from integrations.jira import JiraApi, JiraCli
from integrations.providers import (
    TRANSPORTS,
    GitHubProvider,
    ProviderConfigError,
    github_provider,
    resolve_github_transport,
)
from integrations.slack import SlackSdk, SlackWebhook
from tests.integrations.fakecli import FakeCli
from the_loop import wiring
from the_loop.graphs import load_graph
from the_loop.wiring import (
    OPTIONAL_INTEGRATIONS,
    WORKER_OPERATIONS,
    NoGitHubClient,
    build_providers,
    build_worker,
    required_operations,
)

TOKEN = "ghp_providers_secret"


def settings(env: dict[str, str]) -> Settings:
    return Settings.from_env(env, process="worker")


def github_provider_from_env(env: dict[str, str]) -> Any:
    """The GitHub provider the worker and the commands build from ``env``."""
    return wiring.github_provider(settings(env))


def providers(env: dict[str, str], **kw: Any) -> dict[str, Any]:
    return build_providers(settings({"GH_TOKEN": TOKEN, **env}), **kw)


def build_processor(env: dict[str, str], client: Any) -> Any:
    return build_worker(settings(env), client)


def no_gh(_name: str) -> None:
    return None


def gh_at(path: str):
    return lambda _name: path


# --------------------------------------------------------------------------- GitHub auto


def test_auto_prefers_api_when_credentials_are_present() -> None:
    settings = GitHubSettings(token=TOKEN)
    chosen, reason = resolve_github_transport("auto", settings, which=gh_at("/usr/bin/gh"))
    assert chosen == "api" and "token credentials" in reason
    provider = github_provider("auto", settings, which=gh_at("/usr/bin/gh"))
    assert provider.transport == "api"
    assert isinstance(provider(None), GitHubApi)


def test_auto_uses_cli_without_credentials_when_gh_is_on_path(tmp_path) -> None:
    gh = FakeCli(tmp_path, "gh")
    env = gh.on_path({"PATH": "/nonexistent"})
    provider = github_provider_from_env(env)
    assert provider.transport == "cli" and str(gh.path) in provider.reason
    client = provider(123)
    assert isinstance(client, GitHubCli)
    assert provider(None) is client  # gh acts as the operator, whatever the installation


def test_auto_fails_closed_naming_both_fixes() -> None:
    with pytest.raises(ProviderConfigError) as info:
        github_provider("auto", GitHubSettings(), which=no_gh)
    message = str(info.value)
    assert "GH_TOKEN" in message and "THE_LOOP_GITHUB_APP_ID" in message
    assert "install gh" in message and "gh auth login" in message


def test_explicit_api_never_falls_back_to_cli() -> None:
    with pytest.raises(GitHubConfigError, match="no GitHub credentials"):
        github_provider("api", GitHubSettings(), which=gh_at("/usr/bin/gh"))


def test_explicit_cli_never_falls_back_to_api() -> None:
    with pytest.raises(ProviderConfigError) as info:
        github_provider("cli", GitHubSettings(token=TOKEN), which=no_gh)
    assert "never falls back" in str(info.value) and TOKEN not in str(info.value)


def test_explicit_cli_is_honoured_with_credentials_present(tmp_path) -> None:
    gh = FakeCli(tmp_path, "gh")
    provider = github_provider_from_env(
        {"GH_TOKEN": TOKEN, "THE_LOOP_GITHUB_TRANSPORT": "cli",
         "THE_LOOP_GITHUB_CLI_BINARY": str(gh.path)}
    )
    assert provider.transport == "cli" and provider.reason == "cli (configured)"


def test_unknown_transport_is_refused() -> None:
    with pytest.raises(SettingsError, match="auto, api, cli or none"):
        github_provider_from_env({"THE_LOOP_GITHUB_TRANSPORT": "graphql"})
    with pytest.raises(ProviderConfigError, match="auto, api or cli"):
        github_provider("graphql", GitHubSettings())


def test_cli_host_follows_an_enterprise_api_url(tmp_path) -> None:
    gh = FakeCli(tmp_path, "gh")
    provider = github_provider_from_env(
        {"THE_LOOP_GITHUB_TRANSPORT": "cli", "THE_LOOP_GITHUB_CLI_BINARY": str(gh.path),
         "THE_LOOP_GITHUB_API_URL": "https://ghe.example.com/api/v3"}
    )
    assert provider(None).host == "ghe.example.com"  # type: ignore[attr-defined]
    explicit = github_provider_from_env(
        {"THE_LOOP_GITHUB_TRANSPORT": "cli", "THE_LOOP_GITHUB_CLI_BINARY": str(gh.path),
         "GH_HOST": "other.example.com"}
    )
    assert explicit(None).host == "other.example.com"  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- Slack, Jira


def test_slack_transports_from_the_settings() -> None:
    assert isinstance(providers({"THE_LOOP_SLACK_TOKEN": "xoxb-1"})["slack"], SlackSdk)
    hook = providers(
        {"THE_LOOP_SLACK_TRANSPORT": "webhook",
         "THE_LOOP_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/secret"}
    )["slack"]
    assert isinstance(hook, SlackWebhook) and "secret" not in repr(hook)
    with pytest.raises(ProviderConfigError, match="THE_LOOP_SLACK_TOKEN"):
        providers({"THE_LOOP_SLACK_TRANSPORT": "sdk"})
    with pytest.raises(ProviderConfigError, match="THE_LOOP_SLACK_WEBHOOK_URL"):
        providers({"THE_LOOP_SLACK_TRANSPORT": "webhook",
                   "THE_LOOP_SLACK_TOKEN": "xoxb-1"})  # no fallback to sdk
    with pytest.raises(ProviderConfigError, match="sdk or webhook"):
        providers({"THE_LOOP_SLACK_TRANSPORT": "cli"})


def test_jira_transports_from_the_settings(tmp_path) -> None:
    api = providers(
        {"THE_LOOP_JIRA_URL": "https://x.atlassian.net", "THE_LOOP_JIRA_USER": "a@b.c",
         "THE_LOOP_JIRA_TOKEN": "jira-secret"}
    )["jira"]
    assert isinstance(api, JiraApi) and "jira-secret" not in repr(api)
    jira = FakeCli(tmp_path, "jira")
    cli = providers(
        {"THE_LOOP_JIRA_TRANSPORT": "cli", "THE_LOOP_JIRA_CLI_BINARY": str(jira.path)}
    )["jira"]
    assert isinstance(cli, JiraCli)
    with pytest.raises(ProviderConfigError, match="THE_LOOP_JIRA_URL"):
        providers({"THE_LOOP_JIRA_TOKEN": "t"})
    with pytest.raises(ProviderConfigError, match="not on PATH"):
        providers({"THE_LOOP_JIRA_TRANSPORT": "cli",
                   "THE_LOOP_JIRA_CLI_BINARY": str(tmp_path / "missing")})


def test_build_providers_adds_slack_and_jira_only_when_configured(caplog) -> None:
    assert set(providers({})) == {"github"}
    assert set(providers({}, needed={"slack": frozenset({"post-message"})})) == {
        "github"}
    assert "integration slack: not configured" in caplog.text
    with pytest.raises(ProviderConfigError, match="THE_LOOP_SLACK_WEBHOOK_URL"):
        providers({"THE_LOOP_SLACK_TRANSPORT": "webhook"})
    both = providers({"THE_LOOP_SLACK_TOKEN": "xoxb-1",
                      "THE_LOOP_JIRA_URL": "https://x.atlassian.net",
                      "THE_LOOP_JIRA_USER": "a@b.c", "THE_LOOP_JIRA_TOKEN": "t"})
    assert set(both) == {"github", "slack", "jira"}


# --------------------------------------------------------------------------- capabilities


class LimitedCli:
    """A GitHub 'cli' transport that lacks add-reaction and list-pull-files."""

    name = "github"
    transport = "cli"
    operations = TRANSPORTS["github"]["cli"].operations - {"add-reaction", "list-pull-files"}


def test_gap_message_names_operation_integration_transport_and_both_fixes() -> None:
    with pytest.raises(CapabilityError) as info:
        check_capabilities(
            {"github": {"add-reaction", "comment"}},
            {"github": LimitedCli()},
            hooks={("github", "add-reaction"): ("ack-comment",)},
        )
    message = str(info.value)
    assert "hook 'ack-comment' needs github operation 'add-reaction'" in message
    assert "configured github transport 'cli' does not implement it" in message
    assert "choose a github transport that has it ('api'" in message
    assert "THE_LOOP_GITHUB_TRANSPORT" in message
    assert "remove hook 'ack-comment' from the graph" in message
    assert [(g.integration, g.op, g.transport) for g in info.value.gaps] == [
        ("github", "add-reaction", "cli")
    ]


def test_every_gap_is_reported_at_once_including_missing_integrations() -> None:
    with pytest.raises(CapabilityError) as info:
        check_capabilities(
            {"github": {"add-reaction", "list-pull-files"}, "slack": {"post-message"},
             "jira": {"delete-project"}},
            {"github": LimitedCli()},
        )
    gaps = {(g.integration, g.op): g for g in info.value.gaps}
    assert set(gaps) == {("github", "add-reaction"), ("github", "list-pull-files"),
                         ("slack", "post-message"), ("jira", "delete-project")}
    message = str(info.value)
    assert "no slack transport is configured" in message
    assert "('sdk' or 'webhook'" in message
    assert "no jira transport implements 'delete-project'" in message


def test_a_complete_provider_passes() -> None:
    check_capabilities({"github": {"comment"}}, {"github": LimitedCli()})
    check_capabilities({}, {})


@pytest.mark.parametrize("transport", sorted(TRANSPORTS["github"]))
def test_default_graph_runs_on_every_github_transport(transport: str) -> None:
    graph = load_graph()
    needed = required_operations(graph)
    assert WORKER_OPERATIONS["github"] <= needed["github"]
    provider = GitHubProvider(transport, lambda _i: None,  # type: ignore[arg-type,return-value]
                              "test", operations=TRANSPORTS["github"][transport].operations)
    skipped = check_capabilities(needed, {"github": provider}, hooks=hooks_needing(graph),
                                 optional=OPTIONAL_INTEGRATIONS)
    assert {(g.integration, g.op) for g in skipped} <= {("slack", "post-message")}


def worker_env(ns: Any, **extra: str) -> dict[str, str]:
    return {"REDIS_URL": ns.url, "THE_LOOP_REDIS_PREFIX": ns.prefix,
            "THE_LOOP_QUEUE": ns.queue_name, **extra}


def test_startup_fails_when_the_transport_lacks_an_operation_the_graph_needs(
    redis_ns: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    gh = FakeCli(tmp_path, "gh")
    monkeypatch.setattr(GitHubCli, "operations", GitHubCli.operations - {"list-pull-files"})
    env = worker_env(redis_ns, THE_LOOP_GITHUB_TRANSPORT="cli",
                     THE_LOOP_GITHUB_CLI_BINARY=str(gh.path))
    with pytest.raises(CapabilityError) as info:
        build_processor(env, redis_ns.client)
    message = str(info.value)
    for part in ("'list-pull-files'", "github", "transport 'cli'", "('api'",
                 "remove hook 'is-docs-only' from the graph"):
        assert part in message, part
    assert gh.calls == []  # decided before any work item, without running gh


def test_startup_with_complete_transports(redis_ns: Any, tmp_path: Any) -> None:
    processor = build_processor(worker_env(redis_ns, GH_TOKEN=TOKEN), redis_ns.client)
    assert processor.github.transport == "api"  # type: ignore[union-attr]
    assert processor.integrations == {}
    gh = FakeCli(tmp_path, "gh")
    processor = build_processor(
        worker_env(redis_ns, THE_LOOP_GITHUB_TRANSPORT="cli",
                   THE_LOOP_GITHUB_CLI_BINARY=str(gh.path),
                   THE_LOOP_SLACK_TRANSPORT="webhook",
                   THE_LOOP_SLACK_WEBHOOK_URL="https://hooks.slack.com/services/x"),
        redis_ns.client,
    )
    assert processor.github.transport == "cli"  # type: ignore[union-attr]
    assert isinstance(processor.integrations["slack"]._inner, SlackWebhook)  # observed


def test_a_configured_optional_integration_is_checked_too(
    redis_ns: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = load_graph()
    if ("slack", "post-message") not in hooks_needing(graph):
        pytest.skip("the default graph sends no Slack message")
    monkeypatch.setattr(SlackWebhook, "operations", frozenset())
    env = worker_env(redis_ns, GH_TOKEN=TOKEN, THE_LOOP_SLACK_TRANSPORT="webhook",
                     THE_LOOP_SLACK_WEBHOOK_URL="https://hooks.slack.com/services/x")
    with pytest.raises(CapabilityError, match="slack transport 'webhook' does not implement"):
        build_processor(env, redis_ns.client)


def test_an_unconfigured_optional_integration_is_skipped(redis_ns: Any) -> None:
    skipped = check_capabilities({"slack": {"post-message"}}, {},
                                 hooks={("slack", "post-message"): ("notify",)},
                                 optional={"slack"})
    assert [(g.integration, g.op, g.transport) for g in skipped] == [
        ("slack", "post-message", None)]
    processor = build_processor(worker_env(redis_ns, GH_TOKEN=TOKEN), redis_ns.client)
    assert "slack" not in processor.integrations


def test_startup_without_any_github_transport_fails_closed(redis_ns: Any, tmp_path) -> None:
    env = worker_env(redis_ns, THE_LOOP_GITHUB_CLI_BINARY=str(tmp_path / "no-gh"))
    with pytest.raises(NoGitHubClient, match="GH_TOKEN"):
        build_processor(env, redis_ns.client)
