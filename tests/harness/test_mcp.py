"""``mcp-call``: a named MCP tool call delegated to the node's harness (headless,
schema-constrained output), its structured result in ``data``; typed parameters only;
the worker checks at start-up that it can make the call (fail closed). The harnesses are
the fakes of ``tests/harnesses`` (real processes), answering such a call
deterministically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foundation.hooks import REGISTRY
from foundation.settings import HarnessSettings, Settings
from graph.compile import GraphError, compile_graph
from graph.context import HookConfig
from graph.model import WorkItem
from graph.runtime import Runtime
from graph.state import MemoryStateStore
from integrations.harness.base import HarnessError, HarnessVersionError
from integrations.harness.mcp import SCHEMA, HarnessMcp, check_mcp
from tests.conftest import REPO_ROOT

FAKES = REPO_ROOT / "tests" / "harnesses"
VERSIONS = {"claude-code": "2.0.14 (Claude Code)", "codex": "codex-cli 0.46.0"}
SECRET = "sk-test-0123456789abcdef"
GRAPH = """
nodes:
  - id: lookup
    actor: agent
    exit:
      - {hook: mcp-call, with: {server: tracker, tool: get_issue,
                                arguments: {issue: id, repository: repository}}}
  - {id: end, actor: system}
edges:
  - {from: lookup, to: end, on: pass}
