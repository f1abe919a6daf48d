"""A loopback HTTP server with canned answers, for clients ``responses`` cannot intercept
(slack-sdk sends through ``urllib``). It records every request and answers them in order.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Recorder:
    """Canned answers (``status``, ``body`` str/bytes/JSON, ``headers``) used in order;
    :attr:`seen` lists the requests."""

    url: str = ""
    answers: list[tuple[int, Any, dict[str, str]]] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    def answer(self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None
               ) -> None:
        self.answers.append((status, body, dict(headers or {})))


@contextmanager
def serve() -> Iterator[Recorder]:
    recorder = Recorder()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with lock:
                recorder.seen.append(Seen(self.command, self.path, dict(self.headers), body))
                answer = recorder.answers.pop(0) if recorder.answers else (599, "no answer", {})
            status, payload, headers = answer
            if isinstance(payload, bytes):
                data, ctype = payload, "application/octet-stream"
            elif isinstance(payload, str):
                data, ctype = payload.encode(), "text/plain"
            else:
                data, ctype = json.dumps(payload).encode(), "application/json"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
