"""The ``codex`` adapter: one turn is ``codex exec --json``, the prompt on stdin (``-``).

Protocol facts (Codex CLI's ``codex exec`` docs and its TypeScript SDK, which builds the
same argv):

- ``codex exec [flags] -`` reads the prompt from stdin, until EOF.
- ``codex exec [flags] resume <thread_id> -`` continues a thread; the flags come before
  ``resume`` and must be given again on every turn.
- ``--cd DIR`` the working root, ``--sandbox workspace-write`` (exec defaults to
  read-only), ``--skip-git-repo-check`` (a workspace need not be a trusted repository).
- ``--json`` prints JSON lines: ``thread.started{thread_id}``, ``turn.started``,
  ``item.*``, ``turn.completed{usage{input_tokens, cached_input_tokens,
  output_tokens}}``, ``turn.failed{error{message}}``, ``error{message}`` (a retried
  5xx, a WebSocket-to-HTTPS fallback: a warning; the turn goes on), and
  ``item.completed{item{type: "error", message}}`` (Codex 0.171: a notice such as
  "Model metadata for `M` not found": a warning too).
- ``turn.completed.usage`` is the thread's running total (on a resumed thread too):
  a turn's tokens are the difference from the totals the last turn reported.
- Codex reports no cost: ``cost_usd`` is 0.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from integrations.harness.base import (
    MAX_WARNINGS,
    TurnOutcome,
    TurnRequest,
    killed_status,
    limit_detail,
    number,
    turn_figure,
)
from integrations.harness.modes import BinaryHarness, launch

__all__ = ["PROVIDER", "Codex", "write_provider"]

#: The model provider id ``harness.baseUrl`` is written as (``-c model_provider=...``).
PROVIDER = "the-loop"
_TABLE = f"[model_providers.{PROVIDER}]"


def write_provider(home: Path, base_url: str, env: Mapping[str, str]) -> Path:
    """Write the gateway ``base_url`` as model provider :data:`PROVIDER` into
    ``home/.codex/config.toml`` (Codex ignores ``OPENAI_BASE_URL``; a provider is
    ``[model_providers.<id>]`` with ``base_url``, ``env_key``, ``wire_api``). The
    provider's table is replaced; the rest of the file is kept. ``env_key`` names the
    key variable ``env`` holds (``CODEX_API_KEY``, else ``OPENAI_API_KEY``).

    Returns:
        the config file's path.
    """
    path = home / ".codex" / "config.toml"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    kept: list[str] = []
    inside = False
    for line in lines:
        header = line.strip()
        if header.startswith("["):
            inside = header == _TABLE
        if not inside:
            kept.append(line)
    key = next((k for k in ("CODEX_API_KEY", "OPENAI_API_KEY") if env.get(k)),
               "CODEX_API_KEY")
    kept += [_TABLE, 'name = "the-loop gateway"', f"base_url = {json.dumps(base_url)}",
             f"env_key = {json.dumps(key)}", 'wire_api = "responses"']
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    os.chmod(path, 0o600)
    return path


class _Events:
    """Reads ``--json`` events: the thread id, summed usage, the end of the turn."""

    def __init__(self) -> None:
        self.thread: str | None = None
        self.completed = 0
        self.failed = False
        #: ``turn.failed.error.message``: what Codex said when it gave the turn up.
        self.failure = ""
        self.warnings: list[str] = []
        self.input_tokens = 0
        self.output_tokens = 0

    def __call__(self, line: str) -> bool:
        if not line.startswith("{"):
            return False
        try:
            event = json.loads(line)
        except ValueError:
            return False
        if not isinstance(event, dict):
            return False
        kind = event.get("type")
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            self.thread = event["thread_id"]
        elif kind == "turn.completed":
            # The thread's running totals (on a resumed thread too): the latest wins.
            usage: dict[str, Any] = event["usage"] if isinstance(event.get("usage"), dict) else {}
            self.input_tokens = int(number(usage.get("input_tokens"), integer=True))
            self.output_tokens = int(number(usage.get("output_tokens"), integer=True))
            self.completed += 1
            return True
        elif kind == "turn.failed":
            self.failed = True
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            self.failure = str(message)[:200] if message is not None else ""
            return True
        elif kind == "error":
            # A stream error (a retried 5xx, a reconnect) is a warning: the turn's
            # outcome is turn.completed / turn.failed and the exit status.
            self._warn(event.get("message"))
        elif kind == "item.completed" and isinstance(event.get("item"), dict) \
                and event["item"].get("type") == "error":
            self._warn(event["item"].get("message"))
        return False

    def _warn(self, message: object) -> None:
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(str(message)[:200] if message is not None else "error")


class Codex(BinaryHarness):
    """Codex CLI's ``exec``. ``settings``: :class:`foundation.settings.HarnessSettings`
    (``binary``, default ``codex``)."""

    name = "codex"

    default_binary = "codex"

    def __init__(self, settings: object, mode: str = "process") -> None:
        super().__init__(settings, mode)
        self.base_url: str | None = getattr(settings, "base_url", None)

    def command(self, request: TurnRequest) -> list[str]:
        """``codex exec --json --cd DIR --sandbox workspace-write --skip-git-repo-check
        [--model M] [resume THREAD] -``; never the prompt."""
        argv = [self.binary, "exec", "--json", "--cd", str(request.cwd),
                "--sandbox", "workspace-write", "--skip-git-repo-check"]
        if self.base_url:  # the gateway's provider, written in HOME's config.toml
            argv += ["-c", f"model_provider={json.dumps(PROVIDER)}"]
        if request.model:
            argv += ["--model", request.model]
        if request.resume:
            argv += ["resume", request.resume]
        return [*argv, "-"]

    def run(self, request: TurnRequest) -> TurnOutcome:
        """One turn; ``harness_session`` is the thread id to resume next."""
        events = _Events()
        if self.base_url and request.env.get("HOME"):
            write_provider(Path(request.env["HOME"]), self.base_url, request.env)
        proc = launch(self.mode, self.command(request), request, events)

        resumed = request.resume is not None and events.thread in (None, request.resume)
        before = request.totals if resumed else {}
        totals = ({"input_tokens": events.input_tokens, "output_tokens": events.output_tokens}
                  if events.completed else {})

        def outcome(status: str, detail: str = "") -> TurnOutcome:
            return TurnOutcome(
                status=status, harness_session=events.thread or request.resume,
                exit_code=proc.exit_code, duration_s=proc.duration_s, cost_usd=0.0,
                input_tokens=int(turn_figure(events.input_tokens,
                                             before.get("input_tokens"))),
                output_tokens=int(turn_figure(events.output_tokens,
                                              before.get("output_tokens"))),
                totals=totals,
                num_turns=events.completed, detail=detail, warnings=tuple(events.warnings))

        ended = events.completed or events.failed
        killed = killed_status(proc.reason)
        if killed and not ended:
            return outcome(killed, limit_detail(proc.reason, request.limits))
        if request.resume and events.thread != request.resume and not events.completed:
            return outcome("resume-failed", (
                f"codex could not resume thread {request.resume} (it needs the same HOME): "
                "start a fresh session"))
        if request.resume and events.thread not in (None, request.resume):
            return outcome("resume-failed", (
                f"codex started thread {events.thread} instead of resuming "
                f"{request.resume}: the context is lost, start a fresh session"))
        if events.failed:
            said = f": {events.failure}" if events.failure else ""
            return outcome("failed",
                           f"codex reported a failed turn (exit {proc.exit_code}){said}")
        if not events.completed:
            return outcome("no-result",
                           f"codex ended (exit {proc.exit_code}) without turn.completed")
        if proc.exit_code not in (0, None) and proc.reason == "exited":
            return outcome("failed", f"codex exited {proc.exit_code} after its turn")
        return outcome("completed")
