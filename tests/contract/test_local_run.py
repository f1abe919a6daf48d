"""``the-loop run`` (the local driver, its own process) with the real Claude Code
through ``harness.baseUrl`` to the scripted model server: the requirements turn leaves
a section out, the exit chain blocks, the same session's resumed turn adds it, and the
gate waits; a session lost from HOME between the turns is replaced by a fresh seeded
one; one overloaded (529) or failed (500) answer is retried by the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_local_loop import REF
from tests.cli.test_local_loop import Rig as LocalRig
from tests.contract.conftest import BINARIES, forgetful, list_price
from tests.modelserver.server import ModelServer, Script


class Rig(LocalRig):
    def env(self) -> dict[str, str]:
        return super().env() | {"ANTHROPIC_API_KEY": "dummy", "CLAUDE_CODE_MAX_RETRIES": "1",
                                "CODEX_API_KEY": "dummy"}


VERSIONS = {"claude-code": "2.1.332 (Claude Code)", "codex": "codex-cli 0.171.0"}
def configure(rig: Rig, server: ModelServer, adapter: str, binary: Path | None = None) -> None:
    """Point ``rig``'s cli-config.yaml at the real CLI (or ``binary``) and ``server``."""
    base = server.base_url + ("/v1" if adapter == "codex" else "")
    rig.config.write_text(
        "version: 2\n"
        f"harness: {{adapter: {adapter}, binary: {binary or BINARIES[adapter]}, "
        f"version: '{VERSIONS[adapter]}', baseUrl: '{base}', "
        "env: [CLAUDE_CODE_MAX_RETRIES]}\n"
        f"runner: {{homeDir: {rig.home}, workspaceDir: {rig.root / 'workspaces'}}}\n")


def run(rig: Rig) -> dict[str, Any]:
    code, doc = rig.json("run", "--work-item", REF, "--repo", str(rig.repo))
    assert code == 0, doc
    assert (doc["status"], doc["node"]) == ("waiting", "requirements-approval"), doc
    return doc


@pytest.mark.parametrize("adapter", sorted(VERSIONS))
def test_the_loop_run_blocks_then_passes_with_the_real_cli(tmp_path: Path, adapter: str) -> None:
    with ModelServer(Script(from_prompt=True)) as server:
        rig = Rig(tmp_path, adapter)
        configure(rig, server, adapter)
        doc = run(rig)
        first, second = doc["turns"]
        assert [m["code"] for m in first["messages"]] == ["section-missing"]
        assert second["session_id"] == first["session_id"]
        if adapter == "codex":  # no cost: tokens only
            return
        # Two requests a turn (the Write, then the end); each turn costs what it was
        # billed, the resumed one not the session's running total.
        assert len(server.billed) == 4
        assert first["cost_usd"] == list_price(server.billed[:2])
        assert second["cost_usd"] == list_price(server.billed[2:])


@pytest.mark.parametrize("adapter", sorted(VERSIONS))
def test_a_session_lost_between_turns_is_replaced_by_a_fresh_seeded_one(
        tmp_path: Path, adapter: str) -> None:
    with ModelServer(Script(from_prompt=True)) as server:
        rig = Rig(tmp_path, adapter)
        configure(rig, server, adapter, forgetful(tmp_path, adapter))
        doc = run(rig)
        first, second = doc["turns"]
        assert [m["code"] for m in first["messages"]] == ["section-missing"]
        # The resume found nothing: the repair ran in a new session, recorded as such,
        # and passed the exit chain.
        assert second["status"] == "completed", second
        assert second["session_id"] != first["session_id"]
        assert [m["code"] for m in second["messages"]] == ["awaiting-decision"]
        # The fresh session's first request is seeded: told of the artifact already
        # written, with no history of the lost conversation.
        seeded = [r for r in server.requests if "continues earlier work" in str(r["body"])]
        assert seeded, "no request of the fresh session was seeded with the artifacts"
        assert "Written by the scripted model" not in str(seeded[0]["body"])


@pytest.mark.parametrize("adapter", sorted(VERSIONS))
def test_one_overloaded_or_failed_answer_is_retried_and_the_run_goes_on(
        tmp_path: Path, adapter: str) -> None:
    fault = 529 if adapter == "claude-code" else 500
    with ModelServer(Script(from_prompt=True, faults=[fault])) as server:
        rig = Rig(tmp_path, adapter)
        configure(rig, server, adapter)
        doc = run(rig)
        first, second = doc["turns"]
        # The fault answered a model request (not billed), which the CLI retried.
        assert server.script.faults == []
        asked = [r for r in server.requests if r["path"].endswith(("/messages", "/responses"))]
        assert len(asked) == len(server.billed) + 1
        assert (first["status"], second["status"]) == ("completed", "completed")
        assert second["session_id"] == first["session_id"]
