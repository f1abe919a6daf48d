"""The receiver's request limits under the real gunicorn (``the-loop serve``): the body
read ahead by ``pre_request`` (the_loop/gunicorn_conf.py) keeps kept-alive connections
working, an oversize chunked body is refused and its connection closed, and request
lines or header sets over gunicorn's limits are refused before the app runs."""

from __future__ import annotations

import contextlib
import socket

from tests.conftest import sign_body
from tests.observability.helpers import wait_until
from tests.support.processes import serve, stop

SECRET = "gunicorn-limits-secret-51d0"
LIMIT = 4000  # THE_LOOP_MAX_BODY_BYTES for this test




def _head(delivery: str, body: bytes, framing: bytes) -> bytes:
    return (b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"X-GitHub-Event: ping\r\nX-GitHub-Delivery: " + delivery.encode() + b"\r\n"
            b"X-Hub-Signature-256: " + sign_body(body, SECRET).encode() + b"\r\n"
            + framing + b"\r\n")


def _one_answer(sock: socket.socket) -> bytes:
    """One response: its headers, then Content-Length bytes of body."""
    sock.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _answers(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 5 s pass)."""
    sock.settimeout(5)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def test_limits_under_the_real_gunicorn(redis_ns, tmp_path):
    out = tmp_path / "serve.out"
    proc, port = serve(redis_ns, out, THE_LOOP_WEBHOOK_SECRET=SECRET,
                       THE_LOOP_MAX_BODY_BYTES=str(LIMIT), THE_LOOP_WEB_WORKERS="1")
    ping = b'{"zen": "x", "hook_id": 1}'
    try:
        def up() -> bool:
            assert proc.poll() is None, out.read_text()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return False

        wait_until(up, what="the receiver to listen")

        # Two pings on one kept-alive connection: both answered (the read-ahead body is
        # what the app reads, and the parser finds the next request after it).
        with socket.create_connection(("127.0.0.1", port)) as sock:
            framing = b"Content-Length: %d\r\n" % len(ping)
            sock.sendall(_head("a1", ping, framing) + ping)
            first = _one_answer(sock)
            sock.sendall(_head("a2", ping, framing + b"Connection: close\r\n") + ping)
            second = _answers(sock)
        assert first.startswith(b"HTTP/1.1 200") and b'"event": "ping"' in first
        assert second.startswith(b"HTTP/1.1 200") and b'"event": "ping"' in second

        # A chunked body over the limit: 413, and the connection is closed rather than
        # the rest of the body being read as the next request.
        # (Small enough to arrive in one read: a close with unread bytes would be a reset.)
        big = b"x" * (LIMIT + 100)
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(big), big)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(_head("b1", big, b"Transfer-Encoding: chunked\r\n") + chunked)
            answer = _one_answer(sock)
            # A request after it on the same connection is never served.
            with contextlib.suppress(OSError):
                sock.sendall(_head("b2", ping, b"Content-Length: %d\r\n" % len(ping)) + ping)
            after = _answers(sock)
        assert answer.startswith(b"HTTP/1.1 413")
        assert after == b"", after[:100]

        # Over gunicorn's limits: refused before the app (no delivery is logged).
        for request in (
            b"POST /webhook?" + b"q" * 3000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /webhook HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-H%d: v\r\n" % i for i in range(60)) + b"\r\n",
        ):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(request)
                answer = _answers(sock)
            assert answer.split(b" ", 2)[1] in (b"400", b"414", b"431"), answer[:100]
    finally:
        stop(proc)
    log = out.read_text()
    assert "Traceback" not in log
    assert "delivery=b1" in log and "status=413" in log
