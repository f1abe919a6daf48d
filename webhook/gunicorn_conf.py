"""Gunicorn settings for the receiver, from the environment.

Run: ``gunicorn -c webhook/gunicorn_conf.py webhook.wsgi:app``

- ``THE_LOOP_BIND`` (e.g. ``0.0.0.0:8080``) wins; else ``PORT`` binds ``0.0.0.0:$PORT``;
  else ``127.0.0.1:8000``.
- ``THE_LOOP_WEB_WORKERS`` processes (default 2).
- ``THE_LOOP_WEB_THREADS`` threads per process (default 1: the sync worker; more than 1
  selects gunicorn's gthread worker).
- ``THE_LOOP_ACCESS_LOG`` access log target (``-`` for stdout); off by default, the
  receiver already logs one line per delivery.
- timeout 30 s: a request needs one Redis round trip with 2 s timeouts, so a worker
  stuck longer than that is broken.
"""

from __future__ import annotations

import os


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name) or str(default)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise SystemExit(f"{name} must be a positive integer, e.g. {name}={default}")
    return value


def _bind() -> str:
    if os.environ.get("THE_LOOP_BIND"):
        return os.environ["THE_LOOP_BIND"]
    if os.environ.get("PORT"):
        return f"0.0.0.0:{os.environ['PORT']}"
    return "127.0.0.1:8000"


bind = [_bind()]
workers = _positive_int("THE_LOOP_WEB_WORKERS", 2)
threads = _positive_int("THE_LOOP_WEB_THREADS", 1)
worker_class = "sync" if threads == 1 else "gthread"
timeout = 30
graceful_timeout = 30
keepalive = 5
accesslog = os.environ.get("THE_LOOP_ACCESS_LOG") or None
errorlog = "-"
