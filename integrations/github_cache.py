"""GitHub reads spent sparingly: a conditional-request cache shared through Redis, and a
per-delivery memo in front of it (in the manner of Prow's ghproxy).

GitHub's "Best practices for using the REST API" ("Use conditional requests if
appropriate"): most endpoints answer with an ``etag`` and many with a ``last-modified``
header; a ``GET`` that sends them back as ``If-None-Match`` / ``If-Modified-Since`` is
answered ``304 Not Modified`` when nothing changed, and "making a conditional request
does not count against your primary rate limit if a 304 response is returned and the
request was made while correctly authorized with an Authorization header".

* :class:`ConditionalCache` keeps, per bucket (an App installation, ``token`` or
  ``cli``) and URL, the validators and the body GitHub last sent, in one Redis hash
  (``P:github:etag:BUCKET:DIGEST``, :meth:`CacheKeys.etag`: ``etag``, ``last_modified``,
  ``data``, ``link``; DIGEST a digest of the URL) that expires after ``ttl`` seconds
  unused. Every worker and command of a deployment shares it. Keys
  are per bucket, not per token: an installation's token changes hourly, its view of a
  repository does not; a validator GitHub no longer honours costs one ordinary 200.
* :class:`DeliveryMemo` answers a ``GET`` already made within the same delivery from
  memory, with no request at all; a write drops what it may have changed
  (:func:`stale`). The worker opens one per delivery with :func:`delivery_scope`.

Why not ``requests-cache`` or CacheControl: both wrap a ``requests.Session``, and the
``api`` transport's session belongs to PyGithub (which mints and renews the installation
tokens); its one hook to replace it (``Requester.injectConnectionClasses``) is
process-wide and turns connection reuse off. The ``cli`` transport is ``gh api``, no
session at all. The cache therefore sits under both transports, at the level of one REST
request (:meth:`integrations.github_ops.GitHubOperations._request`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from foundation.redis.namespaces import KeySpace, owns

__all__ = ["CacheKeys", "CachedReply", "ConditionalCache", "DeliveryMemo", "delivery_scope",
           "memo", "stale"]

log = logging.getLogger("the_loop.integrations.github_cache")

#: Seconds an entry is kept after its last use (refreshed on every hit).
DEFAULT_TTL = 24 * 3600
#: Bodies larger than this (bytes of JSON) are not cached: a big file or list is rare,
#: and Redis memory is not spent on it.
MAX_BODY = 512 * 1024


@owns("github:etag")
@dataclass(frozen=True, slots=True)
class CacheKeys(KeySpace):
    """The ETag cache's key names of one deployment (see the module docstring). No I/O.

    Args:
        prefix: prefix of the-loop's keys (``THE_LOOP_REDIS_PREFIX``).
    """

    def etag(self, bucket: str, digest: str) -> str:
        """``P:github:etag:BUCKET:DIGEST``: the cached ``GET`` answer of one URL."""
        return self.key("github:etag", bucket, digest)


@dataclass(frozen=True)
class CachedReply:
    """What the cache holds for one URL: the validators and the answer they stand for.

    ``etag`` / ``last_modified``: GitHub's headers as sent (either may be empty);
    ``data``: the decoded JSON body; ``link``: the ``Link`` header (pagination)."""

    etag: str
    last_modified: str
    data: Any
    link: str = ""

    def validators(self) -> dict[str, str]:
        """The conditional headers to send: ``If-None-Match`` when there is an ETag, else
        ``If-Modified-Since`` (GitHub's ``Last-Modified``); ``{}`` for neither."""
        if self.etag:
            return {"If-None-Match": self.etag}
        if self.last_modified:
            return {"If-Modified-Since": self.last_modified}
        return {}


class ConditionalCache:
    """ETags, Last-Modified dates and bodies of GitHub ``GET`` answers, in Redis.

    Args:
        connection: the Redis client.
        prefix: the deployment's key prefix (``THE_LOOP_REDIS_PREFIX``).
        ttl: seconds an entry lives after its last use.

    Redis being unreachable never fails a request: :meth:`get` then finds nothing and
    :meth:`put` stores nothing (logged once per process).
    """

    def __init__(self, connection: redis.Redis, prefix: str = "the-loop", *,
                 ttl: int = DEFAULT_TTL) -> None:
        self.redis = connection
        self.prefix = prefix
        self.ttl = int(ttl)
        self._keys = CacheKeys(prefix)
        self._warned = False

    def __repr__(self) -> str:
        return f"ConditionalCache(prefix={self.prefix!r}, ttl={self.ttl})"

    def key(self, bucket: str, url: str) -> str:
        """The Redis key of ``url`` (path and query, as sent) in ``bucket``."""
        return self._keys.etag(bucket, hashlib.sha256(url.encode("utf-8")).hexdigest()[:32])

    def get(self, bucket: str, url: str) -> CachedReply | None:
        """The entry of ``url`` in ``bucket``, or ``None``; a hit's lifetime is renewed."""
        key = self.key(bucket, url)
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hgetall(key)
            pipe.expire(key, self.ttl)
            raw, _ = pipe.execute()
        except redis.RedisError as exc:
            self._unavailable(exc)
            return None
        if not raw:
            return None
        fields = {k.decode() if isinstance(k, bytes) else str(k):
                  v.decode() if isinstance(v, bytes) else str(v) for k, v in raw.items()}
        try:
            data = json.loads(fields.get("data", "null"))
        except ValueError:
            return None
        return CachedReply(fields.get("etag", ""), fields.get("last_modified", ""), data,
                           fields.get("link", ""))

    def put(self, bucket: str, url: str, headers: Mapping[str, str], data: Any) -> bool:
        """Keep GitHub's answer to ``url`` when it carries a validator (``etag`` or
        ``last-modified``; ``headers`` lower-cased); returns whether it was kept."""
        etag = headers.get("etag", "")
        modified = headers.get("last-modified", "")
        if not etag and not modified:
            return False
        body = json.dumps(data, separators=(",", ":"))
        if len(body) > MAX_BODY:
            return False
        key = self.key(bucket, url)
        try:
            pipe = self.redis.pipeline(transaction=True)
            pipe.delete(key)
            pipe.hset(key, mapping={"etag": etag, "last_modified": modified, "data": body,
                                    "link": headers.get("link", "")})
            pipe.expire(key, self.ttl)
            pipe.execute()
        except redis.RedisError as exc:
            self._unavailable(exc)
            return False
        return True

    def _unavailable(self, exc: redis.RedisError) -> None:
        if not self._warned:
            self._warned = True
            log.warning("github request cache unavailable (%s); reading without it",
                        type(exc).__name__)


# --------------------------------------------------------------------------- the memo

_REPO = re.compile(r"^(?:https?://[^/]+)?(?:/api/v3)?/repos/([^/]+/[^/]+)(/[^?]*)?")
_ITEM = re.compile(r"^/(?:issues|pulls)/(\d+)(?:/([^/]+))?")
_COMMENTS = re.compile(r"^/issues/(\d+)/comments/?$")
_COMMENT = re.compile(r"^/issues/comments/\d+/?$")
_RUNS = re.compile(r"^/commits/([^/]+)/check-runs/?$")
_RUN = re.compile(r"^/check-runs(?:/\d+)?/?$")
#: What a commit may change besides the files: heads, branches, pull requests.
_COMMITTED = ("/contents", "/git", "/commits", "/branches", "/pulls", "/compare")


def _parts(url: str) -> tuple[str, str] | None:
    """``(OWNER/REPO, rest of the path)`` of a repository URL, else ``None``."""
    match = _REPO.match(url)
    if match is None:
        return None
    return match.group(1).lower(), match.group(2) or "/"


def stale(write: str, read: str) -> bool:
    """Whether a write to URL ``write`` may change what a ``GET`` of ``read`` answered.

    Writes to an issue or pull request (``/issues/N/...``, ``/pulls/N/...``: labels,
    comments, reviewers, the pull request itself) touch that number only (an issue and a
    pull request share one number): the issue or pull request itself and what is under
    the same part (a label write, ``/labels``, leaves the comments alone). An edit of a
    comment by id (``/issues/comments/ID``) touches every comment list; a check run
    write touches the check runs; a label created touches the repository's labels; a
    commit (``/contents``, ``/git``) touches files, commits, branches and pull requests
    (their heads move) and the repository itself; anything else the whole repository. A
    URL outside ``/repos/`` (``/user``, ``/app``) is stale after any write outside
    ``/repos/``."""
    w, r = _parts(write), _parts(read)
    if w is None or r is None:
        return w is None and r is None
    if w[0] != r[0]:
        return False
    wpath, rpath = w[1], r[1]
    witem, ritem = _ITEM.match(wpath), _ITEM.match(rpath)
    if witem is not None:
        if ritem is None or ritem.group(1) != witem.group(1):
            return False
        wsub, rsub = witem.group(2) or "", ritem.group(2) or ""
        return not rsub or not wsub or rsub == wsub
    if wpath.startswith("/issues/comments/"):
        return "/comments" in rpath
    if "check-runs" in wpath:
        return "check-runs" in rpath
    if wpath.startswith("/labels"):
        return rpath.startswith("/labels")
    if wpath.startswith(("/contents/", "/git/")):  # a commit: files, heads, the repository
        return rpath == "/" or rpath.startswith(_COMMITTED)
    return True


class DeliveryMemo:
    """``GET`` answers made within one delivery, by bucket and URL: a read made twice is
    answered once. Thread-safe (a hook runs in its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: dict[tuple[str, str], Any] = {}
        self.hits = 0

    def get(self, bucket: str, url: str) -> Any:
        """The reply remembered for ``url``, or ``None``."""
        with self._lock:
            reply = self._replies.get((bucket, url))
            if reply is not None:
                self.hits += 1
            return reply

    def put(self, bucket: str, url: str, reply: Any) -> None:
        with self._lock:
            self._replies[(bucket, url)] = reply

    def wrote(self, bucket: str, url: str, method: str = "", data: Any = None) -> None:
        """A write to ``url`` was sent (or tried): forget what it may have changed.

        Two writes of the-loop's own, with GitHub's answer ``data``, are written through
        instead, so they do not make it read a list again: a comment created (``POST
        /issues/N/comments``) or edited (``PATCH /issues/comments/ID``) goes into the
        remembered one-page comment lists of that issue, and a check run created
        (``POST /check-runs``) or edited (``PATCH /check-runs/ID``) into those of its
        head commit (``GET /commits/SHA/check-runs``, filtered by name or not)."""
        with self._lock:
            if isinstance(data, dict) and "id" in data and self._write_through(
                    bucket, url, method, data):
                return
            for key in [k for k in self._replies if k[0] == bucket and stale(url, k[1])]:
                del self._replies[key]

    def _write_through(self, bucket: str, url: str, method: str,
                       item: dict[str, Any]) -> bool:
        parts = _parts(url)
        if parts is None or method not in ("POST", "PATCH"):
            return False
        repo, path = parts
        created = method == "POST"
        comments = _COMMENTS.match(path) if created else _COMMENT.match(path)
        runs = _RUN.match(path) is not None
        if comments is None and not runs:
            return False
        for key, reply in list(self._replies.items()):
            read = _parts(key[1])
            if key[0] != bucket or read is None or read[0] != repo:
                continue
            if comments is not None:
                listed = _COMMENTS.match(read[1])
                belongs = listed is not None and (not created
                                                  or listed.group(1) == comments.group(1))
                single = read[1].startswith(("/issues/comments", "/pulls/comments"))
            else:
                listed = _RUNS.match(read[1])
                belongs = listed is not None and listed.group(1) == item.get("head_sha") \
                    and _query(key[1]).get("check_name", item.get("name")) == item.get("name")
                single = read[1].startswith("/check-runs")
            if single:
                del self._replies[key]  # one item read by id: read it again if need be
            if not belongs:
                continue
            updated = _with_item(reply.data, item, created=created)
            more = 'rel="next"' in str(reply.headers.get("link", ""))
            if updated is None or (created and more):
                del self._replies[key]  # not a shape it knows, or not the last page
            else:
                self._replies[key] = type(reply)(reply.headers, updated, reply.status)
        return True


def _query(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


def _with_item(data: Any, item: dict[str, Any], *, created: bool) -> Any:
    """A listed page (a JSON list, or GitHub's ``{"total_count", "check_runs"}``) with
    ``item`` appended (``created``) or put in place of the one with its id; ``None`` for
    another shape."""
    envelope = isinstance(data, dict) and isinstance(data.get("check_runs"), list)
    items = data["check_runs"] if envelope else data
    if not isinstance(items, list):
        return None
    if created:
        new = [*items, item]
    else:
        new = [item if isinstance(c, dict) and c.get("id") == item["id"] else c
               for c in items]
    if envelope:
        return {**data, "check_runs": new, "total_count": len(new)}
    return new


_scope_lock = threading.Lock()
_scope: DeliveryMemo | None = None


def memo() -> DeliveryMemo | None:
    """The memo of the delivery being handled in this process, or ``None`` outside one."""
    return _scope


@contextlib.contextmanager
def delivery_scope() -> Iterator[DeliveryMemo]:
    """Open the memo of one delivery for this process (a worker handles one delivery at
    a time; the hook threads it starts share it); a nested scope reuses the outer one.

    Yields:
        the memo (``hits``: reads answered from it).
    """
    global _scope
    with _scope_lock:
        outer = _scope
        current = outer if outer is not None else DeliveryMemo()
        _scope = current
    try:
        yield current
    finally:
        if outer is None:
            with _scope_lock:
                _scope = None
