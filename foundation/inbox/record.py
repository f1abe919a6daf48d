"""The delivery as it crosses Redis: the parsed :class:`Delivery` (receiver side) and the
stored :class:`DeliveryRecord` (the hash ``P:delivery:ID``), with ONE encode
(:meth:`DeliveryRecord.to_redis`) and ONE decode (:meth:`DeliveryRecord.from_redis`).

Pure: no I/O. Bodies are parsed with :func:`foundation.events.loads`.

The hash's fields (:data:`STORED`; absent values are stored as ""):
``delivery_id``, ``event``, ``action``, ``received_at`` (Unix seconds, ``repr`` of a
float), ``installation_id``, ``repository`` (``OWNER/NAME``), ``work_item``
(``github:OWNER/REPO#N``) and ``body`` (the JSON document); the drain adds ``attempts``
(counted before each attempt), ``started`` (set on the first start) and ``last_error``
(the-loop's own reason of the last failed attempt, at most 500 characters). A record the
worker queued itself (a fan-out, a forward, a re-drive) also has ``derived`` ("1"); the
receiver never writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from foundation.events import loads

__all__ = ["FIELDS", "STORED", "Delivery", "DeliveryRecord", "text"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One authenticated, parsed webhook delivery (built by :mod:`webhook.events`).

    Attributes:
        delivery_id: the ``X-GitHub-Delivery`` value (<= 100 chars of ``[A-Za-z0-9-]``).
        event: the ``X-GitHub-Event`` value, e.g. ``"pull_request"`` (plain str).
        action: the payload's ``action`` field, or None (push, status, ping... have none).
        body: the JSON document as bytes; for form-encoded deliveries, the decoded value
            of the ``payload`` field (so workers always get JSON).
        payload: ``body`` parsed, a JSON object.
        installation_id: ``payload["installation"]["id"]`` when present (GitHub Apps).
        repository: ``payload["repository"]["full_name"]`` ("OWNER/NAME") when present.
        work_item: see :func:`foundation.events.work_item_ref`, e.g.
            ``"github:OWNER/REPO#12"``, or None.
    """

    delivery_id: str
    event: str
    action: str | None
    body: bytes = field(repr=False)
    payload: dict[str, Any] = field(repr=False)
    installation_id: int | None
    repository: str | None
    work_item: str | None


#: The fields the receiver writes, in this order.
STORED = ("delivery_id", "event", "action", "received_at", "installation_id", "repository",
          "work_item", "body")
#: The fields a drain step reads before it knows whether it needs the body.
FIELDS = ("delivery_id", "event", "action", "received_at", "installation_id", "repository",
          "work_item", "attempts", "started", "last_error", "derived")


def text(value: Any) -> str:
    """A value read from Redis as text: bytes decoded (UTF-8), ``None`` as ``""``."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """One stored delivery (the hash ``P:delivery:ID``), typed.

    Attributes:
        delivery_id, event, action, installation_id, repository, work_item: as in
            :class:`Delivery` (``None`` where absent).
        received_at: Unix time (seconds) the receiver accepted it; ``None`` if unknown.
        body: the JSON document, or ``None`` when it was not read from Redis (a drain
            step leaves it out for deliveries the router ignores).
        attempts: attempts counted so far (0 before the first).
        last_error: the reason the last attempt failed, or ``None``.
        derived: queued by the worker itself from a delivery it had already checked
            (a fan-out, a forward, a re-drive); the receiver never sets it.
    """

    delivery_id: str
    event: str
    action: str | None = None
    received_at: float | None = None
    installation_id: int | None = None
    repository: str | None = None
    work_item: str | None = None
    body: bytes | None = field(default=None, repr=False)
    attempts: int = 0
    last_error: str | None = None
    derived: bool = False

    @classmethod
    def of(cls, delivery: Delivery, received_at: float) -> DeliveryRecord:
        """The record the receiver stores for ``delivery``, accepted at ``received_at``."""
        return cls(delivery.delivery_id, delivery.event, delivery.action, received_at,
                   delivery.installation_id, delivery.repository, delivery.work_item,
                   delivery.body)

    def to_redis(self) -> list[bytes | str]:
        """The stored fields (:data:`STORED`) as a flat ``[field, value, ...]`` list for
        ``HSET``; absent values are ``""`` (``derived`` is written only when set)."""
        fields: list[bytes | str] = [
            "delivery_id", self.delivery_id,
            "event", self.event,
            "action", self.action or "",
            "received_at", "" if self.received_at is None else repr(self.received_at),
            "installation_id", "" if self.installation_id is None else str(self.installation_id),
            "repository", self.repository or "",
            "work_item", self.work_item or "",
            "body", b"" if self.body is None else self.body,
        ]
        if self.derived:
            fields += ["derived", "1"]
        return fields

    @classmethod
    def from_redis(cls, fields: Mapping[Any, Any],
                   delivery_id: str | None = None) -> DeliveryRecord | None:
        """Decode a hash read from Redis (``HGETALL``, or the fields a drain step took).

        Args:
            fields: field -> value, as bytes or str.
            delivery_id: the id the hash was found under (used when the hash lacks it).

        Returns:
            The record, or ``None`` when it has no ``event`` (it expired: at most
            bookkeeping fields are left).
        """
        values: dict[str, Any] = {}
        for key, value in fields.items():  # one pass: the drain decodes every delivery
            if key.__class__ is bytes:
                key = key.decode()
            if value.__class__ is bytes and key != "body":
                value = value.decode()
            values[key] = value
        get = values.get
        event = get("event")
        if not event:
            return None
        received, installation, body = get("received_at"), get("installation_id"), get("body")
        return cls(
            delivery_id=get("delivery_id") or delivery_id or "",
            event=str(event),
            action=get("action") or None,
            received_at=float(received) if received else None,
            installation_id=int(installation) if installation else None,
            repository=get("repository") or None,
            work_item=get("work_item") or None,
            body=body.encode() if isinstance(body, str) else body,
            attempts=int(get("attempts") or 0),
            last_error=get("last_error"),
            derived=bool(get("derived")),
        )

    def payload(self) -> Any:
        """The body parsed (:func:`foundation.events.loads`).

        Raises:
            ValueError: the body was not read (``None``) or is not JSON.
        """
        if self.body is None:
            raise ValueError(f"delivery {self.delivery_id}: body not read")
        return loads(self.body)
