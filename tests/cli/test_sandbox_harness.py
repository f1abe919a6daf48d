"""``the-loop sandbox prepare`` pins a real CLI chosen with THE_LOOP_HARNESS at the
version it prints, as ``check_harness`` compares it."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.settings import HarnessSettings
from integrations.harness.factory import matches_pin
from the_loop.cli.sandbox import _harness


def test_sandbox_prepare_pins_codexs_installed_version_not_its_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli = tmp_path / "codex"
    cli.write_text("#!/bin/sh\necho 'WARNING: could not create the PATH entry' >&2\n"
                   "echo 'codex-cli 0.171.0'\n")
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("THE_LOOP_HARNESS", "codex")
    harness, why = _harness()
    assert (harness["adapter"], harness["binary"]) == ("codex", str(cli))
    assert harness["version"] == "0.171.0", why
    settings = HarnessSettings(adapter="codex", binary=str(cli), version=harness["version"])
    assert matches_pin(str(settings.version), "codex-cli 0.171.0")
    assert not matches_pin(str(settings.version), "codex-cli 0.172.0")
