"""The agent harness's and the runner's settings (``cli-config.yaml``'s ``harness:`` and
``runner:``): their environment variables and the adapters' defaults.

The sections' type is the file's: :class:`HarnessSettings` and :class:`RunnerSettings`
(:mod:`foundation.config.deployment`) are what ``cli-config.yaml`` is built into, and
:meth:`foundation.settings.Settings.from_env` resolves the same type with the
environment's overrides and the derived defaults.
"""

from __future__ import annotations

from collections.abc import Mapping

from foundation.config.deployment import HarnessSettings, RunnerSettings

__all__ = [
    "ENV_HARNESS",
    "ENV_HARNESS_BINARY",
    "ENV_RUNNER_CONCURRENCY",
    "ENV_WORKSPACE_DIR",
    "HARNESS_ADAPTERS",
    "HARNESS_BINARIES",
    "HARNESS_BASE_URL_ENV",
    "HARNESS_ENV",
    "harness_env",
    "RUNNER_MODES",
    "HarnessSettings",
    "RunnerSettings",
]

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
#: The variable that points each adapter at ``harness.baseUrl`` (Claude Code's LLM
#: gateway docs); Codex reads a model provider from its config.toml instead.
HARNESS_BASE_URL_ENV: Mapping[str, str] = {"claude-code": "ANTHROPIC_BASE_URL"}


def harness_env(adapter: str, named: tuple[str, ...], only: bool) -> tuple[str, ...]:
    """The variables a harness gets: the adapter's own (:data:`HARNESS_ENV`) then the
    names ``harness.env`` adds, each once; with ``harness.envOnly`` the named ones
    alone."""
    names = named if only else (*HARNESS_ENV.get(adapter, ()), *named)
    return tuple(dict.fromkeys(names))
