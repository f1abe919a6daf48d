"""The adapters' stream readers: Codex ``error`` events are warnings, Claude's lost
session inside a result line is recognised."""

from __future__ import annotations

import json

from integrations.harness.claude_code import _Stream
from integrations.harness.codex import _Events


def test_a_codex_error_event_is_a_warning_not_a_failed_turn() -> None:
    events = _Events()
    events(json.dumps({"type": "thread.started", "thread_id": "t1"}))
    events(json.dumps({"type": "error", "message": "Reconnecting... 1/5"}))
    ended = events(json.dumps({"type": "turn.completed",
                               "usage": {"input_tokens": 3, "output_tokens": 2}}))
    assert ended and events.completed == 1
    assert not events.failed
    assert events.warnings == ["Reconnecting... 1/5"]


def test_a_codex_turn_failed_is_a_failed_turn() -> None:
    events = _Events()
    assert events(json.dumps({"type": "turn.failed", "error": {"message": "boom"}}))
    assert events.failed


def test_claude_lost_session_in_the_result_line_is_recognised() -> None:
    stream = _Stream()
    stream(json.dumps({"type": "result", "subtype": "error_during_execution",
                       "is_error": True, "session_id": "s2",
                       "errors": ["No conversation found with session ID: s1"]}))
    assert stream.unknown_session
    assert stream.result is not None and stream.result["subtype"] == "error_during_execution"


def test_a_codex_error_item_is_a_warning() -> None:
    # Codex 0.171 reports a notice as an item of type error; the turn goes on.
    events = _Events()
    events(json.dumps({"type": "item.completed", "item": {
        "id": "item_0", "type": "error", "message": "Model metadata for `gpt-5` not found."}}))
    events(json.dumps({"type": "item.completed", "item": {
        "id": "item_1", "type": "agent_message", "text": "Done."}}))
    assert events.warnings == ["Model metadata for `gpt-5` not found."]
    assert not events.failed


def test_a_codex_turn_failed_keeps_what_codex_said() -> None:
    events = _Events()
    events(json.dumps({"type": "turn.failed", "error": {
        "message": "We're currently experiencing high demand"}}))
    assert events.failure == "We're currently experiencing high demand"
