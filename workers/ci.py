"""CI results recorded from events, per commit, in Redis (a graph.context.CIResults),
and the other facts the worker keeps about a repository's commits.

Keys (:class:`CommitKeys`; ``P`` the prefix, ``OWNER/REPO`` a repository's key, ``SHA`` a
commit):

- ``P:head:OWNER/REPO``         the default branch's head commit (from ``push``;
  :class:`workers.repo_context.RepoContext` caches the repository's configuration by it)
- ``P:ci:OWNER/REPO:SHA``       hash: check name -> conclusion
- ``P:ci-order:OWNER/REPO:SHA`` hash: check name -> the order of the stored result
  (``run_attempt`` and time; an older result never replaces a newer one)
- ``P:ci-run:OWNER/REPO:SHA``   hash: check name -> the id of the check run that reported
  the stored result (check runs only; an Actions job's id is its check run's)
- ``P:ci-wait:OWNER/REPO:SHA``  hash: check name -> when ``verify-tests`` first waited for
  it on that commit (Unix seconds; its ``timeout`` counts from there)
- ``P:sha:OWNER/REPO:SHA``      set of work items whose pull request head is SHA

Script (``workers/scripts/``): ``ci_record.lua``, store a result unless a newer one is
stored; it gets its keys through ``KEYS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import redis

from foundation.events import CIResult
from foundation.redis import scripts
from foundation.redis.namespaces import KeySpace, owns

__all__ = ["CI_TTL_SECONDS", "CommitKeys", "RedisCI"]

CI_TTL_SECONDS = 30 * 24 * 3600


@owns("head", "ci", "ci-order", "ci-run", "ci-wait", "sha")
@dataclass(frozen=True, slots=True)
class CommitKeys(KeySpace):
    """The key names of what the worker knows of commits, for one deployment (see the
    module docstring). No I/O.

    Args:
        prefix: prefix of the-loop's keys (``THE_LOOP_REDIS_PREFIX``).
    """

    def head(self, repository: str) -> str:
        """``P:head:OWNER/REPO``: the default branch's head commit."""
        return self.key("head", repository)

    def ci(self, repository: str, sha: str) -> str:
        """``P:ci:OWNER/REPO:SHA``: CI conclusions of a commit."""
        return self.key("ci", repository, sha)

    def sha(self, repository: str, sha: str) -> str:
        """``P:sha:OWNER/REPO:SHA``: work items whose pull request head is SHA."""
        return self.key("sha", repository, sha)

    def ci_order(self, repository: str, sha: str) -> str:
        """``P:ci-order:OWNER/REPO:SHA``: the order of each stored CI result of a commit."""
        return self.key("ci-order", repository, sha)

    def ci_run(self, repository: str, sha: str) -> str:
        """``P:ci-run:OWNER/REPO:SHA``: the check run id of each stored CI result."""
        return self.key("ci-run", repository, sha)

    def ci_wait(self, repository: str, sha: str) -> str:
        """``P:ci-wait:OWNER/REPO:SHA``: when each check was first waited for."""
        return self.key("ci-wait", repository, sha)


class RedisCI:
    """``P:ci:OWNER/REPO:SHA``: a hash of check name -> conclusion, kept 30 days; and
    ``P:sha:OWNER/REPO:SHA``: the work items whose pull request head it is
    (:class:`CommitKeys`).

    Args:
        connection: Redis client.
        prefix: the-loop's key prefix.
        repository: ``OWNER/NAME`` the commits belong to.
    """

    def __init__(self, connection: redis.Redis, prefix: str, repository: str) -> None:
        self.redis = connection
        self.prefix = prefix
        self.repository = repository
        self.keys = CommitKeys(prefix)
        self._record = scripts.register(connection, "workers.scripts", "ci_record")

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
        if stored:
            runs = self.keys.ci_run(self.repository, result.sha)
            pipe = self.redis.pipeline()
            if result.run_id is not None:
                pipe.hset(runs, result.name, str(result.run_id))
                pipe.expire(runs, CI_TTL_SECONDS)
            else:  # a status or suite of the same name: no check run to read
                pipe.hdel(runs, result.name)
            pipe.execute()
        return bool(stored)

    def run_id(self, sha: str, name: str) -> int | None:
        """The check run id stored with ``name``'s result on ``sha``, or ``None``."""
        raw = self.redis.hget(self.keys.ci_run(self.repository, sha), name)
        text = raw.decode() if isinstance(raw, bytes) else raw
        return int(text) if isinstance(text, str) and text.isdigit() else None

    def first_wait(self, sha: str, name: str, now: float) -> float:
        """When ``name`` was first waited for on ``sha``: ``now`` noted by the first
        call (``HSETNX``), what was noted returned by later ones; kept 30 days."""
        key = self.keys.ci_wait(self.repository, sha)
        pipe = self.redis.pipeline()
        pipe.hsetnx(key, name, repr(float(now)))
        pipe.hget(key, name)
        pipe.expire(key, CI_TTL_SECONDS)
        _, raw, _ = pipe.execute()
        try:
            return float(raw.decode() if isinstance(raw, bytes) else raw)
        except (TypeError, ValueError):
            return float(now)

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
