"""The ``claude-code`` adapter: one turn is ``claude -p`` in print mode, the prompt on
stdin, output as stream-json.

Protocol facts (Claude Code's CLI reference and headless-mode docs):

- ``--output-format stream-json`` needs ``--verbose`` with ``-p``.
- The stream is one JSON object per line: first ``{"type": "system", "subtype": "init",
  "session_id": ...}``, last ``{"type": "result", "subtype": "success" |
  "error_max_turns" | "error_during_execution", "is_error", "num_turns",
  "total_cost_usd", "usage": {"input_tokens", "output_tokens", ...}, "session_id"}``.
  No result line: the turn failed.
- ``--session-id UUID`` pins a new session's id; ``--resume ID`` continues one (a
  resumed run may report a new ``session_id``: the latest wins). Resuming an unknown id
  prints ``No conversation found with session ID: <id>`` and exits 1.
- ``--permission-mode acceptEdits`` lets a headless run edit files without prompting.
- ``--setting-sources user`` skips the working tree's ``.claude/settings*.json`` (whose
  hooks are shell commands) and ``--strict-mcp-config`` without ``--mcp-config`` loads
  no MCP server (none from the tree's ``.mcp.json``): a branch cannot turn into code
  the-loop runs.
"""

from __future__ import annotations

import json
from typing import Any

from integrations.harness.base import (
    TurnOutcome,
    TurnRequest,
    killed_status,
    limit_detail,
    number,
    turn_figure,
)
from integrations.harness.modes import BinaryHarness, launch

__all__ = ["ClaudeCode"]

NO_CONVERSATION = "No conversation found with session ID"


class _Stream:
    """Reads stream-json lines: the session id (every init and result; latest wins),
    the result line, and the unknown-session message."""

    def __init__(self) -> None:
        self.session: str | None = None
        self.result: dict[str, Any] | None = None
        self.unknown_session = False

    def __call__(self, line: str) -> bool:
        if NO_CONVERSATION in line:
            self.unknown_session = True
        if not line.startswith("{"):
            return False
        try:
            event = json.loads(line)
        except ValueError:
            return False
        if not isinstance(event, dict):
            return False
        session = event.get("session_id")
        kind = event.get("type")
        if isinstance(session, str) and session and (
                kind == "result" or (kind == "system" and event.get("subtype") == "init")):
            self.session = session
        if kind == "result":
            self.result = event
            return True
        return False


class ClaudeCode(BinaryHarness):
    """Claude Code in print mode. ``settings``: :class:`foundation.settings.HarnessSettings`
    (``binary``, default ``claude``)."""

    name = "claude-code"

    default_binary = "claude"

    def command(self, request: TurnRequest) -> list[str]:
        """``claude -p --output-format stream-json --verbose ...``: ``--session-id`` on a
        fresh turn, ``--resume`` on a later one; never the prompt."""
        argv = [self.binary, "-p", "--output-format", "stream-json", "--verbose",
                "--permission-mode", "acceptEdits", "--setting-sources", "user",
                "--strict-mcp-config"]
        if request.resume:
            argv += ["--resume", request.resume]
        else:
            argv += ["--session-id", request.session_id]
        if request.model:
            argv += ["--model", request.model]
        if request.max_agent_turns:
            argv += ["--max-turns", str(request.max_agent_turns)]
        return argv

    def run(self, request: TurnRequest) -> TurnOutcome:
        """One turn; the outcome's ``harness_session`` is the latest reported id."""
        stream = _Stream()
        proc = launch(self.mode, self.command(request), request, stream)
        session = stream.session or request.resume or None
        result = stream.result or {}
        usage: dict[str, Any] = result["usage"] if isinstance(result.get("usage"), dict) else {}
        # A resumed session's total_cost_usd is the session's running total.
        total = number(result.get("total_cost_usd"))
        previous = request.totals.get("cost_usd") if request.resume else None
        cost = round(turn_figure(total, previous), 6)
        totals = {"cost_usd": total} if stream.result is not None else {}

        def outcome(status: str, detail: str = "") -> TurnOutcome:
            return TurnOutcome(
                status=status, harness_session=session, exit_code=proc.exit_code,
                duration_s=proc.duration_s, cost_usd=cost, totals=totals,
                input_tokens=int(number(usage.get("input_tokens"), integer=True)),
                output_tokens=int(number(usage.get("output_tokens"), integer=True)),
                num_turns=int(number(result.get("num_turns"), integer=True)), detail=detail)

        killed = killed_status(proc.reason)
        if killed and stream.result is None:
            return outcome(killed, limit_detail(proc.reason, request.limits))
        lost = stream.unknown_session and request.resume and (
            stream.result is None or result.get("subtype") != "success")
        if lost:
            return outcome("resume-failed", (
                f"claude has no session {request.resume} to resume (it needs the same HOME "
                "and workspace): start a fresh session"))
        if stream.result is None:
            return outcome("no-result",
                           f"claude ended (exit {proc.exit_code}) without a result line")
        subtype = result.get("subtype")
        if subtype != "success" or result.get("is_error") is True:
            # A model error (an API error, an overload) is a result with is_error true,
            # often with subtype success: what the CLI said is the detail.
            said = result.get("errors") or result.get("result") or ""
            if isinstance(said, list):
                said = "; ".join(str(item) for item in said)
            said = " ".join(str(said).split())[:200]
            if said:
                return outcome("failed", f"claude reported an error: {said}")
            return outcome("failed", f"claude's result is {str(subtype)[:40]!r} with "
                                     "nothing said")
        return outcome("completed")
