"""the-loop's settings: one frozen object, read once from the environment and
``cli-config.yaml``, validated once with the same rules in every process.

:meth:`Settings.from_env` is the only reader of the-loop's environment variables and of
the deployment file (the path in ``$THE_LOOP_CONFIG``). The receiver, the worker and
every command call it once at start-up (the entry points pass ``os.environ``; tests pass a
dict) and hand its sections to :mod:`the_loop.wiring`. A variable given in the
environment wins over the same setting in the file; credentials are read under the names
the file's ``*Env`` keys give.

Every problem raises :class:`SettingsError`, whose message names the variable (or the
file, line and key) and the fix, and never contains a secret value. Secrets (webhook
secrets, tokens, the App's private key, a Redis password) are kept out of ``repr``.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

from foundation.config.deployment import CONFIG_ENV, Classification, CliConfig, load_cli_config
from foundation.config.loader import ConfigFileError
from foundation.config.repository import DEFAULT_SPEC_DIR
from foundation.signing import ENV_SIGNING_KEY, ENV_SIGNING_KEY_FILE, load_signer
from graph.compile import duration
from graph.context import DEFAULT_ENROLMENT_LABEL
from graph.errors import LoopError
from graph.signing import Signer, SigningKeyError

_N = TypeVar("_N", int, float)  # the numbers _Reader._positive reads

__all__ = [
    "DEFAULT_API_URL",
    "DEFAULT_MAX_BODY_BYTES",
    "ClassifierSettings",
    "DashboardSettings",
    "GitHubSettings",
    "HarnessSettings",
    "JiraSettings",
    "LogSettings",
    "MetricsSettings",
    "Process",
    "ReceiverSettings",
    "RunnerSettings",
    "Settings",
    "SettingsError",
    "SlackSettings",
    "WebSettings",
    "WorkerSettings",
    "WriteLimits",
    "config_path",
    "redact_url",
]

#: Which process reads the settings: the receiver needs the webhook secret and no
#: integration credentials; gunicorn's master (``the_loop/gunicorn_conf.py``) neither (its
#: workers, the receiver, require the secret when they boot); the worker and the
#: commands read the integrations.
Process = Literal["receiver", "gunicorn", "worker", "command"]

# GitHub caps webhook payloads at 25 MB ("Webhook events and payloads" docs); 25 MiB
# leaves headroom for form encoding.
DEFAULT_MAX_BODY_BYTES = 25 * 1024 * 1024
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_API_URL = "https://api.github.com"
DEFAULT_METRICS_PORT = 9101
GITHUB_TRANSPORTS = ("auto", "api", "cli", "none")
LOG_FORMATS = ("json", "text")

ENV_SECRET = "THE_LOOP_WEBHOOK_SECRET"
ENV_API_URL = "THE_LOOP_GITHUB_API_URL"
ENV_APP_ID = "THE_LOOP_GITHUB_APP_ID"
ENV_KEY = "THE_LOOP_GITHUB_PRIVATE_KEY"
ENV_KEY_PATH = "THE_LOOP_GITHUB_PRIVATE_KEY_PATH"
ENV_GITHUB_TRANSPORT = "THE_LOOP_GITHUB_TRANSPORT"
ENV_GITHUB_CLI_BINARY = "THE_LOOP_GITHUB_CLI_BINARY"
ENV_METRICS_PORT = "THE_LOOP_WORKER_METRICS_PORT"
ENV_HARNESS = "THE_LOOP_HARNESS"
ENV_HARNESS_BINARY = "THE_LOOP_HARNESS_BINARY"
ENV_RUNNER_CONCURRENCY = "THE_LOOP_RUNNER_CONCURRENCY"
ENV_WORKSPACE_DIR = "THE_LOOP_WORKSPACE_DIR"
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
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_GITHUB_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98})")

#: The harness adapters (``integrations.harness.ADAPTERS`` plus ``none``).
HARNESS_ADAPTERS = ("claude-code", "codex", "command", "none")
#: Each adapter's executable when ``harness.binary`` is unset.
HARNESS_BINARIES: Mapping[str, str] = {"claude-code": "claude", "codex": "codex"}
#: The variables passed to each adapter when ``harness.env`` is empty (its API keys:
#: Claude Code's and Codex CLI's authentication docs).
HARNESS_ENV: Mapping[str, tuple[str, ...]] = {
    "claude-code": ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"),
    "codex": ("OPENAI_API_KEY", "CODEX_API_KEY"),
}
RUNNER_MODES = ("process", "tmux")


class SettingsError(LoopError, ValueError):
    """A setting is missing or invalid, found at start-up.

    The message names the environment variable (or the ``cli-config.yaml`` file, line
    and key) and how to fix it; it never contains a secret value.
    """


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for repr and messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


def config_path(env: Mapping[str, str]) -> str | None:
    """The ``cli-config.yaml`` path ``$THE_LOOP_CONFIG`` names, or ``None`` when unset."""
    return (env.get(CONFIG_ENV) or "").strip() or None


# ----------------------------------------------------------------------------- sections


@dataclass(frozen=True, slots=True)
class ReceiverSettings:
    """What the webhook receiver needs.

    Attributes:
        secrets: accepted webhook secrets as bytes, most recent first as configured
            (several during rotation). Never shown in repr. Empty outside the receiver
            when ``THE_LOOP_WEBHOOK_SECRET`` is unset.
        redis_url: Redis URL for the queue (``redis://host:port/db``); a password in it
            is masked in repr.
        queue_name: RQ queue name the deliveries go to.
        redis_prefix: prefix of the-loop's own Redis keys (``{prefix}:delivery:...``).
        max_body_bytes: largest accepted request body, in bytes.

    ``redis_url``, ``queue_name`` and ``redis_prefix`` are the values the worker gets
    too (:class:`WorkerSettings`): :meth:`Settings.from_env` reads them once.
    """

    secrets: tuple[bytes, ...] = field(repr=False)
    redis_url: str = field(default=DEFAULT_REDIS_URL, repr=False)
    queue_name: str = "the-loop"
    redis_prefix: str = "the-loop"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __repr__(self) -> str:
        return (
            f"ReceiverSettings(secrets=<{len(self.secrets)} hidden>, "
            f"redis_url={redact_url(self.redis_url)!r}, queue_name={self.queue_name!r}, "
            f"redis_prefix={self.redis_prefix!r}, max_body_bytes={self.max_body_bytes})"
        )


#: How long a done work item's event log is kept (``THE_LOOP_RETENTION``): 90 days.
DEFAULT_RETENTION = 90 * 86400.0


@dataclass(frozen=True)
class WorkerSettings:
    """What the RQ worker (and the commands working on its state) need.

    Attributes:
        redis_url: ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
        queue: RQ queue name, ``THE_LOOP_QUEUE`` or ``queue.name`` (default ``the-loop``).
        prefix: key prefix of the-loop's own Redis keys, ``THE_LOOP_REDIS_PREFIX`` or
            ``state.prefix``.
        graph_path: ``THE_LOOP_GRAPH`` (default: the shipped ``graph/pdlc.yaml``).
        enrolment_label: ``THE_LOOP_ENROLMENT_LABEL`` (default ``the-loop``).
        spec_dir: ``THE_LOOP_SPEC_DIR`` template (default ``specs/{number}``).
        lock_timeout: seconds a work item lock lives if its holder dies,
            ``THE_LOOP_LOCK_TIMEOUT`` or ``state.lockTimeout`` (default 300). A live holder
            extends it every third of that; a worker's reaper takes back the lock of a
            dead ``the-loop worker`` as soon as that worker is known dead
            (``worker_ttl``), so this is a backstop.
        config_ttl: seconds repository config files are cached, ``THE_LOOP_CONFIG_TTL``
            or ``state.configTtl`` (default 300; a push to the default branch also
            refreshes them).
        bot_logins: ``THE_LOOP_BOT_LOGINS``, comma-separated logins whose events are the
            App's own (e.g. ``the-loop[bot]``): they never drive a gate, and their marked
            comments are the-loop's own besides the App's bot (learned from ``GET /app``;
            :class:`workers.identities.Accounts`).
        reactions: ``webhooks.ghWebhook.routing.reactions`` from cli-config.yaml:
            ``{enabled, started, completed, error}``.
        worker_ttl: seconds a ``the-loop worker`` that stopped heartbeating is still
            taken for alive, ``THE_LOOP_WORKER_TTL`` (default 30); after that its work
            item locks and its job are taken back and the job requeued.
        delivery_attempts: how many times one delivery is tried (a worker killed while
            handling it counts) before it is parked as a dead letter,
            ``THE_LOOP_DELIVERY_ATTEMPTS`` (default 5).
        delivery_backoff: seconds to wait before each retry, ``THE_LOOP_DELIVERY_BACKOFF``
            (comma-separated; the last repeats; default ``10,60,300,900``).
        reap_interval: seconds between the reaper's rounds (heartbeat, due retries,
            abandoned jobs), ``THE_LOOP_REAP_INTERVAL`` (default 5).
        dispatch_budget: seconds one wake-up job keeps taking work items off the ready
            list before it queues another wake-up and returns, so RQ's own duties (and
            a warm shutdown) get their turn, ``THE_LOOP_DISPATCH_BUDGET`` (default 10;
            keep it well under the wake-up job's RQ timeout, 300 s).
        state_key: ``THE_LOOP_STATE_KEY``, the key of the local state files' seals
            (HMAC-SHA256; :class:`the_loop.stores.FileStateStore`), or ``None``: an
            unkeyed SHA-256 digest, which catches corruption but not a forger. A secret:
            hidden from repr.
        public_url: ``THE_LOOP_PUBLIC_URL`` (:class:`DashboardSettings`), so the status
            comment and the check run link to the work item's dashboard page; ``None``:
            no link.
        retention: seconds a done work item's event log is kept before it expires,
            ``THE_LOOP_RETENTION`` (a duration: ``90d``, ``72h``, ``30m``, ``3600s`` or
            whole seconds; default 90 days). ``the-loop state export`` saves one first.
        signer: the review-record signing key from ``THE_LOOP_SIGNING_KEY`` (PEM) or
            ``THE_LOOP_SIGNING_KEY_FILE`` (:mod:`foundation.signing`), a handle that never
            shows the key; ``None``: records are written unsigned and no check counts
            them.
    """

    redis_url: str = field(default=DEFAULT_REDIS_URL, repr=False)
    queue: str = "the-loop"
    prefix: str = "the-loop"
    graph_path: str | None = None
    enrolment_label: str = DEFAULT_ENROLMENT_LABEL
    spec_dir: str = DEFAULT_SPEC_DIR
    lock_timeout: int = 300
    config_ttl: int = 300
    bot_logins: frozenset[str] = frozenset()
    reactions: tuple[tuple[str, object], ...] = (
        ("enabled", True), ("started", "eyes"), ("completed", "hooray"), ("error", "confused"))
    worker_ttl: int = 30
    delivery_attempts: int = 5
    delivery_backoff: tuple[float, ...] = (10.0, 60.0, 300.0, 900.0)
    reap_interval: float = 5.0
    dispatch_budget: float = 10.0
    state_key: str | None = field(default=None, repr=False)
    public_url: str | None = None
    retention: float = DEFAULT_RETENTION
    signer: Signer | None = field(default=None, repr=False, compare=False)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        steps = self.delivery_backoff or (0.0,)
        return steps[min(max(attempt, 1), len(steps)) - 1]


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
    """

    transport: str | None = None
    base_url: str | None = None
    user: str | None = None
    token: str | None = field(default=None, repr=False)
    binary: str = "jira"
    auth: str = "basic"

    @property
    def configured(self) -> bool:
        return self.transport is not None


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


@dataclass(frozen=True)
class ClassifierSettings:
    """``cli-config.yaml``'s ``classification`` block and the endpoint's API key (read
    from the variable ``classification.endpoint.tokenEnv`` names; hidden from repr)."""

    config: Classification = field(default_factory=Classification)
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class MetricsSettings:
    """Prometheus metrics.

    Attributes:
        worker_port: the worker's ``/metrics`` port, ``THE_LOOP_WORKER_METRICS_PORT``
            (default 9101, 0 = off).
        multiproc_dir: ``PROMETHEUS_MULTIPROC_DIR`` (the receiver's gunicorn workers'
            shared counters), or ``None``.
    """

    worker_port: int = DEFAULT_METRICS_PORT
    multiproc_dir: str | None = None


@dataclass(frozen=True)
class LogSettings:
    """``THE_LOOP_LOG_FORMAT`` (``json`` or ``text``) and ``THE_LOOP_LOG_LEVEL``."""

    format: str = "json"
    level: str = "INFO"


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


@dataclass(frozen=True)
class HarnessSettings:
    """The coding-agent CLI that does the work of agent nodes (``cli-config.yaml``
    ``harness:``).

    Attributes:
        adapter: ``claude-code``, ``codex``, ``command`` or ``none`` (agent nodes wait for
            a person); ``THE_LOOP_HARNESS`` or ``harness.adapter``.
        binary: the executable of claude-code / codex (``THE_LOOP_HARNESS_BINARY`` or
            ``harness.binary``; default ``claude`` / ``codex`` on PATH); ``None`` for
            ``command`` and ``none``.
        argv: the command adapter's argument list (a typed YAML list, never a string).
        version: the pinned version; what ``--version`` prints must contain it.
        turn_timeout: wall-clock seconds of one turn.
        idle_timeout: seconds without output before a turn is killed.
        max_turns: the-loop turns per node visit (the first and its repairs).
        cost_cap_usd: US dollars per work item; reaching it escalates. ``None``: no cap.
        models: node stage -> model name.
        env: names of the variables passed to the harness process (API keys); defaults
            per adapter (:data:`HARNESS_ENV`).
        source: where the settings came from (the file's path, or ``cli-config.yaml``),
            for messages naming the fix.
        path: the ``PATH`` the version probe runs with (this process's ``PATH``), or
            ``None`` (:data:`os.defpath`).
        mcp_config: the MCP servers file (Claude Code's ``--mcp-config`` JSON shape) of
            the ``mcp-call`` hook's harness calls, ``THE_LOOP_MCP_CONFIG`` or
            ``harness.mcpConfig``; ``None``: no server.
    """

    adapter: str = "none"
    binary: str | None = None
    argv: tuple[str, ...] = ()
    version: str | None = None
    turn_timeout: float = 1800.0
    idle_timeout: float = 300.0
    max_turns: int = 5
    cost_cap_usd: float | None = None
    models: Mapping[str, str] = field(default_factory=dict)
    env: tuple[str, ...] = ()
    source: str = "cli-config.yaml"
    path: str | None = None
    mcp_config: str | None = None

    def model_for(self, stage: str | None) -> str | None:
        """The model configured for node stage ``stage``, or ``None`` (the harness's own
        default)."""
        return self.models.get(stage) if stage else None


@dataclass(frozen=True)
class RunnerSettings:
    """The runner processes that run agent turns (``cli-config.yaml`` ``runner:``).

    Attributes:
        queue: the RQ queue of turns (``{THE_LOOP_QUEUE}-turns``).
        concurrency: live turns per runner, ``THE_LOOP_RUNNER_CONCURRENCY`` or
            ``runner.concurrency`` (default 2).
        per_installation: live turns per GitHub App installation (default 2).
        workspace_dir: the per-work-item checkouts, ``THE_LOOP_WORKSPACE_DIR`` or
            ``runner.workspaceDir`` (default ``$XDG_STATE_HOME/the-loop/workspaces``, or
            ``~/.local/state/the-loop/workspaces``).
        home_dir: ``HOME`` of the harness processes, where their transcripts stay
            (default ``.../the-loop/home`` beside ``workspaces``).
        log_bytes: bytes of one turn's output kept in its log.
        mode: ``process`` or ``tmux``.
        lease: seconds a running turn's lease lasts without a heartbeat.
        git_url: clone URL template, ``{repo}`` = ``owner/name``, or ``None`` (derived
            from the GitHub API URL).
    """

    queue: str = "the-loop-turns"
    concurrency: int = 2
    per_installation: int = 2
    workspace_dir: str = "~/.local/state/the-loop/workspaces"
    home_dir: str = "~/.local/state/the-loop/home"
    log_bytes: int = 5 * 2**20
    mode: str = "process"
    lease: int = 30
    git_url: str | None = None


@dataclass(frozen=True)
class Settings:
    """Every setting of a the-loop process, in sections.

    Attributes:
        receiver: the webhook receiver's settings.
        worker: the worker's (and the commands' state) settings.
        github, slack, jira: the integrations (``None`` in the receiver, which calls
            none of them).
        limits: GitHub's write budget per installation.
        classifier: the optional gate-feedback classifier.
        metrics, logging, web: as their classes say.
        harness, runner: the agent harness and the runner that runs its turns.
        dashboard: the read API and the dashboard the receiver serves.
        deployment: the loaded ``cli-config.yaml`` (every default without one).
        environ: the environment the settings were read from, handed to the child
            processes the integrations run (gh, jira-cli, a classifier command); hidden
            from repr.
    """

    receiver: ReceiverSettings
    worker: WorkerSettings
    github: GitHubSettings | None = None
    slack: SlackSettings | None = None
    jira: JiraSettings | None = None
    limits: WriteLimits = field(default_factory=WriteLimits)
    classifier: ClassifierSettings = field(default_factory=ClassifierSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    logging: LogSettings = field(default_factory=LogSettings)
    web: WebSettings = field(default_factory=WebSettings)
    harness: HarnessSettings = field(default_factory=HarnessSettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)
    dashboard: DashboardSettings = field(default_factory=DashboardSettings)
    deployment: CliConfig = field(default_factory=CliConfig)
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, process: Process = "worker") -> Settings:
        """Read and validate every setting: the environment, then ``cli-config.yaml``
        (the path in ``$THE_LOOP_CONFIG``) for what the environment leaves unset.

        Args:
            env: the environment, e.g. ``os.environ`` or a dict in tests.
            process: ``receiver`` (``THE_LOOP_WEBHOOK_SECRET`` is required; the
                integrations are not read), ``gunicorn`` (the receiver's master: neither),
                ``worker`` or ``command`` (the integrations are read). Every other
                variable is validated the same way in each.

        Returns:
            The settings.

        Raises:
            SettingsError: a required variable is missing/empty, a value is invalid, or
                the file is missing, not valid or at an older version; the message names
                the variable or file, line and key, and the fix, never a secret.
        """
        read = _Reader(env)
        deployment = _deployment(env)
        redis_url = read.redis_url()
        queue = read.token("THE_LOOP_QUEUE", deployment.queue.name or "the-loop")
        prefix = read.token("THE_LOOP_REDIS_PREFIX", deployment.state.prefix or "the-loop")
        secrets = read.secrets(required=process == "receiver")
        dashboard = read.dashboard(deployment, secrets)
        receiver = ReceiverSettings(
            secrets=secrets, redis_url=redis_url, queue_name=queue, redis_prefix=prefix,
            max_body_bytes=read.positive_int(
                "THE_LOOP_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES,
                f"a positive integer number of bytes, e.g. THE_LOOP_MAX_BODY_BYTES="
                f"{DEFAULT_MAX_BODY_BYTES} (25 MiB)"))
        worker = WorkerSettings(
            redis_url=redis_url,
            queue=queue,
            prefix=prefix,
            graph_path=read.get("THE_LOOP_GRAPH"),
            enrolment_label=read.get("THE_LOOP_ENROLMENT_LABEL") or DEFAULT_ENROLMENT_LABEL,
            spec_dir=read.spec_dir(),
            lock_timeout=read.seconds_int("THE_LOOP_LOCK_TIMEOUT", deployment.state.lock_timeout),
            config_ttl=read.seconds_int("THE_LOOP_CONFIG_TTL", deployment.state.config_ttl),
            bot_logins=frozenset(s.casefold() for s in read.names("THE_LOOP_BOT_LOGINS")),
            reactions=tuple(vars(deployment.webhooks.gh_webhook.routing.reactions).items()),
            worker_ttl=read.seconds_int("THE_LOOP_WORKER_TTL", 30),
            delivery_attempts=read.seconds_int("THE_LOOP_DELIVERY_ATTEMPTS", 5),
            delivery_backoff=read.backoff("THE_LOOP_DELIVERY_BACKOFF",
                                          WorkerSettings.delivery_backoff),
            reap_interval=read.seconds("THE_LOOP_REAP_INTERVAL", 5.0),
            dispatch_budget=read.seconds("THE_LOOP_DISPATCH_BUDGET", 10.0),
            state_key=read.get("THE_LOOP_STATE_KEY") or None,
            public_url=dashboard.public_url,
            retention=read.duration("THE_LOOP_RETENTION", DEFAULT_RETENTION, "90d"),
            signer=read.signer() if process in ("worker", "command") else None,
        )
        integrations = process in ("worker", "command")
        return cls(
            receiver=receiver,
            worker=worker,
            github=read.github(deployment) if integrations else None,
            slack=read.slack(deployment) if integrations else None,
            jira=read.jira(deployment) if integrations else None,
            limits=read.write_limits(),
            classifier=ClassifierSettings(
                deployment.classification,
                read.get(deployment.classification.endpoint.token_env) if integrations
                else None),
            metrics=MetricsSettings(
                worker_port=read.port(ENV_METRICS_PORT, DEFAULT_METRICS_PORT,
                                      "(0 turns the worker's metrics off)"),
                multiproc_dir=read.get("PROMETHEUS_MULTIPROC_DIR")),
            logging=read.log_settings(),
            web=read.web(),
            harness=read.harness(deployment, config_path(env) or "cli-config.yaml"),
            runner=read.runner(deployment, queue),
            dashboard=dashboard,
            deployment=deployment,
            environ=dict(env),
        )

    def require_secrets(self) -> tuple[bytes, ...]:
        """The webhook secrets (``THE_LOOP_WEBHOOK_SECRET``), most recent first.

        Raises:
            SettingsError: none is set (the message is the receiver's start-up one).
        """
        if not self.receiver.secrets:
            raise _no_secret()
        return self.receiver.secrets

    def require_github(self) -> GitHubSettings:
        """The GitHub section (read for the worker and the commands).

        Raises:
            SettingsError: these settings were read for the receiver.
        """
        if self.github is None:
            raise SettingsError("the receiver's settings hold no GitHub settings: read "
                                "them with Settings.from_env(env, process='command')")
        return self.github

    def child_env(self) -> dict[str, str]:
        """The environment for a child process an integration runs (gh, jira-cli): the
        process's, with ``GH_TOKEN`` set from :attr:`GitHubSettings.token` (which may come
        from a variable ``integrations.github.api.tokenEnv`` names)."""
        env = {k: v for k, v in self.environ.items()
               if k not in (ENV_SIGNING_KEY, ENV_SIGNING_KEY_FILE)}
        if self.github is not None and self.github.token and not env.get("GH_TOKEN"):
            env["GH_TOKEN"] = self.github.token
        return env


# ----------------------------------------------------------------------------- reading


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
        import logging

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
            None if base_url.rstrip("/") == DEFAULT_API_URL else base_url))
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
        return HarnessSettings(
            adapter=adapter,
            binary=binary,
            argv=tuple(config.argv),
            version=config.version,
            turn_timeout=float(config.turn_timeout),
            idle_timeout=float(config.idle_timeout),
            max_turns=config.max_turns,
            cost_cap_usd=None if config.cost_cap_usd is None else float(config.cost_cap_usd),
            models=dict(config.models),
            env=tuple(config.env) or HARNESS_ENV.get(adapter, ()),
            source=source,
            path=self.get("PATH"),
            mcp_config=self.get("THE_LOOP_MCP_CONFIG") or config.mcp_config,
        )

    def runner(self, deployment: CliConfig, queue: str) -> RunnerSettings:
        """``runner:`` with ``THE_LOOP_RUNNER_CONCURRENCY`` / ``THE_LOOP_WORKSPACE_DIR``
        over it; directories default under ``$XDG_STATE_HOME/the-loop``.

        Raises:
            SettingsError: a concurrency that is not a positive whole number.
        """
        config = deployment.runner
        concurrency = _int_setting(ENV_RUNNER_CONCURRENCY, self.get(ENV_RUNNER_CONCURRENCY),
                                   minimum=1, what="live turns per runner")
        state = self.get("XDG_STATE_HOME") or str(
            Path(self.get("HOME") or "~").expanduser() / ".local" / "state")
        base = Path(state) / "the-loop"
        workspace = self.get(ENV_WORKSPACE_DIR) or config.workspace_dir or str(
            base / "workspaces")
        return RunnerSettings(
            queue=f"{queue}-turns",
            concurrency=config.concurrency if concurrency is None else concurrency,
            per_installation=config.per_installation,
            workspace_dir=str(Path(workspace).expanduser()),
            home_dir=str(Path(config.home_dir or str(base / "home")).expanduser()),
            log_bytes=config.log_bytes,
            mode=config.mode,
            lease=config.lease,
            git_url=config.git_url or None,
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
        )


