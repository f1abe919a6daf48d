"""Job functions RQ imports by path, for tests that run ``the-loop worker`` for real."""

from __future__ import annotations

import os
import time

import redis


def slow_job(marker_key: str, seconds: float) -> str:
    """Sleep ``seconds``, then set ``marker_key`` (on ``REDIS_URL``) to ``"done"``."""
    time.sleep(seconds)
    redis.Redis.from_url(os.environ["REDIS_URL"]).set(marker_key, "done", ex=600)
    return "done"
