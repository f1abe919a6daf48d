"""Processes a test starts: each in its own process group, stopped as a whole.

A test that fails or is interrupted must leave nothing behind (a gunicorn master and its
workers orphaned on their port, a runner's harness): :func:`stop` signals the whole
group, TERM then KILL, and waits until no member is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from integrations.harness.process import group_members


def start(argv: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (its own process group), output to ``log``."""
    return subprocess.Popen(list(argv), env=dict(env), stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def group_alive(pgid: int) -> bool:
    """Whether any live (not zombie) process of group ``pgid`` is left."""
    return bool(group_members(pgid))


def stop(proc: subprocess.Popen[bytes], *, grace: float = 15.0) -> None:
    """SIGTERM ``proc``'s process group, SIGKILL what is left after ``grace`` seconds,
    and wait for the group to be gone."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    deadline = time.monotonic() + grace
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def running(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    """Stop every one of ``procs`` (whole groups) when the block ends, however."""
    try:
        yield
    finally:
        for proc in procs:
            stop(proc)
