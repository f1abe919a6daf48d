"""Every Redis client is made by foundation.redis.client: timeouts, keepalive, health checks
and retries on each; RQ's workers wait for jobs on a connection of their own whose socket
timeout covers the wait, and RQ leaves the timeouts alone."""

from __future__ import annotations

import ast
import socket
from pathlib import Path

import pytest
import redis
from rq import Queue

from foundation.redis import (
    DEQUEUE_TIMEOUT,
    HEALTH_CHECK_INTERVAL,
    RECEIVER,
    SERVICE,
    HeldConnections,
    blocking,
    connect,
)
from foundation.redis import client as redis_client
from foundation.settings import Settings
from runner.service import TurnWorker
from the_loop.wiring import build_operator
from the_loop.wiring import redis_client as wiring_client
from webhook.app import make_redis_client
from workers.worker import LoopWorker

REPO_ROOT = Path(__file__).resolve().parent.parent
URL = "redis://127.0.0.1:6379/14"


def options(client: redis.Redis) -> dict:
    return client.connection_pool.connection_kwargs


def test_a_service_client_has_timeouts_keepalive_health_checks_and_retries():
    """Given REDIS_URL
    When the worker's client is made
    Then it has 2 s connect and 5 s socket timeouts, TCP keepalive with idle/interval/count,
      a 10 s health check and a retry with backoff on connection errors and timeouts."""
    kwargs = options(connect(URL))
    assert kwargs["socket_connect_timeout"] == 2.0
    assert kwargs["socket_timeout"] == 5.0
    assert kwargs["socket_keepalive"] is True
    assert kwargs["socket_keepalive_options"] == {socket.TCP_KEEPIDLE: 5,
                                                  socket.TCP_KEEPINTVL: 2,
                                                  socket.TCP_KEEPCNT: 3}
    assert kwargs["health_check_interval"] == HEALTH_CHECK_INTERVAL == 10
    retry = kwargs["retry"]
    assert retry.get_retries() == 1
    assert redis.TimeoutError in retry._supported_errors
    assert redis.ConnectionError in retry._supported_errors


def test_the_receiver_client_answers_within_githubs_ten_seconds():
    """Given the receiver's profile
    Then its longest stall (a due health check retried, then the command retried, every
      attempt timing out, connects included) stays under the 10 s GitHub waits for an
      answer."""
    kwargs = options(make_redis_client(URL))
    assert kwargs["socket_timeout"] == RECEIVER.socket_timeout == 2.0
    assert kwargs["socket_keepalive"] is True
    assert kwargs["health_check_interval"] == HEALTH_CHECK_INTERVAL
    assert RECEIVER.longest_stall == 3 * (1.0 + 2.0) + 2 * 0.1
    assert RECEIVER.longest_stall < 10


def test_a_worker_cut_off_from_redis_stops_retrying_before_its_liveness_lapses():
    """Given the default worker settings (TTL 30 s, a heartbeat every 5 s)
    Then one command's longest stall (every attempt timing out) ends before another
      worker can take the work item over."""
    from foundation.settings import WorkerSettings

    defaults = WorkerSettings()
    beat = min(defaults.reap_interval, defaults.worker_ttl / 3, defaults.lock_timeout / 3)
    assert SERVICE.longest_stall == 3 * (2.0 + 5.0) + 2 * 1.0
    assert SERVICE.longest_stall + beat < defaults.worker_ttl
    assert SERVICE.longest_stall + beat < defaults.lock_timeout


def test_a_unix_socket_client_gets_timeouts_but_no_tcp_keepalive():
    kwargs = options(connect("unix:///tmp/none.sock?db=14"))
    assert kwargs["socket_timeout"] == 5.0
    assert "socket_keepalive" not in kwargs


def test_the_commands_and_the_worker_get_their_clients_from_the_owner():
    settings = Settings.from_env({"REDIS_URL": URL}, process="worker")
    assert options(wiring_client(settings))["socket_timeout"] == SERVICE.socket_timeout
    operator = build_operator(settings)
    assert options(operator.redis)["socket_timeout"] == SERVICE.socket_timeout
    assert options(operator.redis)["socket_keepalive"] is True


@pytest.mark.parametrize("worker_class", [LoopWorker, TurnWorker])
def test_rq_waits_briefly_on_its_own_connection_and_leaves_its_timeout_alone(worker_class):
    """Given a service client and its blocking twin
    When an RQ worker of ours is built on the twin
    Then RQ blocks at most DEQUEUE_TIMEOUT seconds per wait, the twin's socket timeout
      covers that wait plus the usual 5 s, RQ did not raise it (RQ would set 415 s), and
      the service client keeps its 5 s."""
    client = connect(URL)
    twin = blocking(client, DEQUEUE_TIMEOUT)
    extra = {"processor": None} if worker_class is LoopWorker else {"runner": None}
    worker = worker_class([Queue("x", connection=twin)], connection=twin, **extra)
    assert worker.dequeue_timeout == DEQUEUE_TIMEOUT == 5
    assert options(twin)["socket_timeout"] == DEQUEUE_TIMEOUT + SERVICE.socket_timeout
    assert worker.connection_timeout == options(twin)["socket_timeout"]
    assert options(client)["socket_timeout"] == SERVICE.socket_timeout
    assert options(twin)["socket_keepalive"] is True
    assert options(twin)["retry"].get_retries() == SERVICE.retries
    assert worker.max_connection_wait_time <= 5


