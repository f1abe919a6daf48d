"""Run one harness process: its own process group, stdin then EOF, merged output streamed
to a size-capped log, wall-clock / idle / after-result limits, the whole group reaped.

Why not ``subprocess.run(timeout=...)``: it waits on the output pipe, which a grandchild
may hold open after the leader died (CPython issue 97000), and it kills only the leader.
Here the pipe is read with :mod:`selectors` in the calling thread, a limit kills the
process *group* (SIGTERM, then SIGKILL after ``grace``), and the function returns only
once no live process of the group is left.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from integrations.harness.base import HarnessMissing, TurnLimits

__all__ = [
    "ProcessResult", "group_members", "kill_group", "probe_env", "probe_version",
    "run_process",
]

#: Bytes of one line kept for ``on_line`` (a result line carries the final message, so
#: more than the logged ``line_bytes``); longer lines are cut.
PARSE_BYTES = 1 << 20
_TICK = 0.05  # seconds between checks of the limits when no output arrives
_REAP_LIMIT = 10.0  # seconds to wait for a SIGKILLed group to vanish (uninterruptible I/O)


@dataclass(frozen=True)
class ProcessResult:
    """How a process ended.

    Attributes:
        exit_code: the leader's exit status (negative: the signal that ended it), or
            ``None`` if it could not be reaped.
        reason: ``exited`` (on its own), ``timeout`` (wall clock), ``idle`` (no output
            for ``idle_timeout``) or ``after-result`` (lingered past ``result_grace``
            after ``on_line`` reported the result).
        duration_s: wall-clock seconds from start to the last process gone.
        pgid: the process group id (the leader's pid).
        lines: lines of output seen (logged or not).
        dropped_bytes: output bytes not written because the log reached its cap.
    """

    exit_code: int | None
    reason: str
    duration_s: float
    pgid: int
    lines: int = 0
    dropped_bytes: int = 0


class _Log:
    """The turn's log file: lines capped at ``line_bytes``, the file at ``log_bytes``;
    past the cap output is counted, not written, and the truncation noted once."""

    def __init__(self, handle: BinaryIO, limits: TurnLimits, redact: Sequence[str]) -> None:
        self.handle = handle
        self.limits = limits
        self.redact = [r.encode() for r in redact if r]
        self.written = 0
        self.dropped = 0
        self.lines = 0

    def write(self, line: bytes) -> None:
        self.lines += 1
        for secret in self.redact:
            line = line.replace(secret, b"***")
        if len(line) > self.limits.line_bytes:
            cut = len(line) - self.limits.line_bytes
            line = line[: self.limits.line_bytes] + f" [line cut: {cut} bytes]".encode()
        line += b"\n"
        if self.dropped or self.written + len(line) > self.limits.log_bytes:
            if not self.dropped:
                self.handle.write(
                    f"[the-loop: log capped at {self.limits.log_bytes} bytes; the rest of "
                    "the output is counted, not kept]\n".encode())
            self.dropped += len(line)
            return
        self.handle.write(line)
        self.written += len(line)


def run_process(
    argv: Sequence[str],
    *,
    stdin: str,
    cwd: Path | str,
    env: Mapping[str, str],
    limits: TurnLimits,
    log_path: Path | str,
    on_line: Callable[[str], bool] | None = None,
    on_start: Callable[[int], None] | None = None,
    redact: Sequence[str] = (),
    merge_stderr: bool = True,
) -> ProcessResult:
    """Run ``argv`` (no shell) in a new session and process group until it ends or a
    limit is reached; return only when no live process of its group remains.

    Args:
        argv: the program and its arguments.
        stdin: text written to the process's stdin, which is then closed (Codex CLI
            waits for EOF otherwise).
        cwd: the working directory.
        env: the process's complete environment.
        limits: time and output bounds (seconds, bytes).
        log_path: the log file (created or appended to), stdout and stderr merged.
        on_line: called with each output line (UTF-8, undecodable bytes replaced, cut at
            :data:`PARSE_BYTES`); returning True means "the result arrived": the group
            is killed if it still runs ``result_grace`` seconds later.
        on_start: called with the process group id right after the start.
        redact: strings replaced by ``***`` in the log (API keys).
        merge_stderr: stderr joins stdout (a turn's log); false: stderr is discarded
            (a version probe reads stdout only).

    Returns:
        A :class:`ProcessResult`.

    Raises:
        HarnessMissing: ``argv[0]`` is not found or not executable.
    """
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "ab") as handle:
        try:
            proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL, cwd=cwd,
                env=dict(env), start_new_session=True, close_fds=True)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise HarnessMissing(
                f"cannot run {argv[0]!r} ({type(exc).__name__}): install it, or point the "
                "harness at the right executable (harness.binary / harness.argv in "
                "cli-config.yaml, or THE_LOOP_HARNESS_BINARY)") from None
        pgid = proc.pid  # start_new_session: the leader's pid is the group's id
        if on_start is not None:
            on_start(pgid)
        _feed(proc, stdin)
        log = _Log(handle, limits, redact)
        try:
            reason = _pump(proc, limits, log, on_line, started)
        finally:
            kill_group(pgid, limits.grace, proc)
            if proc.stdout is not None:
                proc.stdout.close()
        return ProcessResult(
            exit_code=proc.returncode, reason=reason,
            duration_s=time.monotonic() - started, pgid=pgid, lines=log.lines,
            dropped_bytes=log.dropped)


def _feed(proc: subprocess.Popen[bytes], text: str) -> None:
    """Write ``text`` to stdin and close it, in a thread: a child that does not read
    its input must not block the reader of its output."""
    pipe = proc.stdin
    assert pipe is not None

    def write() -> None:
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            pipe.write(text.encode("utf-8"))
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            pipe.close()

    threading.Thread(target=write, name=f"harness-stdin-{proc.pid}", daemon=True).start()


def _pump(proc: subprocess.Popen[bytes], limits: TurnLimits, log: _Log,
          on_line: Callable[[str], bool] | None, started: float) -> str:
    """Read the output until EOF and exit, or until a limit; returns the reason."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buffer = b""
    skipping = False  # inside a line longer than PARSE_BYTES: drop to its newline
    result_at: float | None = None
    exited_at: float | None = None
    last_output = started
    eof = False
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            chunk = b""
            if not eof and selector.select(_TICK):
                try:
                    chunk = os.read(fd, 65536)
                    if not chunk:  # readable with nothing to read: every writer closed it
                        eof = True
                        selector.unregister(fd)
                except BlockingIOError:
                    pass
            elif eof:  # the pipe is closed: wake as soon as the leader exits
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_TICK)
            now = time.monotonic()
            if chunk:
                last_output = now
                buffer += chunk
                lines = buffer.split(b"\n")
                buffer = lines.pop()
                for raw in lines:
                    if skipping:
                        skipping = False
                        continue
                    if _line(raw, log, on_line) and result_at is None:
                        result_at = now
                if len(buffer) > PARSE_BYTES and not skipping:
                    if _line(buffer, log, on_line) and result_at is None:
                        result_at = now
                    buffer, skipping = b"", True
                elif skipping:
                    buffer = b""
            if eof and buffer:
                if not skipping and _line(buffer, log, on_line) and result_at is None:
                    result_at = now
                buffer = b""
            if proc.poll() is not None:
                if eof:
                    return "exited"
                # The leader is gone but a child holds the pipe: give it result_grace.
                exited_at = exited_at or now
                if now - exited_at > limits.result_grace:
                    return "exited"
            if now - started > limits.turn_timeout:
                return "timeout"
            if now - last_output > limits.idle_timeout:
                return "idle"
            if result_at is not None and now - result_at > limits.result_grace:
                return "after-result"


