"""CI results recorded from events, per commit, in Redis (a graph.context.CIResults)."""

from __future__ import annotations

from collections.abc import Mapping

import redis

from foundation.events import CIResult
from foundation.inbox.keys import Keys
from foundation.inbox.scripts import Scripts

CI_TTL_SECONDS = 30 * 24 * 3600


class RedisCI:
    """``P:ci:OWNER/REPO:SHA``: a hash of check name -> conclusion, kept 30 days; and
    ``P:sha:OWNER/REPO:SHA``: the work items whose pull request head it is
    (:mod:`foundation.inbox.keys`).

    Args:
        connection: Redis client.
        prefix: the-loop's key prefix.
        repository: ``OWNER/NAME`` the commits belong to.
    """

    def __init__(self, connection: redis.Redis, prefix: str, repository: str) -> None:
        self.redis = connection
        self.prefix = prefix
        self.repository = repository
        self.keys = Keys(prefix)
        self._record = Scripts(connection).ci_record

    def key(self, sha: str) -> str:
        """Redis key of ``sha``'s results."""
        return self.keys.ci(self.repository, sha)

    def record(self, result: CIResult) -> bool:
        """Store ``result`` unless a newer result of the same name is stored (newer:
        a higher ``run_attempt``, then a later ``completed_at``/``updated_at``; GitHub may
        deliver a first attempt's result after its rerun's). Returns whether it was
        stored."""
        stored = self._record(keys=(self.key(result.sha),
                                    self.keys.ci_order(self.repository, result.sha)),
                              args=(result.name, result.conclusion, result.order,
                                    CI_TTL_SECONDS))
        return bool(stored)

    def remember(self, sha: str, ref: str) -> None:
        """Note that work item ``ref``'s pull request head is ``sha`` (so a commit status,
        which names no pull request, can find it)."""
        key = self.keys.sha(self.repository, sha)
        pipe = self.redis.pipeline()
        pipe.sadd(key, ref)
        pipe.expire(key, CI_TTL_SECONDS)
        pipe.execute()

    def work_items(self, sha: str) -> list[str]:
        """Work items whose pull request head was ``sha``."""
        key = self.keys.sha(self.repository, sha)
        return sorted(m.decode() if isinstance(m, bytes) else m
                      for m in self.redis.smembers(key))

    def conclusions(self, sha: str) -> Mapping[str, str]:
        return {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in self.redis.hgetall(self.key(sha)).items()
        }
