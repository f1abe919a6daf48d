"""foundation.settings: one Settings object read once from the environment and
cli-config.yaml, validated with the same rules in every process."""

from __future__ import annotations

import runpy

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from foundation.settings import DEFAULT_MAX_BODY_BYTES, Settings, SettingsError
from the_loop.cli import main
from the_loop.wiring import build_receiver

SECRET = {"THE_LOOP_WEBHOOK_SECRET": "s3cret"}


@pytest.fixture(scope="module")
def rsa_pem() -> tuple[str, object]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM,
                            serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption()).decode()
    return pem, key.public_key()


def github(env: dict[str, str]):
    return Settings.from_env(env, process="command").require_github()


# ----------------------------------------------------------------------------- receiver


def test_defaults() -> None:
    s = Settings.from_env(SECRET, process="receiver").receiver
    assert s.secrets == (b"s3cret",)
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert s.queue_name == "the-loop"
    assert s.redis_prefix == "the-loop"
    assert s.max_body_bytes == DEFAULT_MAX_BODY_BYTES == 26214400


def test_all_variables() -> None:
    settings = Settings.from_env(
        {
            "THE_LOOP_WEBHOOK_SECRET": "new, ,old,",
            "REDIS_URL": "redis://:pw@redis.internal:6380/3",
            "THE_LOOP_QUEUE": "q1",
            "THE_LOOP_REDIS_PREFIX": "p1",
            "THE_LOOP_MAX_BODY_BYTES": "1024",
        },
        process="receiver",
    )
    s, w = settings.receiver, settings.worker
    assert s.secrets == (b"new", b"old")
    assert (s.redis_url, s.queue_name, s.redis_prefix, s.max_body_bytes) == (
        "redis://:pw@redis.internal:6380/3", "q1", "p1", 1024,
    )
    assert (w.redis_url, w.queue, w.prefix) == (s.redis_url, s.queue_name, s.redis_prefix)


@pytest.mark.parametrize("value", [None, "", " , ,"])
def test_missing_secret_names_variable(value: str | None) -> None:
    env = {} if value is None else {"THE_LOOP_WEBHOOK_SECRET": value}
    with pytest.raises(SettingsError, match="THE_LOOP_WEBHOOK_SECRET") as info:
        Settings.from_env(env, process="receiver")
    assert "export" in str(info.value)
    assert Settings.from_env(env, process="worker").receiver.secrets == ()


def test_secrets_and_redis_password_not_in_repr(rsa_pem) -> None:
    s = Settings.from_env(
        {"THE_LOOP_WEBHOOK_SECRET": "topsecret,oldsecret",
         "REDIS_URL": "redis://user:hunter2@h:6379/0", "GH_TOKEN": "ghp_hidden",
         "THE_LOOP_SLACK_TOKEN": "xoxb-hidden", "THE_LOOP_JIRA_TOKEN": "jira-hidden",
         "THE_LOOP_JIRA_URL": "https://jira.example", "THE_LOOP_JIRA_USER": "a@b.c"},
        process="command",
    )
    text = repr(s) + str(s) + repr(s.receiver) + repr(s.worker)
    for secret in ("topsecret", "oldsecret", "hunter2", "ghp_hidden", "xoxb-hidden",
                   "jira-hidden"):
        assert secret not in text
    assert "2 hidden" in repr(s.receiver)


# ----------------------------------------------------------------------------- one rule


BAD_VALUES = [
    ("THE_LOOP_MAX_BODY_BYTES", "lots"),
    ("THE_LOOP_MAX_BODY_BYTES", "-1"),
    ("REDIS_URL", "http://example.com"),
    ("THE_LOOP_QUEUE", "has space"),
    ("THE_LOOP_QUEUE", "q*"),
    ("THE_LOOP_REDIS_PREFIX", "glob*"),
    ("THE_LOOP_REDIS_PREFIX", "a{b}"),
    ("THE_LOOP_LOCK_TIMEOUT", "soon"),
    ("THE_LOOP_DELIVERY_BACKOFF", "10,x"),
    ("THE_LOOP_SPEC_DIR", "specs/{name}"),
    ("THE_LOOP_LOG_FORMAT", "xml"),
    ("THE_LOOP_LOG_LEVEL", "LOUD"),
    ("THE_LOOP_GITHUB_WRITES_PER_MINUTE", "5"),
    ("THE_LOOP_WORKER_METRICS_PORT", "70000"),
]


