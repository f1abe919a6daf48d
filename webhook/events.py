"""Parse GitHub webhook deliveries into :class:`foundation.inbox.record.Delivery` values
(pure: no Flask, no I/O).

Protocol facts come from GitHub's docs:

- "Webhook events and payloads": the ``X-GitHub-Event`` header names the event, the
  ``X-GitHub-Delivery`` header is a GUID unique to the delivery (kept on redelivery),
  and payloads are capped at 25 MB.
- "Creating webhooks": the content type is ``application/json`` (the body is the JSON
  document) or ``application/x-www-form-urlencoded`` (the JSON document is the value of
  the ``payload`` form field).

The event name stays a plain ``str``: GitHub keeps adding events, and an event we do not
know must still be accepted and queued.

Every error here is a :class:`DeliveryError` whose ``reason`` is fixed text of ours; it
never quotes header values, payload text or secrets, so it is safe to send back to the
caller and to log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol
from urllib.parse import parse_qs

from foundation.events import INTERNAL_EVENTS, envelope, loads, work_item_ref
from foundation.inbox.record import Delivery
from graph.errors import LoopError

__all__ = [
    "BadHeadersError",
    "BadPayloadError",
    "DeliveryError",
    "HeaderSource",
    "PayloadTooLargeError",
    "QueueUnavailableError",
    "SignatureError",
    "UnsupportedContentTypeError",
    "build_delivery",
    "decode_body",
    "parse_delivery",
    "read_delivery_headers",
]

EVENT_HEADER = "X-GitHub-Event"
DELIVERY_HEADER = "X-GitHub-Delivery"
SIGNATURE_HEADER = "X-Hub-Signature-256"
CONTENT_TYPE_HEADER = "Content-Type"

# GitHub sends a GUID; allow any short dash/alnum token so replays and tests can use
# their own ids, while keeping the id safe to use in Redis keys, RQ job ids and logs.
_DELIVERY_ID = re.compile(r"[A-Za-z0-9-]{1,100}")
# Event names are snake_case words ("pull_request_review_comment"); stay permissive
# about new ones but keep them safe to log.
_EVENT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


# --- errors -------------------------------------------------------------------------


class DeliveryError(LoopError):
    """A delivery we refuse; ``status`` is the HTTP status code to answer with.

    ``reason`` is always one of our own fixed messages: it never echoes untrusted input
    (header values, payload text) or a secret, so the receiver can return and log it.
    """

    status: int = 400
    default_reason: str = "bad delivery"

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason or self.default_reason
        super().__init__(self.reason)


class BadHeadersError(DeliveryError):
    """A required GitHub header is missing or malformed (HTTP 400)."""

    status = 400
    default_reason = "missing or malformed GitHub delivery headers"


class BadPayloadError(DeliveryError):
    """The body is not a JSON object in a supported encoding (HTTP 400)."""

    status = 400
    default_reason = "payload is not a JSON object"


class UnsupportedContentTypeError(BadPayloadError):
    """The Content-Type is neither JSON nor form-encoded (HTTP 415)."""

    status = 415
    default_reason = (
        "Content-Type must be application/json or application/x-www-form-urlencoded"
    )


class PayloadTooLargeError(DeliveryError):
    """The body exceeds the configured limit (HTTP 413)."""

    status = 413
    default_reason = "payload too large"


class SignatureError(DeliveryError):
    """The ``X-Hub-Signature-256`` header is missing, malformed or matches no secret (401).

    Raised by :func:`webhook.signature.verify_signature`.
    """

    status = 401
    default_reason = "signature does not match"


class QueueUnavailableError(DeliveryError):
    """The queue (Redis) cannot be reached; the sender should retry later (HTTP 503)."""

    status = 503
    default_reason = "queue unavailable, retry later"


# --- parsing --------------------------------------------------------------------------


class HeaderSource(Protocol):
    """What header lookups need: a ``Mapping[str, str]`` or Werkzeug's ``Headers``."""

    def get(self, key: str, /) -> str | None: ...

    def items(self) -> Iterable[tuple[str, str]]: ...


def _header(headers: HeaderSource, name: str) -> str | None:
    """Case-insensitive header lookup that works for Werkzeug headers and plain dicts."""
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
        if value is None:
            wanted = name.lower()
            for key, candidate in headers.items():
                if key.lower() == wanted:
                    return candidate
    return value


