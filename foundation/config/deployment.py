"""``cli-config.yaml``, the deployment's configuration (*how*): the transports and the
environment variables that hold their credentials, the webhook routing, the RQ queue, the
state settings, the classifier endpoint, the agent harness and its runner.

The ``harness`` and ``runner`` sections' types are the settings' too
(:class:`HarnessSettings`, :class:`RunnerSettings`): the file's keys are built into them,
and :meth:`foundation.settings.Settings.from_env` resolves the same type with the
environment's overrides. Loading and errors: :mod:`foundation.config.loader`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from foundation.config.legacy import find_legacy_keys
from foundation.config.loader import (
    CLI_CONFIG,
    CURRENT_VERSION,
    RESOLVED,
    as_dict,
    build,
    load_document,
    read_file,
)

CONFIG_ENV = "THE_LOOP_CONFIG"
CLI_CONFIG_NAME = "cli-config.yaml"


# -- the files' dataclasses ------------------------------------------------------------
#
# Field ``foo_bar`` is key ``fooBar`` in the file. A nested dataclass is a nested mapping.


@dataclass(frozen=True)
class GitHubApi:
    """``integrations.github.api``: credentials only as environment variable names."""

    token_env: tuple[str, ...] = ("GH_TOKEN", "GITHUB_TOKEN")
    base_url: str = "https://api.github.com"
    app_id_env: str = "THE_LOOP_GITHUB_APP_ID"
    private_key_env: str = "THE_LOOP_GITHUB_PRIVATE_KEY"
    private_key_path_env: str = "THE_LOOP_GITHUB_PRIVATE_KEY_PATH"


@dataclass(frozen=True)
class GitHubCli:
    """``integrations.github.cli``: the ``gh`` executable (was ``ghBinary`` in version 1)."""

    binary: str = "gh"


@dataclass(frozen=True)
class GitHubIntegration:
    """``integrations.github``: ``transport`` is ``auto`` (api when a token is set, else cli
    when the binary is on PATH, else fail naming both fixes), ``api`` or ``cli``."""

    transport: str = "auto"
    api: GitHubApi = field(default_factory=GitHubApi)
    cli: GitHubCli = field(default_factory=GitHubCli)


@dataclass(frozen=True)
class SlackIntegration:
    """``integrations.slack``: ``transport`` ``sdk`` (bot token) or ``webhook`` (URL)."""

    transport: str = "sdk"
    token_env: str = "THE_LOOP_SLACK_TOKEN"
    url_env: str = "THE_LOOP_SLACK_WEBHOOK_URL"


@dataclass(frozen=True)
class JiraApi:
    """``integrations.jira.api``; an empty ``base_url`` means Jira is not configured."""

    base_url: str = ""
    token_env: str = "THE_LOOP_JIRA_TOKEN"
    user_env: str = "THE_LOOP_JIRA_USER"


@dataclass(frozen=True)
class JiraCli:
    """``integrations.jira.cli``."""

    binary: str = "jira"


@dataclass(frozen=True)
class JiraIntegration:
    """``integrations.jira``: ``transport`` ``api`` or ``cli``."""

    transport: str = "api"
    api: JiraApi = field(default_factory=JiraApi)
    cli: JiraCli = field(default_factory=JiraCli)


@dataclass(frozen=True)
class Integrations:
    """``integrations``: each external service declared once."""

    github: GitHubIntegration = field(default_factory=GitHubIntegration)
    slack: SlackIntegration = field(default_factory=SlackIntegration)
    jira: JiraIntegration = field(default_factory=JiraIntegration)


@dataclass(frozen=True)
class ControlRouting:
    """``webhooks.ghWebhook.routing.control``: no settings; it uses ``integrations.github``."""


@dataclass(frozen=True)
class Reactions:
    """``webhooks.ghWebhook.routing.reactions``: emoji on the triggering comment (names from
    :data:`graph.ports.REACTIONS`)."""

    enabled: bool = True
    started: str = "eyes"
    completed: str = "hooray"
    error: str = "confused"


@dataclass(frozen=True)
class Announce:
    """``webhooks.ghWebhook.routing.announce``: comments announcing phase changes."""

    enabled: bool = True


@dataclass(frozen=True)
class Routing:
    """``webhooks.ghWebhook.routing``."""

    control: ControlRouting = field(default_factory=ControlRouting)
    reactions: Reactions = field(default_factory=Reactions)
    announce: Announce = field(default_factory=Announce)


@dataclass(frozen=True)
class GhWebhook:
    """``webhooks.ghWebhook``."""

    routing: Routing = field(default_factory=Routing)


@dataclass(frozen=True)
class Webhooks:
    """``webhooks``."""

    gh_webhook: GhWebhook = field(default_factory=GhWebhook)


@dataclass(frozen=True)
class QueueSettings:
    """``queue``: the RQ queue (``name`` is ``THE_LOOP_QUEUE``'s setting)."""

    name: str = "the-loop"
    default_timeout: int = 300


@dataclass(frozen=True)
class StateSettings:
    """``state``: ``prefix`` (``THE_LOOP_REDIS_PREFIX``), ``lock_timeout``
    (``THE_LOOP_LOCK_TIMEOUT``), ``config_ttl`` (``THE_LOOP_CONFIG_TTL``), in seconds."""

    prefix: str = "the-loop"
    lock_timeout: int = 300
    config_ttl: int = 300


@dataclass(frozen=True)
class ClassifierEndpoint:
    """``classification.endpoint``: an OpenAI-compatible chat completions API."""

    base_url: str = ""
    model: str = ""
    token_env: str = "THE_LOOP_CLASSIFIER_TOKEN"


@dataclass(frozen=True)
class Classification:
    """``classification``: the optional model classifier (a harness ``command`` or an
    ``endpoint``), with ``timeout`` seconds per attempt and ``retries``."""

    command: tuple[str, ...] = ()
    endpoint: ClassifierEndpoint = field(default_factory=ClassifierEndpoint)
    timeout: int = 30
    retries: int = 2


# -- sections that are also the settings' ---------------------------------------------
#
# The file's keys are built into these types; Settings.from_env then resolves the same
# type with the environment's overrides (dataclasses.replace): one type per section, from
# the file to the process. A field with ``metadata={RESOLVED: True}`` is no key of the
# file: only start-up sets it.


@dataclass(frozen=True)
class HarnessSettings:
    """``harness``: the coding-agent CLI that does the work of agent nodes; the section
    :attr:`foundation.settings.Settings.harness` too.

    Attributes:
        adapter: ``claude-code``, ``codex``, ``command`` or ``none`` (agent nodes wait for
            a person); ``THE_LOOP_HARNESS`` or ``harness.adapter``.
        binary: the executable of claude-code / codex (``THE_LOOP_HARNESS_BINARY`` or
            ``harness.binary``; resolved default ``claude`` / ``codex`` on PATH); ``None``
            for ``command`` and ``none``.
        argv: the command adapter's argument list (a typed YAML list, never a string).
        version: the pinned version; what ``--version`` prints must contain it.
        turn_timeout: wall-clock seconds of one turn.
        idle_timeout: seconds without output before a turn is killed.
        max_turns: the-loop turns per node visit (the first and its repairs).
        cost_cap_usd: US dollars per work item; reaching it escalates. ``None``: no cap.
        models: node stage -> model name.
        env: names of the variables passed to the harness process (API keys, a
            gateway's ``ANTHROPIC_BASE_URL``): the adapter's own
            (:data:`foundation.settings.HARNESS_ENV`) and these, which start-up merges;
            with ``env_only`` these alone.
        env_only: ``harness.envOnly``: ``env`` replaces the adapter's names instead of
            adding to them.
        source: where the settings came from (the file's path, or ``cli-config.yaml``),
            for messages naming the fix. Resolved, not a key of the file.
        path: the ``PATH`` the version probe runs with (this process's ``PATH``), or
            ``None`` (:data:`os.defpath`). Resolved, not a key of the file.
        mcp_config: the MCP servers file (Claude Code's ``--mcp-config`` JSON shape) of
            the ``mcp-call`` hook's harness calls, ``THE_LOOP_MCP_CONFIG`` or
            ``harness.mcpConfig``; ``None``: no server.
        base_url: ``harness.baseUrl``: a gateway (a proxy, a self-hosted model) the CLI
            talks to instead of its vendor's API: Claude Code gets it as
            ``ANTHROPIC_BASE_URL``, Codex as a model provider in the work item's
            ``$HOME/.codex/config.toml``. ``None``: the vendor's API.
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
    env_only: bool = False
    source: str = field(default=CLI_CONFIG_NAME, metadata={RESOLVED: True})
    path: str | None = field(default=None, metadata={RESOLVED: True})
    mcp_config: str | None = None
    base_url: str | None = None

    def model_for(self, stage: str | None) -> str | None:
        """The model configured for node stage ``stage``, or ``None`` (the harness's own
        default)."""
        return self.models.get(stage) if stage else None


@dataclass(frozen=True)
class RunnerSettings:
    """``runner``: the processes that run agent turns (``the-loop runner``); the section
    :attr:`foundation.settings.Settings.runner` too.

    In the file an empty ``workspace_dir``, ``home_dir`` or ``git_url`` means "derive it";
    start-up resolves them (:meth:`foundation.settings.Settings.from_env`).

    Attributes:
        queue: the RQ queue of turns (``{THE_LOOP_QUEUE}-turns``). Resolved, not a key of
            the file.
        concurrency: live turns per runner, ``THE_LOOP_RUNNER_CONCURRENCY`` or
            ``runner.concurrency`` (default 2).
        per_installation: live turns per GitHub App installation (default 2).
        workspace_dir: the per-work-item checkouts, ``THE_LOOP_WORKSPACE_DIR`` or
            ``runner.workspaceDir`` (resolved default ``$XDG_STATE_HOME/the-loop/workspaces``,
            or ``~/.local/state/the-loop/workspaces``).
        home_dir: ``HOME`` of the harness processes, where their transcripts stay
            (resolved default ``.../the-loop/home`` beside ``workspaces``).
        log_bytes: bytes of one turn's output kept in its log.
        mode: ``process`` or ``tmux``.
        lease: seconds a running turn's lease lasts without a heartbeat.
        git_url: clone URL template, ``{repo}`` = ``owner/name``; resolved ``None`` when
            the file leaves it empty (derived from the GitHub API URL).
        drain_seconds: seconds a runner told to stop (SIGTERM) lets its live turn run
            before it interrupts it and queues it again, to resume elsewhere,
            ``THE_LOOP_RUNNER_DRAIN_SECONDS`` (the chart's ``runner.drainSeconds``;
            default 25). Resolved, not a key of the file.
        partial_clone: whether a repository's mirror, when a runner creates it, is a
            partial clone (``--filter=blob:none``: blobs fetched as checkouts need
            them), ``THE_LOOP_RUNNER_PARTIAL_CLONE`` (``true`` / ``false``) or
            ``runner.partialClone`` (default true); an existing mirror keeps its kind
            (:class:`runner.workspace.Workspaces`).
    """

    queue: str = field(default="the-loop-turns", metadata={RESOLVED: True})
    concurrency: int = 2
    per_installation: int = 2
    workspace_dir: str = ""
    home_dir: str = ""
    log_bytes: int = 5 * 2**20
    mode: str = "process"
    lease: int = 30
    git_url: str | None = ""
    drain_seconds: float = field(default=25.0, metadata={RESOLVED: True})
    partial_clone: bool = True


#: The file's names of the two sections (they were separate types before the settings
#: used them).
HarnessSection = HarnessSettings
RunnerSection = RunnerSettings


@dataclass(frozen=True)
class CliConfig:
    """``cli-config.yaml``, the deployment's configuration (*how*)."""

    version: int = CURRENT_VERSION[CLI_CONFIG]
    integrations: Integrations = field(default_factory=Integrations)
    webhooks: Webhooks = field(default_factory=Webhooks)
    queue: QueueSettings = field(default_factory=QueueSettings)
    state: StateSettings = field(default_factory=StateSettings)
    classification: Classification = field(default_factory=Classification)
    harness: HarnessSettings = field(default_factory=HarnessSettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)

    @property
    def routing(self) -> Routing:
        """Shortcut for ``webhooks.gh_webhook.routing``."""
        return self.webhooks.gh_webhook.routing

    def as_dict(self) -> dict[str, Any]:
        """The file's shape with every default filled (camelCase keys, lists)."""
        return as_dict(self)



def load_cli_config(text: str | None, source: str = CLI_CONFIG_NAME) -> CliConfig:
    """Parse ``cli-config.yaml``'s text; ``None`` (no file) or an empty file gives every
    default.

    Raises:
        LegacyConfigError: version 1 (or no version), or a ``ghBinary`` key anywhere.
        InvalidConfigError: bad YAML, an unknown key, a wrong type or value.
    """
    plain = load_document(text, source, CLI_CONFIG, legacy=find_legacy_keys)
    return CliConfig() if plain is None else build(CliConfig, plain)



def cli_config_from_path(path: str | os.PathLike[str]) -> CliConfig:
    """:func:`load_cli_config` of the file at ``path`` (absent: every default)."""
    return load_cli_config(read_file(path), str(path))

