"""The worker's watchdog, in real child processes: a worker whose interpreter is frozen
in C code (the interpreter lock held, every other thread stopped) or that keeps a hook
it could not stop ends itself within its TTL; a healthy one does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_child(code, timeout=60):
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_a_worker_frozen_in_c_code_ends_itself_within_its_ttl():
    """Given a process with the worker's watchdog (TTL 1 s) whose main thread then runs
      an exponential regex (C code that holds the interpreter lock: no other thread, no
      in-process timer can run)
    When a TTL passes
    Then the process exits with status 1 and every thread's traceback on stderr, the
      frozen frame included."""
    done = run_child(
        "import re\n"
        "from workers.watchdog import Watchdog\n"
        "Watchdog(1).start()\n"
        "def frozen():\n"
        "    return re.match(r'(a+)+$', 'a' * 64 + 'b')\n"
        "frozen()\n"
        "print('not frozen')\n")
    assert done.returncode == 1
    assert "not frozen" not in done.stdout
    assert "Timeout" in done.stderr and "in frozen" in done.stderr


def test_a_worker_with_a_runaway_hook_ends_itself_and_a_healthy_one_does_not():
    """Given two processes with the watchdog (TTL 1 s), idle for 3 s: one whose hook
      threads include a runaway, one without
    Then the first exits with status 1 and says why; the second finishes normally."""
    code = (
        "import time, logging\n"
        "logging.basicConfig()\n"
        "from workers.watchdog import Watchdog\n"
        "dog = Watchdog(1, runaways=lambda: {runaways})\n"
        "dog.start()\n"
        "time.sleep(3)\n"
        "dog.stop()\n"
        "print('finished')\n")
    runaway = run_child(code.format(runaways="['hook-x']"))
    healthy = run_child(code.format(runaways="[]"))
    assert runaway.returncode == 1 and "finished" not in runaway.stdout
    assert "hook-x ran past their limit and could not be stopped" in runaway.stderr
    assert healthy.returncode == 0 and "finished" in healthy.stdout
