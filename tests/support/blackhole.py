"""A loopback TCP proxy that can black-hole its connections: stop forwarding without
closing either side, as a middlebox that silently drops a connection's packets does
(no RST, no FIN: both ends see an open, idle connection; what they send is accepted
by the proxy's kernel and goes nowhere).

Used between the-loop's processes and Redis (:mod:`tests.support.faults`)::

    proxy = BlackHoleProxy("127.0.0.1", 6379)
    url = proxy.start()  # redis://127.0.0.1:PORT
    proxy.black_hole(stall_new=False)  # the connections open now are dead for good
    proxy.black_hole(stall_new=True)   # ... and new ones hang too, until heal()
    proxy.heal(thaw=True)              # the network is back: everything flows again

One thread per direction of each connection; a frozen direction is simply not read, so
nothing is lost or reordered inside the proxy while frozen (TCP's own buffers fill up,
as they would behind a real black hole).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Link:
    """One proxied connection: the client's socket and the one to the upstream."""

    client: socket.socket
    upstream: socket.socket
    frozen: threading.Event = field(default_factory=threading.Event)
    closed: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.close()


class BlackHoleProxy:
    """Forwards ``127.0.0.1:PORT`` to ``host:port`` until told to black-hole.

    Args:
        host, port: the upstream (Redis).

    Attributes:
        accepted: connections accepted so far.
        frozen_links: connections black-holed so far.
    """

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._stall_new = False
        self._stop = threading.Event()
        self.accepted = 0
        self.frozen_links = 0

    def start(self) -> str:
        """Start accepting; returns the proxy's address as ``redis://127.0.0.1:PORT``."""
        threading.Thread(target=self._accept, name="blackhole-accept", daemon=True).start()
        return f"redis://127.0.0.1:{self.port}"

    def black_hole(self, *, stall_new: bool) -> int:
        """Stop forwarding on every connection open now (neither side is closed).

        Args:
            stall_new: connections accepted from now on are black-holed too (until
                :meth:`heal`); otherwise they forward normally, so a client that drops
                its dead connection and opens a new one gets through.

        Returns:
            how many connections were black-holed.
        """
        with self._lock:
            self._stall_new = stall_new
            links = [link for link in self._links if not link.closed.is_set()]
            for link in links:
                link.frozen.set()
            self.frozen_links += len(links)
        return len(links)

    def heal(self, *, thaw: bool) -> None:
        """New connections forward again; with ``thaw`` the black-holed ones do too (the
        path came back), else they stay dead for good."""
        with self._lock:
            self._stall_new = False
            if thaw:
                for link in self._links:
                    link.frozen.clear()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    # -- forwarding -------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            link = _Link(client, upstream)
            with self._lock:
                self.accepted += 1
                if self._stall_new:
                    link.frozen.set()
                    self.frozen_links += 1
                self._links = [k for k in self._links if not k.closed.is_set()] + [link]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(link, src, dst),
                                 name="blackhole-pump", daemon=True).start()

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not link.closed.is_set() and not self._stop.is_set():
                if link.frozen.is_set():
                    link.closed.wait(0.05)
                    continue
                readable, _, _ = select.select([src], [], [], 0.1)
                if not readable or link.frozen.is_set():
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        link.close()
