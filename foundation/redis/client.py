"""Every Redis client of the-loop, made one way (:func:`connect`), so that no connection
can hang: the receiver (and the read API and dashboard on its app), the worker, the
runner, RQ's own connection in both, and the commands.

Each client gets

* a connect timeout and a socket timeout: a command whose reply does not come (Redis
  unreachable, or a connection a middlebox silently stopped forwarding) raises
  ``redis.TimeoutError`` after :attr:`Profile.socket_timeout` seconds instead of waiting
  for ever; redis-py then drops that connection, so the next attempt opens a fresh one;
* TCP keepalive (:data:`KEEPALIVE`): the kernel probes an idle connection and closes one
  whose peer vanished (a host gone, a NAT entry dropped), so an idle pooled connection
  is not found dead only when a command is sent on it;
* a health check (:data:`HEALTH_CHECK_INTERVAL`): a connection idle for longer is
  PINGed before it carries a command (redis-py's ``health_check_interval``);
* a retry policy (redis-py's ``Retry`` with exponential backoff and jitter) on
  connection errors and timeouts, each retry on a fresh connection.

A hot path that sends one command per request (the receiver's enqueue) can send it on
a :class:`HeldConnections` instead of the client: the same connections (made by the
client's pool's connection class, with its timeouts, keepalive and health checks) and the
same retry policy, without the pool's per-command work (its lock, the readiness poll of
every checked-out connection, the observability hooks), which under gevent cost about as
much CPU as the command itself.

With Redis Sentinel (``THE_LOOP_REDIS_SENTINELS``, :class:`foundation.settings.queues.
RedisSentinel`) the client is redis-py's ``Sentinel(...).master_for(...)``: its pool
(``SentinelConnectionPool``) asks the Sentinels for the primary's address each time it
opens a connection, so after a failover the next connection (every retry opens one) goes
to the promoted replica, and a connection still on a demoted primary is dropped on its
first ``READONLY`` error; no restart is needed. The primary's password, database and TLS
come from ``REDIS_URL``; the same timeouts, keepalive and retry policy apply to the
Sentinels. Lua scripts survive the switch: the stores' registered scripts
(:mod:`foundation.redis.scripts`) and :meth:`HeldConnections.run_script` send ``EVALSHA``
and load the script again on ``NOSCRIPT`` (the new primary may never have seen it).

A client that sends blocking commands (RQ's worker waits for jobs with ``BLMOVE``/
``BLPOP`` for up to its dequeue timeout) needs a socket timeout longer than the block, or
every idle wait would end in a timeout: :func:`blocking` makes that client's twin, and
:class:`BoundedDequeue` keeps RQ's wait at :data:`DEQUEUE_TIMEOUT` seconds. Without it RQ
raises the socket timeout of the connection it is given to its worker TTL (420 s by
default, ``Worker._set_connection``), and every command on that connection pool could
then hang for seven minutes.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.commands.core import Script
from redis.connection import parse_url
from redis.exceptions import NoScriptError
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from foundation.settings.queues import RedisSentinel

__all__ = ["CLI", "DEQUEUE_TIMEOUT", "HEALTH_CHECK_INTERVAL", "KEEPALIVE", "RECEIVER",
           "SERVICE", "BoundedDequeue", "HeldConnections", "Profile", "blocking", "connect"]


@dataclass(frozen=True, slots=True)
class Profile:
    """How long one kind of process waits for Redis.

    Attributes:
        name: what the profile is for (in docs and logs).
        connect_timeout: seconds to open a TCP connection.
        socket_timeout: seconds to wait for a reply (or to send) on an open connection.
        retries: retries of a command that failed on a connection error or a timeout.
        backoff_base, backoff_cap: seconds of the exponential backoff between retries
            (redis-py's ``ExponentialWithJitterBackoff``).
    """

    name: str
    connect_timeout: float
    socket_timeout: float
    retries: int
    backoff_base: float = 0.05
    backoff_cap: float = 1.0

    @property
    def longest_stall(self) -> float:
        """Seconds one command can take at most before it fails: a due health check's
        PING is retried (``retries + 1`` attempts), then the command's own retries on
        fresh connections (``retries`` more), each opening a connection and waiting out
        the socket timeout, plus the backoffs. A worker cut off from Redis may still
        write until this is up, so its liveness (``THE_LOOP_WORKER_TTL``) must outlast it
        plus a heartbeat interval, or another worker takes over its work item while the
        write is retried."""
        attempts = 2 * self.retries + 1
        return attempts * (self.connect_timeout + self.socket_timeout) \
            + 2 * self.retries * self.backoff_cap


#: The receiver (and the read API and dashboard on its app): GitHub waits 10 s for an
#: answer ("Best practices for using webhooks", GitHub docs); the longest stall (9.2 s
#: at most, 6 s measured behind a black hole) answers 503 before that.
RECEIVER = Profile("receiver", connect_timeout=1.0, socket_timeout=2.0, retries=1,
                   backoff_cap=0.1)
#: The worker and the runner: a dead connection is noticed within 5 s, then retried
#: once on a fresh one; the longest stall (23 s) stays under the worker TTL (30 s) less a
#: heartbeat interval (5 s).
SERVICE = Profile("service", connect_timeout=2.0, socket_timeout=5.0, retries=1)
#: The commands: as the service.
CLI = SERVICE

#: Seconds a connection may stay idle before it is PINGed ahead of its next command.
HEALTH_CHECK_INTERVAL = 10

#: TCP keepalive (tcp(7)): first probe after 5 s idle, then every 2 s, the connection
#: closed after 3 unanswered probes: a vanished peer is noticed within about 11 s.
KEEPALIVE: dict[int, int] = {
    option: value for option, value in (
        (getattr(socket, "TCP_KEEPIDLE", None), 5),
        (getattr(socket, "TCP_KEEPINTVL", None), 2),
        (getattr(socket, "TCP_KEEPCNT", None), 3),
    ) if option is not None}

#: Seconds RQ's workers (the worker's and the runner's) block waiting for a job.
DEQUEUE_TIMEOUT = 5


def _retry(profile: Profile) -> Retry:
    return Retry(ExponentialWithJitterBackoff(base=profile.backoff_base,
                                              cap=profile.backoff_cap),
                 profile.retries,
                 supported_errors=(redis.ConnectionError, redis.TimeoutError, socket.timeout))


def connect(url: str, profile: Profile = SERVICE, *, block: float = 0.0,
            sentinel: RedisSentinel | None = None) -> redis.Redis:
    """A Redis client for ``url`` with the timeouts, keepalive, health checks and retry
    policy of ``profile`` (see the module docstring). No I/O happens here.

    Args:
        url: a ``redis://``, ``rediss://`` or ``unix://`` URL (``REDIS_URL``); with
            ``sentinel``, only its password, username, database, TLS and query options
            are used (its host and port are ignored).
        profile: :data:`RECEIVER`, :data:`SERVICE` or :data:`CLI`.
        block: seconds the longest blocking command sent on this client may block; the
            socket timeout is ``profile.socket_timeout + block``.
        sentinel: the Sentinels to ask for the primary (``THE_LOOP_REDIS_SENTINELS``),
            or ``None``: ``url``'s host is the primary.

    Returns:
        The client (its own connection pool; a ``SentinelConnectionPool`` with
        ``sentinel``).
    """
    options: dict[str, Any] = {
        "socket_connect_timeout": profile.connect_timeout,
        "socket_timeout": profile.socket_timeout + block,
        "health_check_interval": HEALTH_CHECK_INTERVAL,
        "retry": _retry(profile),
    }
    if not url.startswith("unix:"):  # keepalive is TCP's
        options["socket_keepalive"] = True
        options["socket_keepalive_options"] = KEEPALIVE
    if sentinel is None:
        return redis.Redis.from_url(url, **options)
    return _master_for(url, options, sentinel)


def _master_for(url: str, options: dict[str, Any], sentinel: RedisSentinel) -> redis.Redis:
    """redis-py's ``Sentinel(hosts).master_for(name)`` with ``options`` on the primary's
    connections and the Sentinels' own, the primary's credentials, database and TLS
    from ``url`` (``parse_url``, as ``from_url`` reads them)."""
    primary = {k: v for k, v in parse_url(url).items() if k not in ("host", "port", "path")}
    tls = primary.pop("connection_class", None) is redis.SSLConnection
    tls_options = {k: v for k, v in primary.items() if k.startswith("ssl_")}
    sentinel_options = {k: v for k, v in options.items()
                        if k.startswith("socket_") or k == "retry"}
    sentinel_options.update(tls_options)
    if tls:
        sentinel_options["ssl"] = True
    if sentinel.username:
        sentinel_options["username"] = sentinel.username
    if sentinel.password:
        sentinel_options["password"] = sentinel.password
    manager = Sentinel(list(sentinel.hosts), sentinel_kwargs=sentinel_options)
    return manager.master_for(sentinel.master, redis_class=redis.Redis,
                              connection_pool_class=SentinelConnectionPool,
                              ssl=tls, **{**options, **primary})


def blocking(client: redis.Redis, block: float) -> redis.Redis:
    """A twin of ``client`` (same server, database, credentials, keepalive, health checks
    and retry policy, its own connection pool) whose socket timeout is longer by
    ``block`` seconds, for blocking commands (RQ's worker: ``block`` =
    :data:`DEQUEUE_TIMEOUT`). ``client`` keeps its short timeout.

    Args:
        client: a client made by :func:`connect` (or any redis-py client).
        block: seconds a blocking command may block.

    Returns:
        The twin.
    """
    pool = client.connection_pool
    kwargs = dict(pool.connection_kwargs)
    kwargs["socket_timeout"] = (kwargs.get("socket_timeout") or SERVICE.socket_timeout) + block
    if isinstance(pool, SentinelConnectionPool):
        # Its own Sentinel-managed pool (the primary found the same way), not a plain pool
        # of Sentinel-managed connections: that one would not drop connections left on a
        # demoted primary.
        kwargs.pop("connection_pool", None)
        return redis.Redis(connection_pool=SentinelConnectionPool(
            pool.service_name, pool.sentinel_manager, connection_class=pool.connection_class,
            **kwargs))
    return redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=pool.connection_class, **kwargs))


class HeldConnections:
    """Commands sent straight on connections held here, past ``client``'s pool.

    Each command takes an idle connection (or makes one with the pool's connection class
    and options: the client's timeouts, keepalive, health checks, credentials), sends,
    reads the reply, and gives the connection back only after a whole reply was read, so
    a held connection never has unread data and needs no readiness check before its next
    command (the pool polls every connection it hands out, for connections users return
    half-read). Connection errors and timeouts are retried with the client's retry policy
    (:func:`connect`'s), each retry on the same connection reconnected, as redis-py's
    client does. Safe for greenlets and threads: a connection is used by one caller at a
    time; after a fork the child never uses the parent's connections: it drops its copies
    (redis-py shuts a socket down only in the process that opened it) and makes new ones.

    Args:
        client: the client whose connection class, options and retry policy to use.
    """

    def __init__(self, client: redis.Redis) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._connection_kwargs = dict(pool.connection_kwargs)
        self._retry = client.get_retry() or _retry(SERVICE)
        self._idle: list[Any] = []
        self._pid = os.getpid()

    def _take(self) -> Any:
        if self._pid != os.getpid():
            self._idle = []  # the parent's sockets: never to be used here
            self._pid = os.getpid()
        try:
            return self._idle.pop()
        except IndexError:
            return self._connection_class(**self._connection_kwargs)

    def execute(self, *args: Any) -> Any:
        """Send one command and return its reply (parsed by the connection's parser: bytes,
        ints, lists; no response callbacks).

        Args:
            args: the command and its arguments, e.g. ``("EVALSHA", sha, 1, key)``.

        Returns:
            The reply.

        Raises:
            redis.ResponseError: the server answered with an error (the connection stays
                usable and is kept).
            redis.ConnectionError, redis.TimeoutError: still failing after the retries;
                the connection is dropped.
        """
        with self._lease() as connection:
            return self._send(connection, args)

    def run_script(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``EVALSHA`` of a registered script (redis-py's :class:`~redis.commands.core.Script`),
        loading it once if the server does not know it (a restart, ``SCRIPT FLUSH``, a
        failover to a replica that never loaded it).

        Args:
            script: the script (``client.register_script(text)``).
            keys, args: its ``KEYS`` and ``ARGV``.

        Returns:
            The script's reply.

        Raises:
            redis.RedisError: as :meth:`execute`.
        """
        return self.run_script_and_wait(script, keys, args)[0]

    def run_script_and_wait(self, script: Script, keys: Sequence[Any], args: Sequence[Any],
                            *, replicas: int = 0, timeout_ms: int = 0,
                            wrote: Any = None) -> tuple[Any, int | None]:
        """:meth:`run_script`, then, unless the reply is ``wrote``'s opposite, Redis's
        ``WAIT replicas timeout_ms`` on the SAME connection: how many replicas hold every
        write this connection made, the script's included ("WAIT", Redis docs: it counts
        the replicas that acknowledged the connection's writes so far).

        The ``WAIT`` is never retried: on another connection (a reconnection after the
        connection broke between the two) it would count replicas of none of the script's
        writes and answer at once. A broken connection then raises.

        Args:
            script, keys, args: as :meth:`run_script`.
            replicas: replicas to wait for; 0 sends no ``WAIT``.
            timeout_ms: the ``WAIT``'s timeout, milliseconds (``WAIT`` answers by then
                with the count so far; 0 would wait for ever, so it must be positive with
                ``replicas``).
            wrote: a callable ``reply -> bool``: whether the script wrote anything (no
                ``WAIT`` when it did not); ``None``: always wait.

        Returns:
            ``(reply, acknowledged)``: ``acknowledged`` is the ``WAIT``'s count, or
            ``None`` when no ``WAIT`` was sent.

        Raises:
            ValueError: ``replicas`` without a positive ``timeout_ms``.
            redis.RedisError: as :meth:`execute`; the ``WAIT`` failing after the script
                ran raises too (whether the write reached a replica is then unknown).
        """
        if replicas and timeout_ms <= 0:
            raise ValueError("WAIT needs a positive timeout_ms")
        call = ("EVALSHA", script.sha, len(keys), *keys, *args)
        with self._lease() as connection:
            try:
                reply = self._send(connection, call)
            except NoScriptError:
                self._send(connection, ("SCRIPT", "LOAD", script.script))
                reply = self._send(connection, call)
            acknowledged = None
            if replicas and (wrote is None or wrote(reply)):
                connection.send_command("WAIT", replicas, timeout_ms)
                timeout = (connection.socket_timeout or 0) + timeout_ms / 1000
                acknowledged = int(connection.read_response(timeout=timeout))
        return reply, acknowledged

    @contextlib.contextmanager
    def _lease(self) -> Iterator[Any]:
        """A held connection for one call: back to the idle list after it, or after a
        server error (the connection stays usable); dropped on anything else (a broken
        or half-read connection is never reused)."""
        connection = self._take()
        try:
            yield connection
        except redis.ResponseError:
            self._idle.append(connection)
            raise
        except BaseException:
            connection.disconnect()
            raise
        self._idle.append(connection)

    def _send(self, connection: Any, args: Sequence[Any]) -> Any:
        """One command on ``connection`` with the retry policy (reconnecting it)."""
        def attempt() -> Any:
            # connect() first, as the pool does: sending on a closed connection opens it
            # past connect(), where a Sentinel-managed connection asks for the primary.
            connection.connect()
            connection.send_command(*args)
            return connection.read_response()

        return self._retry.call_with_retry(attempt, lambda _error: connection.disconnect())


class BoundedDequeue:
    """Mixin for RQ worker classes: wait for a job at most :data:`DEQUEUE_TIMEOUT`
    seconds per ``BLMOVE``/``BLPOP``, and tell RQ the socket timeout that needs, so that
    RQ leaves the connection's own timeout alone. (RQ's ``Worker.dequeue_timeout`` is its
    worker TTL less 15 s -- 405 s by default -- and ``Worker.connection_timeout``, 10 s
    more, is the socket timeout RQ sets on the pool it is given when that one's is
    shorter; rq/worker/base.py.) Give the worker a :func:`blocking` client with
    ``block=DEQUEUE_TIMEOUT``."""

    #: RQ's cap on its wait between two attempts to reach Redis again (60 s in RQ).
    max_connection_wait_time = 5.0

    @property
    def dequeue_timeout(self) -> int:
        return DEQUEUE_TIMEOUT

    @property
    def connection_timeout(self) -> int:
        return DEQUEUE_TIMEOUT + int(SERVICE.socket_timeout)
