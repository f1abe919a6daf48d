"""The adapters against the fakes where the fakes behave as the real CLIs do (Claude
Code 2.1.332, Codex 0.171.0): Codex's stream errors, running totals on a resumed
session, a lost session, the version probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from graph.work import TurnEnded
from tests.harness.support import Rig


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
