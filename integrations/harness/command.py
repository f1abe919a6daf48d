"""The ``command`` adapter: any agent CLI as an argument list from ``harness.argv``
(aider, an in-house agent), the turn's input on stdin, the environment as the runner
built it.

The contract (the-loop's own, docs/harness.md): the process gets the ``THE_LOOP_*``
variables (work item, node, session id, turn, resume flag, artifact paths, spec
directory, result file). Exit 0 means the turn completed. It may write
``$THE_LOOP_RESULT_FILE`` as a JSON object ``{session_id?: str, cost_usd?: number,
input_tokens?: int, output_tokens?: int, status?: "completed" | "failed" |
"resume-failed"}``; a file that is not such an object fails the turn with a clear
detail, never the runner.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from integrations.harness.base import (
    HarnessError,
    TurnOutcome,
    TurnRequest,
    killed_status,
    limit_detail,
)
from integrations.harness.modes import launch
from integrations.harness.process import probe_env, probe_version

__all__ = ["Command"]

RESULT_STATUSES = ("completed", "failed", "resume-failed")
_MAX_RESULT_BYTES = 64 * 1024


def read_result(path: Path) -> tuple[dict[str, Any], str]:
    """``(fields, problem)``: the result file's validated fields (``{}`` when there is
    no file) and ``""``, or ``({}, why)`` when it is not a JSON object of the documented
    shape (the words name the field, never echo its value)."""
    try:
        # Non-blocking and no symlink: the agent owns the file and could make it a named
        # pipe (an open() that never returns) or a link to one of the-loop's files.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}, "is not a regular file"
            raw = handle.read(_MAX_RESULT_BYTES + 1)
    except FileNotFoundError:
        return {}, ""
    except OSError as exc:
        return {}, f"cannot be read ({type(exc).__name__})"
    if len(raw) > _MAX_RESULT_BYTES:
        return {}, f"is larger than {_MAX_RESULT_BYTES} bytes"
    try:
        data = json.loads(raw)
    except ValueError:
        return {}, "is not JSON"
    if not isinstance(data, dict):
        return {}, "is not a JSON object"
    checks: dict[str, tuple[tuple[type, ...], str]] = {
        "session_id": ((str,), "a string"),
        "cost_usd": ((int, float), "a number >= 0"),
        "input_tokens": ((int,), "a whole number >= 0"),
        "output_tokens": ((int,), "a whole number >= 0"),
        "status": ((str,), f"one of {', '.join(RESULT_STATUSES)}"),
    }
    for key, (types, word) in checks.items():
        if key not in data or data[key] is None:
            continue
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, types):
            return {}, f"has {key} that is not {word}"
        if isinstance(value, int | float) and not 0 <= value < float("inf"):
            return {}, f"has {key} that is not {word}"
    if data.get("status") not in (None, *RESULT_STATUSES):
        return {}, f"has status that is not one of {', '.join(RESULT_STATUSES)}"
    return data, ""


class Command:
    """Any agent CLI. ``settings``: :class:`foundation.settings.HarnessSettings` (``argv``,
    a non-empty list)."""

    name = "command"

    def __init__(self, settings: Any, mode: str = "process") -> None:
        self.mode = mode  # runner.mode: process or tmux
        self.path: str | None = getattr(settings, "path", None)  # PATH of the probe
        argv = tuple(getattr(settings, "argv", ()) or ())
        if not argv or isinstance(getattr(settings, "argv", None), str):
            raise HarnessError(
                "harness.adapter is command but harness.argv is not a non-empty list: set "
                "harness.argv: [your-agent, --flag] in cli-config.yaml")
        self.argv: tuple[str, ...] = argv

    def command(self, request: TurnRequest) -> list[str]:
        """``harness.argv`` as configured: the session and the input travel in the
        environment and on stdin."""
        return list(self.argv)

    def probe(self) -> str:
        """``argv[0] --version``. Raises HarnessMissing."""
        return probe_version(self.argv[0], probe_env(self.path))

    def run(self, request: TurnRequest) -> TurnOutcome:
        """One turn; a stale result file is removed first so only this turn's is read."""
        with contextlib.suppress(FileNotFoundError):
            request.result_path.unlink()
        request.result_path.parent.mkdir(parents=True, exist_ok=True)
        proc = launch(self.mode, self.command(request), request, None)
        result, problem = read_result(request.result_path)
        bad = f"the result file {request.result_path.name} {problem}" if problem else ""

        def outcome(status: str, detail: str = "") -> TurnOutcome:
            return TurnOutcome(
                status=status,
                harness_session=result.get("session_id") or request.resume
                or request.session_id,
                exit_code=proc.exit_code, duration_s=proc.duration_s,
                cost_usd=float(result.get("cost_usd") or 0.0),
                input_tokens=int(result.get("input_tokens") or 0),
                output_tokens=int(result.get("output_tokens") or 0),
                num_turns=1, detail=detail)

        killed = killed_status(proc.reason)
        if killed:
            return outcome(killed, limit_detail(proc.reason, request.limits))
        if bad:
            return outcome("failed", bad)
        if result.get("status") == "resume-failed":
            return outcome("resume-failed",
                           "the command could not resume its session: start a fresh one")
        if proc.exit_code != 0:
            return outcome("failed", f"the command exited {proc.exit_code}")
        if result.get("status") == "failed":
            return outcome("failed", "the command's result file says failed")
        return outcome("completed")
