"""The adapters against the fakes where the fakes behave as the real CLIs do (Claude
Code 2.1.332, Codex 0.171.0): Codex's stream errors, running totals on a resumed
session, a lost session, the version probe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.work import TurnEnded, TurnOrder, record_totals
from tests.harness.support import FEEDBACK, Rig


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
