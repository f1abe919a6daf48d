"""A bad setting is refused naming the variable (or file and key) and the expected form,
never its value: a token pasted into the App id variable, a password in a Redis URL or a
URL with credentials must not reach a log line, an exception or a terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

import foundation.settings as settings_module
from foundation.config.deployment import load_cli_config
from foundation.config.loader import InvalidConfigError
from foundation.settings import Settings, SettingsError
from tests.conftest import REPO_ROOT
from the_loop.cli import main

TOKEN = "ghp_Zq9PastedTokenValue0123456789abcdef"
PASSWORD = "Pa/ss?Word#Zq9"
BASE = {"THE_LOOP_WEBHOOK_SECRET": "s" * 24, "THE_LOOP_ENV_FILE": ""}


def refusal(env: dict[str, str], process: str = "worker") -> str:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({**BASE, **env}, process=process)
    return str(caught.value)


#: (variable, bad value, the secret part that must not appear, the form the message names)
CASES = [
    ("THE_LOOP_GITHUB_APP_ID", TOKEN, TOKEN, "whole number"),
    ("REDIS_URL", f"redis://:{PASSWORD}@redis.internal:6379/0", "ss?Word", "percent-encoded"),
    ("REDIS_URL", f"redis://default:{TOKEN}@redis.internal:port/0", TOKEN, "redis://"),
    ("REDIS_URL", f"redis://default:{TOKEN}@redis.internal:6379/db", TOKEN, "database number"),
    ("REDIS_URL", f"http://default:{TOKEN}@redis.internal/0", TOKEN, "redis://"),
    ("THE_LOOP_GITHUB_API_URL", f"https://x-access-token:{TOKEN}@ghe.example.com", TOKEN,
     "/api/v3"),
    ("THE_LOOP_GITHUB_API_URL", TOKEN, TOKEN, "http(s) URL"),
    ("THE_LOOP_GITHUB_TIMEOUT", TOKEN, TOKEN, "whole number"),
    ("THE_LOOP_GITHUB_RETRIES", TOKEN, TOKEN, "whole number"),
    ("THE_LOOP_GITHUB_WRITE_INTERVAL", TOKEN, TOKEN, "number of seconds"),
    ("THE_LOOP_GITHUB_READ_INTERVAL", TOKEN, TOKEN, "number of seconds"),
    ("THE_LOOP_RUNNER_CONCURRENCY", TOKEN, TOKEN, "whole number"),
    ("THE_LOOP_GITHUB_TRANSPORT", TOKEN, TOKEN, "auto, api, cli or none"),
    ("THE_LOOP_HARNESS", TOKEN, TOKEN, "claude-code"),
    ("THE_LOOP_LOG_LEVEL", TOKEN, TOKEN, "DEBUG, INFO"),
    ("THE_LOOP_LOG_FORMAT", TOKEN, TOKEN, "json or text"),
]


@pytest.mark.parametrize("name,value,secret,form", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_bad_value_is_named_by_its_variable_and_never_echoed(name, value, secret, form):
    message = refusal({name: value, "GH_TOKEN": "x"})
    assert name in message and form in message
    assert secret.lower() not in message.lower()


def test_no_variable_the_settings_read_echoes_its_value():
    """Every variable the settings package names, given values that are each wrong for
    some rule (a token, URLs with credentials, text with spaces), in every process."""
    source = "\n".join(path.read_text(encoding="utf-8") for path in
                       sorted((REPO_ROOT / "foundation" / "settings").glob("*.py")))
    names = set(re.findall(r'"((?:THE_LOOP|REDIS|GH|GITHUB|PORT|PROMETHEUS)_?[A-Z0-9_]*)"',
                           source))
    names |= {v for k, v in vars(settings_module).items()
              if k.startswith("ENV_") and isinstance(v, str)}
    names -= {"THE_LOOP_CONFIG", "THE_LOOP_ENV_FILE"}  # name a file, which errors name
    assert len(names) > 40
    marker = "Zq9SecretMarker"
    values = [f"ghp_{marker}", f"redis://user:{marker}@host:6379/0", f"https://u:{marker}@h",
              f"{marker} with spaces", f"https://{marker}.example.com", f"1{marker}",
              f"unix://:{marker}@/tmp/x?db=zz"]
    echoed = {}
    for name in sorted(names):
        for value in values:
            for process in ("receiver", "gunicorn", "worker", "command"):
                try:
                    Settings.from_env({**BASE, name: value}, process=process)
                except SettingsError as exc:
                    if marker.lower() in str(exc).lower():
                        echoed[name] = str(exc)
    assert echoed == {}


def test_a_config_file_value_outside_its_choices_is_not_echoed():
    text = f"version: 2\nintegrations:\n  github:\n    transport: {TOKEN}\n"
    with pytest.raises(InvalidConfigError) as caught:
        load_cli_config(text)
    message = str(caught.value)
    assert "integrations.github.transport" in message and "must be one of" in message
    assert TOKEN.lower() not in message.lower()


def test_the_worker_command_names_the_app_id_variable_not_the_pasted_token():
    out = CliRunner().invoke(main, ["worker", "--burst"], env={
        **BASE, "THE_LOOP_GITHUB_APP_ID": TOKEN, "THE_LOOP_GITHUB_PRIVATE_KEY": "x"})
    assert out.exit_code != 0
    assert "THE_LOOP_GITHUB_APP_ID" in out.output and TOKEN not in out.output


@pytest.mark.parametrize("module", ["the_loop.gunicorn_conf", "the_loop.wsgi"])
def test_the_receivers_start_up_names_redis_url_not_its_password(module):
    """gunicorn's master (its config module) and each of its workers (the WSGI module)
    read the settings at start-up; a refused REDIS_URL stops them naming it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THE_LOOP_", "REDIS"))}
    env.update(BASE, REDIS_URL=f"redis://:{PASSWORD}@redis.internal:6379/0")
    done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "REDIS_URL" in done.stderr and "ss?Word" not in done.stderr + done.stdout