@pytest.mark.parametrize(("name", "value"), BAD_VALUES)
def test_every_process_refuses_a_bad_value_with_the_same_message(name, value) -> None:
    """The receiver, the worker and the commands read one variable with one rule."""
    env = {"THE_LOOP_WEBHOOK_SECRET": "topsecret", name: value}
    messages = set()
    for process in ("receiver", "gunicorn", "worker", "command"):
        with pytest.raises(SettingsError, match=name) as info:
            Settings.from_env(env, process=process)  # type: ignore[arg-type]
        messages.add(str(info.value))
    assert len(messages) == 1
    assert "topsecret" not in messages.pop()


@pytest.mark.parametrize(("name", "value"), [
    ("THE_LOOP_QUEUE", "has space"),
    ("THE_LOOP_REDIS_PREFIX", "glob*"),
    ("REDIS_URL", "http://example.com"),
])
def test_receiver_and_worker_startups_refuse_the_same_value_alike(name, value, monkeypatch):
    """`the-loop worker` and the receiver's WSGI module (gunicorn's workers) stop at
    start-up on the same bad value, with the same message (the worker used to accept a
    queue name or prefix the receiver refused)."""
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", "topsecret")
    monkeypatch.delenv("THE_LOOP_CONFIG", raising=False)
    monkeypatch.setenv(name, value)
    expected = str(pytest.raises(SettingsError, Settings.from_env, {name: value}).value)
    with pytest.raises(SettingsError) as receiver:
        runpy.run_module("the_loop.wsgi")
    worker = CliRunner().invoke(main, ["worker", "--burst"])
    assert str(receiver.value) == expected
    assert worker.exit_code == 1 and expected in " ".join(worker.output.split())


def test_replay_reads_the_secret_as_the_receiver_does(monkeypatch, tmp_path) -> None:
    """Whitespace around a listed secret is stripped in both."""
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", " first , second")
    payload = tmp_path / "ping" / "p.json"
    payload.parent.mkdir()
    payload.write_text("{}")
    sent = []

    def post(self, url, data, headers, timeout):
        sent.append(headers["X-Hub-Signature-256"])
        raise __import__("requests").ConnectionError("no receiver here")

    monkeypatch.setattr("requests.Session.post", post)
    CliRunner().invoke(main, ["replay", str(payload), "--url", "http://127.0.0.1:1/webhook"])
    from webhook.signature import sign

    assert sent == [sign(b"{}", b"first")]
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", " , ")
    out = CliRunner().invoke(main, ["replay", str(payload), "--url", "http://x/webhook"])
    assert out.exit_code == 1 and "THE_LOOP_WEBHOOK_SECRET is not set" in out.output


def test_build_receiver_needs_the_secret() -> None:
    with pytest.raises(SettingsError, match="THE_LOOP_WEBHOOK_SECRET"):
        build_receiver(Settings.from_env({}, process="command"))


# ----------------------------------------------------------------------------- worker


def test_worker_defaults_and_variables() -> None:
    w = Settings.from_env({
        "THE_LOOP_LOCK_TIMEOUT": "60", "THE_LOOP_CONFIG_TTL": "30",
        "THE_LOOP_BOT_LOGINS": " The-Loop[bot] ,,x", "THE_LOOP_DELIVERY_BACKOFF": "1, 2",
        "THE_LOOP_REAP_INTERVAL": "0.5", "THE_LOOP_SPEC_DIR": "docs/{number}",
    }).worker
    assert (w.lock_timeout, w.config_ttl, w.reap_interval, w.spec_dir) == (
        60, 30, 0.5, "docs/{number}")
    assert w.bot_logins == frozenset({"the-loop[bot]", "x"})
    assert w.delivery_backoff == (1.0, 2.0) and w.backoff(5) == 2.0
    assert Settings.from_env({}).worker.delivery_attempts == 5


def test_write_limits() -> None:
    assert Settings.from_env({}).limits.per_minute == 80
    with pytest.raises(SettingsError, match="must not exceed"):
        Settings.from_env({"THE_LOOP_GITHUB_WRITES_PER_MINUTE": "600"})


# ----------------------------------------------------------------------------- file


