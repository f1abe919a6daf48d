"""A malformed chunked request body (``Transfer-Encoding: chunked``, RFC 9112 section 7.1)
is answered 400 before authentication, never 500 with a traceback: the real receiver
under real gunicorn (its sync and gthread workers), spoken to over a raw socket."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import TEST_REDIS_URL, RedisNamespace, _cleanup, load_fixture, sign_body
from tests.observability.helpers import free_port, wait_until
from tests.support.processes import start, stop

# One worker runs the module (pytest-xdist, --dist loadgroup): each gunicorn it starts is
# started once, not once per worker.
pytestmark = pytest.mark.xdist_group("chunked-gunicorn")

BIN = Path(sys.executable).parent
SECRET = "chunked-secret-9b1e"
SIZE_MARKER = b"7a7a7a7a7a7a7a7a7a7a7a7a"  # a chunk size no log line may quote


def request_head(delivery: str, signature: str) -> bytes:
    return (b"POST /webhook HTTP/1.1\r\nHost: loop.example.com\r\n"
            b"X-GitHub-Event: issues\r\nX-GitHub-Delivery: " + delivery.encode() + b"\r\n"
            b"X-Hub-Signature-256: " + signature.encode() + b"\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")


def exchange(port: int, data: bytes, *, half_close: bool = False) -> bytes:
    """Send ``data`` on a fresh connection and read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        if half_close:
            with contextlib.suppress(OSError):  # the server may have closed it already
                conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer:
                head, _, body = answer.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), None)
                if length is not None and len(body) >= length:
                    break
        return answer


@pytest.fixture(scope="module", params=["1", "4"], ids=["gevent", "gthread"])
def receiver(request, tmp_path_factory) -> Iterator[tuple[int, Path, RedisNamespace]]:
    client = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=5)
    token = f"t{uuid.uuid4().hex}"
    ns = RedisNamespace(client, TEST_REDIS_URL, token, f"the-loop-test-{token}",
                        f"the-loop-test-{token}")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THE_LOOP_", "REDIS"))}
    env.update(THE_LOOP_WEBHOOK_SECRET=SECRET, REDIS_URL=ns.url,
               THE_LOOP_REDIS_PREFIX=ns.prefix, THE_LOOP_QUEUE=ns.queue_name,
               THE_LOOP_LOG_FORMAT="text", THE_LOOP_WEB_WORKERS="1",
               THE_LOOP_WEB_THREADS=request.param, THE_LOOP_BIND=f"127.0.0.1:{port}")
    log = tmp_path_factory.mktemp("gunicorn") / "receiver.log"
    proc = start([str(BIN / "gunicorn"), "-c", "python:the_loop.gunicorn_conf",
                  "the_loop.wsgi:app"], env, log)
    try:
        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return b" 200 " in exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            except OSError:
                return False

        wait_until(up, what="gunicorn's /healthz")
        yield port, log, ns
    finally:
        stop(proc)
        _cleanup(ns)
        client.close()


MALFORMED = {
    "chunk size not hex": (b"zz\r\nhello\r\n0\r\n\r\n", False),
    "negative chunk size": (b"-5\r\nhello\r\n0\r\n\r\n", False),
    "chunk size quoted in the log if echoed": (SIZE_MARKER + b"q\r\nab\r\n0\r\n\r\n", False),
    "chunk without its CRLF terminator": (b"5\r\nhelloXX0\r\n\r\n", False),
    "truncated chunk": (b"10\r\nabc", True),
    "truncated before the last chunk": (b"3\r\nabc\r\n", True),
    "chunk larger than what follows": (b"ffffffff\r\nab\r\n", True),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_chunked_body_is_a_400_never_a_500(receiver, case):
    port, log, _ = receiver
    body, half_close = MALFORMED[case]
    delivery = str(uuid.uuid4())
    answer = exchange(port, request_head(delivery, "sha256=" + "0" * 64) + body,
                      half_close=half_close)
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 400"), answer[:300]
    _, _, response_body = answer.partition(b"\r\n\r\n")
    assert b'"ok": false' in response_body
    assert SIZE_MARKER not in answer and b"hello" not in answer
    text = log.read_text()
    assert "Traceback" not in text and "internal error" not in text
    assert SIZE_MARKER.decode() not in text


def test_a_well_formed_chunked_signed_delivery_is_still_queued(receiver):
    port, log, ns = receiver
    payload = load_fixture("issues", "opened")
    framed = b"".join(b"%x\r\n%s\r\n" % (len(part), part)
                      for part in (payload[:100], payload[100:]) if part) + b"0\r\n\r\n"
    delivery = ns.new_id()
    answer = exchange(port, request_head(delivery, sign_body(payload, SECRET)) + framed)
    assert answer.startswith(b"HTTP/1.1 202"), answer[:300]
