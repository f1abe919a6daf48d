"""Gunicorn settings for the receiver, from the environment.

Run: ``gunicorn -c python:webhook.gunicorn_conf webhook.wsgi:app`` (``the-loop serve``
does that, adding ``--bind HOST:PORT`` from its ``--host``/``--port``, which wins over the
``bind`` below).

- ``THE_LOOP_BIND`` (e.g. ``0.0.0.0:8080``) wins; else ``PORT`` binds ``0.0.0.0:$PORT``;
  else ``127.0.0.1:8000``. Only when gunicorn is run directly with this file.
- ``THE_LOOP_WEB_WORKERS`` processes (default 2).
- ``THE_LOOP_WEB_THREADS`` threads per process (default 1: the sync worker; more than 1
  selects gunicorn's gthread worker).
- ``THE_LOOP_ACCESS_LOG`` access log target (``-`` for stdout); off by default, the
  receiver already logs one line per delivery.
- timeout 30 s: a request needs one Redis round trip with 2 s timeouts, so a worker
  stuck longer than that is broken. On SIGTERM gunicorn stops accepting connections and
  gives the requests in flight up to ``graceful_timeout`` (30 s) to finish.
- Logs: ``THE_LOOP_LOG_FORMAT`` (``json`` by default, or ``text``) and
  ``THE_LOOP_LOG_LEVEL``, on stdout, gunicorn's own lines included (``logconfig_dict``,
  see :mod:`the_loop.observability.logs`).
- No control socket (``control_socket_disable``, gunicorn 25.1+): gunicorn would create
  ``$HOME/.gunicorn/gunicorn.ctl`` for ``gunicornc``, and in the image ``HOME`` is
  ``/nonexistent`` on a read-only root filesystem, so it logged an ERROR at every start.
  Nothing of the-loop uses ``gunicornc``; older gunicorn ignores the setting.
- Metrics: ``PROMETHEUS_MULTIPROC_DIR`` (default: a fresh directory under the temporary
  directory, removed at exit) holds every worker process's counters for ``GET /metrics``
  (prometheus-client's multiprocess mode); it is emptied when the master starts, and a
  worker's files are marked dead when it exits.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from typing import Any

from gunicorn.glogging import Logger

from the_loop.observability.logs import logging_dict
from the_loop.settings import Settings, SettingsError

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

try:
    # Validated in the master: a bad setting stops gunicorn before any worker boots (each
    # worker reads them again in webhook.wsgi, and there requires the webhook secret).
    _settings = Settings.from_env(os.environ, process="gunicorn")
except SettingsError as exc:
    raise SystemExit(str(exc)) from None

bind = [_settings.web.bind]
workers = _settings.web.workers
threads = _settings.web.threads
worker_class = "sync" if threads == 1 else "gthread"
timeout = 30
graceful_timeout = 30
keepalive = 5
accesslog = _settings.web.access_log
errorlog = "-"
# gunicorn >= 25.1 otherwise opens a control socket under $HOME/.gunicorn (see above).
control_socket_disable = True
logconfig_dict = logging_dict(_settings.logging, gunicorn=True)


class LoopLogger(Logger):
    """gunicorn's logger, formatting access lines only when ``THE_LOOP_ACCESS_LOG`` is set
    (with a ``logconfig_dict`` gunicorn would compute them for every request)."""

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        if self.cfg.accesslog is None:
            return
        super().access(resp, req, environ, request_time)


logger_class = LoopLogger


def _default_multiproc_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"the-loop-metrics-{os.getpid()}")


def on_starting(server: Any) -> None:
    """Master start: choose and empty the metrics directory before any worker exists;
    the workers (prometheus-client, and their settings) find it in the environment."""
    path = _settings.metrics.multiproc_dir or _default_multiproc_dir()
    os.environ[MULTIPROC_ENV] = path
    os.makedirs(path, exist_ok=True)
    for stale in glob.glob(os.path.join(path, "*.db")):
        os.remove(stale)


def child_exit(server: Any, worker: Any) -> None:
    """A worker exited: its live gauges stop counting (counters keep their totals)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    """Master exit: remove the metrics directory if it is the default one made here."""
    if _settings.metrics.multiproc_dir is None:
        shutil.rmtree(_default_multiproc_dir(), ignore_errors=True)