CONFIG = """
version: 2
integrations:
  github:
    transport: api
    api:
      tokenEnv: [MY_GH_TOKEN]
      baseUrl: "https://ghe.example.com/api/v3"
      appIdEnv: MY_APP_ID
      privateKeyEnv: MY_APP_KEY
    cli: {binary: /opt/gh/bin/gh}
  slack:
    transport: webhook
    urlEnv: TEAM_SLACK_HOOK
queue: {name: from-file}
state: {prefix: file-prefix, lockTimeout: 90}
"""


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "cli-config.yaml"
    path.write_text(CONFIG)
    return str(path)


def test_the_file_names_transports_and_the_variables_holding_credentials(config_file, rsa_pem):
    s = Settings.from_env({"THE_LOOP_CONFIG": config_file, "MY_GH_TOKEN": "t0k",
                           "MY_APP_ID": "7", "MY_APP_KEY": rsa_pem[0],
                           "TEAM_SLACK_HOOK": "https://hooks.example/x"})
    gh = s.require_github()
    assert (gh.transport, gh.token, gh.api_url, gh.cli_binary) == (
        "api", "t0k", "https://ghe.example.com/api/v3", "/opt/gh/bin/gh")
    assert (gh.app_id, gh.private_key, gh.mode) == (7, rsa_pem[0].strip(), "app")
    assert s.slack is not None and (s.slack.transport, s.slack.webhook_url) == (
        "webhook", "https://hooks.example/x")
    assert s.jira is not None and not s.jira.configured
    assert (s.worker.queue, s.worker.prefix, s.worker.lock_timeout) == (
        "from-file", "file-prefix", 90)
    assert s.receiver.queue_name == "from-file"
    assert s.child_env()["GH_TOKEN"] == "t0k"  # for gh, under the name it reads


def test_the_environment_wins_over_the_file(config_file):
    s = Settings.from_env({"THE_LOOP_CONFIG": config_file, "THE_LOOP_GITHUB_TRANSPORT": "cli",
                           "GH_TOKEN": "direct", "MY_GH_TOKEN": "other",
                           "THE_LOOP_QUEUE": "env-queue",
                           "THE_LOOP_GITHUB_API_URL": "https://other.example/api/v3"})
    gh = s.require_github()
    assert (gh.transport, gh.token, gh.api_url) == (
        "cli", "direct", "https://other.example/api/v3")
    assert s.worker.queue == "env-queue"


def test_defaults_leave_integrations_unconfigured():
    s = Settings.from_env({})
    assert s.require_github().transport == "auto" and s.require_github().token is None
    assert s.slack is not None and not s.slack.configured