def _line(raw: bytes, log: _Log, on_line: Callable[[str], bool] | None) -> bool:
    raw = raw[:PARSE_BYTES].rstrip(b"\r")
    log.write(raw)
    return bool(on_line(raw.decode("utf-8", "replace"))) if on_line is not None else False


def group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes of group ``pgid``, from ``/proc``; where
    there is no ``/proc``, ``[pgid]`` while ``killpg(pgid, 0)`` succeeds."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def kill_group(pgid: int, grace: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """End process group ``pgid``: SIGTERM, then SIGKILL after ``grace`` seconds; return
    when no live member is left (reaping ``proc``, the leader, on the way)."""
    def alive() -> bool:
        if proc is not None:
            proc.poll()
        return bool(group_members(pgid))

    try:
        _end_group(pgid, grace, alive)
    finally:
        # A zombie leader is not "live" but still needs reaping for its exit status.
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)


def _end_group(pgid: int, grace: float, alive: Callable[[], bool]) -> None:
    if not alive():
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive():
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + _REAP_LIMIT
    while alive() and time.monotonic() < deadline:
        time.sleep(0.02)


def probe_env(path: str | None = None) -> dict[str, str]:
    """The environment of a version probe: ``PATH`` (``harness.path``: the harness may be
    a Node.js script found through it; default :data:`os.defpath`) and a UTF-8 locale."""
    return {"PATH": path or os.defpath, "LANG": "C.UTF-8"}


def probe_version(binary: str, env: Mapping[str, str] | None = None, *,
                  timeout: float = 10.0) -> str:
    """``binary --version``'s stdout (stripped), run with ``env`` (default
    :func:`probe_env`; ``HOME`` is a throw-away directory unless given) and a short
    timeout, in seconds. Stderr is not read: with a fresh HOME Codex prints a WARNING
    there first, which is not its version.

    Raises:
        HarnessMissing: the binary is not found, or printed nothing / failed; the
            message names the fix.
    """
    lines: list[str] = []

    def keep(line: str) -> bool:
        if len(lines) < 20:
            lines.append(line)
        return False

    limits = TurnLimits(turn_timeout=timeout, idle_timeout=timeout, log_bytes=64 * 1024,
                        grace=1.0, result_grace=1.0)
    with tempfile.TemporaryDirectory(prefix="the-loop-probe-") as tmp:
        env = {"HOME": tmp, **(probe_env() if env is None else env)}
        result = run_process([binary, "--version"], stdin="", cwd=tmp, env=env,
                             limits=limits, log_path=Path(tmp) / "probe.log", on_line=keep,
                             merge_stderr=False)
    text = "\n".join(lines).strip()
    if result.reason != "exited" or result.exit_code != 0 or not text:
        raise HarnessMissing(
            f"`{binary} --version` did not answer (exit {result.exit_code}, "
            f"{result.reason}): install a working {binary}, or set harness.binary in "
            "cli-config.yaml or THE_LOOP_HARNESS_BINARY")
    return text
