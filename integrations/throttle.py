"""Cross-worker spacing of GitHub writes, shared through Redis.

GitHub's secondary rate limits allow about 80 content-creating requests a minute and 500
an hour per installation ("Rate limits for the REST API"), counted across every worker
that acts for it. :class:`WriteThrottle` keeps, per installation, one Redis hash with a
"theoretical arrival time" per limit (the generic cell rate algorithm, GCRA): one Lua
script reads them, reserves the earliest slot that keeps both limits, and returns how long
the caller must wait for it -- atomically, on Redis's clock, so any number of workers on
any number of machines share one budget. A reservation is never handed out twice; the
caller sleeps until its slot and then sends.

Bursts: up to ``burst`` writes go out back to back, then the steady pace applies. The pace
is chosen so that no window of one minute (one hour) holds more than ``per_minute``
(``per_hour``) writes: ``interval = window / (limit - burst)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from graph.ports import RateLimited
from the_loop.inbox.keys import Keys
from the_loop.inbox.scripts import Scripts

__all__ = ["WriteThrottle"]

log = logging.getLogger("the_loop.integrations.throttle")


@dataclass(frozen=True)
class _Limit:
    interval_ms: int
    tolerance_ms: int


class WriteThrottle:
    """Space writes per installation across all workers (see the module docstring).

    Args:
        connection: the Redis client (the worker's).
        prefix: key prefix; keys are ``P:github:writes:BUCKET``
            (:meth:`the_loop.inbox.keys.Keys.writes`).
        per_minute, per_hour: the limits to keep in any window of that length.
        burst: writes allowed back to back before the pace applies (< ``per_minute``).
        max_wait: longest sleep (seconds) for a slot; a later slot is not reserved and
            the write fails with a retriable RateLimited instead, so the job queue
            waits rather than a worker.
        sleep: the sleep function (tests pass a recorder).
    """

    def __init__(
        self,
        connection: redis.Redis,
        prefix: str = "the-loop",
        *,
        per_minute: int = 80,
        per_hour: int = 500,
        burst: int = 10,
        max_wait: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 < burst < per_minute <= per_hour:
            raise ValueError("need 0 < burst < per_minute <= per_hour")
        self.redis = connection
        self.prefix = prefix
        self._keys = Keys(prefix)
        self.per_minute, self.per_hour, self.burst = per_minute, per_hour, burst
        self.max_wait = max_wait
        self._sleep = sleep
        self._limits = (
            _limit(60_000, per_minute, burst),
            # The hour's burst is a minute's worth, short of the whole hour: with equal
            # caps, the minute's budget is the hour's and the rest is spread over it.
            _limit(3_600_000, per_hour, min(per_minute, per_hour - 1)),
        )
        self._script = Scripts(connection).reserve_write

    def __repr__(self) -> str:
        return (
            f"WriteThrottle(prefix={self.prefix!r}, per_minute={self.per_minute}, "
            f"per_hour={self.per_hour}, burst={self.burst})"
        )

    def key(self, bucket: str) -> str:
        return self._keys.writes(bucket)

    def reserve(self, bucket: str) -> float | None:
        """Reserve the next write slot of ``bucket``; return the seconds to wait for it,
        or ``None`` (nothing reserved) when that would be longer than ``max_wait``."""
        args: list[int] = [int(self.max_wait * 1000)]
        for limit in self._limits:
            args += [limit.interval_ms, limit.tolerance_ms]
        reserved, wait_ms = self._script(keys=[self.key(bucket)], args=args)
        return int(wait_ms) / 1000 if int(reserved) else None

    def acquire(self, bucket: str, *, op: str = "write") -> float:
        """Wait for the next write slot of ``bucket``; return the seconds slept.

        Redis being unreachable does not stop the write (the worker's own pacing still
        applies); it is logged.

        Raises:
            RateLimited: retriable; the next slot is more than ``max_wait`` away.
        """
        try:
            wait = self.reserve(bucket)
        except redis.RedisError as exc:
            log.warning("github write throttle unavailable (%s); writing unthrottled",
                        type(exc).__name__)
            return 0.0
        if wait is None:
            raise RateLimited(
                f"github {op}: the write budget of {bucket} is used up for now (at most "
                f"{self.per_minute}/min and {self.per_hour}/h, shared by every worker); "
                "the delivery is retried later",
                integration="github",
                op=op,
            )
        if wait > 0:
            self._sleep(wait)
        return wait


def _limit(window_ms: int, limit: int, burst: int) -> _Limit:
    interval = -(-window_ms // (limit - burst))  # ceil: never faster than the limit
    return _Limit(interval, (burst - 1) * interval)