def test_a_missing_or_invalid_file_names_it_and_the_fix(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(SettingsError, match="does not exist") as info:
        Settings.from_env({"THE_LOOP_CONFIG": missing}, process="receiver")
    assert missing in str(info.value) and "THE_LOOP_CONFIG" in str(info.value)
    bad = tmp_path / "cli-config.yaml"
    bad.write_text("version: 2\nqueue: {nmae: x}\n")
    with pytest.raises(SettingsError, match=r"cli-config.yaml:2: queue.nmae: unknown key"):
        Settings.from_env({"THE_LOOP_CONFIG": str(bad)}, process="worker")


# ----------------------------------------------------------------------------- GitHub


def test_settings_defaults() -> None:
    s = github({})
    assert (s.api_url, s.app_id, s.private_key, s.token) == (
        "https://api.github.com",
        None,
        None,
        None,
    )
    assert (s.write_interval, s.read_interval, s.timeout, s.retries) == (1.0, 0.25, 15, 2)
    assert s.mode is None


def test_settings_full_app(tmp_path, rsa_pem) -> None:
    pem = rsa_pem[0]
    key_file = tmp_path / "app.pem"
    key_file.write_text(pem)
    s = github(
        {
            "THE_LOOP_GITHUB_API_URL": "https://ghe.example.com/api/v3/",
            "THE_LOOP_GITHUB_APP_ID": "123",
            "THE_LOOP_GITHUB_PRIVATE_KEY_PATH": str(key_file),
            "GITHUB_TOKEN": "ghp_fallback",
            "THE_LOOP_GITHUB_WRITE_INTERVAL": "0.5",
            "THE_LOOP_GITHUB_READ_INTERVAL": "0",
            "THE_LOOP_GITHUB_TIMEOUT": "30",
            "THE_LOOP_GITHUB_RETRIES": "0",
        }
    )
    assert s.api_url == "https://ghe.example.com/api/v3"
    assert (s.app_id, s.private_key, s.token) == (123, pem, "ghp_fallback")
    assert (s.write_interval, s.read_interval, s.timeout, s.retries) == (0.5, 0.0, 30, 0)
    assert s.mode == "app"


def test_settings_token_mode_prefers_gh_token() -> None:
    s = github({"GH_TOKEN": "ghp_a", "GITHUB_TOKEN": "ghp_b"})
    assert s.token == "ghp_a" and s.mode == "token"


def test_settings_inline_key_with_escaped_newlines(rsa_pem) -> None:
    pem = rsa_pem[0]
    s = github(
        {
            "THE_LOOP_GITHUB_APP_ID": "1",
            "THE_LOOP_GITHUB_PRIVATE_KEY": pem.strip().replace("\n", "\\n"),
        }
    )
    assert s.private_key == pem.strip()


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"THE_LOOP_GITHUB_APP_ID": "abc"}, ["THE_LOOP_GITHUB_APP_ID"]),
        ({"THE_LOOP_GITHUB_APP_ID": "0"}, ["THE_LOOP_GITHUB_APP_ID"]),
        (
            {"THE_LOOP_GITHUB_APP_ID": "1"},
            ["THE_LOOP_GITHUB_APP_ID", "THE_LOOP_GITHUB_PRIVATE_KEY"],
        ),
        (
            {
                "THE_LOOP_GITHUB_APP_ID": "1",
                "THE_LOOP_GITHUB_PRIVATE_KEY_PATH": "/nonexistent/k.pem",
            },
            ["THE_LOOP_GITHUB_PRIVATE_KEY_PATH"],
        ),
        (
            {"THE_LOOP_GITHUB_APP_ID": "1", "THE_LOOP_GITHUB_PRIVATE_KEY": "sekrit-not-a-pem"},
            ["THE_LOOP_GITHUB_PRIVATE_KEY"],
        ),
        (
            {
                "THE_LOOP_GITHUB_APP_ID": "1",
                "THE_LOOP_GITHUB_PRIVATE_KEY": "sekrit-not-a-pem",
                "THE_LOOP_GITHUB_PRIVATE_KEY_PATH": "/k.pem",
            },
            ["THE_LOOP_GITHUB_PRIVATE_KEY", "THE_LOOP_GITHUB_PRIVATE_KEY_PATH"],
        ),
        ({"THE_LOOP_GITHUB_WRITE_INTERVAL": "soon"}, ["THE_LOOP_GITHUB_WRITE_INTERVAL"]),
        ({"THE_LOOP_GITHUB_READ_INTERVAL": "-1"}, ["THE_LOOP_GITHUB_READ_INTERVAL"]),
        ({"THE_LOOP_GITHUB_TIMEOUT": "1.5"}, ["THE_LOOP_GITHUB_TIMEOUT"]),
        ({"THE_LOOP_GITHUB_RETRIES": "-1"}, ["THE_LOOP_GITHUB_RETRIES"]),
        ({"THE_LOOP_GITHUB_API_URL": "api.github.com"}, ["THE_LOOP_GITHUB_API_URL"]),
    ],
)
def test_settings_errors_name_variable(env: dict[str, str], names: list[str]) -> None:
    with pytest.raises(SettingsError) as info:
        github(env)
    assert isinstance(info.value, ValueError)
    for name in names:
        assert name in str(info.value)
    assert "sekrit" not in str(info.value)


def test_key_without_app_id(rsa_pem) -> None:
    with pytest.raises(SettingsError, match="THE_LOOP_GITHUB_APP_ID") as info:
        github({"THE_LOOP_GITHUB_PRIVATE_KEY": rsa_pem[0]})
    assert "BEGIN" not in str(info.value)




# ----------------------------------------------------------------------------- one reader


#: Files that may touch ``os.environ``: the settings package's one reader of the
#: environment, and the entry points that hand ``os.environ`` to it (gunicorn_conf also
#: publishes the metrics directory to its workers). lint_artifacts' parser directory is
#: read where the graph is compiled (its load-time check), which takes no settings yet.
ENVIRON_ALLOWED = {
    "foundation/settings/environment.py", "the_loop/wsgi.py", "the_loop/gunicorn_conf.py",
    "the_loop/cli/base.py", "the_loop/cli/config_upgrade.py", "the_loop/cli/deliveries.py",
    "foundation/hooks/lint_artifacts.py", "the_loop/cli/sandbox.py",
    "the_loop/sandbox/demo_agent.py",
}


