"""Helpers shared by the benchmark scripts (not a benchmark itself).

Redis hygiene: every benchmark run picks a unique token and puts it into every key,
queue name and delivery id it creates, then deletes only keys containing that token
(plus the worker keys it recorded, and its members of RQ's global sets). Never FLUSHDB.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

VENV_BIN = REPO / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
FIXTURES = REPO / "tests" / "fixtures" / "github-webhooks" / "api.github.com"
ISSUE_COMMENT = FIXTURES / "issue_comment" / "created.payload.json"
BENCH_REDIS_URL = os.environ.get("THE_LOOP_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
RESULTS = Path(__file__).resolve().parent / "results"

# Variables that would make a benchmark process talk to GitHub or change its behaviour.
_STRIP_ENV_PREFIXES = ("THE_LOOP_", "GH_", "GITHUB_")


def new_token() -> str:
    """A short unique token: in every Redis key/queue/delivery id a run creates."""
    return "bench" + uuid.uuid4().hex[:12]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without the-loop/GitHub settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_STRIP_ENV_PREFIXES)}
    env.pop("REDIS_URL", None)
    env.update(extra)
    return env


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in KiB, from /proc/<pid>/status."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (scans /proc/*/stat)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # Field 4 (ppid) follows the ")" closing the command name.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            kids.append(int(entry))
    return sorted(kids)


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            mem_kib = int(f.readline().split()[1])
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


# RQ's global maintenance locks (short TTL) that a worker run may create.
RQ_GLOBAL_LOCKS = ("rq:clean_groups",)


def absent_globals(conn) -> tuple[str, ...]:  # noqa: ANN001
    """The RQ global lock keys that do not exist now (so a run that creates them may
    delete them afterwards; ones that existed before are left alone)."""
    return tuple(k for k in RQ_GLOBAL_LOCKS if not conn.exists(k))


def cpu_ticks() -> tuple[int, int]:
    """(total, idle) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]  # idle + iowait


def cpu_busy_pct(seconds: float = 1.0) -> float:
    """Whole-machine CPU busy percentage over ``seconds`` (from /proc/stat), to notice
    other load on the machine while benchmarking."""
    import time

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields), idle

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    if total1 == total0:
        return 0.0
    return round(100 * (1 - (idle1 - idle0) / (total1 - total0)), 1)


def wait_quiet(max_wait: float = 0.0, threshold: float = 25.0) -> float:
    """Whole-machine CPU busy % over the last 0.5 s; while it is above ``threshold``
    keep sampling, for at most ``max_wait`` seconds (0: measure once). Returns the last
    sample, recorded with each measurement so noisy runs can be recognised."""
    import time

    deadline = time.monotonic() + max_wait
    busy = cpu_busy_pct(0.5)
    while busy > threshold and time.monotonic() < deadline:
        busy = cpu_busy_pct(0.5)
    return busy


def code_version() -> dict[str, Any]:
    """The commit measured and how many files differed from it (the tree is shared)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "changed_files": len(status.splitlines()) if status else 0}


def cleanup_redis(conn, token: str, worker_keys: tuple[str, ...] = (),  # noqa: ANN001
                  created_globals: tuple[str, ...] = ()) -> int:
    """Delete the keys of one run: those containing ``token``, ``worker_keys``, and the
    ``created_globals`` (RQ global locks that were absent when the run started).

    Also removes members containing ``token`` (or in ``worker_keys``) from RQ's global
    ``rq:queues`` and ``rq:workers`` sets. Returns the number of keys deleted.
    """
    deleted = 0
    if created_globals:
        deleted += conn.unlink(*created_globals)
    batch: list[bytes] = []
    for key in conn.scan_iter(match=f"*{token}*", count=500):
        batch.append(key)
        if len(batch) >= 500:
            deleted += conn.unlink(*batch)
            batch.clear()
    if batch:
        deleted += conn.unlink(*batch)
    if worker_keys:
        deleted += conn.unlink(*worker_keys)
    for shared in ("rq:queues", "rq:workers"):
        members = [m for m in conn.smembers(shared)
                   if token.encode() in m or m.decode() in worker_keys]
        if members:
            conn.srem(shared, *members)
    return deleted


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1, nearest rank) of ``values`` rounded to 0.01, or None."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else None


def wait_http_ok(url: str, timeout: float = 30.0) -> bool:
    """Poll ``url`` (GET) until it answers 2xx or ``timeout`` seconds pass; returns
    whether it did."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def gh_label(name: str) -> dict[str, Any]:
    """A label as GitHub puts it in a payload (``tests.conftest.gh_label``: every field
    the webhook schema requires); a bare ``{"name"}`` in a checkout that predates it."""
    try:
        from tests.conftest import gh_label as label
    except ImportError:
        return {"name": name}
    return label(name)


def act_as(payload: dict[str, Any], login: str) -> dict[str, Any]:
    """``login`` as the payload's sender and author, with the user id the fake GitHub
    gives it (``tests.conftest.act_as``); logins only in a checkout that predates it."""
    try:
        from tests.conftest import act_as as act
    except ImportError:
        payload["sender"]["login"] = login
        for key in ("comment", "review"):
            if isinstance(payload.get(key), dict):
                payload[key]["user"]["login"] = login
        return payload
    return act(payload, login)
