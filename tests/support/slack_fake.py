"""A loopback Slack Web API that keeps its messages, for the transports' read-back.

slack-sdk sends through ``urllib``, so ``responses`` cannot intercept it; this answers
``chat.postMessage`` (keeps the message, its ``metadata``, a ``ts``), ``conversations.open``
(``users=U...`` -> a direct message conversation ``D...``) and ``conversations.history``
(newest first, ``oldest``/``inclusive``, ``metadata`` only with ``include_all_metadata``;
Slack API pages of those names). ``seen`` lists the requests, :attr:`FakeSlack.calls` their methods.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeSlack:
    url: str = ""
    #: conversation id -> messages, oldest first.
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: (method, arguments) of every request, in order.
    seen: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    clock: float = field(default_factory=time.time)

    @property
    def calls(self) -> list[str]:
        return [method for method, _ in self.seen]

    def conversation(self, channel: str) -> str:
        return "D" + channel[1:] if channel[:1] in ("U", "W") else channel

    def post(self, channel: str, text: str, metadata: Any = None,
             ts: float | None = None) -> str:
        """Keep a message in ``channel`` (a user id: its direct message conversation)."""
        self.clock = max(self.clock + 0.000001, ts if ts is not None else time.time())
        stamp = f"{self.clock:.6f}"
        message: dict[str, Any] = {"type": "message", "text": text, "ts": stamp}
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        if metadata:
            message["metadata"] = metadata
        self.messages.setdefault(self.conversation(channel), []).append(message)
        return stamp

    def posts(self, channel: str) -> list[dict[str, Any]]:
        return list(self.messages.get(self.conversation(channel), []))

    def answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        self.seen.append((method, dict(args)))
        if method == "chat.postMessage":
            channel = str(args["channel"])
            ts = self.post(channel, str(args.get("text") or ""), args.get("metadata"))
            return {"ok": True, "channel": self.conversation(channel), "ts": ts}
        if method == "conversations.open":
            return {"ok": True, "channel": {"id": self.conversation(str(args["users"]))}}
        if method == "conversations.history":
            oldest = float(args.get("oldest") or 0)
            inclusive = str(args.get("inclusive")).lower() in ("1", "true")
            full = str(args.get("include_all_metadata")).lower() in ("1", "true")
            kept = []
            for message in reversed(self.messages.get(str(args["channel"]), [])):
                ts = float(message["ts"])
                if ts > oldest or (inclusive and ts == oldest):
                    shown = dict(message)
                    if not full:
                        shown.pop("metadata", None)
                    kept.append(shown)
            return {"ok": True, "messages": kept, "has_more": False}
        return {"ok": False, "error": "unknown_method"}


@contextmanager
def serve() -> Iterator[FakeSlack]:
    """A :class:`FakeSlack` on a loopback port; its Web API root is ``url + "/api/"``."""
    slack = FakeSlack()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _handle(self) -> None:
            parsed = urllib.parse.urlparse(self.path)
            args: dict[str, Any] = dict(urllib.parse.parse_qsl(parsed.query))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if body and "json" in (self.headers.get("Content-Type") or ""):
                args.update(json.loads(body))
            elif body:
                args.update(urllib.parse.parse_qsl(body.decode()))
            with lock:
                answer = slack.answer(parsed.path.rpartition("/")[2], args)
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    slack.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield slack
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
