"""integrations.harness.process: one process group, bounded in time and output, reaped."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from integrations.harness import HarnessMissing, TurnLimits, run_process
from integrations.harness.process import probe_version
from tests.harness.support import FAKES, no_group_left

PY = sys.executable
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def limits(**kw: float) -> TurnLimits:
    base = {"turn_timeout": 10.0, "idle_timeout": 10.0, "grace": 0.5, "result_grace": 0.5}
    base.update(kw)
    return TurnLimits(**base)  # type: ignore[arg-type]


def run(tmp_path: Path, code: str, stdin: str = "", **kw: object):
    lines: list[str] = []
    pgids: list[int] = []
    on_line = kw.pop("on_line", None) or (lambda line: lines.append(line) or False)
    result = run_process([PY, "-c", code], stdin=stdin, cwd=tmp_path, env=ENV,
                         limits=kw.pop("limits", limits()),  # type: ignore[arg-type]
                         log_path=tmp_path / "log" / "turn.log", on_line=on_line,
                         on_start=pgids.append, **kw)  # type: ignore[arg-type]
    assert pgids == [result.pgid]
    assert no_group_left(result.pgid)
    return result, lines


def test_stdin_is_written_then_closed_and_output_merged(tmp_path: Path) -> None:
    code = ("import sys; data = sys.stdin.read(); print('out', len(data)); "
            "print('err', file=sys.stderr); sys.exit(3)")
    result, lines = run(tmp_path, code, stdin="x" * 200_000)  # more than a pipe buffer
    assert (result.reason, result.exit_code) == ("exited", 3)
    assert sorted(lines) == ["err", "out 200000"]
    assert (tmp_path / "log" / "turn.log").read_text().count("\n") == 2


def test_wall_clock_timeout_kills_the_group(tmp_path: Path) -> None:
    code = "import time\nwhile True:\n    print('tick', flush=True); time.sleep(0.1)"
    result, _ = run(tmp_path, code, limits=limits(turn_timeout=0.7))
    assert result.reason == "timeout" and result.exit_code == -15
    assert result.duration_s < 3


def test_a_process_ignoring_sigterm_is_killed_after_grace(tmp_path: Path) -> None:
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    started = time.monotonic()
    result, _ = run(tmp_path, code, limits=limits(idle_timeout=0.5, grace=0.5))
    assert result.reason == "idle" and result.exit_code == -9
    assert 0.9 < time.monotonic() - started < 4


def test_a_grandchild_holding_the_pipe_is_killed_after_the_leader_exits(tmp_path: Path) -> None:
    # CPython issue 97000: the leader exits, its child keeps stdout open.
    code = (f"import subprocess; subprocess.Popen([{PY!r}, '-c', 'import time; "
            "time.sleep(60)']); print('leader done')")
    result, lines = run(tmp_path, code)
    assert result.reason == "exited" and result.exit_code == 0
    assert lines == ["leader done"] and result.duration_s < 3


def test_after_the_result_line_a_lingering_process_is_killed(tmp_path: Path) -> None:
    code = "import time; print('RESULT', flush=True); time.sleep(60)"
    result, _ = run(tmp_path, code, on_line=lambda line: line == "RESULT")
    assert result.reason == "after-result" and result.duration_s < 3


def test_lines_and_the_log_are_capped_and_the_rest_counted(tmp_path: Path) -> None:
    code = "print('a' * 5000)\nfor i in range(1000):\n    print('line', i)"
    result, lines = run(tmp_path, code, limits=limits(log_bytes=4096, line_bytes=100))
    log = (tmp_path / "log" / "turn.log").read_text()
    assert log.startswith("a" * 100 + " [line cut: 4900 bytes]\n")
    assert log.count("log capped at 4096 bytes") == 1
    assert len(log.encode()) < 4096 + 200
    assert result.lines == 1001 and result.dropped_bytes > 0
    assert len(lines) == 1001 and len(lines[0]) == 5000  # on_line sees whole lines


def test_secrets_are_redacted_from_the_log(tmp_path: Path) -> None:
    run(tmp_path, "print('key=sk-abcdef123456')", redact=("sk-abcdef123456",))
    assert (tmp_path / "log" / "turn.log").read_text() == "key=***\n"


def test_output_without_a_final_newline_is_kept(tmp_path: Path) -> None:
    _, lines = run(tmp_path, "import sys; sys.stdout.write('partial')")
    assert lines == ["partial"]


def test_a_missing_executable_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(HarnessMissing, match="THE_LOOP_HARNESS_BINARY"):
        run_process([str(tmp_path / "nope")], stdin="", cwd=tmp_path, env=ENV,
                    limits=limits(), log_path=tmp_path / "l")


def test_probe_reads_the_version_with_a_minimal_environment(tmp_path: Path) -> None:
    assert probe_version(str(FAKES / "claude")) == "2.0.14 (Claude Code)"
    assert probe_version(str(FAKES / "codex")) == "codex-cli 0.46.0"
    with pytest.raises(HarnessMissing, match="install"):
        probe_version(str(tmp_path / "missing-claude"))
    with pytest.raises(HarnessMissing, match="did not answer"):
        probe_version("false")
