"""the_loop/gunicorn_conf.py under the image's conditions: ``HOME`` is ``/nonexistent`` on a
read-only root filesystem, so gunicorn must not try to create its control socket under
``$HOME/.gunicorn`` (gunicorn 25.1+ does by default and logs an ERROR when it cannot).
And where the receiver binds: ``the-loop serve`` passes ``--bind`` from its flags, so
``THE_LOOP_BIND`` only counts when gunicorn is run directly with the file (README)."""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import urllib.request
from pathlib import Path

from click.testing import CliRunner
from gunicorn.config import Config

from tests.conftest import REPO_ROOT
from tests.observability.helpers import free_port, wait_until
from tests.support.processes import start, stop
from the_loop.cli import main

CONF = REPO_ROOT / "the_loop" / "gunicorn_conf.py"
BIN = Path(sys.executable).parent


def test_conf_disables_gunicorns_control_socket(monkeypatch):
    for name in list(os.environ):
        if name.startswith("THE_LOOP_"):
            monkeypatch.delenv(name)
    conf = runpy.run_path(str(CONF))
    assert conf["control_socket_disable"] is True
    # A setting gunicorn knows (a misspelt name in a config file is silently ignored).
    cfg = Config()
    assert "control_socket_disable" in cfg.settings
    cfg.set("control_socket_disable", conf["control_socket_disable"])
    assert cfg.control_socket_disable is True


def test_serve_binds_its_flags_and_ignores_the_loop_bind(monkeypatch):
    """README: THE_LOOP_BIND applies only to gunicorn run directly with this file;
    ``the-loop serve`` passes ``--bind HOST:PORT`` (its flags, or PORT/THE_LOOP_HOST),
    and gunicorn's command line wins over the file's ``bind``."""
    calls = []

    def fake_execv(path, argv):
        calls.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", fake_execv)
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", "x")
    monkeypatch.setenv("THE_LOOP_BIND", "10.1.2.3:7777")
    monkeypatch.setenv("PORT", "9001")
    monkeypatch.delenv("THE_LOOP_HOST", raising=False)
    monkeypatch.delenv("THE_LOOP_CONFIG", raising=False)
    for args, bind in (([], "0.0.0.0:9001"), (["--host", "0.0.0.0", "--port", "8080"],
                                              "0.0.0.0:8080")):
        CliRunner().invoke(main, ["serve", *args])
        argv = calls.pop()
        assert argv[argv.index("-c") + 1] == "python:the_loop.gunicorn_conf"
        assert argv[argv.index("--bind") + 1] == bind


def test_gunicorn_command_line_bind_wins_over_the_conf(monkeypatch):
    from gunicorn.app.wsgiapp import WSGIApplication

    monkeypatch.setenv("THE_LOOP_BIND", "10.1.2.3:7777")
    for extra, bind in (([], "10.1.2.3:7777"), (["--bind", "127.0.0.1:1234"], "127.0.0.1:1234")):
        monkeypatch.setattr("sys.argv", ["gunicorn", "-c", "python:the_loop.gunicorn_conf",
                                         *extra, "the_loop.wsgi:app"])
        sys.modules.pop("the_loop.gunicorn_conf", None)  # re-read the environment
        assert WSGIApplication().cfg.bind == [bind]


def _healthz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def test_serve_starts_without_an_error_when_home_is_unusable(tmp_path):
    """``the-loop serve`` with a HOME under which no directory can be made (as in the
    image) logs no ERROR or WARNING and stops cleanly."""
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("THE_LOOP_", "PROMETHEUS_", "XDG_"))}
    env.update({
        "HOME": "/dev/null",  # not a directory: $HOME/.gunicorn cannot exist, even for root
        "TMPDIR": str(tmp_path),
        "THE_LOOP_WEBHOOK_SECRET": "gunicorn-conf-test",
        "REDIS_URL": "redis://127.0.0.1:9/0",  # /healthz does not touch Redis
        "THE_LOOP_LOG_FORMAT": "json",
        "THE_LOOP_LOG_LEVEL": "DEBUG",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH"))
                                      if p),
    })
    out = tmp_path / "serve.out"
    proc = start([str(BIN / "the-loop"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                 env, out, cwd=tmp_path)
    try:
        def up() -> bool:
            assert proc.poll() is None, f"serve exited early:\n{out.read_text()}"
            return _healthz(port)

        wait_until(up, what="the receiver to answer /healthz")

        def control_decided() -> bool:  # the master logs one of these once its workers run
            text = out.read_text()
            return any(m in text for m in ("Control socket disabled", "Control server error",
                                           "Control socket listening",
                                           "Failed to start control socket"))

        wait_until(control_decided, timeout=10, what="gunicorn's control socket line")
    finally:
        proc.send_signal(signal.SIGTERM)  # the master alone: it stops its workers
        try:
            proc.wait(timeout=30)
        finally:
            stop(proc)  # whatever happened, nothing of its group is left
    lines = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    loud = [line for line in lines if line["level"] in ("WARNING", "ERROR", "CRITICAL")]
    assert loud == [], loud
    assert any(line["message"] == "Control socket disabled" for line in lines)
    assert proc.returncode == 0
