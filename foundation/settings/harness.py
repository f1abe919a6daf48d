"""The agent harness's and the runner's settings (``cli-config.yaml``'s ``harness:``
and ``runner:``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

ENV_HARNESS = "THE_LOOP_HARNESS"
ENV_HARNESS_BINARY = "THE_LOOP_HARNESS_BINARY"
ENV_RUNNER_CONCURRENCY = "THE_LOOP_RUNNER_CONCURRENCY"
ENV_WORKSPACE_DIR = "THE_LOOP_WORKSPACE_DIR"

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
