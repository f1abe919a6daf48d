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

The package, one module per section family (each section a frozen dataclass):

* :mod:`~foundation.settings.queues` -- the receiver and the worker: Redis, the RQ queue,
  the deliveries and the worker's state;
* :mod:`~foundation.settings.github` -- GitHub and its write budget;
* :mod:`~foundation.settings.harness` -- the agent harness and the runner;
* :mod:`~foundation.settings.web` -- where processes listen, the read API and dashboard;
* :mod:`~foundation.settings.integrations` -- Slack, Jira, the classifier;
* :mod:`~foundation.settings.observability` -- metrics and logs;
* :mod:`~foundation.settings.environment` -- the one reader of the environment;
* :mod:`~foundation.settings.errors` -- :class:`SettingsError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from foundation.config.deployment import CliConfig
from foundation.settings.environment import _deployment, _no_secret, _Reader, config_path
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
    HARNESS_BASE_URL_ENV,
    HARNESS_BINARIES,
    HARNESS_ENV,
    RUNNER_MODES,
    HarnessSettings,
    RunnerSettings,
)
from foundation.settings.integrations import ClassifierSettings, JiraSettings, SlackSettings
from foundation.settings.observability import (
    DEFAULT_METRICS_PORT,
    ENV_METRICS_PORT,
    LOG_FORMATS,
    LogSettings,
    MetricsSettings,
)
from foundation.settings.queues import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_REDIS_URL,
    DEFAULT_RETENTION,
    ENV_SECRET,
    ReceiverSettings,
    RedisSentinel,
    WorkerSettings,
    redact_url,
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
from foundation.signing import ENV_SIGNING_KEY, ENV_SIGNING_KEY_FILE
from graph.context import DEFAULT_ENROLMENT_LABEL

__all__ = [
    "DEFAULT_API_URL",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_REDIS_URL",
    "DEFAULT_RETENTION",
    "ENV_API_TOKENS",
    "ENV_API_URL",
    "ENV_APP_ID",
    "ENV_CLIENT_ID",
    "ENV_CLIENT_SECRET",
    "ENV_GITHUB_CLI_BINARY",
    "ENV_GITHUB_TRANSPORT",
    "ENV_HARNESS",
    "ENV_HARNESS_BINARY",
    "ENV_KEY",
    "ENV_KEY_PATH",
    "ENV_MERMAID_DIR",
    "ENV_METRICS_PORT",
    "ENV_PUBLIC_URL",
    "ENV_RUNNER_CONCURRENCY",
    "ENV_SECRET",
    "ENV_SESSION_SECRET",
    "ENV_SESSION_TTL",
    "ENV_UI_MEMBERS",
    "ENV_WORKSPACE_DIR",
    "GITHUB_TRANSPORTS",
    "HARNESS_ADAPTERS",
    "HARNESS_BINARIES",
    "HARNESS_BASE_URL_ENV",
    "HARNESS_ENV",
    "LOG_FORMATS",
    "MIN_TOKEN_CHARS",
    "RUNNER_MODES",
    "ClassifierSettings",
    "DashboardSettings",
    "GitHubSettings",
    "HarnessSettings",
    "JiraSettings",
    "LogSettings",
    "MetricsSettings",
    "Process",
    "ReceiverSettings",
    "RedisSentinel",
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
        sentinel = read.redis_sentinel(redis_url)
        replicas, replicas_timeout_ms = read.receiver_replicas()
        queue = read.token("THE_LOOP_QUEUE", deployment.queue.name or "the-loop")
        prefix = read.token("THE_LOOP_REDIS_PREFIX", deployment.state.prefix or "the-loop")
        secrets = read.secrets(required=process == "receiver")
        dashboard = read.dashboard(deployment, secrets)
        receiver = ReceiverSettings(
            secrets=secrets, redis_url=redis_url, queue_name=queue, redis_prefix=prefix,
            sentinel=sentinel, replicas=replicas, replicas_timeout_ms=replicas_timeout_ms,
            max_body_bytes=read.positive_int(
                "THE_LOOP_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES,
                f"a positive integer number of bytes, e.g. THE_LOOP_MAX_BODY_BYTES="
                f"{DEFAULT_MAX_BODY_BYTES} (25 MiB)"))
        worker = WorkerSettings(
            redis_url=redis_url,
            sentinel=sentinel,
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
            reconcile_interval=read.duration("THE_LOOP_RECONCILE_INTERVAL", 600.0, "10m"),
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
