"""check_harness (the fail-closed start-up check), build_harness, and the fakes' refusals
of wrong flags (as the real CLIs refuse them)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from foundation.settings import HarnessSettings
from integrations.harness import (
    ADAPTERS,
    HarnessError,
    HarnessMissing,
    HarnessVersionError,
    build_harness,
    check_harness,
)
from integrations.harness.command import read_result
from integrations.harness.factory import matches_pin, version_of
from integrations.harness.process import probe_version
from tests.harness.support import FAKES, settings_for


def graph(*actors: str) -> Any:
    return SimpleNamespace(nodes={f"n{i}": SimpleNamespace(actor=a) for i, a in enumerate(actors)})


AGENT_GRAPH = graph("agent", "human", "system")


def test_the_registry_names_the_three_adapters() -> None:
    assert set(ADAPTERS) == {"claude-code", "codex", "command"}
    assert build_harness(HarnessSettings()) is None  # adapter none
    with pytest.raises(HarnessError, match="unknown harness adapter"):
        build_harness(HarnessSettings(adapter="aider"))
    with pytest.raises(HarnessError, match="harness.argv"):
        build_harness(HarnessSettings(adapter="command"))


def test_nothing_is_checked_for_adapter_none_or_a_graph_without_agents() -> None:
    assert check_harness(HarnessSettings(), AGENT_GRAPH) is None
    missing = HarnessSettings(adapter="claude-code", binary="/nonexistent/claude")
    assert check_harness(missing, graph("human", "system")) is None


@pytest.mark.parametrize(("adapter", "printed"), [
    ("claude-code", "2.0.14 (Claude Code)"), ("codex", "codex-cli 0.46.0"),
    ("command", "fake-agent 1.0.0")])
def test_an_unpinned_version_fails_closed_naming_the_line_to_add(adapter: str,
                                                                 printed: str) -> None:
    settings = replace(settings_for(adapter), source="/etc/the-loop/cli-config.yaml")
    with pytest.raises(HarnessVersionError) as caught:
        check_harness(settings, AGENT_GRAPH)
    assert str(caught.value).startswith(
        f"harness.version is not pinned: set harness.version: {json.dumps(printed)} in "
        "/etc/the-loop/cli-config.yaml")
    pinned = replace(settings, version=printed.split()[-1] if adapter != "claude-code"
                     else "2.0.14")
    assert check_harness(pinned, AGENT_GRAPH) == printed


def test_another_version_than_the_pinned_one_names_both() -> None:
    settings = replace(settings_for("claude-code"), version="1.0.99")
    with pytest.raises(HarnessVersionError, match=r"2\.0\.14.*1\.0\.99"):
        check_harness(settings, AGENT_GRAPH)


def test_a_missing_harness_names_the_fix(tmp_path: Path) -> None:
    settings = HarnessSettings(adapter="codex", binary=str(tmp_path / "codex"), version="0.46")
    with pytest.raises(HarnessMissing, match="harness.binary.*THE_LOOP_HARNESS_BINARY"):
        check_harness(settings, AGENT_GRAPH)


def test_argv_shapes() -> None:
    from tests.harness.support import Rig

    rig = Rig("claude-code", Path("/tmp/unused-harness-rig"))
    first = rig.harness.command(rig.request())
    assert first[:5] == [str(FAKES / "claude"), "-p", "--output-format", "stream-json",
                         "--verbose"]
    assert {"--setting-sources", "user", "--strict-mcp-config", "--permission-mode",
            "acceptEdits", "--session-id"} <= set(first) and "--mcp-config" not in first
    resumed = rig.harness.command(rig.request(resume="abc"))
    assert resumed[resumed.index("--resume") + 1] == "abc" and "--session-id" not in resumed
    codex = Rig("codex", Path("/tmp/unused-harness-rig"))
    argv = codex.harness.command(codex.request(resume="t-1", model="m"))
    assert argv[1:3] == ["exec", "--json"] and argv[-3:] == ["resume", "t-1", "-"]
    assert argv.index("--model") < argv.index("resume")


def fake(name: str, *args: str, stdin: str = "hi", home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FAKES / name), *args], input=stdin, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
                          cwd=home, timeout=10)


def test_the_fakes_refuse_wrong_flags_as_the_real_clis_do(tmp_path: Path) -> None:
    no_verbose = fake("claude", "-p", "--output-format", "stream-json", home=tmp_path)
    assert no_verbose.returncode == 1
    assert "When using --print, --output-format=stream-json requires --verbose" in \
        no_verbose.stderr
    bad_id = fake("claude", "-p", "--verbose", "--output-format", "stream-json",
                  "--session-id", "not-a-uuid", home=tmp_path)
    assert bad_id.returncode == 1 and "Invalid session ID" in bad_id.stderr
    unknown = fake("claude", "-p", "--bogus", home=tmp_path)
    assert unknown.returncode == 1 and "unknown option '--bogus'" in unknown.stderr
    no_git = fake("codex", "exec", "--json", "--sandbox", "workspace-write", "-", home=tmp_path)
    assert no_git.returncode == 1 and "--skip-git-repo-check" in no_git.stderr
    sandbox = fake("codex", "exec", "--sandbox", "everything", "-", home=tmp_path)
    assert sandbox.returncode == 2
    assert fake("agent", "--version", home=tmp_path).stdout == "fake-agent 1.0.0\n"


@pytest.mark.parametrize(("body", "problem"), [
    ("not json", "is not JSON"), ("[1]", "is not a JSON object"),
    ('{"cost_usd": "a lot"}', "cost_usd that is not a number"),
    ('{"input_tokens": 1.5}', "input_tokens that is not a whole number"),
    ('{"session_id": 12}', "session_id that is not a string"),
    ('{"cost_usd": -1}', "cost_usd that is not a number"),
    ('{"status": "great"}', "status that is not one of"),
])
def test_a_bad_result_file_is_a_clear_problem(tmp_path: Path, body: str, problem: str) -> None:
    (tmp_path / "r.json").write_text(body)
    assert read_result(tmp_path / "r.json") == ({}, read_result(tmp_path / "r.json")[1])
    assert problem in read_result(tmp_path / "r.json")[1]
    assert read_result(tmp_path / "absent.json") == ({}, "")


def test_a_bad_result_file_fails_the_turn_without_a_crash(tmp_path: Path) -> None:
    from tests.harness.support import Rig

    rig = Rig("command", tmp_path)
    rig.knobs(bad_result=True)
    outcome = rig.run(rig.request())
    assert outcome.status == "failed"
    assert "result.json has session_id that is not a string" in outcome.detail


def test_a_resumed_claude_session_reporting_a_new_id_is_recorded(tmp_path: Path) -> None:
    from tests.harness.support import FEEDBACK, Rig

    rig = Rig("claude-code", tmp_path)
    first = rig.run(rig.request())
    rig.knobs(new_session_on_resume=True)
    again = rig.run(rig.request(FEEDBACK, resume=first.harness_session))
    assert again.ok and again.harness_session not in (None, first.harness_session)


def test_the_version_probe_reads_stdout_only(tmp_path: Path) -> None:
    # Codex with a fresh HOME prints a WARNING on stderr before its version.
    cli = tmp_path / "codex"
    cli.write_text("#!/bin/sh\necho 'WARNING: proceeding, even though we could not update "
                   "PATH' >&2\necho 'codex-cli 0.171.0'\n")
    cli.chmod(0o755)
    assert probe_version(str(cli)) == "codex-cli 0.171.0"
    settings = HarnessSettings(adapter="codex", binary=str(cli), version="0.171.0")
    assert check_harness(settings, AGENT_GRAPH) == "codex-cli 0.171.0"


@pytest.mark.parametrize("pin", ["codex-cli", "0.171", "171.0", "WARNING"])
def test_a_pin_is_the_version_as_printed_not_any_part_of_it(pin: str) -> None:
    assert not matches_pin(pin, "codex-cli 0.171.0")


@pytest.mark.parametrize(("pin", "printed"), [
    ("0.171.0", "codex-cli 0.171.0"), ("codex-cli 0.171.0", "codex-cli 0.171.0"),
    ("2.1.332", "2.1.332 (Claude Code)")])
def test_a_pin_matches_the_printed_line_or_its_version(pin: str, printed: str) -> None:
    assert matches_pin(pin, printed)
    assert version_of(printed) == pin.split()[-1]
