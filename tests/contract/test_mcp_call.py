"""``mcp-call`` through the real CLIs: the-loop's :class:`HarnessMcp` runs Claude Code
or Codex headless with one stdio MCP server (tests/modelserver/mcp_stdio.py); the
scripted model calls its tool and answers with the schema's JSON."""

from __future__ import annotations

import json
import sys

from foundation.settings import HarnessSettings
from integrations.harness.codex import write_provider
from integrations.harness.mcp import HarnessMcp
from tests.conftest import REPO_ROOT
from tests.contract.conftest import BINARIES, CLI


def test_mcp_call_returns_the_tools_structured_result(cli: CLI) -> None:
    servers = cli.root / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"tracker": {
        "command": sys.executable,
        "args": [str(REPO_ROOT / "tests" / "modelserver" / "mcp_stdio.py")]}}}))
    env = cli.env() | {"ENABLE_TOOL_SEARCH": "false"}  # MCP tools offered up front
    if cli.adapter == "codex":  # mcp-call runs exec without -c model_provider: the default
        config = write_provider(cli.home, cli.server.base_url + "/v1", env)
        config.write_text('model_provider = "the-loop"\nmodel = "gpt-5"\n'
                          + config.read_text())
    settings = HarnessSettings(adapter=cli.adapter, binary=str(BINARIES[cli.adapter]),
                               mcp_config=str(servers), env=tuple(env))
    mcp = HarnessMcp(settings, env, str(cli.home), timeout=60)
    result = mcp.call("tracker", "get_issue", {"issue": 7, "repository": "o/r"})
    assert result == {"tool": "get_issue", "echo": True,
                      "arguments": {"issue": 7, "repository": "o/r"}}


def test_mcp_call_goes_through_the_harness_gateway(cli: CLI) -> None:
    servers = cli.root / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"tracker": {
        "command": sys.executable,
        "args": [str(REPO_ROOT / "tests" / "modelserver" / "mcp_stdio.py")]}}}))
    env = {k: v for k, v in cli.env().items() if k != "ANTHROPIC_BASE_URL"}
    env |= {"ENABLE_TOOL_SEARCH": "false"}
    base = cli.server.base_url + ("/v1" if cli.adapter == "codex" else "")
    config = cli.home / ".codex" / "config.toml"
    if cli.adapter == "codex":  # the user's own model choice, which the provider keeps
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text('model = "gpt-5"\n')
    settings = HarnessSettings(adapter=cli.adapter, binary=str(BINARIES[cli.adapter]),
                               mcp_config=str(servers), env=tuple(env), base_url=base)
    mcp = HarnessMcp(settings, env, str(cli.home), timeout=30)
    result = mcp.call("tracker", "get_issue", {"issue": 7, "repository": "o/r"})
    assert result["echo"] is True
    if cli.adapter == "codex":  # the gateway's provider, beside the user's settings
        text = config.read_text()
        assert 'model = "gpt-5"' in text and f'base_url = "{base}"' in text