def read_delivery_headers(headers: HeaderSource) -> tuple[str, str]:
    """Return ``(event, delivery_id)`` from the GitHub delivery headers.

    Args:
        headers: request headers (a Mapping or Werkzeug Headers); case-insensitive.

    Returns:
        ``(X-GitHub-Event, X-GitHub-Delivery)``.

    Raises:
        BadHeadersError: either header is missing or empty, the delivery id is not
            1-100 characters of ``[A-Za-z0-9-]``, or the event name is not a short
            ``[A-Za-z0-9_.-]`` token.
    """
    event = _header(headers, EVENT_HEADER)
    delivery_id = _header(headers, DELIVERY_HEADER)
    if not event:
        raise BadHeadersError("missing X-GitHub-Event header")
    if not delivery_id:
        raise BadHeadersError("missing X-GitHub-Delivery header")
    if not _EVENT_NAME.fullmatch(event):
        raise BadHeadersError("malformed X-GitHub-Event header")
    if event.lower() in INTERNAL_EVENTS:
        raise BadHeadersError("X-GitHub-Event names an event only the-loop itself sends")
    if not _DELIVERY_ID.fullmatch(delivery_id):
        raise BadHeadersError("malformed X-GitHub-Delivery header")
    return event, delivery_id


def _load_object(document: bytes) -> dict[str, Any]:
    try:
        payload = loads(document)
    except (ValueError, RecursionError):
        # ValueError covers JSONDecodeError and UnicodeDecodeError; RecursionError is a
        # deeply nested document. Either way: our message, not the parser's.
        raise BadPayloadError("payload is not valid JSON") from None
    if not isinstance(payload, dict):
        raise BadPayloadError("payload is not a JSON object")
    return payload


def decode_body(content_type: str | None, body: bytes) -> tuple[bytes, dict[str, Any]]:
    """Decode a delivery body according to its Content-Type ("Creating webhooks" docs).

    Args:
        content_type: the Content-Type header value (parameters such as ``charset``
            are ignored), or None.
        body: the raw request body.

    Returns:
        ``(document, payload)``: the JSON document bytes (for form-encoded bodies the
        decoded ``payload`` field) and that document parsed into a dict.

    Raises:
        UnsupportedContentTypeError: (415) any other or a missing content type.
        BadPayloadError: (400) bad form encoding, no single ``payload`` field, invalid
            JSON, or JSON that is not an object.
    """
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if media_type == "application/json":
        return body, _load_object(body)
    if media_type == "application/x-www-form-urlencoded":
        try:
            fields = parse_qs(
                body.decode("ascii"),
                keep_blank_values=True,
                strict_parsing=True,
                encoding="utf-8",
                errors="strict",
                max_num_fields=16,
            )
        except (ValueError, UnicodeError):
            raise BadPayloadError("malformed form-encoded body") from None
        values = fields.get("payload")
        if not values or len(values) != 1:
            raise BadPayloadError("form-encoded body needs exactly one payload field")
        document = values[0].encode("utf-8")
        return document, _load_object(document)
    raise UnsupportedContentTypeError()


def build_delivery(
    event: str, delivery_id: str, document: bytes, payload: dict[str, Any]
) -> Delivery:
    """Assemble a :class:`Delivery` from already validated parts (no validation here).

    Args:
        event, delivery_id: as returned by :func:`read_delivery_headers`.
        document, payload: as returned by :func:`decode_body`.

    Returns:
        The Delivery, with action, installation id, repository and work item read off
        the payload (:func:`foundation.events.envelope`, :func:`foundation.events.work_item_ref`:
        the same rules as :meth:`foundation.events.GitHubEvent.parse`, without reading
        the rest, which only the worker needs).
    """
    action, installation_id, repository = envelope(payload)
    ref = work_item_ref(event, payload)
    return Delivery(
        delivery_id=delivery_id,
        event=event,
        action=action,
        body=document,
        payload=payload,
        installation_id=installation_id,
        repository=repository,
        work_item=ref.format() if ref else None,
    )


def parse_delivery(headers: HeaderSource | Mapping[str, str], body: bytes) -> Delivery:
    """Parse one webhook delivery (headers + raw body). Does NOT check the signature.

    Args:
        headers: request headers (case-insensitive lookup); needs ``X-GitHub-Event``,
            ``X-GitHub-Delivery`` and ``Content-Type``.
        body: the raw request body, exactly as received.

    Returns:
        The parsed :class:`Delivery`.

    Raises:
        BadHeadersError: (400) see :func:`read_delivery_headers`.
        UnsupportedContentTypeError: (415) see :func:`decode_body`.
        BadPayloadError: (400) see :func:`decode_body`.
    """
    event, delivery_id = read_delivery_headers(headers)
    document, payload = decode_body(_header(headers, CONTENT_TYPE_HEADER), body)
    return build_delivery(event, delivery_id, document, payload)