def test_the_blocking_twin_reaches_the_same_redis(redis_ns):
    client = connect(redis_ns.url)
    twin = blocking(client, DEQUEUE_TIMEOUT)
    key = f"{redis_ns.prefix}:twin"
    client.set(key, "1", ex=60)
    assert twin.get(key) == b"1"
    assert twin.blpop([f"{redis_ns.prefix}:empty"], timeout=1) is None  # under the timeout


def _client_ids(held: HeldConnections, n: int = 3) -> set[int]:
    """The server-side ids of the connections ``n`` commands in a row were sent on."""
    return {held.execute("CLIENT", "ID") for _ in range(n)}


def test_held_connections_reuse_one_connection_with_the_clients_options(redis_ns):
    client = connect(redis_ns.url, RECEIVER)
    held = HeldConnections(client)
    key = f"{redis_ns.prefix}:held"
    assert held.execute("SET", key, b"v", "EX", 60) == b"OK"
    assert held.execute("GET", key) == b"v"
    assert len(_client_ids(held)) == 1  # one after another: the same connection
    (connection,) = held._idle
    assert connection.socket_timeout == RECEIVER.socket_timeout
    assert connection.socket_keepalive is True
    assert connection.health_check_interval == HEALTH_CHECK_INTERVAL


def test_a_held_connection_survives_an_error_reply(redis_ns):
    held = HeldConnections(connect(redis_ns.url, RECEIVER))
    key = f"{redis_ns.prefix}:held-list"
    before = _client_ids(held, 1)
    held.execute("SET", key, "a string", "EX", 60)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        held.execute("LPUSH", key, "x")
    assert _client_ids(held, 1) == before  # kept, and in step with its replies


def test_a_held_connection_killed_by_the_server_is_replaced_by_the_retry(redis_ns):
    held = HeldConnections(connect(redis_ns.url, RECEIVER))
    (old,) = _client_ids(held, 1)
    assert redis_ns.client.client_kill_filter(_id=old) == 1
    (new,) = _client_ids(held, 1)  # the send or the read fails, the retry reconnects
    assert new != old


def test_held_connections_fail_fast_when_redis_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the with ends: nothing listens
    held = HeldConnections(connect(f"redis://127.0.0.1:{port}/14", RECEIVER))
    with pytest.raises(redis.ConnectionError):
        held.execute("PING")
    assert held._idle == []  # a failed connection is not kept


def test_held_connections_load_a_script_the_server_does_not_know(redis_ns):
    client = connect(redis_ns.url, RECEIVER)
    # A script text no one has loaded yet: its EVALSHA answers NOSCRIPT first.
    script = client.register_script(f"return '{redis_ns.token}' .. ARGV[1]")
    assert client.script_exists(script.sha) == [False]
    held = HeldConnections(client)
    assert held.run_script(script, (), ("-x",)) == f"{redis_ns.token}-x".encode()
    assert client.script_exists(script.sha) == [True]


def test_after_a_fork_held_connections_leave_the_parents_alone(redis_ns, monkeypatch):
    held = HeldConnections(connect(redis_ns.url, RECEIVER))
    parent_ids = _client_ids(held, 1)
    (parent_connection,) = held._idle
    monkeypatch.setattr(redis_client.os, "getpid", lambda: -1)  # as in a forked child
    assert _client_ids(held, 1).isdisjoint(parent_ids)
    assert parent_connection not in held._idle
    assert parent_connection._sock is not None  # not closed: the parent still uses it


def test_no_production_module_builds_a_redis_client_but_the_owner():
    """Redis.from_url, Redis(...) and ConnectionPool(...) appear only in
    foundation/redis/client.py."""
    found = []
    owner = Path(redis_client.__file__).resolve()
    for package in ("the_loop", "webhook", "workers", "integrations", "graph"):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if path.resolve() == owner:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                    node.func.id if isinstance(node.func, ast.Name) else ""
                if name in ("from_url", "Redis", "StrictRedis", "ConnectionPool"):
                    found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert found == []


def test_a_sentinel_client_takes_the_primarys_credentials_db_and_tls_from_the_url() -> None:
    """THE_LOOP_REDIS_SENTINELS: redis-py's Sentinel master_for, the primary's password,
    database and TLS from REDIS_URL, the Sentinels' own password, the same timeouts and
    keepalive on both (no I/O)."""
    from redis.sentinel import SentinelConnectionPool, SentinelManagedSSLConnection

    from foundation.redis import RECEIVER, connect
    from foundation.settings import RedisSentinel

    sentinel = RedisSentinel(hosts=(("s0", 26379), ("s1", 26380)), master="mymaster",
                             password="sentinel-pw")
    client = connect("rediss://:primary-pw@ignored:1/3?ssl_cert_reqs=none", RECEIVER,
                     sentinel=sentinel)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "mymaster"
    assert pool.connection_class is SentinelManagedSSLConnection
    kwargs = pool.connection_kwargs
    assert (kwargs["password"], kwargs["db"], kwargs["ssl_cert_reqs"]) == ("primary-pw", 3,
                                                                          "none")
    assert kwargs["socket_timeout"] == RECEIVER.socket_timeout and kwargs["socket_keepalive"]
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["host"],
             s.connection_pool.connection_kwargs["port"]) for s in sentinels] == \
        [("s0", 26379), ("s1", 26380)]
    first = sentinels[0].connection_pool
    assert first.connection_kwargs["password"] == "sentinel-pw"
    assert first.connection_kwargs["socket_timeout"] == RECEIVER.socket_timeout
    assert issubclass(first.connection_class, redis.SSLConnection)
