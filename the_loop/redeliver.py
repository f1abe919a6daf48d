"""``the-loop redeliver``: ask GitHub to redeliver the App's webhook deliveries of a window
that never got through, by hand (the worker's reconciler, :mod:`workers.reconcile`, does
it on a schedule).

GitHub does not retry a failed delivery by itself. While the receiver was unreachable or
answered 503 (Redis down), every delivery GitHub tried failed; this finds them through the
App's delivery log and asks for each one again. The log, what counts as missed and the
endpoints are :mod:`integrations.hook_deliveries`'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from integrations.hook_deliveries import (
    AppHookDeliveries,
    Missed,
    RedeliverError,
    is_ok,
    missed,
    parse_time,
)

_DURATION = re.compile(r"(\d+)\s*([smhdw])", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``6h``, ``2d``, ``1w`` or combinations (``1h30m``).

    Raises:
        ValueError: anything else, or a zero duration.
    """
    cleaned = text.strip().replace(" ", "")
    parts = _DURATION.findall(cleaned)
    if not parts or "".join(f"{n}{u}" for n, u in parts).lower() != cleaned.lower():
        raise ValueError(f"{text!r} is not a duration such as 30m, 6h, 2d or 1h30m")
    seconds = sum(int(n) * _UNITS[u.lower()] for n, u in parts)
    if seconds <= 0:
        raise ValueError("the duration must be longer than zero")
    return timedelta(seconds=seconds)


@dataclass
class Report:
    """What one run found and did."""

    since: datetime
    checked: int
    missed: list[Missed]
    redelivered: list[str]
    errors: dict[str, str]


def redeliver_missed(log: AppHookDeliveries, window: timedelta, *, dry_run: bool = False,
                     now: datetime | None = None) -> Report:
    """Find the deliveries of the last ``window`` that never got through and (unless
    ``dry_run``) ask GitHub to redeliver each; a refusal is recorded, the rest go on."""
    cutoff = (now or datetime.now(UTC)) - window
    attempts = log.since(cutoff)
    found = missed(attempts)
    done: list[str] = []
    errors: dict[str, str] = {}
    if not dry_run:
        for m in found:
            try:
                log.redeliver(int(m.attempt["id"]))
                done.append(m.guid)
            except RedeliverError as exc:
                errors[m.guid] = str(exc)
    return Report(cutoff, len(attempts), found, done, errors)


def age(at: datetime, now: datetime | None = None) -> str:
    """``3m``, ``2h``... since ``at``."""
    seconds = max(0, int(((now or datetime.now(UTC)) - at).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


__all__ = ["AppHookDeliveries", "Missed", "RedeliverError", "Report", "age", "is_ok", "missed",
           "parse_duration", "parse_time", "redeliver_missed"]
