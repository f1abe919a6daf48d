"""The adapters against the fakes where the fakes behave as the real CLIs do (Claude
Code 2.1.332, Codex 0.171.0): Codex's stream errors, running totals on a resumed
session, a lost session, the version probe."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from foundation.settings import HarnessSettings, RunnerSettings
from graph.work import TurnEnded, TurnOrder, record_totals
from integrations.harness.codex import Codex
from runner.harness_turn import TurnSetup, environment
from tests.harness.support import FAKES, FEEDBACK, Rig


@pytest.fixture
def codex(tmp_path: Path) -> Rig:
    return Rig("codex", tmp_path)


@pytest.fixture
def claude(tmp_path: Path) -> Rig:
    return Rig("claude-code", tmp_path)


def test_codex_error_events_then_turn_completed_is_a_completed_turn_with_warnings(
        codex: Rig) -> None:
    codex.knobs(stream_errors=2)
    outcome = codex.run(codex.request())
    assert outcome.status == "completed", outcome
    assert outcome.exit_code == 0 and outcome.detail == ""
    assert outcome.warnings == ("Reconnecting... 1/5", "Reconnecting... 2/5")


def test_a_failed_codex_turn_says_what_turn_failed_said(codex: Rig) -> None:
    # Codex 0.171 after persistent 5xx: turn.failed{error{message}}, exit 1.
    codex.knobs(exit_code=1)
    outcome = codex.run(codex.request())
    assert outcome.status == "failed", outcome
    assert outcome.detail == "codex reported a failed turn (exit 1): stream error: fake failure"


def test_a_turns_warnings_travel_in_its_report() -> None:
    ended = TurnEnded("t", "completed", warnings=("Reconnecting... 1/5",))
    again = TurnEnded.from_dict(ended.to_dict())
    assert again.warnings == ("Reconnecting... 1/5",)
    assert ended.to_dict()["warnings"] == ["Reconnecting... 1/5"]


def test_a_resumed_claude_session_costs_the_difference_of_its_running_totals(
        claude: Rig) -> None:
    claude.knobs(cost_usd=0.25)
    first = claude.run(claude.request())
    assert (first.cost_usd, dict(first.totals)) == (0.25, {"cost_usd": 0.25})
    again = claude.run(claude.request(FEEDBACK, session_id=first.harness_session,
                                      resume=first.harness_session, totals=first.totals))
    assert again.ok, again
    assert again.cost_usd == 0.25  # the result line said 0.5, the session's total
    assert dict(again.totals) == {"cost_usd": 0.5}


def test_a_resumed_claude_turn_without_known_totals_counts_the_whole_total(
        claude: Rig) -> None:
    # The turn interrupted before it reported: its spend is in the next total, once.
    first = claude.run(claude.request())
    again = claude.run(claude.request(FEEDBACK, session_id=first.harness_session,
                                      resume=first.harness_session))
    assert again.cost_usd == 0.02


def test_a_resumed_codex_thread_counts_the_difference_of_its_token_totals(
        codex: Rig) -> None:
    first = codex.run(codex.request())
    assert dict(first.totals) == {"input_tokens": first.input_tokens,
                                  "output_tokens": first.output_tokens}
    again = codex.run(codex.request(FEEDBACK, resume=first.harness_session,
                                    totals=first.totals))
    assert again.ok, again
    assert again.output_tokens == 50  # the thread's total says 100
    assert again.input_tokens == 100 + len(FEEDBACK) // 4
    assert dict(again.totals)["output_tokens"] == 100


def test_the_totals_a_turn_reports_are_kept_on_its_session_and_resumed_with() -> None:
    session: dict[str, object] = {"id": "s1", "totals": {"cost_usd": 0.2}}
    record_totals(session, TurnEnded("t", "completed", session_id="s1",
                                     totals={"cost_usd": 0.5}))
    assert session["totals"] == {"cost_usd": 0.5}
    # killed before its result: the last totals stay, the next difference counts it
    record_totals(session, TurnEnded("t", "timeout", session_id="s1"))
    assert session["totals"] == {"cost_usd": 0.5}
    # a fresh session (the old one was lost) starts from its own totals
    record_totals(session, TurnEnded("t", "completed", session_id="s2",
                                     totals={"cost_usd": 0.1}))
    assert session["totals"] == {"cost_usd": 0.1}
    order = TurnOrder("o", "r", "n", 1, 2, 5, "s2", resume="h", totals={"cost_usd": 0.1})
    assert TurnOrder.from_dict(json.loads(json.dumps(order.to_dict()))).totals == {
        "cost_usd": 0.1}


def test_a_model_error_says_what_claude_said(claude: Rig) -> None:
    # As Claude Code reports an API error: subtype success, is_error true, exit 1.
    claude.knobs(is_error=True, result_text="API Error: 529 Overloaded")
    outcome = claude.run(claude.request())
    assert outcome.status == "failed"
    assert outcome.detail == "claude reported an error: API Error: 529 Overloaded"
    assert "'success'" not in outcome.detail


def test_a_codex_gateway_is_a_provider_in_the_work_items_home(tmp_path: Path) -> None:
    rig = Rig("codex", tmp_path)
    rig.harness = Codex(HarnessSettings(adapter="codex", binary=str(FAKES / "codex"),
                                        base_url="http://127.0.0.1:9/v1"))
    config = rig.home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('model = "gpt-5"\n\n[model_providers.the-loop]\nbase_url = "old"\n')
    outcome = rig.run(rig.request())
    assert outcome.ok, outcome
    written = tomllib.loads(config.read_text())
    assert written["model"] == "gpt-5"  # the rest of the file is kept
    assert written["model_providers"]["the-loop"] == {
        "name": "the-loop gateway", "base_url": "http://127.0.0.1:9/v1",
        "env_key": "CODEX_API_KEY", "wire_api": "responses"}
    argv = rig.calls()[-1]["argv"]
    assert argv[argv.index("-c") + 1] == 'model_provider="the-loop"'


def test_a_claude_gateway_is_anthropic_base_url(tmp_path: Path) -> None:
    harness = HarnessSettings(adapter="claude-code", base_url="https://gw.example/anthropic")
    setup = TurnSetup(harness, RunnerSettings(home_dir=str(tmp_path)),
                      {"PATH": "/usr/bin", "ANTHROPIC_BASE_URL": "https://elsewhere"})
    order = TurnOrder("o", "github:o/r#1", "n", 1, 1, 5, "s")
    env = environment(setup, order, "s", None, tmp_path / "r.json")
    assert env["ANTHROPIC_BASE_URL"] == "https://gw.example/anthropic"
    assert env["GIT_TERMINAL_PROMPT"] == "0"  # the agent's git never waits on a prompt
    codex = environment(replace(setup, harness_settings=replace(harness, adapter="codex")),
                        order, "s", None, tmp_path / "r.json")
    assert "ANTHROPIC_BASE_URL" not in codex
