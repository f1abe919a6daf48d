"""A scripted model server on loopback for the real harness CLIs (contract tests).

Speaks two wire protocols, streaming only what the CLIs ask for:

- Anthropic Messages API, ``POST /v1/messages`` with ``stream: true``: server-sent events
  ``message_start``, ``content_block_start``, ``content_block_delta`` (``text_delta`` or
  ``input_json_delta``), ``content_block_stop``, ``message_delta`` (``stop_reason``,
  ``usage``) and ``message_stop`` (docs.anthropic.com, "Streaming Messages"). A request
  without ``stream`` gets one JSON message.
- OpenAI Responses API, ``POST /v1/responses`` with ``stream: true``: events
  ``response.created``, ``response.output_item.added``,
  ``response.function_call_arguments.delta`` / ``.done``, ``response.output_item.done``
  and ``response.completed`` with ``usage`` (platform.openai.com, "Streaming responses").

A :class:`Script` decides each answer: while the conversation has no tool result yet, the
model calls the CLI's file-write tool (Claude Code: ``Write``; Codex: ``exec_command`` with a
heredoc) to write ``artifact`` with ``content``; once a tool result is in, it ends with a
text. ``faults`` is a queue of HTTP statuses answered before any real answer (529, 500);
``hang`` keeps every response open without a byte until the server stops; ``hangs``
does so for that many model requests only, answering the later ones. Every billed
answer is appended to :attr:`ModelServer.billed` as ``{"api", "input_tokens",
"output_tokens"}``.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OUTPUT_TOKENS = 20


@dataclass
class Script:
    """What the model does: write ``artifact`` (relative to the CLI's cwd) with ``content``."""

    artifact: str = "artifact.md"
    content: str = "# Artifact\n"
    faults: list[int] = field(default_factory=list)
    hang: bool = False
    #: Model requests still to hang (before the faults and answers), counted down.
    hangs: int = 0
    #: Answer ``faults`` to the requests of a repair turn only (its prompt carries the
    #: exit hooks' block, as :attr:`from_prompt` tells them), not to the first turn's.
    faults_at_repair: bool = False
    #: Write what the-loop's prompt lists instead (lines ``- `PATH` with sections:
    #: `## A`, `## B```): a fresh session's turn leaves out each artifact's last section,
    #: a turn whose prompt carries the exit hooks' feedback writes every section.
    from_prompt: bool = False


_ARTIFACT_LINE = re.compile(r"^- `(?P<path>[^`]+)` with sections: (?P<sections>.+)$", re.M)


def _writes(body: dict[str, Any], script: Script) -> list[dict[str, str]]:
    """The ``Write`` inputs of this turn: ``[{"file_path", "content"}]``."""
    if not script.from_prompt:
        return [{"file_path": script.artifact, "content": script.content}]
    prompt = "\n".join(_strings(body.get("messages") or body.get("input") or []))
    repair = _repair(body)
    writes = []
    for match in _ARTIFACT_LINE.finditer(prompt):
        sections = re.findall(r"`(## [^`]+)`", match["sections"])
        kept = sections if repair else sections[:-1]
        content = "# " + match["path"] + "\n\n" + "".join(
            f"{section}\n\nWritten by the scripted model.\n\n" for section in kept)
        writes.append({"file_path": match["path"], "content": content})
    return writes


def _repair(body: dict[str, Any]) -> bool:
    """Whether ``body`` is a request of a turn that carries the exit hooks' block."""
    texts = _strings(body.get("messages") or body.get("input") or [])
    return "blocked" in (texts[-1] if texts else "") or "has no '" in "\n".join(texts)


def _input_tokens(body: dict[str, Any]) -> int:
    """A deterministic token count for a request: its JSON size / 16 (at least 1)."""
    return max(1, len(json.dumps(body.get("messages") or body.get("input") or [])) // 16)


def _has_tool_result(body: dict[str, Any]) -> bool:
    """Whether the conversation's last user turn carries a tool's result (either protocol)."""
    last = (body.get("messages") or [{}])[-1]
    content = last.get("content")
    if isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    ):
        return True
    items = [item for item in body.get("input") or [] if isinstance(item, dict)]
    users = [i for i, item in enumerate(items) if item.get("role") == "user"]
    since = items[users[-1] + 1:] if users else items  # this turn's items
    return any(item.get("type") == "function_call_output" for item in since)


def _mcp_call(body: dict[str, Any], tools: set[Any]) -> tuple[str, dict[str, Any]] | None:
    """The MCP tool to call and its arguments when the prompt is an ``mcp-call``
    (a line ``MCP-CALL {"server", "tool", "arguments"}``) and the CLI offers that tool."""
    for text in _strings(body.get("messages") or body.get("input") or []):
        for line in text.splitlines():
            if line.startswith("MCP-CALL "):
                call = json.loads(line[len("MCP-CALL "):])
                for name in tools:
                    if (isinstance(name, str) and name.endswith(call["tool"])
                            and call["server"] in name):
                        return name, call["arguments"]
    return None


def _strings(value: Any) -> list[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _last_tool_result(body: dict[str, Any]) -> str:
    """The text of the conversation's last tool result (either protocol)."""
    for message in reversed(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    inner = block.get("content")
                    if isinstance(inner, list):
                        return "".join(b.get("text", "") for b in inner if isinstance(b, dict))
                    return str(inner)
    for item in reversed(body.get("input") or []):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                return "".join(b.get("text", "") for b in output if isinstance(b, dict))
            # Codex 0.171 frames an MCP result: "Wall time: ... seconds\nOutput:\n<text>".
            return str(output).split("Output:\n", 1)[-1]
    return ""


class ModelServer:
    """A threaded loopback HTTP server; ``base_url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self.billed: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def billed_for(self, api: str) -> tuple[int, int]:
        """(input, output) tokens billed so far on ``api`` ("anthropic" or "openai")."""
        rows = [row for row in self.billed if row["api"] == api]
        return sum(r["input_tokens"] for r in rows), sum(r["output_tokens"] for r in rows)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                return

            def do_GET(self) -> None:  # models lists and the like: nothing here
                self._json(404, {"error": {"type": "not_found_error", "message": "no"}})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?")[0]
                with server._lock:
                    server.requests.append({"path": path, "body": body})
                    server.headers.append(dict(self.headers.items()))
                    model = path.endswith(("/messages", "/responses"))
                    hang = server.script.hang or (model and server.script.hangs > 0)
                    if model and not server.script.hang and hang:
                        server.script.hangs -= 1
                    faulty = not hang and (
                        not server.script.faults_at_repair or (model and _repair(body)))
                    fault = (server.script.faults.pop(0)
                             if server.script.faults and faulty else None)
                if path.endswith("/count_tokens"):
                    self._json(200, {"input_tokens": _input_tokens(body)})
                    return
                if not (path.endswith("/messages") or path.endswith("/responses")):
                    self._json(404, {"error": {"type": "not_found_error", "message": path}})
                    return
                if hang:
                    server._stop.wait()
                    return
                if fault is not None:
                    kind = "overloaded_error" if fault == 529 else "api_error"
                    error = {"type": kind, "message": "scripted"}
                    self._json(fault, {"type": "error", "error": error})
                    return
                if path.endswith("/messages"):
                    self._anthropic(body)
                else:
                    self._openai(body)

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse_start(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            def _event(self, name: str, data: dict[str, Any]) -> None:
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

            def _bill(self, api: str, body: dict[str, Any]) -> tuple[int, int]:
                tokens = (_input_tokens(body), OUTPUT_TOKENS)
                with server._lock:
                    server.billed.append(
                        {"api": api, "input_tokens": tokens[0], "output_tokens": tokens[1]}
                    )
                return tokens

            def _anthropic(self, body: dict[str, Any]) -> None:
                n = len(server.requests)
                model = body.get("model", "claude")
                done = _has_tool_result(body)
                tools = {t.get("name") for t in body.get("tools") or []}
                write = not done and "Write" in tools
                call = _mcp_call(body, tools)
                input_tokens, output_tokens = self._bill("anthropic", body)
                block: dict[str, Any]
                extra: list[dict[str, str]] = []
                if call and (not done or "StructuredOutput" in tools):
                    name, arguments = call
                    if done:  # the answer, through Claude Code's --json-schema tool
                        name, arguments = "StructuredOutput", {
                            "ok": True, "result": _last_tool_result(body), "error": ""}
                    write = True  # a tool_use block, streamed as for Write
                    block = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": name,
                             "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
                    stop = "tool_use"
                elif write:
                    writes = _writes(body, server.script)
                    block = {
                        "type": "tool_use", "id": f"toolu_{n:04d}", "name": "Write", "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(writes[0])}
                    stop = "tool_use"
                    extra = writes[1:]
                else:
                    block = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": "Done."}
                    stop = "end_turn"
                message = {
                    "id": f"msg_{n:04d}", "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1},
                }
                if not body.get("stream"):
                    final = dict(block)
                    if write:
                        final["input"] = json.loads(delta["partial_json"])
                    else:
                        final["text"] = delta["text"]
                    message.update(content=[final], stop_reason=stop,
                                   usage={"input_tokens": input_tokens,
                                          "output_tokens": output_tokens})
                    self._json(200, message)
                    return
                self._sse_start()
                self._event("message_start", {"type": "message_start", "message": message})
                self._event("content_block_start",
                            {"type": "content_block_start", "index": 0, "content_block": block})
                self._event("content_block_delta",
                            {"type": "content_block_delta", "index": 0, "delta": delta})
                self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
                for index, more in enumerate(extra if write and not call else [], start=1):
                    self._event("content_block_start", {
                        "type": "content_block_start", "index": index, "content_block": dict(
                            block, id=f"toolu_{n:04d}_{index}")})
                    self._event("content_block_delta", {
                        "type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(more)}})
                    self._event("content_block_stop",
                                {"type": "content_block_stop", "index": index})
                self._event("message_delta", {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
                })
                self._event("message_stop", {"type": "message_stop"})

            def _openai(self, body: dict[str, Any]) -> None:
                n = len(server.requests)
                done = _has_tool_result(body)
                input_tokens, output_tokens = self._bill("openai", body)
                rid = f"resp_{n:04d}"
                base = {"id": rid, "object": "response", "status": "in_progress",
                        "model": body.get("model", "gpt"), "output": []}
                self._sse_start()
                seq = iter(range(1000))
                self._event("response.created",
                            {"type": "response.created", "sequence_number": next(seq),
                             "response": base})
                # Codex 0.171 offers an MCP server's tools as a namespace tool
                # {"type": "namespace", "name": "mcp__SERVER", "tools": [...]}.
                spaces = {f"{t.get('name')}/{f.get('name')}": t.get("name")
                          for t in body.get("tools") or [] if t.get("type") == "namespace"
                          for f in t.get("tools") or []}
                call = _mcp_call(body, set(spaces))
                item: dict[str, Any]
                final: dict[str, Any]
                if call and done:
                    answer = json.dumps({"ok": True, "result": _last_tool_result(body),
                                         "error": ""})
                if call and not done:
                    args = json.dumps(call[1])
                    item = {"type": "function_call", "id": f"fc_{n:04d}",
                            "call_id": f"call_{n:04d}", "name": call[0].split("/")[1],
                            "namespace": spaces[call[0]], "arguments": "",
                            "status": "in_progress"}
                    self._event("response.output_item.added", {
                        "type": "response.output_item.added", "sequence_number": next(seq),
                        "output_index": 0, "item": item})
                    self._event("response.function_call_arguments.done", {
                        "type": "response.function_call_arguments.done",
                        "sequence_number": next(seq),
                        "item_id": item["id"], "output_index": 0, "arguments": args})
                    final = dict(item, arguments=args, status="completed")
                elif not done:
                    command = "".join(
                        f"mkdir -p \"$(dirname '{w['file_path']}')\" && "
                        f"cat > '{w['file_path']}' <<'THE_LOOP_EOF'\n{w['content']}THE_LOOP_EOF\n"
                        for w in _writes(body, server.script))
                    # Codex 0.171 offers its shell as exec_command {"cmd": ...}.
                    args = json.dumps({"cmd": command, "tty": False})
                    item = {"type": "function_call", "id": f"fc_{n:04d}",
                            "call_id": f"call_{n:04d}",
                            "name": "exec_command", "arguments": "", "status": "in_progress"}
                    self._event("response.output_item.added", {
                        "type": "response.output_item.added", "sequence_number": next(seq),
                        "output_index": 0, "item": item})
                    self._event("response.function_call_arguments.delta", {
                        "type": "response.function_call_arguments.delta",
                        "sequence_number": next(seq),
                        "item_id": item["id"], "output_index": 0, "delta": args})
                    self._event("response.function_call_arguments.done", {
                        "type": "response.function_call_arguments.done",
                        "sequence_number": next(seq),
                        "item_id": item["id"], "output_index": 0, "arguments": args})
                    final = dict(item, arguments=args, status="completed")
                else:
                    text: dict[str, Any] = {"type": "output_text",
                                            "text": answer if call else "Done.",
                                            "annotations": []}
                    final = {"type": "message", "id": f"msg_{n:04d}", "role": "assistant",
                             "status": "completed", "content": [text]}
                    self._event("response.output_item.added", {
                        "type": "response.output_item.added", "sequence_number": next(seq),
                        "output_index": 0, "item": dict(final, content=[], status="in_progress")})
                self._event("response.output_item.done", {
                    "type": "response.output_item.done", "sequence_number": next(seq),
                    "output_index": 0, "item": final})
                self._event("response.completed", {
                    "type": "response.completed", "sequence_number": next(seq),
                    "response": dict(base, status="completed", output=[final], usage={
                        "input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens": output_tokens,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": input_tokens + output_tokens})})

        return Handler
