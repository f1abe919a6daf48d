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

The primary rate limit (5,000 requests an hour per installation, "Rate limits for the
REST API") is read from GitHub's answers: :meth:`WriteThrottle.observe` keeps the last
``x-ratelimit-remaining`` / ``x-ratelimit-reset`` / ``x-ratelimit-limit`` of a bucket in
Redis (``P:github:budget:BUCKET``, shared by every worker), and :meth:`WriteThrottle.pace`
slows requests down *before* the budget runs out: once fewer than ``low_water`` (a share
of the limit) remain, each request waits ``(reset - now) / remaining`` seconds, so what is
left is spread over the time to the reset instead of spent at once and then answered 403.
With nothing left it does not send at all (a retriable RateLimited until the reset).

Keys (:class:`ThrottleKeys`; ``P`` the prefix, ``BUCKET`` an installation id, ``token``
or ``cli``):

- ``P:github:writes:BUCKET`` hash: the write throttle's schedule of a bucket (one
  theoretical arrival time per limit: ``tat1``, ``tat2``)
- ``P:github:budget:BUCKET`` hash: GitHub's last ``x-ratelimit-remaining``/``-reset``/
  ``-limit`` for a bucket; expires a minute after the reset

Script (``integrations/scripts/``): ``reserve_write.lua``, the reservation; it gets its
key through ``KEYS``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import redis

from foundation.redis import scripts
from foundation.redis.namespaces import KeySpace, owns
from graph.ports import RateLimited

__all__ = ["ThrottleKeys", "WriteThrottle"]

log = logging.getLogger("the_loop.integrations.throttle")


@owns("github:writes", "github:budget")
@dataclass(frozen=True, slots=True)
class ThrottleKeys(KeySpace):
    """The write throttle's and rate budget's key names of one deployment (see the module
    docstring). No I/O.

    Args:
        prefix: prefix of the-loop's keys (``THE_LOOP_REDIS_PREFIX``).
    """

    def writes(self, bucket: str) -> str:
        """``P:github:writes:BUCKET``: the write throttle's schedule of one bucket."""
        return self.key("github:writes", bucket)

    def budget(self, bucket: str) -> str:
        """``P:github:budget:BUCKET``: GitHub's primary rate limit as last reported."""
        return self.key("github:budget", bucket)


@dataclass(frozen=True)
class _Limit:
    interval_ms: int
    tolerance_ms: int