"""


def servers_file(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "tracker": {"command": "tracker-mcp", "args": ["--stdio"]}}}))
    return path


def harness(tmp_path: Path, adapter: str, **overrides) -> HarnessSettings:
    fields = dict(adapter=adapter, binary=str(FAKES / ("claude" if adapter == "claude-code"
                                                        else "codex")),
                  version=VERSIONS[adapter], mcp_config=str(servers_file(tmp_path)),
                  env=("ANTHROPIC_API_KEY",), path="/usr/bin:/bin")
    fields.update(overrides)
    return HarnessSettings(**fields)


def calls(home: Path) -> list[dict]:
    log = home / ".fake-harness" / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("adapter", ["claude-code", "codex"])
def test_mcp_call_asks_the_nodes_harness_and_returns_the_structured_result_in_data(
        tmp_path, adapter):
    """Given a node whose exit chain is mcp-call {server: tracker, tool: get_issue,
    arguments from the work item's id and repository}
    When the exit chain runs
    Then the harness is run headless with the output schema and the one MCP server, and
    the tool's structured result is the hook's data; no secret reaches its input."""
    home = tmp_path / "home"
    environ = {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": SECRET,
               "THE_LOOP_GITHUB_PRIVATE_KEY": "never-passed"}
    mcp = HarnessMcp(harness(tmp_path, adapter), environ, str(home))
    graph = compile_graph(GRAPH, source="mcp.yaml", registry=REGISTRY)
    rt = Runtime(graph, MemoryStateStore())
    item = WorkItem("github:o/r#7", 7, "o/r")
    r = rt.enrol(item, HookConfig(mcp=mcp), None)
    assert (r.status, r.node) == ("done", "end")
    [chain] = [c for c in r.chains if c.node == "lookup" and c.boundary == "exit"]
    [result] = chain.results
    assert result.status == "pass"
    assert result.data["server"] == "tracker" and result.data["tool"] == "get_issue"
    assert result.data["result"] == {"server": "tracker", "tool": "get_issue", "echo": True,
                                     "arguments": {"issue": 7, "repository": "o/r"}}
    [call] = calls(home)
    argv = call["argv"]
    if adapter == "claude-code":
        assert argv[argv.index("--json-schema") + 1] == json.dumps(SCHEMA)
        assert argv[argv.index("--allowedTools") + 1] == "mcp__tracker__get_issue"
        assert "--strict-mcp-config" in argv
    else:
        assert "--output-schema" in argv and argv[argv.index("--sandbox") + 1] == "read-only"
        assert 'mcp_servers.tracker.command="tracker-mcp"' in argv
        # exec's approval policy is never: exactly this server's one tool is approved
        configs = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
        assert 'mcp_servers.tracker.enabled_tools=["get_issue"]' in configs
        assert 'mcp_servers.tracker.default_tools_approval_mode="approve"' in configs
        assert [c for c in configs if "approv" in c] == [
            'mcp_servers.tracker.default_tools_approval_mode="approve"']
        assert all(c.startswith("mcp_servers.tracker.") for c in configs)
    assert call["env"]["ANTHROPIC_API_KEY"] == SECRET  # the harness's own key, named
    assert "THE_LOOP_GITHUB_PRIVATE_KEY" not in call["env"]
    assert SECRET not in call["stdin"] and SECRET not in json.dumps(argv)
    assert 'MCP-CALL {"arguments": {"issue": 7, "repository": "o/r"}' in call["stdin"]


def test_a_failed_mcp_call_blocks_naming_the_server_and_tool(tmp_path):
    mcp = HarnessMcp(harness(tmp_path, "claude-code"), {"PATH": "/usr/bin:/bin"},
                     str(tmp_path / "home"))
    graph = compile_graph(GRAPH.replace("server: tracker", "server: wiki"),
                          source="mcp.yaml", registry=REGISTRY)
    r = Runtime(graph, MemoryStateStore()).enrol(WorkItem("local:1"), HookConfig(mcp=mcp),
                                                 None)
    assert r.status == "escalated"  # a server the deployment does not name: not retriable
    assert r.messages[0].code == "mcp-failed"
    assert "mcp-call wiki/get_issue failed: MCP server 'wiki' is not configured" in (
        r.messages[0].text)
    # The harness says it could not make the call: a block, its reason in our words.
    (tmp_path / "home/.fake-harness").mkdir(parents=True, exist_ok=True)
    (tmp_path / "home/.fake-harness/knobs.json").write_text('{"mcp_error": "server down"}')
    graph = compile_graph(GRAPH, source="mcp.yaml", registry=REGISTRY)
    r = Runtime(graph, MemoryStateStore()).enrol(WorkItem("local:1"), HookConfig(mcp=mcp),
                                                 None)
    assert r.status == "blocked" and "could not make the call (server down)" in (
        r.messages[0].text)
    # No harness for MCP calls handed to the hook: a block that retrying cannot fix.
    r = Runtime(graph, MemoryStateStore()).enrol(WorkItem("local:2"), HookConfig(), None)
    assert r.status == "escalated" and r.messages[0].code == "mcp-unavailable"


@pytest.mark.parametrize(("change", "why"), [
    ("server: tracker, ", "parameter 'server' is required"),
    ("tool: get_issue,", "tool: 'get issue',"),
    ("issue: id", "issue: body"),
])
def test_mcp_call_takes_typed_params_only_checked_at_load(change, why):
    text = GRAPH.replace(change, why if "'" in why or ":" in why else "")
    with pytest.raises(GraphError) as err:
        compile_graph(text, source="mcp.yaml", registry=REGISTRY)
    message = str(err.value)
    assert "mcp.yaml: node 'lookup'" in message and "'mcp-call'" in message


def test_a_worker_whose_graph_uses_mcp_call_checks_the_harness_at_start_up(tmp_path):
    graph = compile_graph(GRAPH, source="mcp.yaml", registry=REGISTRY)
    home = str(tmp_path / "home")
    assert isinstance(check_mcp(harness(tmp_path, "claude-code"), graph, {}, home),
                      HarnessMcp)
    no_mcp = compile_graph(GRAPH.replace(
        "      - {hook: mcp-call, with: {server: tracker, tool: get_issue,\n"
        "                                arguments: {issue: id, repository: repository}}}\n",
        "      - log-entry\n"), source="plain.yaml", registry=REGISTRY)
    assert check_mcp(HarnessSettings(), no_mcp, {}, home) is None
    with pytest.raises(HarnessError, match="claude-code or codex"):
        check_mcp(HarnessSettings(), graph, {}, home)
    with pytest.raises(HarnessError, match="harness.mcpConfig"):
        check_mcp(harness(tmp_path, "codex", mcp_config=None), graph, {}, home)
    with pytest.raises(HarnessVersionError, match="install the pinned version on the worker"):
        check_mcp(harness(tmp_path, "codex", version="9.9.9"), graph, {}, home)
    with pytest.raises(HarnessError, match="cannot run .*: install it"):
        check_mcp(harness(tmp_path, "codex", binary=str(tmp_path / "nope")), graph, {}, home)
    (tmp_path / "bad.json").write_text('{"mcpServers": {"bad name": {"command": "x"}}}')
    with pytest.raises(HarnessError, match="mcpServers.bad name"):
        check_mcp(harness(tmp_path, "codex", mcp_config=str(tmp_path / "bad.json")), graph,
                  {}, home)


def test_the_worker_refuses_to_start_without_a_harness_for_mcp_call(tmp_path):
    from the_loop.wiring import build_worker

    graph = tmp_path / "graph.yaml"
    graph.write_text(GRAPH)
    settings = Settings.from_env({"THE_LOOP_GRAPH": str(graph), "HOME": str(tmp_path),
                                  "REDIS_URL": "redis://127.0.0.1:6379/14"})
    with pytest.raises(HarnessError, match="mcp-call needs harness.adapter"):
        build_worker(settings)