def test_a_good_redis_url_with_an_encoded_password_is_taken():
    url = "redis://default:Pa%2Fss%3FWord@redis.internal:6380/3"
    assert Settings.from_env({**BASE, "REDIS_URL": url}, process="receiver"
                             ).receiver.redis_url == url
    sock = "unix:///run/redis.sock?db=2"
    assert Settings.from_env({**BASE, "REDIS_URL": sock}, process="receiver"
                             ).receiver.redis_url == sock


def test_the_worker_transports_name_their_variable_not_the_value():
    """The Slack and Jira transports are chosen when the worker builds its providers."""
    from integrations.providers import ProviderConfigError, jira_provider, slack_provider
    from integrations.providers import resolve_github_transport as github_transport

    github = Settings.from_env({**BASE, "GH_TOKEN": "x"}, process="worker").require_github()
    for build, name in ((lambda: slack_provider(TOKEN), "THE_LOOP_SLACK_TRANSPORT"),
                        (lambda: jira_provider(TOKEN), "THE_LOOP_JIRA_TRANSPORT"),
                        (lambda: github_transport(TOKEN, github), "THE_LOOP_GITHUB_TRANSPORT")):
        with pytest.raises(ProviderConfigError) as caught:
            build()
        assert name in str(caught.value) and TOKEN.lower() not in str(caught.value).lower()


@pytest.mark.parametrize("env,form", [
    ({"THE_LOOP_REDIS_SENTINELS": "s0:26379"}, "THE_LOOP_REDIS_SENTINEL_MASTER is not set"),
    ({"THE_LOOP_REDIS_SENTINEL_MASTER": "mymaster"}, "THE_LOOP_REDIS_SENTINELS is not set"),
    ({"THE_LOOP_REDIS_SENTINELS": f"s0:26379,{TOKEN}",
      "THE_LOOP_REDIS_SENTINEL_MASTER": "m"}, "fix entry 2"),
    ({"THE_LOOP_REDIS_SENTINELS": "s0:99999", "THE_LOOP_REDIS_SENTINEL_MASTER": "m"},
     "HOST:PORT"),
    ({"THE_LOOP_REDIS_SENTINELS": "s0:1", "THE_LOOP_REDIS_SENTINEL_MASTER": f"a {TOKEN}"},
     "THE_LOOP_REDIS_SENTINEL_MASTER must be a name"),
    ({"THE_LOOP_REDIS_SENTINELS": "s0:1", "THE_LOOP_REDIS_SENTINEL_MASTER": "m",
      "REDIS_URL": "unix:///tmp/redis.sock"}, "REDIS_URL is a unix:// socket"),
    ({"THE_LOOP_RECEIVER_REPLICAS": TOKEN}, "THE_LOOP_RECEIVER_REPLICAS must be a whole number"),
    ({"THE_LOOP_RECEIVER_REPLICAS": "-1"}, ">= 0"),
    ({"THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS": "0"}, "milliseconds"),
])
def test_sentinel_and_replica_settings_are_refused_with_the_fix(env, form):
    message = refusal(env, "receiver")
    assert form in message
    assert TOKEN not in message


def test_sentinel_and_replica_settings_reach_every_process():
    """Both variables or neither; the primary's credentials stay REDIS_URL's; the Sentinel
    password never shows in repr."""
    settings = Settings.from_env({
        **BASE, "THE_LOOP_REDIS_SENTINELS": " s0:26379 , [::1]:26380",
        "THE_LOOP_REDIS_SENTINEL_MASTER": "mymaster",
        "THE_LOOP_REDIS_SENTINEL_PASSWORD": PASSWORD, "REDIS_URL": "rediss://:pw@x/2",
        "THE_LOOP_RECEIVER_REPLICAS": "1", "THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS": "250"},
        process="receiver")
    sentinel = settings.receiver.sentinel
    assert sentinel is not None and sentinel == settings.worker.sentinel
    assert sentinel.hosts == (("s0", 26379), ("::1", 26380))
    assert (sentinel.master, sentinel.password) == ("mymaster", PASSWORD)
    assert (settings.receiver.replicas, settings.receiver.replicas_timeout_ms) == (1, 250)
    assert PASSWORD not in repr(settings)
    plain = Settings.from_env(BASE, process="receiver")
    assert (plain.worker.sentinel, plain.receiver.replicas,
            plain.receiver.replicas_timeout_ms) == (None, 0, 500)
