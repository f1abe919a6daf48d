"""The real Claude Code and Codex CLIs (the Dockerfile's pins) through the-loop's
adapters against the scripted model server: artifacts, resume, faults, limits, and the
per-turn figures against what the server billed."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.contract.conftest import ARTIFACT, BINARIES, CLI, FEEDBACK, PINS


def test_the_installed_clis_are_the_pinned_versions(tmp_path: object) -> None:
    for adapter, package in (("claude-code", "@anthropic-ai/claude-code"),
                             ("codex", "@openai/codex")):
        out = subprocess.run([str(BINARIES[adapter]), "--version"], capture_output=True,
                             text=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                             timeout=30, check=True).stdout
        assert PINS[package] in out


def test_first_turn_writes_the_artifact_and_the_resumed_turn_adds_the_section(cli: CLI) -> None:
    first = cli.turn()
    assert first.status == "completed", first
    assert "## Problem" in cli.artifact() and "## Requirements" not in cli.artifact()
    billed_in, billed_out = cli.server.billed_for(cli.api)
    assert (first.input_tokens, first.output_tokens) == (billed_in, billed_out)

    cli.server.script.content = "# Spec\n\n## Problem\n\n## Requirements\n"
    again = cli.turn(FEEDBACK, resume=first.harness_session, totals=dict(first.totals))
    assert again.status == "completed", again
    assert again.harness_session == first.harness_session
    assert cli.artifact().endswith("## Requirements\n")
    total_in, total_out = cli.server.billed_for(cli.api)
    # The resumed turn's figures are what this turn was billed, not the session's total.
    assert (again.input_tokens, again.output_tokens) == (total_in - billed_in,
                                                         total_out - billed_out)
    if cli.adapter == "claude-code":
        assert 0 < again.cost_usd < first.cost_usd + again.cost_usd
        assert abs(first.cost_usd + again.cost_usd - again.totals["cost_usd"]) < 1e-9


def test_one_overloaded_answer_then_success_completes(cli: CLI) -> None:
    cli.server.script.faults = [529 if cli.adapter == "claude-code" else 500]
    outcome = cli.turn()
    assert outcome.status == "completed", outcome
    assert "## Problem" in cli.artifact()
    assert cli.server.script.faults == []


# Codex's persistent 500s (about 25 s of its retries) run through the whole stack in
# test_runner_stack.py, which checks the failed turn's record and detail as well.
@pytest.mark.parametrize("cli", ["claude-code"], indirect=True)
def test_persistent_500s_fail_the_turn(cli: CLI) -> None:
    cli.server.script.faults = [500] * 50
    outcome = cli.turn()
    assert outcome.status != "completed" and not outcome.ok, outcome
    assert not (cli.workspace / ARTIFACT).exists()


def test_a_hung_response_past_idle_timeout_is_idle(cli: CLI) -> None:
    cli.server.script.hang = True
    outcome = cli.turn(idle_timeout=3)
    assert outcome.status == "idle", outcome


def test_a_lost_session_is_resume_failed(cli: CLI) -> None:
    lost = str(uuid.uuid4())
    outcome = cli.turn(FEEDBACK, resume=lost)
    assert outcome.status == "resume-failed", outcome
