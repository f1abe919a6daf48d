"""A replicated Redis on loopback for tests and benchmarks: a primary, one replica and
three Sentinels, each a real ``redis-server`` process (``--sentinel`` for the Sentinels:
the same binary as ``redis-sentinel``) in a temporary directory, on free ports.

The Sentinels monitor the primary as :data:`MASTER` with a quorum of 2, and notice its
death quickly (``down-after-milliseconds`` :data:`DOWN_AFTER_MS`, ``failover-timeout``
:data:`FAILOVER_TIMEOUT_MS`): a SIGKILLed primary is replaced by its replica in about a
second. A replica's full sync starts at once (``repl-diskless-sync-delay 0``, 5 s by
default). Nothing is persisted (``save ""``, no AOF): what a replica holds is what reached
it over replication.

Use :class:`ReplicatedRedis` as a context manager; every process is stopped at its end
(:mod:`tests.support.processes`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from foundation.settings.queues import RedisSentinel
from tests.support import processes

#: The name the Sentinels monitor the primary under.
MASTER = "the-loop"
#: A primary silent this long (ms) is subjectively down for a Sentinel.
DOWN_AFTER_MS = 500
#: Sentinel's failover timeout (ms): also how long before a failed failover is retried.
FAILOVER_TIMEOUT_MS = 3000


def redis_server() -> str | None:
    """The ``redis-server`` binary (it runs Sentinel too), or ``None``."""
    return shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` every 20 ms until it returns something truthy (returned); a
    Redis or connection error counts as not yet. AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = predicate()
        except (redis.RedisError, OSError):  # not up yet (requests' errors are OSErrors)
            result = None
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


class ReplicatedRedis:
    """A primary, one replica and three Sentinels (see the module docstring).

    Attributes:
        primary_port, replica_port: the two data nodes' ports (the replica's becomes the
            primary's after a failover).
        sentinel_ports: the three Sentinels' ports.
        sentinel: the settings that find the primary (``THE_LOOP_REDIS_SENTINELS``).
    """

    def __init__(self) -> None:
        binary = redis_server()
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="the-loop-sentinel-"))
        self.primary_port, self.replica_port = _free_port(), _free_port()
        self.sentinel_ports = [_free_port() for _ in range(3)]
        self.data: dict[int, subprocess.Popen[bytes]] = {}
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def sentinel(self) -> RedisSentinel:
        return RedisSentinel(hosts=tuple(("127.0.0.1", p) for p in self.sentinel_ports),
                             master=MASTER)

    @property
    def env(self) -> dict[str, str]:
        """The processes' environment for this set: ``THE_LOOP_REDIS_SENTINELS``,
        ``THE_LOOP_REDIS_SENTINEL_MASTER`` and a ``REDIS_URL`` whose host is ignored."""
        return {"THE_LOOP_REDIS_SENTINELS": ",".join(f"127.0.0.1:{p}"
                                                     for p in self.sentinel_ports),
                "THE_LOOP_REDIS_SENTINEL_MASTER": MASTER,
                "REDIS_URL": "redis://sentinel-managed/0"}

    def node(self, port: int) -> redis.Redis:
        """A plain client of the data node on ``port`` (no Sentinel)."""
        return redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=1)

    def _start_data(self, port: int, *args: str) -> None:
        self.data[port] = processes.start(
            [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--dbfilename", f"{port}.rdb",
             "--protected-mode", "no", "--repl-diskless-sync-delay", "0", *args],
            os.environ, self.dir / f"redis-{port}.log")

    def start(self) -> ReplicatedRedis:
        """Start all five and wait until the replica is in sync and every Sentinel knows
        the replica and the two other Sentinels."""
        self._start_data(self.primary_port)
        self._start_data(self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port))
        for port in self.sentinel_ports:
            conf = self.dir / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.dir}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER} 1\n")
            self.sentinels.append(processes.start(
                [self.binary, str(conf), "--sentinel"], os.environ,
                self.dir / f"sentinel-{port}.log"))
        wait_until(lambda: self.in_sync(self.primary_port), 30, "the replica in sync")
        for port in self.sentinel_ports:
            wait_until(lambda p=port: self._sees_all(p), 30,  # type: ignore[misc]
                       f"Sentinel {port} to see the whole set")
        return self

    def _sees_all(self, port: int) -> bool:
        """Whether the Sentinel on ``port`` knows the replica and the two other Sentinels."""
        master: Any = redis.Redis(port=port, socket_timeout=2).sentinel_master(MASTER)
        return int(master["num-slaves"]) == 1 and int(master["num-other-sentinels"]) == 2

    def _named(self, port: int) -> int | None:
        """The primary's port as the Sentinel on ``port`` names it, or ``None``."""
        address: Any = redis.Redis(port=port, socket_timeout=1) \
            .sentinel_get_master_addr_by_name(MASTER)
        return int(address[1]) if address else None

    def in_sync(self, primary_port: int) -> bool:
        """Whether the primary on ``primary_port`` has one replica online."""
        info = self.node(primary_port).info("replication")
        return info.get("role") == "master" and int(info.get("connected_slaves", 0)) == 1 \
            and info.get("slave0", {}).get("state") == "online"

    def master_port(self) -> int | None:
        """The port the Sentinels (the first that answers) name as the primary's."""
        for port in self.sentinel_ports:
            try:
                named = self._named(port)
            except redis.RedisError:
                continue
            if named is not None:
                return named
        return None

    def kill_primary(self) -> int:
        """SIGKILL the primary; returns its port."""
        port = self.primary_port
        os.killpg(self.data[port].pid, signal.SIGKILL)
        self.data[port].wait(timeout=10)
        return port

    def pause_replica(self) -> None:
        """SIGSTOP the replica: it stops applying (and acknowledging) the replication
        stream, as a replica behind a slow link or in a long pause would."""
        os.killpg(self.data[self.replica_port].pid, signal.SIGSTOP)

    def resume_replica(self) -> None:
        """SIGCONT the replica :meth:`pause_replica` stopped."""
        os.killpg(self.data[self.replica_port].pid, signal.SIGCONT)

    def wait_promoted(self, timeout: float = 30.0) -> None:
        """Wait until every Sentinel names the replica as the primary and the replica
        acts as one; the ports are then swapped (``primary_port`` is the new one)."""
        old, new = self.primary_port, self.replica_port
        for port in self.sentinel_ports:
            wait_until(lambda p=port: self._named(p) == new, timeout,  # type: ignore[misc]
                       f"Sentinel {port} to promote the replica")
        wait_until(lambda: self.node(new).info("replication")["role"] == "master", timeout,
                   "the replica to act as the primary")
        self.primary_port, self.replica_port = new, old

    def restart_old_primary(self) -> None:
        """Start the killed node again, as a replica of the new primary (as a pod that
        asks the Sentinels where the primary is before it starts), and wait until it is
        in sync."""
        self._start_data(self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port))
        wait_until(lambda: self.in_sync(self.primary_port), 30,
                   "the restarted node in sync with the new primary")

    def stop(self) -> None:
        for proc in [*self.sentinels, *self.data.values()]:
            processes.stop(proc, grace=5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ReplicatedRedis:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
