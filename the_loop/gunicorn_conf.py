"""Gunicorn settings for the receiver, from the environment.

Run: ``gunicorn -c python:the_loop.gunicorn_conf the_loop.wsgi:app`` (``the-loop serve``
does that, adding ``--bind HOST:PORT`` from its ``--host``/``--port``, which wins over the
``bind`` below).

- ``THE_LOOP_BIND`` (e.g. ``0.0.0.0:8080``) wins; else ``PORT`` binds ``0.0.0.0:$PORT``;
  else ``127.0.0.1:8000``. Only when gunicorn is run directly with this file.
- ``THE_LOOP_WEB_WORKERS`` processes (default 2).
- Worker class: ``gevent`` (``THE_LOOP_WEB_THREADS`` at its default 1): each connection is
  a greenlet, up to ``worker_connections`` (1000) per process, so a slow or idle client
  holds a greenlet, never a process. A sync worker is held by every connection it reads
  (two slow clients starved two processes of deliveries); gthread by one thread each.
  ``THE_LOOP_WEB_THREADS`` above 1 selects gunicorn's gthread worker instead, whose
  threads slow clients can tie up: only for where gevent cannot run.
- Slow clients are cut off: the request line and headers must arrive within
  ``keepalive`` (5 s, gunicorn's gevent worker times the header read with it), and the
  body within :data:`BODY_SECONDS` of the headers (:func:`pre_request` reads it before
  the app runs); GitHub itself gives up on a delivery after 10 s. Limits: request line
  :data:`limit_request_line` bytes, :data:`limit_request_fields` headers of at most
  :data:`limit_request_field_size` bytes each (gunicorn answers 400 / 431 past them), the
  body ``max_body_bytes`` (25 MiB, GitHub's cap on a payload; 413 past it).
- ``THE_LOOP_ACCESS_LOG`` access log target (``-`` for stdout); off by default, the
  receiver already logs one line per delivery.
- timeout 30 s: a request needs one Redis round trip with 2 s timeouts, so a worker
  stuck longer than that is broken. On SIGTERM gunicorn stops accepting connections and
  gives the requests in flight up to ``graceful_timeout`` (30 s) to finish.
- Logs: ``THE_LOOP_LOG_FORMAT`` (``json`` by default, or ``text``) and
  ``THE_LOOP_LOG_LEVEL``, on stdout, gunicorn's own lines included (``logconfig_dict``,
  see :mod:`foundation.observability.logs`).
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
import io
import os
import shutil
import tempfile
from typing import Any

from gunicorn.glogging import Logger

from foundation.observability.logs import logging_dict
from foundation.settings import Settings, SettingsError

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

try:
    # Validated in the master: a bad setting stops gunicorn before any worker boots (each
    # worker reads them again in the_loop.wsgi, and there requires the webhook secret).
    _settings = Settings.from_env(os.environ, process="gunicorn")
except SettingsError as exc:
    raise SystemExit(str(exc)) from None

bind = [_settings.web.bind]
workers = _settings.web.workers
threads = _settings.web.threads
worker_class = "gevent" if threads == 1 else "gthread"
worker_connections = 1000
timeout = 30
graceful_timeout = 30
keepalive = 5
#: Seconds the body may take to arrive after the headers (gevent worker).
BODY_SECONDS = 10.0
# GitHub's request line is "POST /path HTTP/1.1", it sends about 12 headers; a fronting
# proxy adds a few (X-Forwarded-*, tracing).
limit_request_line = 2048
limit_request_fields = 50
limit_request_field_size = 8190
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


class _Prefetched(io.BytesIO):
    """A request body read ahead by :func:`pre_request`: the bytes, then the error that
    stopped the read (a malformed chunked body), raised where the app reads it.

    ``failed`` (read by gunicorn's parser before the next request on the connection)
    is true when the read stopped early (an error, or a body over the limit whose rest
    is still unread): the connection is then closed, never reused."""

    def __init__(self, data: bytes, error: Exception | None, complete: bool) -> None:
        super().__init__(data)
        self._error = error
        self.failed = error is not None or not complete

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        if self._error is not None and (not data or size is None or size < 0):
            raise self._error
        return data

    def readinto(self, buffer: Any) -> int:
        # werkzeug's LimitedStream (a max_content_length is set) reads through here.
        count = super().readinto(buffer)
        if self._error is not None and not count:
            raise self._error
        return count

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        if self._error is not None and not line:
            raise self._error
        return line


def pre_request(worker: Any, req: Any) -> None:
    """Under the gevent worker, read the request body within :data:`BODY_SECONDS` before
    the app runs (at most ``max_body_bytes`` + 1 bytes: the receiver answers 413 past
    the limit), so a client trickling its body is cut off instead of holding the request
    open; the app then reads the buffered bytes.

    Raises:
        StopIteration: the body did not arrive in time; gunicorn closes the connection
            (logged at WARNING, without anything the client sent).
    """
    if worker_class != "gevent" or req.body is None:
        return
    import gevent

    timer = gevent.Timeout(BODY_SECONDS)
    timer.start()
    error: Exception | None = None
    data = b""
    limit = _settings.receiver.max_body_bytes
    try:
        data = req.body.read(limit + 1)
    except gevent.Timeout as exc:
        if exc is not timer:
            raise
        worker.log.warning("request body not received within %g s: connection closed",
                           BODY_SECONDS)
        raise StopIteration from None
    except Exception as exc:  # e.g. gunicorn's InvalidChunkSize: the app reports it
        error = exc
    finally:
        timer.close()
    req.body = _Prefetched(data, error, complete=len(data) <= limit)


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
