"""A test run that fails or is interrupted leaves no process behind: a pytest run (a
subprocess) of a test that starts gunicorn (``the-loop serve``) through
``tests/support/processes.py`` and then fails, or is interrupted with SIGINT as Ctrl-C
does, ends with no process of gunicorn's group (master and workers) left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integrations.harness.process import group_members
from tests.conftest import REPO_ROOT
from tests.observability.helpers import free_port

BIN = Path(sys.executable).parent

FAILING = '''
import os, sys, time, urllib.request
from pathlib import Path
import pytest
from tests.support.processes import descendants, start, stop

@pytest.fixture
def gunicorn(tmp_path):
    env = {{**os.environ, "THE_LOOP_WEBHOOK_SECRET": "x", "THE_LOOP_WEB_WORKERS": "2",
           "REDIS_URL": "redis://127.0.0.1:9/0"}}
    proc = start([{the_loop!r}, "serve", "--host", "127.0.0.1", "--port", "{port}"], env,
                 tmp_path / "serve.out")
    try:
        yield proc
    finally:
        stop(proc)

def test_fails_with_gunicorn_running(gunicorn):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen("http://127.0.0.1:{port}/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    while len(descendants(gunicorn.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # both workers booted
    pids = [gunicorn.pid, *descendants(gunicorn.pid)]
    Path({pids_file!r}).write_text(" ".join(map(str, pids)))
    if {interrupt!r}:
        time.sleep(60)  # SIGINT arrives meanwhile
    assert False, "deliberately failing with gunicorn running"
'''


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


@pytest.mark.parametrize("interrupt", [False, True], ids=["fails", "interrupted"])
def test_a_failing_or_interrupted_test_leaves_no_process_behind(tmp_path, interrupt):
    port = free_port()
    pids_file = tmp_path / "pids"
    test_file = tmp_path / "test_leaves_nothing.py"
    test_file.write_text(FAILING.format(the_loop=str(BIN / "the-loop"), port=port,
                                        pids_file=str(pids_file), interrupt=interrupt))
    env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT),
                                                      env.get("PYTHONPATH"))))
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(test_file)], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not pids_file.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids_file.exists(), run.communicate(timeout=30)[0].decode()[-3000:]
        pids = [int(p) for p in pids_file.read_text().split()]
        assert len(pids) >= 3  # the master and its two workers
        if interrupt:
            run.send_signal(signal.SIGINT)
        output = run.communicate(timeout=60)[0].decode()
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == (2 if interrupt else 1), output[-3000:]
    assert ("KeyboardInterrupt" if interrupt else "deliberately failing") in output
    assert [p for p in pids if _alive(p)] == []
    assert group_members(pids[0]) == []
