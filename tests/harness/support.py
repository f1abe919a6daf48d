"""Shared by the harness tests: the fakes' paths, a turn's request, the calls they saw."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundation.settings import HarnessSettings
from integrations.harness import TurnLimits, TurnOutcome, TurnRequest, build_harness
from integrations.harness.base import Harness
from integrations.harness.process import group_members
from tests.conftest import REPO_ROOT

FAKES = REPO_ROOT / "tests" / "harnesses"
ADAPTERS = ("claude-code", "codex", "command")

PROMPT = """You are working on github:o/r#12, node requirements.
Write these artifacts:
- `specs/12/requirements.md` with sections: `## Problem`, `## Requirements`
- `specs/12/notes.md` with sections: `## Context`, `## Risks`
"""
FEEDBACK = (
    "The exit hooks blocked the turn:\n"
    "- validate-artifacts: specs/12/requirements.md has no 'Requirements' section "
    "(specs/12/requirements.md)\n")


def settings_for(adapter: str) -> HarnessSettings:
    if adapter == "command":
        return HarnessSettings(adapter="command", argv=(str(FAKES / "agent"), "--quiet"))
    binary = FAKES / ("claude" if adapter == "claude-code" else "codex")
    return HarnessSettings(adapter=adapter, binary=str(binary))


@dataclass
class Rig:
    """One adapter against its fake, in a temporary HOME and workspace."""

    adapter: str
    root: Path
    harness: Harness = field(init=False)
    started: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        harness = build_harness(settings_for(self.adapter))
        assert harness is not None
        self.harness = harness
        self.home.mkdir(parents=True, exist_ok=True)
        self.workspace.mkdir(parents=True, exist_ok=True)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    def knobs(self, **knobs: Any) -> None:
        base = self.home / ".fake-harness"
        base.mkdir(parents=True, exist_ok=True)
        (base / "knobs.json").write_text(json.dumps(knobs))

    def env(self, session_id: str, resume: bool) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8",
            "THE_LOOP_WORK_ITEM": "github:o/r#12", "THE_LOOP_NODE": "requirements",
            "THE_LOOP_SESSION_ID": session_id, "THE_LOOP_TURN": "2" if resume else "1",
            "THE_LOOP_RESUME": "1" if resume else "0",
            "THE_LOOP_ARTIFACTS": json.dumps(["specs/12/requirements.md"]),
            "THE_LOOP_RESULT_FILE": str(self.root / "result.json"),
            "THE_LOOP_SPEC_DIR": "specs/12",
            "ANTHROPIC_API_KEY": "sk-test-not-a-real-key-0123",
        }

    def request(self, prompt: str = PROMPT, *, session_id: str | None = None,
                resume: str | None = None, turn_timeout: float = 10, idle_timeout: float = 10,
                log_bytes: int = 5 * 2**20, line_bytes: int = 64 * 1024,
                model: str | None = None,
                totals: Mapping[str, float] | None = None) -> TurnRequest:
        session_id = session_id or str(uuid.uuid4())
        return TurnRequest(
            session_id=session_id, resume=resume, prompt=prompt, cwd=self.workspace,
            env=self.env(session_id, resume is not None), model=model,
            log_path=self.root / "turn.log", result_path=self.root / "result.json",
            limits=TurnLimits(turn_timeout=turn_timeout, idle_timeout=idle_timeout,
                              log_bytes=log_bytes, line_bytes=line_bytes, grace=0.5,
                              result_grace=0.5),
            on_start=self.started.append, totals=dict(totals or {}))

    def run(self, request: TurnRequest) -> TurnOutcome:
        return self.harness.run(request)

    def calls(self) -> list[dict[str, Any]]:
        path = self.home / ".fake-harness" / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def artifact(self, path: str) -> str:
        return (self.workspace / path).read_text()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def no_group_left(pgid: int) -> bool:
    return group_members(pgid) == [] and not any(
        alive(int(p)) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
