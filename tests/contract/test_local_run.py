"""``the-loop run`` (the local driver, its own process) with the real Claude Code
through ``harness.baseUrl`` to the scripted model server: the requirements turn leaves
a section out, the exit chain blocks, the same session's resumed turn adds it, and the
gate waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_local_loop import REF
from tests.cli.test_local_loop import Rig as LocalRig
from tests.contract.conftest import BINARIES
from tests.modelserver.server import ModelServer, Script


class Rig(LocalRig):
    def env(self) -> dict[str, str]:
        return super().env() | {"ANTHROPIC_API_KEY": "dummy", "CLAUDE_CODE_MAX_RETRIES": "1",
                                "CODEX_API_KEY": "dummy"}


VERSIONS = {"claude-code": "2.1.332 (Claude Code)", "codex": "codex-cli 0.171.0"}


@pytest.mark.parametrize("adapter", sorted(VERSIONS))
def test_the_loop_run_blocks_then_passes_with_the_real_cli(tmp_path: Path, adapter: str) -> None:
    with ModelServer(Script(from_prompt=True)) as server:
        rig = Rig(tmp_path, adapter)
        base = server.base_url + ("/v1" if adapter == "codex" else "")
        rig.config.write_text(
            "version: 2\n"
            f"harness: {{adapter: {adapter}, binary: {BINARIES[adapter]}, "
            f"version: '{VERSIONS[adapter]}', baseUrl: '{base}', "
            "env: [CLAUDE_CODE_MAX_RETRIES]}\n"
            f"runner: {{homeDir: {rig.home}, workspaceDir: {tmp_path / 'workspaces'}}}\n")
        code, doc = rig.json("run", "--work-item", REF, "--repo", str(rig.repo))
        assert code == 0, doc
        assert (doc["status"], doc["node"]) == ("waiting", "requirements-approval"), doc
        first, second = doc["turns"]
        assert [m["code"] for m in first["messages"]] == ["section-missing"]
        assert second["session_id"] == first["session_id"]
        if adapter == "codex":  # no cost: tokens only
            return
        # Two requests a turn (the Write, then the end); each turn costs what it was
        # billed at Claude Code's list price for its default model ($4/M in, $20/M out),
        # the resumed one not the session's running total.
        def price(rows: list[dict[str, int]]) -> float:
            return round(sum(r["input_tokens"] * 4e-6 + r["output_tokens"] * 2e-5
                             for r in rows), 6)
        assert len(server.billed) == 4
        assert first["cost_usd"] == price(server.billed[:2])
        assert second["cost_usd"] == price(server.billed[2:])