def test_only_the_settings_and_the_entry_points_read_the_environment() -> None:
    import ast

    from tests.conftest import REPO_ROOT

    readers = set()
    for package in ("graph", "foundation", "integrations", "webhook", "workers", "runner",
                    "the_loop"):
        for path in (REPO_ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
                        and isinstance(node.value, ast.Name) and node.value.id == "os"):
                    readers.add(path.relative_to(REPO_ROOT).as_posix())
    assert readers <= ENVIRON_ALLOWED, sorted(readers - ENVIRON_ALLOWED)


# -- the review-record signing key ----------------------------------------------------------

def test_the_signing_key_is_read_from_its_variable_or_file_and_never_shown(tmp_path) -> None:
    from tests.conftest import TEST_SIGNER

    pem = TEST_SIGNER.private_pem().decode()
    inline = Settings.from_env({"THE_LOOP_SIGNING_KEY": pem.replace("\n", "\\n")})
    assert inline.worker.signer is not None
    assert inline.worker.signer.key_id == TEST_SIGNER.key_id
    key_file = tmp_path / "signing.pem"
    key_file.write_text(pem)
    settings = Settings.from_env({"THE_LOOP_SIGNING_KEY_FILE": str(key_file),
                                  "PATH": "/usr/bin"})
    assert settings.worker.signer is not None
    assert "BEGIN PRIVATE KEY" not in repr(settings) and pem not in repr(settings)
    assert "THE_LOOP_SIGNING_KEY_FILE" not in settings.child_env()
    assert Settings.from_env({"THE_LOOP_WEBHOOK_SECRET": "s", "THE_LOOP_SIGNING_KEY": pem},
                             process="receiver").worker.signer is None  # not its key


@pytest.mark.parametrize("env,named", [
    ({"THE_LOOP_SIGNING_KEY": "hunter2-not-a-key"}, "THE_LOOP_SIGNING_KEY"),
    ({"THE_LOOP_SIGNING_KEY_FILE": "/nonexistent/hunter2.pem"}, "THE_LOOP_SIGNING_KEY_FILE"),
    ({"THE_LOOP_SIGNING_KEY": "x", "THE_LOOP_SIGNING_KEY_FILE": "y"}, "keep only one"),
])
def test_a_bad_signing_key_names_the_variable_and_the_fix_never_the_value(env, named) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)
    assert named in str(raised.value) and "hunter2" not in str(raised.value)


def test_harness_env_may_not_name_the_signing_key(tmp_path) -> None:
    config = tmp_path / "cli-config.yaml"
    config.write_text("version: 2\nharness:\n  adapter: command\n  argv: [agent]\n"
                      "  env: [ANTHROPIC_API_KEY, THE_LOOP_SIGNING_KEY_FILE]\n")
    with pytest.raises(SettingsError, match="harness.env names THE_LOOP_SIGNING_KEY_FILE"):
        Settings.from_env({"THE_LOOP_CONFIG": str(config)})


def test_the_jira_api_version_is_the_variable_or_asked_with_the_site_as_fallback():
    from foundation.settings import Settings, SettingsError

    base = {"GH_TOKEN": "x", "THE_LOOP_JIRA_TOKEN": "t", "THE_LOOP_JIRA_AUTH": "bearer"}
    cloud = Settings.from_env({**base, "THE_LOOP_JIRA_URL": "https://acme.atlassian.net"},
                              process="worker")
    center = Settings.from_env({**base, "THE_LOOP_JIRA_URL": "https://jira.acme.example"},
                               process="worker")
    forced = Settings.from_env({**base, "THE_LOOP_JIRA_URL": "https://jira.acme.example",
                                "THE_LOOP_JIRA_API_VERSION": "3"}, process="worker")
    assert (cloud.jira.api_version, center.jira.api_version, forced.jira.api_version) == (
        None, None, 3)  # unset: the transport asks the site (serverInfo)
    assert (cloud.jira.site_api_version, center.jira.site_api_version) == (3, 2)
    import pytest

    for bad in ("4", "v2", "3.0"):
        with pytest.raises(SettingsError) as info:
            Settings.from_env({**base, "THE_LOOP_JIRA_URL": "https://j.example",
                               "THE_LOOP_JIRA_API_VERSION": bad}, process="worker")
        message = str(info.value)
        assert "THE_LOOP_JIRA_API_VERSION must be 2" in message and "=2" in message
        assert repr(bad) not in message and "got" not in message  # not echoed
