"""The one reader of the-loop's environment: :class:`_Reader` turns a mapping of
environment variables (and the loaded ``cli-config.yaml``) into the settings' sections,
checking each value once; every problem raises :class:`SettingsError` naming the variable
(or the file, line and key) and the fix, never a secret value.

:meth:`foundation.settings.Settings.from_env` is its only caller.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import re
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from foundation.config.deployment import CONFIG_ENV, CliConfig, load_cli_config
from foundation.config.loader import ConfigFileError
from foundation.config.repository import DEFAULT_SPEC_DIR
from foundation.settings.errors import SettingsError
from foundation.settings.github import (
    DEFAULT_API_URL,
    ENV_API_URL,
    ENV_APP_ID,
    ENV_GITHUB_CLI_BINARY,
    ENV_GITHUB_TRANSPORT,
    ENV_KEY,
    ENV_KEY_PATH,
    GITHUB_TRANSPORTS,
    GitHubSettings,
    WriteLimits,
)
from foundation.settings.harness import (
    ENV_HARNESS,
    ENV_HARNESS_BINARY,
    ENV_RUNNER_CONCURRENCY,
    ENV_WORKSPACE_DIR,
    HARNESS_ADAPTERS,
    HARNESS_BINARIES,
    HarnessSettings,
    RunnerSettings,
    harness_env,
)
from foundation.settings.integrations import JIRA_API_VERSIONS, JiraSettings, SlackSettings
from foundation.settings.observability import LOG_FORMATS, LogSettings
from foundation.settings.queues import (
    DEFAULT_REDIS_URL,
    DEFAULT_REPLICAS_TIMEOUT_MS,
    ENV_RECEIVER_REPLICAS,
    ENV_RECEIVER_REPLICAS_TIMEOUT,
    ENV_SECRET,
    ENV_SENTINEL_MASTER,
    ENV_SENTINEL_PASSWORD,
    ENV_SENTINEL_USERNAME,
    ENV_SENTINELS,
    RedisSentinel,
)
from foundation.settings.web import (
    ENV_API_TOKENS,
    ENV_CLIENT_ID,
    ENV_CLIENT_SECRET,
    ENV_MERMAID_DIR,
    ENV_PUBLIC_URL,
    ENV_SESSION_SECRET,
    ENV_SESSION_TTL,
    ENV_UI_MEMBERS,
    MIN_TOKEN_CHARS,
    DashboardSettings,
    WebSettings,
)
from foundation.signing import ENV_SIGNING_KEY, ENV_SIGNING_KEY_FILE, load_signer
from graph.compile import duration
from graph.signing import Signer, SigningKeyError

log = logging.getLogger("foundation.settings")
_N = TypeVar("_N", int, float)  # the numbers _Reader._positive reads

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_GITHUB_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98})")


def config_path(env: Mapping[str, str]) -> str | None:
    """The ``cli-config.yaml`` path ``$THE_LOOP_CONFIG`` names, or ``None`` when unset."""
    return (env.get(CONFIG_ENV) or "").strip() or None


def _no_secret() -> SettingsError:
    return SettingsError(
        f"{ENV_SECRET} is not set: set it to the webhook secret of the "
        "GitHub App (App settings > Webhook secret), e.g. "
        f"`export {ENV_SECRET}=...`; during rotation list the new and "
        "the old secret separated by a comma"
    )


def _deployment(env: Mapping[str, str]) -> CliConfig:
    """The ``cli-config.yaml`` ``$THE_LOOP_CONFIG`` names; every default when unset."""
    path = config_path(env)
    if path is None:
        return CliConfig()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SettingsError(
            f"{path}: does not exist (named by ${CONFIG_ENV}); create it, fix "
            f"${CONFIG_ENV}, or unset ${CONFIG_ENV} to use the defaults") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(
            f"{path}: cannot be read ({type(exc).__name__}; named by ${CONFIG_ENV}); "
            f"make it a readable UTF-8 file or fix ${CONFIG_ENV}") from None
    try:
        return load_cli_config(text, path)
    except ConfigFileError as exc:  # the file, line, key and fix; .issues on __cause__
        raise SettingsError(str(exc)) from exc


class _Reader:
    """The readers of one environment; each names its variable in its errors."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def get(self, name: str) -> str | None:
        """The variable's value stripped; ``None`` when unset or blank."""
        value = self.env.get(name)
        if value is None or not value.strip():
            return None
        return value.strip()

    def first(self, *names: str) -> str | None:
        """The first of ``names`` that is set (the file's ``*Env`` names after the
        the-loop variable)."""
        for name in names:
            value = self.get(name)
            if value is not None:
                return value
        return None

    def names(self, name: str) -> tuple[str, ...]:
        """A comma-separated list: entries stripped, empty ones dropped."""
        return tuple(s.strip() for s in (self.env.get(name) or "").split(",") if s.strip())

    # -- shared by every process

    def secrets(self, *, required: bool) -> tuple[bytes, ...]:
        secrets = tuple(s.encode("utf-8") for s in self.names(ENV_SECRET))
        if required and not secrets:
            raise _no_secret()
        return secrets

    def redis_url(self) -> str:
        """``REDIS_URL``, checked here as redis-py will parse it (its own errors would
        quote a piece of the URL, which may be a password with an unescaped ``/``)."""
        url = self.get("REDIS_URL") or DEFAULT_REDIS_URL
        if not url.startswith(("redis://", "rediss://", "unix://")) or not _redis_url_parses(url):
            raise SettingsError(
                "REDIS_URL must be redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (rediss:// for "
                "TLS) or unix://PATH, with a port and a database number as digits and any "
                "/ ? # @ : in the password percent-encoded (%2F %3F %23 %40 %3A), "
                "e.g. REDIS_URL=redis://127.0.0.1:6379/0"
            )
        return url

    def redis_sentinel(self, redis_url: str) -> RedisSentinel | None:
        """``THE_LOOP_REDIS_SENTINELS`` (``host:port,...``) and
        ``THE_LOOP_REDIS_SENTINEL_MASTER``, both or neither; ``None`` when unset (the
        primary is ``REDIS_URL``'s host). With Sentinels ``REDIS_URL`` gives the primary's
        password, database and TLS only, so it must be ``redis://`` or ``rediss://``."""
        hosts_text = self.get(ENV_SENTINELS)
        master = self.get(ENV_SENTINEL_MASTER)
        if hosts_text is None and master is None:
            return None
        if hosts_text is None or master is None:
            missing = ENV_SENTINELS if hosts_text is None else ENV_SENTINEL_MASTER
            raise SettingsError(
                f"{missing} is not set: Sentinel needs both {ENV_SENTINELS}=HOST:PORT,... "
                f"and {ENV_SENTINEL_MASTER}=NAME (the name the Sentinels monitor), e.g. "
                f"{ENV_SENTINELS}=sentinel-0:26379,sentinel-1:26379 "
                f"{ENV_SENTINEL_MASTER}=mymaster; set it or unset the other")
        hosts: list[tuple[str, int]] = []
        for position, entry in enumerate(self.names(ENV_SENTINELS), 1):
            host, _, port = entry.rpartition(":")
            host = host.strip("[]")
            if not host or not port.isdigit() or not 0 < int(port) <= 65535 \
                    or any(c.isspace() or c in "/@?#" for c in host):
                raise SettingsError(
                    f"{ENV_SENTINELS} must be a comma-separated list of HOST:PORT, e.g. "
                    f"{ENV_SENTINELS}=sentinel-0:26379,sentinel-1:26379; fix entry {position}")
            hosts.append((host, int(port)))
        if any(c.isspace() or c in "*?[]{}" for c in master):
            raise SettingsError(f"{ENV_SENTINEL_MASTER} must be a name without spaces or "
                                f"*?[]{{}}, e.g. {ENV_SENTINEL_MASTER}=mymaster")
        if redis_url.startswith("unix:"):
            raise SettingsError(
                f"REDIS_URL is a unix:// socket, but {ENV_SENTINELS} is set: with Sentinel "
                "REDIS_URL gives only the primary's password, database and TLS, e.g. "
                "REDIS_URL=redis://:PASSWORD@ignored/0 (rediss:// for TLS); fix one of them")
        return RedisSentinel(hosts=tuple(hosts), master=master,
                             username=self.get(ENV_SENTINEL_USERNAME),
                             password=self.get(ENV_SENTINEL_PASSWORD))

    def receiver_replicas(self) -> tuple[int, int]:
        """``THE_LOOP_RECEIVER_REPLICAS`` (a whole number >= 0, default 0) and
        ``THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS`` (a positive whole number, default 500)."""
        replicas = _int_setting(ENV_RECEIVER_REPLICAS, self.get(ENV_RECEIVER_REPLICAS),
                                minimum=0, what="replicas that must acknowledge a delivery "
                                "before it is answered 202; 0: the primary alone")
        timeout = self.positive_int(
            ENV_RECEIVER_REPLICAS_TIMEOUT, DEFAULT_REPLICAS_TIMEOUT_MS,
            f"a positive whole number of milliseconds, e.g. "
            f"{ENV_RECEIVER_REPLICAS_TIMEOUT}={DEFAULT_REPLICAS_TIMEOUT_MS}")
        return replicas or 0, timeout

    def token(self, name: str, default: str) -> str:
        """A name used in Redis keys: no whitespace or glob characters."""
        value = (self.env.get(name) or default).strip()
        if not value or any(c.isspace() or c in "*?[]{}" for c in value):
            raise SettingsError(
                f"{name} must be a non-empty name without spaces or *?[]{{}}, "
                f"e.g. {name}={default}"
            )
        return value

    def positive_int(self, name: str, default: int, form: str) -> int:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value <= 0:
            raise SettingsError(f"{name} must be {form}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        """``name`` as ``true`` or ``false`` (any case), ``default`` when unset.

        Raises:
            SettingsError: any other value, with the variable and the two forms.
        """
        raw = self.get(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value not in ("true", "false"):
            raise SettingsError(f"{name} must be true or false, e.g. {name}=true")
        return value == "true"

    def seconds_int(self, name: str, default: int) -> int:
        """``name`` as a positive whole number of seconds, ``default`` when unset."""
        return self._positive(name, default, int, "a whole number of seconds", str(default))

    def duration(self, name: str, default: float, example: str) -> float:
        """``name`` as a positive duration in seconds: ``<n>s``, ``<n>m``, ``<n>h``,
        ``<n>d`` (the graph's duration form, :func:`graph.compile.duration`) or a whole
        number of seconds; ``default`` when unset."""
        raw = self.get(name)
        if raw is None:
            return default
        text = raw.strip()
        if re.fullmatch(r"[0-9]+", text):
            text += "s"
        if not re.fullmatch(r"[0-9]+[smhd]", text) or duration(text) <= 0:
            raise SettingsError(f"{name} must be a positive duration (a number and s, m, "
                                f"h or d), e.g. {name}={example}")
        return duration(text)

    def seconds(self, name: str, default: float) -> float:
        """``name`` as a positive, finite number of seconds, ``default`` when unset."""
        return self._positive(name, default, float, "a number of seconds", f"{default:g}")

    def _positive(self, name: str, default: _N, parse: Callable[[str], _N], word: str,
                  example: str) -> _N:
        """One reader for positive numbers: parse, refuse non-numbers and values <= 0 or
        infinite with the variable, the expected form and an example; raises SettingsError."""
        raw = self.get(name)
        if raw is None:
            return default
        try:
            value = parse(raw)
        except ValueError:
            raise SettingsError(f"{name} must be {word}, e.g. {name}={example}") from None
        if not value > 0 or math.isinf(value):
            raise SettingsError(f"{name} must be positive, e.g. {name}={example}")
        return value

    def backoff(self, name: str, default: tuple[float, ...]) -> tuple[float, ...]:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            steps = tuple(float(part) for part in raw.split(",") if part.strip())
        except ValueError:
            raise SettingsError(
                f"{name} must be comma-separated seconds, e.g. {name}=10,60,300") from None
        if not steps or any(not step >= 0 for step in steps):
            raise SettingsError(f"{name} must list seconds >= 0, e.g. {name}=10,60,300")
        return steps

    def signer(self) -> Signer | None:
        """The review-record signing key (:func:`foundation.signing.load_signer`)."""
        try:
            return load_signer(self.get(ENV_SIGNING_KEY), self.get(ENV_SIGNING_KEY_FILE))
        except SigningKeyError as exc:
            raise SettingsError(str(exc)) from None

    def spec_dir(self) -> str:
        spec_dir = self.get("THE_LOOP_SPEC_DIR") or DEFAULT_SPEC_DIR
        try:
            spec_dir.format(number=1)
        except (KeyError, IndexError, ValueError):
            raise SettingsError(
                "THE_LOOP_SPEC_DIR may only use the placeholder {number}, e.g. specs/{number}"
            ) from None
        return spec_dir

    def port(self, name: str, default: int, meaning: str, *, minimum: int = 0) -> int:
        raw = self.get(name)
        try:
            port = default if raw is None else int(raw)
        except ValueError:
            port = -1
        if not minimum <= port <= 65535:
            raise SettingsError(
                f"{name} must be a port number {meaning}, e.g. {name}={default}")
        return port

    def web(self) -> WebSettings:
        port = self.port("PORT", 8080, "(the port the receiver binds)", minimum=1)
        bind = self.get("THE_LOOP_BIND") or (
            f"0.0.0.0:{port}" if self.get("PORT") else WebSettings.bind)
        return WebSettings(
            host=self.get("THE_LOOP_HOST") or "0.0.0.0",
            port=port,
            bind=bind,
            workers=self.positive_int("THE_LOOP_WEB_WORKERS", 2,
                                      "a positive integer, e.g. THE_LOOP_WEB_WORKERS=2"),
            threads=self.positive_int("THE_LOOP_WEB_THREADS", 1,
                                      "a positive integer, e.g. THE_LOOP_WEB_THREADS=1"),
            access_log=self.get("THE_LOOP_ACCESS_LOG"),
        )

    def write_limits(self) -> WriteLimits:
        limits = {}
        for key, name, default in (("per_minute", "THE_LOOP_GITHUB_WRITES_PER_MINUTE", 80),
                                   ("per_hour", "THE_LOOP_GITHUB_WRITES_PER_HOUR", 500)):
            raw = self.get(name)
            try:
                limits[key] = int(raw) if raw else default
            except ValueError:
                raise SettingsError(
                    f"{name} must be a whole number of writes, e.g. {name}={default}") from None
            if limits[key] < 11:
                raise SettingsError(f"{name} must be at least 11, e.g. {name}={default}")
        if limits["per_minute"] > limits["per_hour"]:
            raise SettingsError("THE_LOOP_GITHUB_WRITES_PER_MINUTE must not exceed "
                                "THE_LOOP_GITHUB_WRITES_PER_HOUR")
        return WriteLimits(**limits)

    def log_settings(self) -> LogSettings:
        fmt = (self.get("THE_LOOP_LOG_FORMAT") or "json").lower()
        if fmt not in LOG_FORMATS:
            raise SettingsError(
                "THE_LOOP_LOG_FORMAT must be json or text, e.g. THE_LOOP_LOG_FORMAT=json"
            )
        level = (self.get("THE_LOOP_LOG_LEVEL") or "INFO").upper()
        if not isinstance(logging.getLevelName(level), int):
            raise SettingsError(
                "THE_LOOP_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, "
                "e.g. THE_LOOP_LOG_LEVEL=INFO"
            )
        return LogSettings(fmt, level)

    # -- the read API and the dashboard

    def dashboard(self, deployment: CliConfig,
                  secrets: tuple[bytes, ...]) -> DashboardSettings:
        """``THE_LOOP_API_TOKENS``, ``THE_LOOP_PUBLIC_URL``, "Sign in with GitHub" and the
        session cookie's key and lifetime.

        Raises:
            SettingsError: a token too short or a malformed digest (never echoed), a
                public URL that is not http(s), a client id without its secret or
                without ``THE_LOOP_UI_GITHUB_MEMBERS`` or a public URL, a malformed
                member entry, a short session secret or a bad lifetime.
        """
        digests = []
        for index, token in enumerate(self.names(ENV_API_TOKENS), start=1):
            match = _DIGEST.fullmatch(token)
            if match:
                digests.append(match.group(1))
            elif token.startswith("sha256:"):
                raise SettingsError(
                    f"{ENV_API_TOKENS}: entry {index} starts with sha256: but is not 64 "
                    "lower-case hex digits: give sha256:$(printf %s TOKEN | sha256sum)")
            elif len(token) < MIN_TOKEN_CHARS:
                raise SettingsError(
                    f"{ENV_API_TOKENS}: entry {index} is shorter than {MIN_TOKEN_CHARS} "
                    "characters: use a random token, e.g. `openssl rand -hex 32`")
            else:
                digests.append(hashlib.sha256(token.encode("utf-8")).hexdigest())
        public_url = self.public_url()
        base_url = deployment.integrations.github.api.base_url
        api_url = _api_url(self.get(ENV_API_URL) or (
            None if base_url.rstrip("/") == DEFAULT_API_URL else base_url), say=False)
        client_id = self.get(ENV_CLIENT_ID)
        client_secret = self.get(ENV_CLIENT_SECRET)
        members = self.names(ENV_UI_MEMBERS)
        for index, entry in enumerate(members, start=1):
            org, _, team = entry.partition("/")
            if not _GITHUB_NAME.fullmatch(org) or (team and not _GITHUB_NAME.fullmatch(team)):
                raise SettingsError(
                    f"{ENV_UI_MEMBERS} lists ORG or ORG/TEAM (a team's slug), comma-"
                    f"separated, e.g. {ENV_UI_MEMBERS}=octo-org,octo-org/reviewers; entry "
                    f"{index} is neither")
        if client_secret and not client_id:
            raise SettingsError(f"{ENV_CLIENT_SECRET} is set but {ENV_CLIENT_ID} is not: set "
                                "it to the App's client id (App settings > General)")
        if client_id and not client_secret:
            raise SettingsError(
                f"{ENV_CLIENT_ID} is set but {ENV_CLIENT_SECRET} is not: generate a "
                "client secret on the App's settings page (General > Client secrets)")
        # "Sign in with GitHub" is on when members are named: the App's client id alone
        # (`the-loop app create` writes it) turns nothing on.
        if members:
            if not client_id:
                raise SettingsError(
                    f"{ENV_UI_MEMBERS} turns on \"Sign in with GitHub\", which needs "
                    f"{ENV_CLIENT_ID} and {ENV_CLIENT_SECRET}: the App's client id and a "
                    "client secret (App settings > General)")
            if public_url is None:
                raise SettingsError(
                    f"{ENV_UI_MEMBERS} needs {ENV_PUBLIC_URL}: GitHub sends people back to "
                    f"{ENV_PUBLIC_URL}/ui/auth/github/callback, the App's callback URL")
        session = self.get(ENV_SESSION_SECRET)
        if session is not None and len(session) < 32:
            raise SettingsError(f"{ENV_SESSION_SECRET} must be at least 32 characters, e.g. "
                                "the output of `openssl rand -hex 32`")
        key = session.encode("utf-8") if session else (
            hmac.new(secrets[0], b"the-loop dashboard session", hashlib.sha256).digest()
            if secrets else None)
        return DashboardSettings(
            token_digests=tuple(dict.fromkeys(digests)),
            public_url=public_url,
            github_client_id=client_id,
            github_client_secret=client_secret,
            github_members=members,
            github_api_url=api_url,
            github_web_url=_web_url(api_url),
            session_secret=key,
            session_ttl=self.seconds_int(ENV_SESSION_TTL, DashboardSettings.session_ttl),
            mermaid_dir=self.get(ENV_MERMAID_DIR) or str(Path(sys.prefix) / "mermaid"),
        )

    def public_url(self) -> str | None:
        raw = self.get(ENV_PUBLIC_URL)
        if raw is None:
            return None
        try:
            parts = urlsplit(raw)
        except ValueError:
            parts = None
        if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname
                or parts.query or parts.fragment or parts.username or parts.password):
            raise SettingsError(
                f"{ENV_PUBLIC_URL} must be the http(s) URL people reach the receiver at, "
                f"without query or credentials, e.g. {ENV_PUBLIC_URL}=https://loop.example.com")
        return raw.rstrip("/")

    # -- the agent harness and its runner

    def harness(self, deployment: CliConfig, source: str) -> HarnessSettings:
        """``harness:`` with ``THE_LOOP_HARNESS`` / ``THE_LOOP_HARNESS_BINARY`` over it.

        Raises:
            SettingsError: an unknown adapter, a binary with spaces, or adapter
                ``command`` without ``argv``; the message names the variable or key,
                the file and the fix.
        """
        config = deployment.harness
        adapter = (self.get(ENV_HARNESS) or config.adapter).lower()
        if adapter not in HARNESS_ADAPTERS:
            raise SettingsError(
                f"{ENV_HARNESS} must be one of {', '.join(HARNESS_ADAPTERS)}, "
                f"e.g. {ENV_HARNESS}=claude-code (or unset it to use harness.adapter in "
                f"{source})")
        binary = self.get(ENV_HARNESS_BINARY)
        if binary is not None and any(c.isspace() for c in binary):
            raise SettingsError(
                f"{ENV_HARNESS_BINARY} must name one executable (a name on PATH or an "
                "absolute path) without arguments, e.g. THE_LOOP_HARNESS_BINARY=claude")
        binary = binary or config.binary or HARNESS_BINARIES.get(adapter)
        if adapter == "command":
            if not config.argv:
                raise SettingsError(
                    f"{source}: harness.adapter is command but harness.argv is empty: set "
                    "harness.argv to the agent's argument list, e.g. "
                    "harness.argv: [aider, --yes-always] (a list, never a shell string)")
            binary = None
        elif adapter == "none":
            binary = None
        held = sorted(set(config.env) & {ENV_SIGNING_KEY, ENV_SIGNING_KEY_FILE})
        if held:  # the service's signing key never reaches an agent
            raise SettingsError(
                f"{source}: harness.env names {', '.join(held)}: the review-record signing "
                "key is the service's only; remove it from harness.env")
        # The file's section, resolved: the environment's overrides and the adapter's
        # defaults replace what the file left unset; the rest stays as the file says.
        return replace(
            config,
            adapter=adapter,
            binary=binary,
            argv=tuple(config.argv),
            turn_timeout=float(config.turn_timeout),
            idle_timeout=float(config.idle_timeout),
            cost_cap_usd=None if config.cost_cap_usd is None else float(config.cost_cap_usd),
            models=dict(config.models),
            env=harness_env(adapter, tuple(config.env), config.env_only),
            source=source,
            path=self.get("PATH"),
            mcp_config=self.get("THE_LOOP_MCP_CONFIG") or config.mcp_config,
        )

    def runner(self, deployment: CliConfig, queue: str) -> RunnerSettings:
        """``runner:`` with ``THE_LOOP_RUNNER_CONCURRENCY`` / ``THE_LOOP_WORKSPACE_DIR``
        over it, ``THE_LOOP_RUNNER_DRAIN_SECONDS`` and ``THE_LOOP_RUNNER_PARTIAL_CLONE``
        over ``runner.partialClone``; directories default under
        ``$XDG_STATE_HOME/the-loop``.

        Raises:
            SettingsError: a concurrency that is not a positive whole number, a drain
                time that is not a positive number of seconds, a partial-clone setting
                that is not ``true`` or ``false``.
        """
        config = deployment.runner
        concurrency = _int_setting(ENV_RUNNER_CONCURRENCY, self.get(ENV_RUNNER_CONCURRENCY),
                                   minimum=1, what="live turns per runner")
        state = self.get("XDG_STATE_HOME") or str(
            Path(self.get("HOME") or "~").expanduser() / ".local" / "state")
        base = Path(state) / "the-loop"
        workspace = self.get(ENV_WORKSPACE_DIR) or config.workspace_dir or str(
            base / "workspaces")
        return replace(
            config,
            queue=f"{queue}-turns",
            concurrency=config.concurrency if concurrency is None else concurrency,
            workspace_dir=str(Path(workspace).expanduser()),
            home_dir=str(Path(config.home_dir or str(base / "home")).expanduser()),
            git_url=config.git_url or None,
            drain_seconds=self.seconds("THE_LOOP_RUNNER_DRAIN_SECONDS",
                                       RunnerSettings.drain_seconds),
            partial_clone=self.flag("THE_LOOP_RUNNER_PARTIAL_CLONE", config.partial_clone),
        )

    # -- integrations

    def github(self, deployment: CliConfig) -> GitHubSettings:
        """GitHub: the the-loop variables, else the variables the file's ``*Env`` keys
        name, else the file's values."""
        config = deployment.integrations.github
        api = config.api
        transport = (self.get(ENV_GITHUB_TRANSPORT) or config.transport or "auto").lower()
        if transport not in GITHUB_TRANSPORTS:
            raise SettingsError(
                f"{ENV_GITHUB_TRANSPORT} (integrations.github.transport) must be auto, api, "
                f"cli or none, e.g. {ENV_GITHUB_TRANSPORT}=auto")
        base_url = None if api.base_url.rstrip("/") == DEFAULT_API_URL else api.base_url
        api_url = _api_url(self.get(ENV_API_URL) or base_url)
        app_id = _int_setting(ENV_APP_ID, self.first(ENV_APP_ID, api.app_id_env),
                              minimum=1, what="the App's numeric id")
        inline = self.env.get(ENV_KEY) or self.env.get(api.private_key_env)
        key = _private_key(inline, self.first(ENV_KEY_PATH, api.private_key_path_env))
        if key is not None and app_id is None:
            raise SettingsError(
                f"{ENV_KEY} (or {ENV_KEY_PATH}) is set but {ENV_APP_ID} is not: set "
                f"{ENV_APP_ID} to the App ID shown on the GitHub App's settings page"
            )
        if app_id is not None and key is None:
            raise SettingsError(
                f"{ENV_APP_ID} is set but no private key: set {ENV_KEY} to the App's PEM "
                f"private key, or {ENV_KEY_PATH} to the .pem file downloaded from the App's "
                "settings page"
            )
        names = ("GH_TOKEN", *api.token_env, "GITHUB_TOKEN")
        timeout = _int_setting("THE_LOOP_GITHUB_TIMEOUT", self.get("THE_LOOP_GITHUB_TIMEOUT"),
                               minimum=1, what="whole seconds")
        retries = _int_setting("THE_LOOP_GITHUB_RETRIES", self.get("THE_LOOP_GITHUB_RETRIES"),
                               minimum=0, what="a count")
        return GitHubSettings(
            api_url=api_url,
            app_id=app_id,
            private_key=key,
            token=self.first(*names),
            write_interval=_float_setting("THE_LOOP_GITHUB_WRITE_INTERVAL",
                                          self.get("THE_LOOP_GITHUB_WRITE_INTERVAL"), 1.0),
            read_interval=_float_setting("THE_LOOP_GITHUB_READ_INTERVAL",
                                         self.get("THE_LOOP_GITHUB_READ_INTERVAL"), 0.25),
            timeout=15 if timeout is None else timeout,
            retries=2 if retries is None else retries,
            transport=transport,
            cli_binary=self.get(ENV_GITHUB_CLI_BINARY) or config.cli.binary or "gh",
            cli_host=self.get("GH_HOST"),
        )

    def slack(self, deployment: CliConfig) -> SlackSettings:
        config = deployment.integrations.slack
        token = self.first("THE_LOOP_SLACK_TOKEN", config.token_env)
        url = self.first("THE_LOOP_SLACK_WEBHOOK_URL", config.url_env)
        transport = self.get("THE_LOOP_SLACK_TRANSPORT")
        if transport is None and (token or url):
            transport = config.transport or "sdk"
        return SlackSettings(transport.lower() if transport else None, token, url)

    def jira(self, deployment: CliConfig) -> JiraSettings:
        config = deployment.integrations.jira
        token = self.first("THE_LOOP_JIRA_TOKEN", config.api.token_env)
        url = self.get("THE_LOOP_JIRA_URL") or config.api.base_url or None
        transport = self.get("THE_LOOP_JIRA_TRANSPORT")
        if transport is None and (token or url):
            transport = config.transport or "api"
        user = self.first("THE_LOOP_JIRA_USER", config.api.user_env)
        auth = (self.get("THE_LOOP_JIRA_AUTH") or "basic").strip().lower()
        if auth not in ("basic", "bearer"):
            raise SettingsError(
                "THE_LOOP_JIRA_AUTH must be basic (Jira Cloud: THE_LOOP_JIRA_USER and an API "
                "token) or bearer (a Data Center personal access token)")
        if (transport or "").lower() == "api" and token and url and not user and (
                auth != "bearer"):
            raise SettingsError(
                "THE_LOOP_JIRA_TOKEN is set without THE_LOOP_JIRA_USER: Jira Cloud needs "
                "Basic auth with the account's e-mail and an API token, so set "
                "THE_LOOP_JIRA_USER; for a Jira Data Center personal access token set "
                "THE_LOOP_JIRA_AUTH=bearer")
        return JiraSettings(
            transport=transport.lower() if transport else None,
            base_url=url,
            user=None if auth == "bearer" else user,
            token=token,
            binary=self.get("THE_LOOP_JIRA_CLI_BINARY") or config.cli.binary or "jira",
            auth=auth,
            api_version=_jira_api_version(self.get("THE_LOOP_JIRA_API_VERSION")),
        )


def _jira_api_version(value: str | None) -> int | None:
    """``THE_LOOP_JIRA_API_VERSION``: ``2`` (Jira Data Center / Server) or ``3`` (Jira
    Cloud); ``None`` when unset (the transport asks the site, see
    :attr:`JiraSettings.api_version`).

    Raises:
        SettingsError: any other value (the value is not echoed).
    """
    if value is None:  # unset or blank (Environment.get)
        return None
    if value not in {str(v) for v in JIRA_API_VERSIONS}:
        raise SettingsError(
            "THE_LOOP_JIRA_API_VERSION must be 2 (Jira Data Center / Server) or 3 "
            "(Jira Cloud), e.g. THE_LOOP_JIRA_API_VERSION=2, or unset to ask the site")
    return int(value)


def _api_url(value: str | None, *, say: bool = True) -> str:
    """The REST API root ``THE_LOOP_GITHUB_API_URL`` (or
    ``integrations.github.api.baseUrl``) names, checked against the layouts GitHub serves
    ("About GitHub Enterprise Server", "About GitHub Enterprise Cloud with data
    residency" docs): ``https://api.github.com``, a GHE.com ``https://api.SUBDOMAIN.ghe.com``
    (no path), a GitHub Enterprise Server ``https://HOST/api/v3``. A loopback host (a fake
    GitHub) may use either layout.

    Args:
        value: the configured URL, or ``None`` (then ``https://api.github.com``).
        say: log the correction below (the GitHub settings do; the dashboard's read of
            the same variable does not, so a process says it once).

    Returns:
        The root without a trailing slash; a GitHub Enterprise Server host given without
        a path (``https://HOST`` or ``https://HOST/``) gets ``/api/v3`` appended, and a
        warning says so.

    Raises:
        SettingsError: not an http(s) URL, a user or password in it, a GHE.com web host
            (not ``api.``), or a path other than ``/api/v3`` (a github.com or GHE.com
            root takes none); the message names the variable and the fix, never the value.
    """
    if value is None:
        return DEFAULT_API_URL
    names = f"{ENV_API_URL} (integrations.github.api.baseUrl)"
    parsed = urllib.parse.urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise SettingsError(
            f"{names} must be an http(s) URL such as {DEFAULT_API_URL} or, for GitHub "
            "Enterprise Server, https://HOST/api/v3"
        )
    if parsed.username is not None or parsed.password is not None:
        raise SettingsError(
            f"{names} must carry no user or password: give the API root alone (e.g. "
            "https://HOST/api/v3) and the credentials in GH_TOKEN or the App's settings"
        )
    host = parsed.hostname.lower()
    path = parsed.path.rstrip("/")
    if host in ("localhost", "127.0.0.1", "::1"):
        return value.rstrip("/")
    if host == "api.github.com" or host.endswith(".ghe.com"):
        if host.endswith(".ghe.com") and not host.startswith("api."):
            raise SettingsError(
                f"{names} names a GHE.com web host: its REST API root is "
                "https://api.SUBDOMAIN.ghe.com (add api. in front of the host)")
        if path or parsed.query or parsed.params or parsed.fragment:
            raise SettingsError(
                f"{names} has a path, but GitHub's hosted REST API root has none: use "
                f"{DEFAULT_API_URL} or https://api.SUBDOMAIN.ghe.com as it is")
        return value.rstrip("/")
    if path == "" and not (parsed.query or parsed.params or parsed.fragment):
        # A GitHub Enterprise Server's REST API lives under /api/v3; its root answers
        # with web pages, which the transport would take for a wrong URL on every call.
        if say:
            log.warning("%s has no path; using HOST/api/v3, a GitHub Enterprise Server's "
                        "REST API root (set it to https://HOST/api/v3 to silence this)",
                        ENV_API_URL)
        return f"{value.rstrip('/')}/api/v3"
    if not path.endswith("/api/v3") or parsed.query or parsed.params or parsed.fragment:
        raise SettingsError(
            f"{names} has a path other than /api/v3: a GitHub Enterprise Server's REST API "
            "root is https://HOST/api/v3; set it to that")
    return value.rstrip("/")


def _web_url(api_url: str) -> str:
    """GitHub's web root for a REST API root, as GitHub lays hosts out:
    ``https://api.github.com`` -> ``https://github.com``, GHE.com
    ``https://api.SUBDOMAIN.ghe.com`` -> ``https://SUBDOMAIN.ghe.com``, Enterprise Server
    ``https://HOST/api/v3`` -> ``https://HOST`` ("About GitHub Enterprise Server" docs);
    any other root (a loopback fake) serves both."""
    parts = urlsplit(api_url)
    hosted = parts.netloc == "api.github.com" or (
        parts.netloc.startswith("api.") and parts.netloc.endswith(".ghe.com"))
    host = parts.netloc.removeprefix("api.") if hosted else parts.netloc
    path = parts.path.rstrip("/").removesuffix("/api/v3")
    return urlunsplit((parts.scheme, host, path, "", "")).rstrip("/")


def _redis_url_parses(url: str) -> bool:
    """Whether redis-py's ``from_url`` will take ``url``'s host, port and database
    (``redis.connection.parse_url``: the port an integer in range, the path a number)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        return False
    if parts.scheme == "unix":
        return bool(parts.path)
    database = parts.path.strip("/")
    return bool(parts.hostname) and (database == "" or database.isdigit())


def _int_setting(name: str, value: str | None, *, minimum: int, what: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise SettingsError(
            f"{name} must be a whole number >= {minimum} ({what}); fix it or unset it") from None
    if number < minimum:
        raise SettingsError(
            f"{name} must be a whole number >= {minimum} ({what}); fix it or unset it")
    return number


def _float_setting(name: str, value: str | None, default: float) -> float:
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise SettingsError(
            f"{name} must be a number of seconds >= 0, e.g. {name}={default}") from None
    if not number >= 0:  # also rejects NaN
        raise SettingsError(f"{name} must be a number of seconds >= 0, e.g. {name}={default}")
    return number


def _private_key(inline: str | None, path: str | None) -> str | None:
    """The App's PEM key from the variable itself or from the file it names; never
    repeated in a message."""
    if inline is not None and not inline.strip():
        inline = None
    if inline is not None and path is not None:
        raise SettingsError(f"both {ENV_KEY} and {ENV_KEY_PATH} are set: keep only one of them")
    if path is not None:
        try:
            key = Path(path).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(
                f"{ENV_KEY_PATH} names a file that cannot be read ({type(exc).__name__}: "
                f"{getattr(exc, 'strerror', None) or 'not UTF-8 text'}): point it at the .pem "
                "file downloaded from the GitHub App's settings page"
            ) from None
        source = ENV_KEY_PATH
    elif inline is not None:
        key = inline.strip()
        if "\n" not in key and "\\n" in key:  # a PEM squeezed into one line by a .env file
            key = key.replace("\\n", "\n")
        source = ENV_KEY
    else:
        return None
    _check_pem(key, source)
    return key


def _check_pem(key: str, source: str) -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        load_pem_private_key(key.encode("utf-8"), password=None)
    except (ValueError, TypeError):
        raise SettingsError(
            f"{source} does not hold an unencrypted PEM private key: use the .pem file "
            "generated on the GitHub App's settings page (it starts with "
            "'-----BEGIN RSA PRIVATE KEY-----')"
        ) from None

