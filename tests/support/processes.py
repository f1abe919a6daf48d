"""Processes a test starts: each in its own process group, stopped as a whole.

A test that fails or is interrupted must leave nothing behind (a gunicorn master and its
workers orphaned on their port, a runner's harness): :func:`stop` signals the whole
group, and the groups of every descendant that moved to a group of its own (``make
run``'s script runs each process in its own group), TERM then KILL, and waits until no
member is left. Use :func:`start` and :func:`running` (or ``stop`` in a ``finally``)
for every process a test starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from integrations.harness.process import group_members


def start(argv: Sequence[str], env: Mapping[str, str], log: Path,
          **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (its own process group), output to ``log``
    (``popen``: more :class:`subprocess.Popen` arguments, e.g. ``cwd``)."""
    with log.open("ab") as sink:
        return subprocess.Popen(list(argv), env=dict(env), stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True, **popen)


def group_alive(pgid: int) -> bool:
    """Whether any live (not zombie) process of group ``pgid`` is left."""
    return bool(group_members(pgid))


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()  # state ppid pgrp ...


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie), from ``/proc``."""
    fields = _stat(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """Pids of the live processes below ``pid`` (children, theirs, ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and fields[0] not in ("Z", "X"):
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _groups(pids: list[int]) -> set[int]:
    groups = set()
    for pid in pids:
        fields = _stat(pid)
        if fields:
            groups.add(int(fields[2]))
    return groups


def stop(proc: subprocess.Popen[bytes], *, grace: float = 15.0) -> None:
    """SIGTERM ``proc``'s process group, SIGKILL what is left after ``grace`` seconds,
    and wait for the group to be gone; then the same for the group of any descendant
    that left it."""
    pgid = proc.pid
    groups = _groups(descendants(proc.pid)) - {pgid}
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
    for group in groups:
        stop_group(group, grace=grace)


def stop_group(pgid: int, *, grace: float = 15.0) -> None:
    """SIGTERM group ``pgid``, SIGKILL it after ``grace`` seconds, until none is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


@contextlib.contextmanager
def running(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    """Stop every one of ``procs`` (whole groups) when the block ends, however."""
    try:
        yield
    finally:
        for proc in procs:
            stop(proc)


def serve(ns: Any, log: Path, **env: str) -> tuple[subprocess.Popen[bytes], int]:
    """Start the receiver as in production (``the-loop serve`` on a free loopback port)
    against ``ns`` (a :class:`tests.conftest.RedisNamespace`), with the-loop's variables of
    this environment left out and ``env`` added (``THE_LOOP_WEBHOOK_SECRET`` at least);
    returns the process and its port. Stop it with :func:`stop`."""
    import socket
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    root = Path(__file__).resolve().parents[2]
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("THE_LOOP_", "PROMETHEUS_")) and k not in (
                "GH_TOKEN", "GITHUB_TOKEN", "REDIS_URL", "GUNICORN_CMD_ARGS")}
    full.update({
        "REDIS_URL": ns.url, "THE_LOOP_REDIS_PREFIX": ns.prefix,
        "THE_LOOP_QUEUE": ns.queue_name,
        "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH"))
                                      if p),
        **env,
    })
    the_loop = Path(sys.executable).parent / "the-loop"
    argv = [str(the_loop), "serve", "--host", "127.0.0.1", "--port", str(port)]
    return start(argv, full, log), port
