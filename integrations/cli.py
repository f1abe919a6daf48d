"""Running a command-line tool safely: an argument array, no shell, bounded time and output.

Used by the ``cli`` transports (``gh`` for GitHub, ``jira`` for Jira). The child gets its
own session (process group), so a timeout or an overflow kills it together with anything
it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

__all__ = ["CliResult", "run_bounded"]

_CHUNK = 64 * 1024


@dataclass(frozen=True)
class CliResult:
    """What one run produced.

    Attributes:
        returncode: the exit status (negative: killed by that signal; ``None``: it could
            not be started).
        stdout, stderr: what it wrote, at most ``max_output`` bytes each.
        timed_out: it ran longer than ``timeout`` and was killed.
        overflow: it wrote more than ``max_output`` bytes on one stream and was killed.
        error: why it could not be started (``FileNotFoundError``, ...), else ``None``.
    """

    returncode: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    overflow: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.overflow


def run_bounded(
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    timeout: float,
    max_output: int,
    env: Mapping[str, str] | None = None,
) -> CliResult:
    """Run ``argv`` (no shell) and collect its output.

    Args:
        argv: the program and its arguments, each one list item (never joined or split).
        stdin: bytes written to its standard input, which is then closed (``None``: an
            empty input).
        timeout: seconds before the process group is killed (SIGKILL).
        max_output: bytes accepted per stream; more kills the process group.
        env: the complete environment of the child (``None``: inherit).
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            shell=False,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        return CliResult(None, error=type(exc).__name__)
    overflow = threading.Event()
    out, err = bytearray(), bytearray()

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    def pump(stream: IO[bytes], buf: bytearray) -> None:
        try:
            while True:
                chunk = stream.read1(_CHUNK)  # type: ignore[attr-defined]
                if not chunk:
                    return
                room = max_output - len(buf)
                buf.extend(chunk[: max(room, 0)])
                if len(chunk) > room:
                    overflow.set()
                    kill()
                    return
        except (OSError, ValueError):
            return

    def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            if stdin:
                proc.stdin.write(stdin)
            proc.stdin.close()

    assert proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=pump, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=pump, args=(proc.stderr, err), daemon=True),
        threading.Thread(target=feed, daemon=True),
    ]
    for t in threads:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill()
        proc.wait()
    # The process is gone; a grandchild holding the pipes open was killed with its group.
    for t in threads:
        t.join(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):
            stream.close()
    return CliResult(
        proc.returncode,
        bytes(out),
        bytes(err),
        timed_out=timed_out,
        overflow=overflow.is_set(),
    )
