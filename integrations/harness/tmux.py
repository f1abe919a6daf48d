"""Runner mode ``tmux``: the same turn, run inside a named, detached tmux session that a
person can attach to (``the-loop sessions attach REF``) and take over.

No shell anywhere: ``tmux new-session -d -s NAME -c CWD -- PYTHON -m
integrations.harness.tmux SPOOL -- ARGV...`` starts this module's :func:`main` in the
pane (tmux runs a multi-argument command directly, without a shell). :func:`main` reads
the turn's stdin text and environment from files in the spool directory (mode 0600, the
environment file deleted once read), runs the harness with
:func:`~integrations.harness.process.run_process` (its own process group, the same
limits and capped log) and echoes each line to the pane. :func:`run_in_tmux` waits for
the session to end, feeds the log's lines to ``on_line``, and on a limit kills the
harness's process group and the session.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from integrations.harness.base import HarnessMissing, TurnLimits
from integrations.harness.process import ProcessResult, kill_group, run_process

__all__ = ["attach_command", "main", "run_in_tmux", "session_name", "tmux_binary"]

_MARGIN = 5.0  # seconds the outer wait allows beyond the inner limits


def tmux_binary() -> str:
    """The tmux executable on PATH.

    Raises:
        HarnessMissing: tmux is not installed (the message names the fix).
    """
    found = shutil.which("tmux")
    if found is None:
        raise HarnessMissing(
            "runner.mode is tmux but tmux is not installed: apt-get install tmux (or set "
            "runner.mode: process in cli-config.yaml)")
    return found


def session_name(session_id: str) -> str:
    """The tmux session name of the-loop session ``session_id`` (no ``.`` or ``:``,
    which tmux reads as window and pane separators)."""
    return "the-loop-" + "".join(c if c.isalnum() or c == "-" else "-" for c in session_id)


def attach_command(name: str) -> list[str]:
    """The argv a person runs to watch or take over the turn: ``tmux attach -t NAME``."""
    return ["tmux", "attach", "-t", name]


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def run_in_tmux(
    argv: Sequence[str],
    *,
    name: str,
    stdin: str,
    cwd: Path | str,
    env: Mapping[str, str],
    limits: TurnLimits,
    log_path: Path | str,
    on_line: Callable[[str], bool] | None = None,
    on_start: Callable[[int], None] | None = None,
    redact: Sequence[str] = (),
) -> ProcessResult:
    """:func:`~integrations.harness.process.run_process`'s contract, in tmux session
    ``name``. ``on_line`` sees the log's lines (capped and redacted as logged).

    Raises:
        HarnessMissing: tmux is not installed.
        HarnessError: the session could not be created (e.g. the name is taken).
    """
    tmux = tmux_binary()
    log_path = Path(log_path)
    spool = log_path.parent / f".{log_path.name}.tmux"
    spool.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_private(spool / "stdin", stdin)
    _write_private(spool / "env.json", json.dumps(dict(env)))
    _write_private(spool / "job.json", json.dumps({
        "log": str(log_path), "limits": asdict(limits), "redact": list(redact)}))
    for stale in ("pgid", "status.json"):
        with contextlib.suppress(FileNotFoundError):
            (spool / stale).unlink()
    started = time.monotonic()
    created = subprocess.run(  # noqa: S603 - argv list, no shell
        [tmux, "new-session", "-d", "-s", name, "-c", str(cwd), "-x", "200", "-y", "50",
         "--", sys.executable, "-m", "integrations.harness.tmux", str(spool), "--", *argv],
        env=_tmux_env(env), capture_output=True, text=True, timeout=10, check=False)
    if created.returncode != 0:
        from integrations.harness.base import HarnessError

        raise HarnessError(f"tmux could not create session {name!r} "
                           f"(exit {created.returncode}); is the name already taken?")
    pgid: int | None = None
    offset = 0
    pending = b""
    result_at: float | None = None
    reason: str | None = None
    deadline = started + limits.turn_timeout + 2 * limits.grace + _MARGIN
    while True:
        if pgid is None:
            with contextlib.suppress(FileNotFoundError, ValueError):
                pgid = int((spool / "pgid").read_text())
                if on_start is not None:
                    on_start(pgid)
        if log_path.exists() and on_line is not None:
            with open(log_path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for raw in lines:
                if on_line(raw.decode("utf-8", "replace")) and result_at is None:
                    result_at = time.monotonic()
        alive = subprocess.run([tmux, "has-session", "-t", f"={name}"],  # noqa: S603
                               env=_tmux_env(env), capture_output=True, check=False,
                               timeout=10).returncode == 0
        now = time.monotonic()
        if not alive:
            break
        if now > deadline:
            reason = "timeout"
        elif result_at is not None and now - result_at > limits.result_grace + _MARGIN / 5:
            reason = "after-result"
        if reason:
            if pgid is not None:
                kill_group(pgid, limits.grace)
            subprocess.run([tmux, "kill-session", "-t", f"={name}"],  # noqa: S603
                           env=_tmux_env(env), capture_output=True, check=False, timeout=10)
            break
        time.sleep(0.1)
    if pgid is not None:
        kill_group(pgid, limits.grace)
    status: dict[str, object] = {}
    with contextlib.suppress(FileNotFoundError, ValueError):
        status = json.loads((spool / "status.json").read_text())
    shutil.rmtree(spool, ignore_errors=True)
    code = status.get("exit_code")
    return ProcessResult(
        exit_code=code if isinstance(code, int) else None,
        reason=reason or str(status.get("reason") or "exited"),
        duration_s=time.monotonic() - started, pgid=pgid or 0)


def _tmux_env(env: Mapping[str, str]) -> dict[str, str]:
    """The tmux client's environment: PATH and HOME only (the harness's own environment
    travels in the spool file, never through tmux's global environment)."""
    return {k: env[k] for k in ("PATH", "HOME", "LANG") if k in env}


def main(args: Sequence[str] | None = None) -> int:
    """In the pane: ``SPOOL -- ARGV...``; runs the turn, echoing its lines to the pane,
    and writes ``status.json`` ({exit_code, reason}) into SPOOL."""
    args = list(sys.argv[1:] if args is None else args)
    spool, argv = Path(args[0]), args[args.index("--") + 1:]
    job = json.loads((spool / "job.json").read_text())
    env = json.loads((spool / "env.json").read_text())
    (spool / "env.json").unlink()  # the API keys stay on disk no longer than needed
    stdin = (spool / "stdin").read_text(encoding="utf-8")

    def echo(line: str) -> bool:
        print(line[:500], flush=True)
        return False

    def started(pgid: int) -> None:
        _write_private(spool / "pgid", str(pgid))

    result = run_process(argv, stdin=stdin, cwd=os.getcwd(), env=env,
                         limits=TurnLimits(**job["limits"]), log_path=job["log"],
                         on_line=echo, on_start=started, redact=job["redact"])
    _write_private(spool / "status.json",
                   json.dumps({"exit_code": result.exit_code, "reason": result.reason}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
