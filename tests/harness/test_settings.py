"""Settings.harness and Settings.runner: cli-config.yaml's harness: and runner: with
their environment overrides; bad values refused at start-up, naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.settings import Settings, SettingsError


def settings(tmp_path: Path, text: str | None = None, **env: str) -> Settings:
    full = {"HOME": str(tmp_path), **env}
    if text is not None:
        path = tmp_path / "cli-config.yaml"
        path.write_text("version: 2\n" + text)
        full["THE_LOOP_CONFIG"] = str(path)
    return Settings.from_env(full)


def test_defaults(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert s.harness.adapter == "none" and s.harness.binary is None
    assert (s.harness.turn_timeout, s.harness.idle_timeout, s.harness.max_turns) == (
        1800.0, 300.0, 5)
    assert s.runner.queue == "the-loop-turns" and s.runner.concurrency == 2
    assert s.runner.workspace_dir == str(tmp_path / ".local/state/the-loop/workspaces")
    assert s.runner.home_dir == str(tmp_path / ".local/state/the-loop/home")
    assert s.runner.mode == "process" and s.runner.git_url is None
    assert s.runner.partial_clone is True


def test_the_file_sets_every_key(tmp_path: Path) -> None:
    s = settings(tmp_path, (
        "harness:\n  adapter: claude-code\n  binary: /opt/claude\n  version: 2.0.14\n"
        "  turnTimeout: 600\n  idleTimeout: 60.5\n  maxTurns: 3\n  costCapUsd: 2.5\n"
        "  models: {spec: claude-opus-4, code: claude-sonnet-4-5}\n  env: [MY_KEY]\n"
        "runner:\n  concurrency: 4\n  perInstallation: 1\n  workspaceDir: /srv/ws\n"
        "  homeDir: /srv/home\n  logBytes: 65536\n  mode: tmux\n  lease: 60\n"
        "  gitUrl: 'https://git.example/{repo}.git'\n  partialClone: false\n"),
        THE_LOOP_QUEUE="q")
    h, r = s.harness, s.runner
    assert (h.adapter, h.binary, h.version) == ("claude-code", "/opt/claude", "2.0.14")
    assert (h.turn_timeout, h.idle_timeout, h.max_turns, h.cost_cap_usd) == (600, 60.5, 3, 2.5)
    assert h.model_for("spec") == "claude-opus-4" and h.model_for("other") is None
    # harness.env adds to the adapter's own names
    assert h.env == ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "MY_KEY")
    assert h.source.endswith("cli-config.yaml")
    assert (r.queue, r.concurrency, r.per_installation, r.workspace_dir, r.home_dir) == (
        "q-turns", 4, 1, "/srv/ws", "/srv/home")
    assert (r.log_bytes, r.mode, r.lease, r.git_url, r.partial_clone) == (
        65536, "tmux", 60, "https://git.example/{repo}.git", False)


def test_harness_env_adds_to_the_adapters_names_and_env_only_replaces_them(
        tmp_path: Path) -> None:
    added = settings(tmp_path, "harness: {adapter: claude-code, env: [ANTHROPIC_BASE_URL, "
                               "ANTHROPIC_API_KEY]}\n").harness
    assert added.env == ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL")
    only = settings(tmp_path, "harness: {adapter: codex, env: [CODEX_API_KEY], "
                              "envOnly: true}\n").harness
    assert only.env == ("CODEX_API_KEY",)
    gateway = settings(tmp_path, "harness: {adapter: codex, baseUrl: "
                                 "'https://gw.example/v1'}\n").harness
    assert gateway.base_url == "https://gw.example/v1"


def test_adapter_defaults_for_binary_and_env(tmp_path: Path) -> None:
    claude = settings(tmp_path, "harness: {adapter: claude-code}\n").harness
    assert claude.binary == "claude"
    assert claude.env == ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")
    codex = settings(tmp_path, "harness: {adapter: codex}\n").harness
    assert (codex.binary, codex.env) == ("codex", ("OPENAI_API_KEY", "CODEX_API_KEY"))
    command = settings(tmp_path, "harness: {adapter: command, argv: [aider, --yes]}\n").harness
    assert (command.binary, command.argv, command.env) == (None, ("aider", "--yes"), ())


def test_environment_overrides(tmp_path: Path) -> None:
    s = settings(tmp_path, "harness: {adapter: none}\nrunner: {concurrency: 1}\n",
                 THE_LOOP_HARNESS="codex", THE_LOOP_HARNESS_BINARY="/usr/local/bin/codex",
                 THE_LOOP_RUNNER_CONCURRENCY="8", THE_LOOP_WORKSPACE_DIR="/data/ws",
                 XDG_STATE_HOME="/state")
    assert (s.harness.adapter, s.harness.binary) == ("codex", "/usr/local/bin/codex")
    assert (s.runner.concurrency, s.runner.workspace_dir) == (8, "/data/ws")
    assert s.runner.home_dir == "/state/the-loop/home"
    assert settings(tmp_path, "runner: {partialClone: true}\n",
                    THE_LOOP_RUNNER_PARTIAL_CLONE="False").runner.partial_clone is False
    assert settings(tmp_path, "runner: {partialClone: false}\n",
                    THE_LOOP_RUNNER_PARTIAL_CLONE="true").runner.partial_clone is True


def test_argv_as_a_string_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        settings(tmp_path, "harness:\n  adapter: command\n  argv: aider --yes\n")
    message = str(caught.value)
    assert "cli-config.yaml" in message and "harness.argv" in message
    assert "argv must be a list, never a shell string" in message


@pytest.mark.parametrize(("text", "env", "words"), [
    ("harness: {adapter: command}\n", {}, "harness.argv is empty"),
    ("harness: {adapter: claude}\n", {}, "did you mean 'claude-code'"),
    ("harness: {turnTimeout: 0}\n", {}, "harness.turnTimeout"),
    ("harness: {binary: claude --verbose}\n", {}, "harness.binary"),
    ("harness: {models: {spec: 3}}\n", {}, "harness.models.spec"),
    ("harness: {env: [my-key]}\n", {}, "harness.env"),
    ("harness: {baseUrl: 'ftp://gw.example'}\n", {}, "harness.baseUrl"),
    ("runner: {mode: screen}\n", {}, "runner.mode"),
    ("runner: {gitUrl: 'https://github.com/x.git'}\n", {}, "{repo}"),
    ("", {"THE_LOOP_HARNESS": "aider"}, "THE_LOOP_HARNESS must be one of"),
    ("", {"THE_LOOP_HARNESS_BINARY": "claude -p"}, "THE_LOOP_HARNESS_BINARY must name one"),
    ("", {"THE_LOOP_RUNNER_CONCURRENCY": "0"},
     "THE_LOOP_RUNNER_CONCURRENCY must be a whole number >= 1"),
    ("", {"THE_LOOP_RUNNER_CONCURRENCY": "many"}, "THE_LOOP_RUNNER_CONCURRENCY must be a whole"),
    ("", {"THE_LOOP_RUNNER_PARTIAL_CLONE": "yes"},
     "THE_LOOP_RUNNER_PARTIAL_CLONE must be true or false"),
    ("runner: {partialClone: maybe}\n", {}, "runner.partialClone"),
])
def test_bad_values_are_refused_naming_the_fix(tmp_path: Path, text: str, env: dict[str, str],
                                               words: str) -> None:
    with pytest.raises(SettingsError) as caught:
        settings(tmp_path, text, **env)
    assert words in str(caught.value)
