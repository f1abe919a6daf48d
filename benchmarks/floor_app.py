"""The floor for the ingest benchmark: the least a receiver that stores each delivery in
Redis before it answers can do on this stack.

``POST /webhook``: verify ``X-Hub-Signature-256`` (:func:`webhook.signature.verify_signature`,
secrets from ``THE_LOOP_WEBHOOK_SECRET``), one ``SET`` of the raw body under
``$THE_LOOP_REDIS_PREFIX:floor:<X-GitHub-Delivery>`` (10 minutes' expiry) on a held
connection (:class:`foundation.redis.client.HeldConnections`, the receiver's own Redis
path), answer 202. A plain WSGI callable like the receiver's fast path, without Flask;
no header checks, no JSON parsing, no dedupe, no inbox, no log line, no metrics: what
the bare app does plus one durable write, and nothing else. 401 on a bad signature,
503 when Redis fails.

``THE_LOOP_FLOOR_STEPS`` (comma-separated) adds the receiver's own steps one by one, to
see what each costs under the same load: ``parse`` (the JSON parse and the delivery's
envelope: :func:`webhook.events.decode_body`, :func:`webhook.events.build_delivery`),
``log`` (the receiver's log line), ``enqueue`` (the receiver's dedupe + inbox script,
:class:`foundation.inbox.enqueue.DeliveryQueue`, instead of the ``SET``; implies ``parse``).

Run (same gunicorn settings as the receiver)::

    THE_LOOP_WEBHOOK_SECRET=s REDIS_URL=redis://127.0.0.1:6379/13 THE_LOOP_REDIS_PREFIX=p \\
        .venv/bin/python -m gunicorn -c python:the_loop.gunicorn_conf \\
        --bind 127.0.0.1:8003 --pythonpath benchmarks floor_app:app
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

import redis

from foundation.inbox.enqueue import DeliveryQueue
from foundation.observability.logs import lean_records
from foundation.redis import RECEIVER, HeldConnections, connect
from webhook.events import SignatureError, build_delivery, decode_body
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
_HELD = HeldConnections(_REDIS)
_STEPS = {s.strip() for s in os.environ.get("THE_LOOP_FLOOR_STEPS", "").split(",") if s.strip()}
if "enqueue" in _STEPS:
    _STEPS.add("parse")
_QUEUE = DeliveryQueue(_REDIS, queue_name=os.environ.get("THE_LOOP_QUEUE", "the-loop"),
                       prefix=_PREFIX)
_log = logging.getLogger("the_loop.webhook")
if "log" in _STEPS:
    lean_records()  # as the receiver's the_loop/wsgi.py does
_JSON = [("Content-Type", "application/json")]


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The WSGI callable (see the module docstring)."""
    body = environ["wsgi.input"].read()
    try:
        verify_signature(body, environ.get("HTTP_X_HUB_SIGNATURE_256"), _SECRETS)
    except SignatureError:
        start_response("401 UNAUTHORIZED", [*_JSON, ("Content-Length", "13")])
        return [b'{"ok": false}']
    delivery_id = environ.get("HTTP_X_GITHUB_DELIVERY", "-")
    try:
        if "parse" in _STEPS:
            document, payload = decode_body(environ.get("CONTENT_TYPE"), body)
            delivery = build_delivery(environ.get("HTTP_X_GITHUB_EVENT", "-"), delivery_id,
                                      document, payload)
        if "enqueue" in _STEPS:
            _QUEUE.enqueue(delivery)
        else:
            _HELD.execute("SET", f"{_PREFIX}:floor:{delivery_id}", body, "EX", 600)
        if "log" in _STEPS:
            _log.info("webhook delivery=%s event=%s action=%s outcome=%s status=%d",
                      delivery_id, delivery.event if "parse" in _STEPS else "-", "-",
                      "queued", 202)
    except redis.RedisError:
        start_response("503 SERVICE UNAVAILABLE", [*_JSON, ("Content-Length", "13")])
        return [b'{"ok": false}']
    start_response("202 ACCEPTED", [*_JSON, ("Content-Length", "12")])
    return [b'{"ok": true}']
