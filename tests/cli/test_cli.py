"""The ``the-loop`` command line: JSON shape, exit codes, determinism, replay."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from graph.state import WorkItemState
from the_loop.cli import main
from webhook.signature import verify_signature
from workers.state import RedisStateStore


def test_graph_validate_json_is_one_object_with_schema_version():
    out = CliRunner().invoke(main, ["graph", "validate", "--json"])
    assert out.exit_code == 0
    doc = json.loads(out.output)
    assert doc["schemaVersion"] == 1 and doc["action"] == "graph.validate"
    assert doc["ok"] is True and doc["status"] == "valid"
    assert doc["nodes"][0] == "requirements"


def test_graph_validate_fails_naming_the_hook(tmp_path):
    bad = tmp_path / "g.yaml"
    bad.write_text("nodes:\n  - {id: a, exit: [nope]}\n")
    out = CliRunner().invoke(main, ["graph", "validate", str(bad), "--json"])
    assert out.exit_code == 1
    doc = json.loads(out.output)
    assert doc["ok"] is False and "nope" in doc["error"] and "node 'a'" in doc["error"]
    plain = CliRunner().invoke(main, ["graph", "validate", str(bad)])
    assert plain.exit_code != 0 and "unknown hook 'nope'" in plain.output


def test_graph_validate_and_the_runtime_refuse_what_the_schema_refuses(tmp_path):
    """`graph validate` reported a graph with `version: 7` or a node id with a space as
    valid, while the shipped schema rejects both; they share one compiler now."""
    from graph.compile import GraphError
    from the_loop.graphs import load_graph

    for text, named in (("version: 7\nnodes:\n  - {id: a}\n", "field 'version' is 7"),
                        ("nodes:\n  - {id: Design Review}\n", "node 'Design Review'")):
        bad = tmp_path / "g.yaml"
        bad.write_text(text)
        out = CliRunner().invoke(main, ["graph", "validate", str(bad), "--json"])
        assert out.exit_code == 1
        assert named in json.loads(out.output)["error"]
        with pytest.raises(GraphError, match=re.escape(named)):
            load_graph(bad)


def test_graph_export_is_deterministic_in_both_formats():
    for fmt in ("json", "mermaid"):
        first = CliRunner().invoke(main, ["graph", "export", "--format", fmt]).output
        second = CliRunner().invoke(main, ["graph", "export", "--format", fmt]).output
        assert first == second and first
    assert "-->|approved|" in CliRunner().invoke(main, ["graph", "export", "--format",
                                                        "mermaid"]).output


def test_state_json_reads_redis(redis_ns, monkeypatch):
    monkeypatch.setenv("REDIS_URL", redis_ns.url)
    monkeypatch.setenv("THE_LOOP_REDIS_PREFIX", redis_ns.prefix)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    store.save(WorkItemState.new("github:o/r#1", "d", "requirements"))
    out = CliRunner().invoke(main, ["state", "github:o/r#1", "--json"])
    doc = json.loads(out.output)
    assert out.exit_code == 0 and doc["state"]["current_node"] == "requirements"
    missing = CliRunner().invoke(main, ["state", "github:o/r#2", "--json"])
    assert missing.exit_code == 1 and json.loads(missing.output)["ok"] is False
    malformed = CliRunner().invoke(main, ["state", "github:o/r"])
    assert malformed.exit_code == 2 and "github:OWNER/REPO#N" in malformed.output


def test_replay_signs_and_names_the_event_after_the_folder(tmp_path, monkeypatch):
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((dict(self.headers), body))
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    folder = tmp_path / "issues"
    folder.mkdir()
    (folder / "opened.payload.json").write_text('{"action": "opened"}')
    (folder / "closed.payload.json").write_text('{"action": "closed"}')
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", "s3cret,other")
    try:
        out = CliRunner().invoke(main, ["replay", str(tmp_path), "--url",
                                        f"http://127.0.0.1:{server.server_port}/webhook"])
    finally:
        server.shutdown()
    assert out.exit_code == 0, out.output
    assert len(out.output.splitlines()) == 2
    assert all(line.startswith("202 issues ") for line in out.output.splitlines())
    ids = {h["X-GitHub-Delivery"] for h, _ in received}
    assert len(ids) == 2
    for headers, body in received:
        assert headers["X-GitHub-Event"] == "issues"
        verify_signature(body, headers["X-Hub-Signature-256"], [b"s3cret"])


def test_replay_exits_non_zero_when_nothing_listens(tmp_path, monkeypatch):
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", "s")
    (tmp_path / "ping").mkdir()
    (tmp_path / "ping" / "p.json").write_text("{}")
    out = CliRunner().invoke(main, ["replay", str(tmp_path), "--url",
                                    "http://127.0.0.1:1/webhook", "--timeout", "1"])
    assert out.exit_code != 0 and "ERR(" in out.output
