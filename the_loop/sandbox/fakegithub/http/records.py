"""What the fake GitHub's HTTP front records of each request (:class:`RecordedRequest`)
and the faults it injects (:class:`Fault`, queued by
:meth:`~the_loop.sandbox.fakegithub.http.fake.HttpFakeState.fail_next`; :class:`Chaos`,
set by :meth:`~the_loop.sandbox.fakegithub.http.fake.HttpFakeState.chaos`), and the App's
webhook delivery log (:class:`HookAttempt`)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

__all__ = ["Chaos", "Fault", "HookAttempt", "RecordedRequest"]


class RecordedRequest(NamedTuple):
    """One request as the fake saw it. ``auth`` is bearer, token, basic, none or other;
    ``conditional``: it carried ``If-None-Match`` or ``If-Modified-Since``; ``status``:
    the status answered (0 until the answer is made)."""

    method: str
    path: str
    auth: str
    query: str = ""
    conditional: bool = False
    status: int = 0


@dataclass
class Fault:
    """One queued fault: the next ``times`` requests whose path matches ``pattern`` (and
    whose method is ``method``, unless ``None``) are answered ``status`` with ``headers``
    and JSON ``body``."""

    pattern: re.Pattern[str]
    status: int
    headers: dict[str, str]
    body: Any
    method: str | None
    times: int
    after: bool = False  # handle the request, then answer with the fault (a lost answer)


@dataclass
class Chaos:
    """Random faults: a share ``rate`` of the requests whose path matches ``pattern``
    fail with one of ``statuses`` (``(status, headers)``), a share ``after_rate`` of
    those after they were handled; ``rng`` draws."""

    rate: float
    after_rate: float
    statuses: tuple[tuple[int, dict[str, str]], ...]
    rng: random.Random
    pattern: re.Pattern[str]



@dataclass(frozen=True)
class HookAttempt:
    """One attempt of a webhook delivery in the App's delivery log, as ``GET
    /app/hook/deliveries`` lists it ("List deliveries for an app webhook"): ``id`` (the
    attempt's, increasing), ``guid`` (``X-GitHub-Delivery``, kept by a redelivery),
    ``status_code`` (the receiver's answer, 0: not reached). ``body`` is the payload sent
    (kept for a redelivery, never listed)."""

    id: int
    guid: str
    event: str
    action: str | None
    status_code: int
    delivered_at: datetime
    redelivery: bool = False
    duration: float = 0.0
    installation_id: int | None = None
    repository_id: int | None = None
    body: bytes = b""

    @property
    def status(self) -> str:
        """GitHub's ``status`` text: ``OK`` for a 2xx/3xx answer."""
        if 200 <= self.status_code < 400:
            return "OK"
        if self.status_code == 0:
            return "failed to connect to host"
        return f"Invalid HTTP Response: {self.status_code}"

    def to_json(self) -> dict[str, Any]:
        """The item of ``GET /app/hook/deliveries``."""
        return {"id": self.id, "guid": self.guid,
                "delivered_at": self.delivered_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "redelivery": self.redelivery, "duration": self.duration,
                "status": self.status, "status_code": self.status_code,
                "event": self.event, "action": self.action,
                "installation_id": self.installation_id,
                "repository_id": self.repository_id, "throttled_at": None}
