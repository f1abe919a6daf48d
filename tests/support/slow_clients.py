"""Slow HTTP clients: connections that send a request a byte at a time (slowloris),
for the receiver's slow-client test and ``benchmarks/slow_clients.py``."""

from __future__ import annotations

import socket
import threading

#: A request line and one header, then header bytes one at a time (never finished).
SLOW_HEADERS = b"POST /webhook HTTP/1.1\r\nHost: x\r\n"


def slow_body_head(length: int) -> bytes:
    """Complete, unauthenticated request headers announcing a ``length``-byte body
    (which then trickles)."""
    return (b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"X-GitHub-Event: issues\r\nX-GitHub-Delivery: slow\r\n"
            b"X-Hub-Signature-256: sha256=" + b"0" * 64 + b"\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


def tricklers(port: int, count: int, body: bytes, interval: float = 1.0) -> list[Trickler]:
    """``count`` slow clients of ``port``: half trickle their headers, half their body
    (``body``, after complete headers)."""
    return [Trickler(port, SLOW_HEADERS, b"X-Slow: " + b"a" * 100, interval) if i % 2 else
            Trickler(port, slow_body_head(len(body)), body, interval) for i in range(count)]


class Trickler(threading.Thread):
    """One unauthenticated client sending ``head`` and then ``tail`` one byte every
    ``interval`` seconds, until the server closes the connection (``closed``)."""

    def __init__(self, port: int, head: bytes, tail: bytes, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.port, self.head, self.tail, self.interval = port, head, tail, interval
        self.closed = threading.Event()
        self.stop = threading.Event()
        self.connected = threading.Event()

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                self.connected.set()
                sock.sendall(self.head)
                for byte in self.tail:
                    if self.stop.wait(self.interval):
                        return
                    sock.sendall(bytes([byte]))
                    sock.settimeout(0.01)
                    try:
                        if sock.recv(1024) == b"":  # the server closed it
                            break
                    except (TimeoutError, BlockingIOError):
                        pass
                    sock.settimeout(5)
        except OSError:  # reset or broken pipe: closed by the server
            pass
        self.closed.set()
