"""runner.mode tmux: the same turn inside a named tmux session (skipped without tmux)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from integrations.harness import HarnessMissing, build_harness
from integrations.harness.tmux import attach_command, session_name, tmux_binary
from tests.harness.support import FEEDBACK, Rig, no_group_left, settings_for

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def test_attach_command_and_names() -> None:
    assert attach_command("the-loop-x") == ["tmux", "attach", "-t", "the-loop-x"]
    assert session_name("a.b:c") == "the-loop-a-b-c"


def test_a_missing_tmux_names_apt_get(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(HarnessMissing, match="apt-get install tmux"):
        tmux_binary()


def tmux_rig(tmp_path: Path, adapter: str) -> Rig:
    rig = Rig(adapter, tmp_path)
    harness = build_harness(settings_for(adapter), mode="tmux")
    assert harness is not None
    rig.harness = harness
    return rig


@needs_tmux
@pytest.mark.parametrize("adapter", ["claude-code", "command"])
def test_a_turn_runs_and_resumes_inside_tmux(tmp_path: Path, adapter: str) -> None:
    rig = tmux_rig(tmp_path, adapter)
    first = rig.run(rig.request())
    assert first.ok, first
    assert "## Requirements" not in rig.artifact("specs/12/requirements.md")
    again = rig.run(rig.request(FEEDBACK, session_id=first.harness_session,
                                resume=first.harness_session))
    assert again.ok, again
    assert "## Requirements" in rig.artifact("specs/12/requirements.md")
    [call, _] = rig.calls()
    assert call["env"] == rig.env(first.harness_session or "", False)  # verbatim, via the spool
    assert "UNTRUSTED" not in " ".join(call["argv"])


@needs_tmux
def test_a_tmux_turn_past_its_timeout_is_killed(tmp_path: Path) -> None:
    rig = tmux_rig(tmp_path, "claude-code")
    rig.knobs(spawn_child=True, sleep=30)
    session = str(uuid.uuid4())
    outcome = rig.run(rig.request(session_id=session, turn_timeout=1, idle_timeout=20))
    assert outcome.status == "timeout", outcome
    assert no_group_left(rig.started[0])
    gone = subprocess.run(["tmux", "has-session", "-t", f"={session_name(session)}"],
                          capture_output=True, check=False)
    assert gone.returncode != 0
