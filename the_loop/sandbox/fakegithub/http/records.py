"""What the fake GitHub's HTTP front records of each request (:class:`RecordedRequest`)
and the faults it injects (:class:`Fault`, queued by
:meth:`~the_loop.sandbox.fakegithub.http.fake.HttpFakeState.fail_next`; :class:`Chaos`,
set by :meth:`~the_loop.sandbox.fakegithub.http.fake.HttpFakeState.chaos`)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["Chaos", "Fault", "RecordedRequest"]


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

