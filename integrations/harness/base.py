"""The harness contract: one turn of a coding-agent CLI (Claude Code, Codex CLI, any
command) behind one Protocol. The registry of adapters, which import this module, is
:mod:`integrations.harness.factory`.

A *turn* is one run of the harness's process: the-loop's own text on stdin, the
workspace as the working directory, a complete environment built by the runner. The
adapter turns a :class:`TurnRequest` into an argv, runs it through
:func:`integrations.harness.process.run_process` (own process group, bounded time and
output) and reads the CLI's output format into a :class:`TurnOutcome`.

Errors: :class:`HarnessError` (a subclass of :class:`graph.errors.LoopError`),
:class:`HarnessMissing` (the executable is not installed) and
:class:`HarnessVersionError` (the installed version is not the pinned one). A turn that
fails is a :class:`TurnOutcome` with a status, never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from graph.errors import LoopError

__all__ = [
    "MAX_WARNINGS",
    "STATUSES",
    "Harness",
    "HarnessError",
    "HarnessMissing",
    "HarnessVersionError",
    "TurnLimits",
    "TurnOutcome",
    "TurnRequest",
    "secret_values",
]

#: The most :attr:`TurnOutcome.warnings` one turn keeps.
MAX_WARNINGS = 10

#: Every :attr:`TurnOutcome.status`.
STATUSES = ("completed", "failed", "timeout", "idle", "no-result", "resume-failed")


class HarnessError(LoopError):
    """A harness cannot be used as configured; the message names the fix."""


class HarnessMissing(HarnessError):
    """The harness's executable is not installed (or not on PATH)."""


class HarnessVersionError(HarnessError):
    """The harness's version is not pinned, or is not the pinned one."""


@dataclass(frozen=True)
class TurnLimits:
    """The bounds of one turn.

    Attributes:
        turn_timeout: wall-clock seconds for the turn.
        idle_timeout: seconds with no output.
        log_bytes: cap of the turn's log file, in bytes (more output is counted only).
        line_bytes: cap of one logged line, in bytes.
        grace: seconds between SIGTERM and SIGKILL of the process group.
        result_grace: seconds the process may linger after its result line (or after
            its leader exited while a child still holds the output pipe).
    """

    turn_timeout: float
    idle_timeout: float
    log_bytes: int = 5 * 2**20
    line_bytes: int = 64 * 1024
    grace: float = 5.0
    result_grace: float = 5.0


@dataclass(frozen=True)
class TurnRequest:
    """One turn to run.

    Attributes:
        session_id: the-loop's id of this node's session (a uuid4 with dashes); Claude
            Code's first turn is pinned to it (``--session-id``).
        resume: the harness's own id to resume (claude ``session_id``, codex
            ``thread_id``, command: what its result file said), or ``None``: a fresh
            session.
        prompt: the turn's input, written to stdin (never argv).
        cwd: the workspace, the process's working directory.
        env: the complete environment of the harness process; adapters add nothing.
        model: the model name, or ``None`` (the harness's default).
        log_path: where the turn's merged stdout and stderr are written (capped).
        result_path: the command adapter's JSON result file.
        limits: time and output bounds.
        max_agent_turns: claude ``--max-turns`` (agentic steps inside one turn).
        on_start: called with the process group id once the process started.
        totals: the running totals the harness last reported for the session being
            resumed (``{cost_usd?, input_tokens?, output_tokens?}``); empty for a fresh
            session. The turn's figures are the difference (:func:`turn_figure`).
    """

    session_id: str
    resume: str | None
    prompt: str
    cwd: Path
    env: Mapping[str, str]
    model: str | None
    log_path: Path
    result_path: Path
    limits: TurnLimits
    max_agent_turns: int | None = None
    on_start: Callable[[int], None] | None = None
    totals: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnOutcome:
    """What one turn came to.

    Attributes:
        status: one of :data:`STATUSES`: ``completed``; ``failed`` (an error result or
            a non-zero exit); ``timeout`` / ``idle`` (killed on a limit); ``no-result``
            (the CLI ended without its result line); ``resume-failed`` (the session to
            resume is unknown to the harness: start a fresh one).
        harness_session: the id to resume next (the latest the harness reported).
        exit_code: the process's exit status (negative: killed by that signal), or
            ``None`` when it never started.
        duration_s: wall-clock seconds.
        cost_usd, input_tokens, output_tokens: what the harness reported for the turn.
        num_turns: agentic steps the harness reported.
        detail: the-loop's own words about a failure (never agent output).
        warnings: what the CLI reported without failing the turn (Codex ``error``
            events: a retried 5xx, a reconnect), each cut to 200 characters, at most
            :data:`MAX_WARNINGS`.
        totals: the session's running totals the harness reported (what the next
            resumed turn's figures are the difference of); empty when it reported none.
    """

    status: str
    harness_session: str | None
    exit_code: int | None
    duration_s: float
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    num_turns: int = 0
    detail: str = ""
    warnings: tuple[str, ...] = ()
    totals: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The turn completed (its exit hooks may run)."""
        return self.status == "completed"


class Harness(Protocol):
    """One adapter: builds the argv, probes the version, runs a turn."""

    name: str

    def command(self, request: TurnRequest) -> list[str]:
        """The argv of ``request``'s turn (the prompt is never in it)."""
        ...

    def probe(self) -> str:
        """The ``--version`` text. Raises :class:`HarnessMissing`."""
        ...

    def run(self, request: TurnRequest) -> TurnOutcome:
        """Run one turn to its end or its limit; never raises for a failed turn."""
        ...


# Variable names whose values are redacted from turn logs (the API keys the runner
# passes; a harness may echo its environment).
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


def secret_values(env: Mapping[str, str]) -> tuple[str, ...]:
    """Values of ``env``'s secret-looking variables (8 characters or more), to redact."""
    return tuple(v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= 8)


def number(value: object, *, integer: bool = False) -> float:
    """``value`` when it is a non-negative finite number (bools refused), else 0: the
    CLIs' figures are read defensively, a bad one never fails a turn."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not 0 <= value < float("inf"):
        return 0
    return int(value) if integer else float(value)


def turn_figure(reported: float, previous: float | None) -> float:
    """A turn's own figure from the session's running total ``reported`` and the total
    the last turn of the session reported (``previous``; ``None``: a fresh session).
    A total below the previous one means the harness started counting afresh: the
    reported figure is the turn's."""
    if previous is None or reported < previous:
        return reported
    return reported - previous


def killed_status(reason: str) -> str | None:
    """The outcome status of a process ended on a limit (``timeout`` / ``idle``), or
    ``None`` when it ended by itself or after its result."""
    return reason if reason in ("timeout", "idle") else None


def limit_detail(reason: str, limits: TurnLimits) -> str:
    """The-loop's words for a turn killed on ``reason``."""
    if reason == "timeout":
        return f"the turn ran past harness.turnTimeout ({limits.turn_timeout:g} s): killed"
    return f"no output for harness.idleTimeout ({limits.idle_timeout:g} s): killed"
