"""The real harness CLIs (``make venv`` installs them into ``.venv/agents``) driven
through the-loop's adapters against the scripted loopback model server
(:mod:`tests.modelserver.server`): each test has its own HOME and workspace."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from foundation.settings import HarnessSettings
from integrations.harness import TurnLimits, TurnOutcome, TurnRequest, build_harness
from integrations.harness.base import Harness
from tests.conftest import REPO_ROOT
from tests.modelserver.server import ModelServer, Script

AGENTS = REPO_ROOT / ".venv" / "agents"
BINARIES = {"claude-code": AGENTS / "node_modules" / ".bin" / "claude",
            "codex": AGENTS / "node_modules" / ".bin" / "codex"}
PINS = json.loads((REPO_ROOT / "tools" / "agents" / "package.json").read_text())["dependencies"]
ARTIFACT = "specs/12/requirements.md"
PROMPT = f"Write `{ARTIFACT}` with sections `## Problem`, `## Requirements`.\n"
FEEDBACK = f"The exit hooks blocked the turn: {ARTIFACT} has no 'Requirements' section.\n"

#: Where each CLI keeps its sessions under HOME.
SESSIONS = {"claude-code": ".claude/projects", "codex": ".codex/sessions"}


def forgetful(root: Path, adapter: str) -> Path:
    """A wrapper of the real CLI (written under ``root``) that removes the CLI's sessions
    from HOME before any resume, as a HOME lost between two turns would."""
    resume = "--resume" if adapter == "claude-code" else "resume"
    wrapper = root / f"forgetful-{adapter}"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'for arg in "$@"; do [ "$arg" = "{resume}" ] && rm -rf "$HOME/{SESSIONS[adapter]}"; '
        "done\n"
        f'exec {BINARIES[adapter]} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


def list_price(billed: list[dict[str, int]]) -> float:
    """What Claude Code reports for ``billed`` (rows of :attr:`ModelServer.billed`): its
    list price for its default model, $4/M input and $20/M output tokens, in US dollars
    rounded as it reports them."""
    return round(sum(r["input_tokens"] * 4e-6 + r["output_tokens"] * 2e-5 for r in billed), 6)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/contract/" in str(item.fspath):
            item.add_marker(pytest.mark.contract)


@dataclass
class CLI:
    """One real CLI behind an adapter, in a temporary HOME and workspace, pointed at
    ``server``."""

    adapter: str
    root: Path
    server: ModelServer
    harness: Harness = field(init=False)
    stdout: list[dict[str, object]] = field(default_factory=list)

    def __post_init__(self) -> None:
        base = self.server.base_url + ("/v1" if self.adapter == "codex" else "")
        harness = build_harness(HarnessSettings(
            adapter=self.adapter, binary=str(BINARIES[self.adapter]), base_url=base))
        assert harness is not None
        self.harness = harness
        (self.workspace / "specs" / "12").mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def api(self) -> str:
        return "anthropic" if self.adapter == "claude-code" else "openai"

    def env(self) -> dict[str, str]:
        env = {"PATH": f"{Path(os.environ['PATH'].split(':')[0])}:/usr/local/bin:/usr/bin:/bin",
               "HOME": str(self.home), "LANG": "C.UTF-8"}
        if self.adapter == "claude-code":
            env |= {"ANTHROPIC_BASE_URL": self.server.base_url, "ANTHROPIC_API_KEY": "dummy",
                    "CLAUDE_CODE_MAX_RETRIES": "1", "DISABLE_TELEMETRY": "1",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        else:
            env |= {"CODEX_API_KEY": "dummy", "OPENAI_API_KEY": "dummy"}
        return env

    def turn(self, prompt: str = PROMPT, *, resume: str | None = None,
             totals: dict[str, float] | None = None, idle_timeout: float = 30,
             model: str | None = None) -> TurnOutcome:
        request = TurnRequest(
            session_id=resume or str(uuid.uuid4()), resume=resume, prompt=prompt,
            cwd=self.workspace, env=self.env(),
            model=model or ("gpt-5" if self.adapter == "codex" else None),
            log_path=self.root / f"turn-{uuid.uuid4().hex[:6]}.log",
            result_path=self.root / "result.json",
            limits=TurnLimits(turn_timeout=60, idle_timeout=idle_timeout, grace=1,
                              result_grace=2),
            totals=dict(totals or {}))
        outcome = self.harness.run(request)
        for line in request.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    self.stdout.append(json.loads(line))
        return outcome

    def artifact(self) -> str:
        return (self.workspace / ARTIFACT).read_text()


@pytest.fixture(params=sorted(BINARIES))
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CLI]:
    binary = BINARIES[request.param]
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `make venv` (installs the pinned CLIs)")
    with ModelServer(Script(artifact=ARTIFACT, content="# Spec\n\n## Problem\n")) as server:
        yield CLI(request.param, tmp_path, server)
