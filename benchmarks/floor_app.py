"""The floor for the ingest benchmark: the least a receiver that stores each delivery in
Redis before it answers can do on this stack.

``POST /webhook``: verify ``X-Hub-Signature-256`` (:func:`webhook.signature.verify_signature`,
secrets from ``THE_LOOP_WEBHOOK_SECRET``), one ``SET`` of the raw body under
``$THE_LOOP_REDIS_PREFIX:floor:<X-GitHub-Delivery>`` (10 minutes' expiry) with a client
made as the receiver's is (:func:`the_loop.redis_client.connect`, its ``RECEIVER``
profile), answer 202. A plain WSGI callable like the receiver's fast path, without Flask;
no header checks, no JSON parsing, no dedupe, no inbox, no log line, no metrics: what
the bare app does plus one durable write, and nothing else. 401 on a bad signature,
503 when Redis fails.

Run (same gunicorn settings as the receiver)::

    THE_LOOP_WEBHOOK_SECRET=s REDIS_URL=redis://127.0.0.1:6379/13 THE_LOOP_REDIS_PREFIX=p \\
        .venv/bin/python -m gunicorn -c python:webhook.gunicorn_conf \\
        --bind 127.0.0.1:8003 --pythonpath benchmarks floor_app:app
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import redis

from the_loop.redis_client import RECEIVER, connect
from webhook.events import SignatureError
from webhook.signature import verify_signature

_SECRETS = tuple(
    s.strip().encode() for s in os.environ.get("THE_LOOP_WEBHOOK_SECRET", "").split(",")
    if s.strip()
)
_URL = os.environ.get("REDIS_URL", "")
if not _SECRETS or not _URL:
    raise SystemExit("floor_app: set THE_LOOP_WEBHOOK_SECRET and REDIS_URL")
_PREFIX = os.environ.get("THE_LOOP_REDIS_PREFIX", "the-loop")
_REDIS = connect(_URL, RECEIVER)
_JSON = [("Content-Type", "application/json")]


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The WSGI callable (see the module docstring)."""
    body = environ["wsgi.input"].read()
    try:
        verify_signature(body, environ.get("HTTP_X_HUB_SIGNATURE_256"), _SECRETS)
    except SignatureError:
        start_response("401 UNAUTHORIZED", [*_JSON, ("Content-Length", "13")])
        return [b'{"ok": false}']
    delivery = environ.get("HTTP_X_GITHUB_DELIVERY", "-")
    try:
        _REDIS.set(f"{_PREFIX}:floor:{delivery}", body, ex=600)
    except redis.RedisError:
        start_response("503 SERVICE UNAVAILABLE", [*_JSON, ("Content-Length", "13")])
        return [b'{"ok": false}']
    start_response("202 ACCEPTED", [*_JSON, ("Content-Length", "12")])
    return [b'{"ok": true}']