class WriteThrottle:
    """Space writes per installation across all workers (see the module docstring).

    Args:
        connection: the Redis client (the worker's).
        prefix: key prefix; keys are ``P:github:writes:BUCKET``
            (:meth:`ThrottleKeys.writes`).
        per_minute, per_hour: the limits to keep in any window of that length.
        burst: writes allowed back to back before the pace applies (< ``per_minute``).
        max_wait: longest sleep (seconds) for a slot; a later slot is not reserved and
            the write fails with a retriable RateLimited instead, so the job queue
            waits rather than a worker.
        low_water: share of the primary rate limit (0-1) below which :meth:`pace`
            spreads the remaining requests over the time to the reset.
        sleep: the sleep function (tests pass a recorder).
        clock: the wall clock (seconds since the epoch) ``x-ratelimit-reset`` is read
            against.
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
        low_water: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < burst < per_minute <= per_hour:
            raise ValueError("need 0 < burst < per_minute <= per_hour")
        if not 0 <= low_water < 1:
            raise ValueError("need 0 <= low_water < 1")
        self.low_water = low_water
        self._clock = clock
        self.redis = connection
        self.prefix = prefix
        self._keys = ThrottleKeys(prefix)
        self.per_minute, self.per_hour, self.burst = per_minute, per_hour, burst
        self.max_wait = max_wait
        self._sleep = sleep
        self._limits = (
            _limit(60_000, per_minute, burst),
            # The hour's burst is a minute's worth, short of the whole hour: with equal
            # caps, the minute's budget is the hour's and the rest is spread over it.
            _limit(3_600_000, per_hour, min(per_minute, per_hour - 1)),
        )
        self._script = scripts.register(connection, "integrations.scripts", "reserve_write")

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


    # -- the primary rate limit, as GitHub reports it ----------------------------------

    def observe(self, bucket: str, headers: Mapping[str, str]) -> None:
        """Keep the primary rate limit GitHub reported in an answer (``headers``
        lower-cased: ``x-ratelimit-remaining``, ``-reset`` (epoch seconds), ``-limit``)
        for ``bucket``; an answer without them changes nothing. The hash expires a minute
        after the reset. Redis being unreachable is ignored (logged by :meth:`acquire`)."""
        remaining = _int(headers.get("x-ratelimit-remaining"))
        reset = _int(headers.get("x-ratelimit-reset"))
        if remaining is None or reset is None:
            return
        limit = _int(headers.get("x-ratelimit-limit"))
        key = self._keys.budget(bucket)
        try:
            pipe = self.redis.pipeline(transaction=True)
            pipe.hset(key, "remaining", remaining)
            pipe.hset(key, "reset", reset)
            if limit is not None:
                pipe.hset(key, "limit", limit)
            pipe.expireat(key, reset + 60)
            pipe.execute()
        except redis.RedisError:
            return

    def budget(self, bucket: str) -> tuple[int, int, int] | None:
        """``(remaining, reset, limit)`` last reported for ``bucket`` (``reset`` in epoch
        seconds), or ``None`` when unknown or past its reset."""
        try:
            raw = self.redis.hgetall(self._keys.budget(bucket))
        except redis.RedisError:
            return None
        fields = {(k.decode() if isinstance(k, bytes) else str(k)): _int(v)
                  for k, v in raw.items()}
        remaining, reset = fields.get("remaining"), fields.get("reset")
        if remaining is None or reset is None or reset <= self._clock():
            return None
        return remaining, reset, fields.get("limit") or PRIMARY_LIMIT

    def pace_wait(self, bucket: str) -> float:
        """Seconds the next request of ``bucket`` should wait to keep the primary limit:
        0 while more than ``low_water`` of the limit remains, else the time to the reset
        spread over the requests left (``inf`` when none is left)."""
        known = self.budget(bucket)
        if known is None:
            return 0.0
        remaining, reset, limit = known
        if remaining >= self.low_water * limit:
            return 0.0
        left = max(0.0, reset - self._clock())
        return float("inf") if remaining <= 0 else left / remaining

    def pace(self, bucket: str, *, op: str = "request") -> float:
        """Wait as :meth:`pace_wait` says before a request that counts against the
        primary limit; return the seconds slept.

        Raises:
            RateLimited: retriable, with ``reset_at``: the wait is longer than
                ``max_wait`` (nothing is left before the reset), so the job queue waits
                rather than a worker.
        """
        wait = self.pace_wait(bucket)
        if wait <= 0:
            return 0.0
        if wait > self.max_wait:
            known = self.budget(bucket)
            raise RateLimited(
                f"github {op}: the primary rate limit of {bucket} is nearly used up "
                f"({known[0] if known else 0} requests left until the reset); the delivery "
                "is retried later",
                integration="github", op=op,
                reset_at=float(known[1]) if known else None,
            )
        self._sleep(wait)
        return wait


#: GitHub's primary limit for an installation when an answer does not say.
PRIMARY_LIMIT = 5000


def _int(value: object) -> int | None:
    if isinstance(value, bytes):
        value = value.decode()
    try:
        return int(float(str(value)))
    except (TypeError, ValueError):
        return None


def _limit(window_ms: int, limit: int, burst: int) -> _Limit:
    interval = -(-window_ms // (limit - burst))  # ceil: never faster than the limit
    return _Limit(interval, (burst - 1) * interval)
