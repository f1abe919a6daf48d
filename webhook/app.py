"""Flask receiver: authenticate GitHub webhook deliveries and queue them.

The route only verifies, parses, enqueues and answers; the work happens in RQ workers.
Checks run in this order (as Prow's hook server does), each failing fast:

1. ``X-GitHub-Event`` and ``X-GitHub-Delivery`` present and sane      -> 400
2. ``X-Hub-Signature-256`` present                                     -> 401
3. body no larger than ``max_body_bytes`` (Content-Length, then read)  -> 413;
   a body whose chunked framing is malformed or cut short               -> 400
4. HMAC-SHA256 of the raw body matches a secret                        -> 401
5. content type supported, body a JSON object                         -> 415 / 400

``ping`` (sent when the webhook is created, "Webhook events and payloads" docs) answers
200 and is not queued. Every other event is deduplicated by delivery id and queued:
202 when new, 200 when a duplicate. Redis trouble answers 503 with ``Retry-After``; so
does a delivery that fewer than ``THE_LOOP_RECEIVER_REPLICAS`` Redis replicas
acknowledged in time (it is taken back first: :mod:`foundation.inbox.enqueue`), so that
GitHub's redelivery is accepted as new.
Every error is ``{"ok": false, "error": <our own text>}``; bad input never gives a 500.

``POST /webhook`` is served by a plain WSGI callable in front of Flask
(:class:`WebhookDispatcher`, installed as ``app.wsgi_app``): it reads the environ and the
input stream directly and answers from byte templates, without building Flask's request
and response objects (about a third of a request's CPU under gunicorn). Every other
request, ``/webhook`` with another method included (405), goes on to Flask.

Each answered delivery is counted (:mod:`webhook.metrics`, served at ``GET /metrics``), and
its delivery id and work item are bound to the request's log lines
(:mod:`foundation.observability.logs`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis as redis_lib
from flask import Flask, Response, request
from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.exceptions import ClientDisconnected, HTTPException, RequestEntityTooLarge
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wsgi import get_content_length, get_input_stream

from foundation.inbox.enqueue import DeliveryQueue, NotReplicatedError
from foundation.observability.logs import bind as bind_log_context
from foundation.observability.logs import clear as clear_log_context
from foundation.redis import RECEIVER, connect
from foundation.settings import ReceiverSettings, RedisSentinel
from webhook.events import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    BadPayloadError,
    DeliveryError,
    PayloadTooLargeError,
    QueueUnavailableError,
    SignatureError,
    build_delivery,
    decode_body,
    read_delivery_headers,
)
from webhook.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from webhook.metrics import count_delivery, count_signature_failure, metrics_renderer
from webhook.signature import verify_signature

__all__ = ["EXTENSION_KEY", "ReceiverState", "WebhookDispatcher", "create_app",
           "make_redis_client"]

EXTENSION_KEY = "the_loop"
RETRY_AFTER_SECONDS = "5"

log = logging.getLogger("the_loop.webhook")

_JSON = "application/json"
_LOG_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_OK_BODY = b'{"ok": true}'
_PING_BODY = b'{"ok": true, "event": "ping"}'
_QUEUED_BODY = b'{"ok": true, "delivery": "%s", "queued": true}'
_DUPLICATE_BODY = b'{"ok": true, "delivery": "%s", "duplicate": true}'
#: What reading a malformed request body raises from the WSGI server's input stream
#: (werkzeug's ClientDisconnected: a body shorter than its Content-Length).
_BODY_ERRORS = (ParseException, NoMoreData, ClientDisconnected)
_WEBHOOK_PATH = "/webhook"

#: A WSGI answer: status code, body, extra headers.
Answer = tuple[int, bytes, list[tuple[str, str]]]
#: ``start_response``'s status line for each code (werkzeug's phrases, as Flask sends).
_STATUS_LINES: dict[int, str] = {}


def _status_line(code: int) -> str:
    line = _STATUS_LINES.get(code)
    if line is None:
        line = _STATUS_LINES[code] = f"{code} {HTTP_STATUS_CODES.get(code, 'UNKNOWN')}"
    return line


class WebhookDispatcher:
    """The receiver's WSGI callable: ``POST /webhook`` to ``receive``, everything else
    to ``fallback`` (Flask's own ``wsgi_app``).

    Args:
        receive: ``environ -> (status code, body, extra headers)``; the body is JSON.
        fallback: the WSGI app serving every other request.
    """

    def __init__(self, receive: Callable[[dict[str, Any]], Answer],
                 fallback: Callable[..., Iterable[bytes]]) -> None:
        self.receive = receive
        self.fallback = fallback

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != _WEBHOOK_PATH or environ.get("REQUEST_METHOD") != "POST":
            return self.fallback(environ, start_response)
        status, body, extra = self.receive(environ)
        start_response(_status_line(status), [
            ("Content-Type", _JSON), ("Content-Length", str(len(body))), *extra])
        return [body]


@dataclass(frozen=True)
class ReceiverState:
    """What the receiver keeps in ``app.extensions["the_loop"]``.

    Attributes:
        settings: the receiver settings.
        redis: the Redis client used for the queue and ``/readyz``.
        queue: the deduplicating delivery queue.
    """

    settings: ReceiverSettings
    redis: redis_lib.Redis
    queue: DeliveryQueue


def make_redis_client(url: str, sentinel: RedisSentinel | None = None) -> redis_lib.Redis:
    """A Redis client for the receiver (:func:`foundation.redis.client.connect` with its
    :data:`~foundation.redis.client.RECEIVER` profile: 1 s connect and 2 s socket timeouts,
    one retry, keepalive and health checks), so an unreachable Redis or a dead connection
    turns into a fast 503 rather than a hung request.

    Args:
        url: a ``redis://``, ``rediss://`` or ``unix://`` URL.
        sentinel: the Sentinels that find the primary (``THE_LOOP_REDIS_SENTINELS``), or
            ``None``.

    Returns:
        The client.
    """
    return connect(url, RECEIVER, sentinel=sentinel)


def _safe(value: object) -> str:
    """A header/payload value reduced to something safe to put in a log line."""
    if value is None:
        return "-"
    text = str(value)
    return text if _LOG_TOKEN.fullmatch(text) else "<invalid>"


def create_app(
    settings: ReceiverSettings,
    *,
    redis: redis_lib.Redis | None = None,
    multiproc_dir: str | None = None,
) -> Flask:
    """Build the receiver's Flask app (:func:`the_loop.wiring.build_receiver` builds it
    from the settings read at start-up).

    Args:
        settings: receiver settings (:attr:`foundation.settings.Settings.receiver`).
        redis: Redis client to use; when None one is made from ``settings.redis_url``
            with :func:`make_redis_client`.
        multiproc_dir: prometheus-client's multiprocess directory
            (``PROMETHEUS_MULTIPROC_DIR``,
            :attr:`foundation.settings.MetricsSettings.multiproc_dir`) or ``None``: this
            process's counters only.

    Returns:
        The app, with a :class:`ReceiverState` in ``app.extensions["the_loop"]``.
    """
    if redis is None:
        redis = make_redis_client(settings.redis_url, settings.sentinel)
    queue = DeliveryQueue(redis, queue_name=settings.queue_name, prefix=settings.redis_prefix,
                          replicas=settings.replicas,
                          replicas_timeout_ms=settings.replicas_timeout_ms)

    app = Flask(__name__)
    # One byte over the limit: on a chunked body Werkzeug stops reading silently at this
    # length, so reading limit + 1 bytes is how an oversize chunked body is told apart.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    app.extensions[EXTENSION_KEY] = ReceiverState(settings=settings, redis=redis, queue=queue)

    # Bound once: the hot path does no setup work.
    secrets = settings.secrets
    max_body = settings.max_body_bytes
    enqueue = queue.enqueue
    response_class = app.response_class
    redis_errors = redis_lib.RedisError
    render_metrics = metrics_renderer(redis, settings.queue_name, settings.redis_prefix,
                                      multiproc_dir)

    def answer(payload: dict, status: int, headers: dict[str, str] | None = None) -> Response:
        return response_class(json.dumps(payload), status, headers, mimetype=_JSON)

    def reject(
        error: DeliveryError, environ: dict[str, Any], delivery_id: object, event: object,
        action: object = None, outcome: str = "rejected",
    ) -> Answer:
        log.warning(
            "webhook delivery=%s event=%s action=%s outcome=%s status=%d reason=%r",
            _safe(delivery_id), _safe(event), _safe(action), outcome, error.status,
            error.reason,
        )
        count_delivery(event if isinstance(event, str) else None,
                       action if isinstance(action, str) else None, error.status)
        if isinstance(error, SignatureError):
            count_signature_failure(bool(environ.get("HTTP_X_HUB_SIGNATURE_256")))
        headers = [("Retry-After", RETRY_AFTER_SECONDS)] if error.status == 503 else []
        body = json.dumps({"ok": False, "error": error.reason}).encode()
        return error.status, body, headers

    def read_body(environ: dict[str, Any]) -> bytes:
        length = get_content_length(environ)
        if length is not None and length > max_body:
            raise PayloadTooLargeError()
        try:
            # As Flask's request.get_data: the limit + 1 bytes at most, nothing from a
            # body of unknown length unless the server frames it (wsgi.input_terminated).
            body: bytes = get_input_stream(environ, max_content_length=max_body + 1).read()
        except RequestEntityTooLarge:
            raise PayloadTooLargeError() from None
        except _BODY_ERRORS:
            # The server's input stream refused the body framing (gunicorn: a bad or
            # missing chunk size or terminator, a body cut short): the client's error.
            raise BadPayloadError("malformed request body") from None
        if len(body) > max_body:  # chunked body (no Content-Length) over the limit
            raise PayloadTooLargeError()
        return body

    def receive(environ: dict[str, Any]) -> Answer:
        """``POST /webhook``, on the WSGI environ (see the module docstring)."""
        try:
            return handle(environ)
        finally:
            clear_log_context()  # the next request, or gunicorn's own lines, start clean

    def handle(environ: dict[str, Any]) -> Answer:
        event = environ.get("HTTP_X_GITHUB_EVENT")
        delivery_id = environ.get("HTTP_X_GITHUB_DELIVERY")
        try:
            # An absent header as "": read_delivery_headers reports both as missing.
            event, delivery_id = read_delivery_headers(
                {EVENT_HEADER: event or "", DELIVERY_HEADER: delivery_id or ""})
            bind_log_context(delivery_id)
            signature = environ.get("HTTP_X_HUB_SIGNATURE_256")
            if not signature:
                raise SignatureError("missing X-Hub-Signature-256 header")
            body = read_body(environ)
            verify_signature(body, signature, secrets)
            document, payload = decode_body(environ.get("CONTENT_TYPE"), body)
            delivery = build_delivery(event, delivery_id, document, payload)
            bind_log_context(delivery_id, delivery.work_item)
        except DeliveryError as error:
            return reject(error, environ, delivery_id, event)

        if event == "ping":
            log.info(
                "webhook delivery=%s event=ping action=- outcome=ping status=200", delivery_id
            )
            count_delivery(event, delivery.action, 200)
            return 200, _PING_BODY, []

        try:
            queued = enqueue(delivery)
        except NotReplicatedError as exc:
            unreplicated = QueueUnavailableError(
                f"not yet on {exc.required} Redis replica(s) ({exc.acknowledged} "
                f"acknowledged), retry later")
            return reject(unreplicated, environ, delivery_id, event, delivery.action,
                          outcome="unreplicated")
        except redis_errors as exc:
            # The exception text may quote the server; only its type goes in the reason.
            unavailable = QueueUnavailableError(
                f"queue unavailable ({type(exc).__name__}), retry later"
            )
            return reject(unavailable, environ, delivery_id, event, delivery.action,
                          outcome="unavailable")

        outcome, status = ("queued", 202) if queued else ("duplicate", 200)
        log.info(
            "webhook delivery=%s event=%s action=%s outcome=%s status=%d",
            delivery_id, event, _safe(delivery.action), outcome, status,
        )
        count_delivery(event, delivery.action, status)
        # The delivery id matched [A-Za-z0-9-]{1,100}: safe inside a JSON string as is.
        template = _QUEUED_BODY if queued else _DUPLICATE_BODY
        return status, template % delivery_id.encode(), []

    @app.post(_WEBHOOK_PATH)
    def webhook() -> Response:
        # Reached only when the dispatcher is bypassed (app.wsgi_app replaced again);
        # the route also makes Flask answer 405 to other methods on /webhook.
        status, body, headers = receive(request.environ)
        return response_class(body, status, headers, mimetype=_JSON)

    @app.get("/metrics")
    def metrics() -> Response:
        """Prometheus text format: the receiver's counters and the queue gauges."""
        return response_class(render_metrics(), 200, content_type=METRICS_CONTENT_TYPE)

    @app.get("/healthz")
    def healthz() -> Response:
        """Liveness: the process serves requests. Does not touch Redis."""
        return response_class(_OK_BODY, 200, mimetype=_JSON)

    @app.get("/readyz")
    def readyz() -> Response:
        """Readiness: Redis answers PING (503 otherwise)."""
        try:
            redis.ping()
        except redis_errors:
            return answer(
                {"ok": False, "error": "redis unavailable"}, 503,
                {"Retry-After": RETRY_AFTER_SECONDS},
            )
        return response_class(_OK_BODY, 200, mimetype=_JSON)

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        # Flask/Werkzeug's own errors (404, 405, 413 ...) in our JSON shape; the status
        # phrase is fixed text, never request data.
        status = error.code or 500
        headers = {}
        allow = getattr(error, "valid_methods", None)  # set on 405
        if allow:
            headers["Allow"] = ", ".join(allow)
        return answer({"ok": False, "error": (error.name or "error").lower()}, status, headers)

    @app.errorhandler(Exception)
    def unexpected_error(error: Exception) -> Response:
        log.exception("webhook unexpected error")
        return answer({"ok": False, "error": "internal error"}, 500)

    app.wsgi_app = WebhookDispatcher(receive, app.wsgi_app)  # type: ignore[method-assign]
    return app