def _api_url(value: str | None) -> str:
    if value is None:
        return DEFAULT_API_URL
    parsed = urllib.parse.urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise SettingsError(
            f"{ENV_API_URL} (integrations.github.api.baseUrl) must be an http(s) URL such "
            f"as {DEFAULT_API_URL} or, for GitHub Enterprise Server, https://HOST/api/v3"
        )
    host = parsed.hostname.lower()
    github_hosted = host == "api.github.com" or host.endswith(".ghe.com")
    loopback = host in ("localhost", "127.0.0.1", "::1")
    if not github_hosted and not loopback and parsed.path.rstrip("/") == "":
        # A GitHub Enterprise Server's REST API lives under /api/v3 ("REST API endpoints
        # ... GitHub Enterprise Server"); its root answers with web pages.
        raise SettingsError(
            f"{ENV_API_URL} (integrations.github.api.baseUrl) has no path: a GitHub "
            "Enterprise Server's REST API root is https://HOST/api/v3; add /api/v3 to it"
        )
    return value.rstrip("/")


def _web_url(api_url: str) -> str:
    """GitHub's web root for a REST API root, as GitHub lays hosts out:
    ``https://api.github.com`` -> ``https://github.com``, Enterprise Server
    ``https://HOST/api/v3`` -> ``https://HOST`` ("About GitHub Enterprise Server" docs);
    any other root (a loopback fake) serves both."""
    parts = urlsplit(api_url)
    host = parts.netloc.removeprefix("api.") if parts.netloc == "api.github.com" \
        else parts.netloc
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

