"""A stdio MCP server with one tool, ``get_issue``, echoing its arguments (JSON-RPC 2.0
lines: ``initialize``, ``tools/list``, ``tools/call``; modelcontextprotocol.io, "Basic
protocol" and "Tools"). Run as ``python mcp_stdio.py``; the real CLIs start it for an
``mcp-call``."""

from __future__ import annotations

import json
import sys


def answer(request: dict) -> dict | None:
    method, rid = request.get("method"), request.get("id")
    if rid is None:  # a notification
        return None
    if method == "initialize":
        result: dict = {"protocolVersion": request["params"].get("protocolVersion",
                                                                  "2025-06-18"),
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "tracker", "version": "1.0.0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "get_issue", "description": "An issue by number.",
                             "inputSchema": {"type": "object", "properties": {
                                 "issue": {"type": "integer"},
                                 "repository": {"type": "string"}}}}]}
    elif method == "tools/call":
        echo = {"tool": request["params"]["name"], "echo": True,
                "arguments": request["params"].get("arguments") or {}}
        result = {"content": [{"type": "text", "text": json.dumps(echo)}],
                  "structuredContent": echo, "isError": False}
    else:
        return {"jsonrpc": "2.0", "id": rid,
                "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
