"""cli-config.yaml's integrations block reaches the providers; the environment wins."""

from the_loop.config.deployment import load_cli_config
from workers.deployment import effective_env

CONFIG = """
version: 2
integrations:
  github:
    transport: api
    api: {tokenEnv: [MY_GH_TOKEN], baseUrl: "https://ghe.example.com/api/v3"}
    cli: {binary: /opt/gh/bin/gh}
  slack:
    transport: webhook
    urlEnv: TEAM_SLACK_HOOK
"""


def test_the_file_names_transports_and_the_variables_holding_credentials():
    env = effective_env({"MY_GH_TOKEN": "t0k", "TEAM_SLACK_HOOK": "https://hooks.example/x"},
                        load_cli_config(CONFIG))
    assert env["THE_LOOP_GITHUB_TRANSPORT"] == "api"
    assert env["GH_TOKEN"] == "t0k"
    assert env["THE_LOOP_GITHUB_API_URL"] == "https://ghe.example.com/api/v3"
    assert env["THE_LOOP_GITHUB_CLI_BINARY"] == "/opt/gh/bin/gh"
    assert env["THE_LOOP_SLACK_TRANSPORT"] == "webhook"
    assert env["THE_LOOP_SLACK_WEBHOOK_URL"] == "https://hooks.example/x"
    assert "THE_LOOP_JIRA_TRANSPORT" not in env  # Jira stays unconfigured


def test_the_environment_wins_over_the_file():
    env = effective_env({"THE_LOOP_GITHUB_TRANSPORT": "cli", "GH_TOKEN": "direct",
                         "MY_GH_TOKEN": "other"}, load_cli_config(CONFIG))
    assert env["THE_LOOP_GITHUB_TRANSPORT"] == "cli" and env["GH_TOKEN"] == "direct"


def test_defaults_leave_the_environment_as_it_is():
    env = effective_env({}, load_cli_config(None))
    assert env["THE_LOOP_GITHUB_TRANSPORT"] == "auto"
    assert "GH_TOKEN" not in env and "THE_LOOP_SLACK_TRANSPORT" not in env
